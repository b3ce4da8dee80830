#include "kv/codecs/q4_0_codec.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kv/codecs/block_planes.h"
#include "kv/codecs/quant_common.h"
#include "ops/code_dot_i16.h"
#include "ops/code_unpack.h"
#include "ops/packed_scores.h"

namespace kvpack {

void Q4_0BlocksToPlanes(const BlockQ4_0* blocks, int n_blocks, uint8_t* codes,
                        uint16_t* scales) {
  for (int b = 0; b < n_blocks; ++b) {
    scales[b] = blocks[b].d;
    uint8_t* out = codes + 16 * b;  // channels 32 b .. 32 b + 31, two per byte
    for (int j = 0; j < 16; ++j) {
      // ggml: byte j holds element j (low nibble) and element j + 16 (high nibble).
      const int c0 = 2 * j, c1 = 2 * j + 1;
      const auto code = [&](int c) { return c < 16 ? blocks[b].qs[c] & 15 : blocks[b].qs[c - 16] >> 4; };
      out[j] = static_cast<uint8_t>(code(c0) | code(c1) << 4);
    }
  }
}

void Q4_0PlanesToBlocks(const uint8_t* codes, const uint16_t* scales, int n_blocks,
                        BlockQ4_0* blocks) {
  for (int b = 0; b < n_blocks; ++b) {
    blocks[b].d = scales[b];
    const uint8_t* in = codes + 16 * b;
    const auto code = [&](int c) { return (in[c / 2] >> (4 * (c % 2))) & 15; };
    for (int j = 0; j < 16; ++j) {
      blocks[b].qs[j] = static_cast<uint8_t>(code(j) | code(j + 16) << 4);
    }
  }
}

namespace {

struct Q4_0Format {
  using Block = BlockQ4_0;
  static constexpr const char* kName = "q4_0";
  static constexpr size_t RowBytes(int head_dim) { return static_cast<size_t>(head_dim) / 2; }
  static void Quantize(const float* x, Block* blocks, int64_t n) { QuantizeRowQ4_0(x, blocks, n); }
  static void ToPlanes(const Block* blocks, int n, uint8_t* codes, uint16_t* scales) {
    Q4_0BlocksToPlanes(blocks, n, codes, scales);
  }
  static void ToBlocks(const uint8_t* codes, const uint16_t* scales, int n, Block* blocks) {
    Q4_0PlanesToBlocks(codes, scales, n, blocks);
  }
  static void Dequantize(const uint8_t* blocks, size_t n, float* out) {
    DequantizeQ4_0Blocks(blocks, n, out);
  }
};

class Q4_0Store final : public GgmlPlaneStore<Q4_0Format> {
 public:
  using GgmlPlaneStore::GgmlPlaneStore;

  // Keys: the int8 query of the grouped algebra (quant_common.h) scored straight from the
  // planes (ScoreQ4_0RowsI8: 32-channel groups with scale d and min -8d); a head of several
  // parts is the sum of its parts' scores.
  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    PrefetchRows(head, t0, t1);
    const int d = shape().head_dim, pd = part_dim(), n = static_cast<int>(t1 - t0);
    CodeTileScratch& t = TileScratch(d);
    PrepareGroupedQueryI8(q, n_q, d, 32, t);
    thread_local std::vector<int8_t> q8;
    thread_local std::vector<float> qm;
    ScoresOverParts(n_q, n, scores, [&](int part, float* dst) {
      const BlockPlanes& p = planes(head, part);
      ScoreQ4_0RowsI8(p.codes(t0), p.scales(t0), n, pd, PartOf(t.q8.data(), n_q, pd, part, q8),
                      t.alpha.data(), PartOf(t.qm.data(), n_q, pd / 32, part, qm), n_q, dst, n);
    });
  }

  // Values: per tile of rows, the weights p * d with int16 quantization where the CPU has
  // the kernel (AccumulateQ4_0RowsI16), the -8d part as min sums added once at the end; a
  // head of several parts accumulates each part in a buffer first.
  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    PrefetchRows(head, t0, t1);
    const int d = shape().head_dim, pd = part_dim(), gp = pd / 32;
    CodeTileScratch& t = TileScratch(d);
    t.msum.assign(static_cast<size_t>(n_q) * (d / 32), 0.0f);
    thread_local std::vector<float> part_msum;
    AccumulateOverParts(n_q, out, [&](int part, float* dst) {
      const BlockPlanes& pl = planes(head, part);
      float* msum = t.msum.data();
      if (n_parts() > 1) {
        part_msum.assign(static_cast<size_t>(n_q) * gp, 0.0f);
        msum = part_msum.data();
      }
      for (int64_t a = t0; a < t1; a += kTileRowsMax) {
        const int64_t e = std::min(t1, a + kTileRowsMax);
        AccumulateQ4_0RowsI16(p + (a - t0), t1 - t0, n_q, pl.scales(a), pl.codes(a), e - a, pd,
                              dst, msum);
      }
      if (n_parts() > 1) {
        for (int i = 0; i < n_q; ++i) {
          std::copy_n(&part_msum[static_cast<size_t>(i) * gp], gp,
                      &t.msum[static_cast<size_t>(i) * (d / 32) + part * gp]);
        }
      }
    });
    AddGroupedMinSums(n_q, d, 0, 32, t, out);
  }
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeQ4_0Store(const StoreShape& shape) {
  if (shape.head_dim % 32 != 0) {
    return InvalidArgument("q4_0: head_dim " + std::to_string(shape.head_dim) +
                           " is not a multiple of the 32-channel block size");
  }
  return std::unique_ptr<ComponentStore>(new Q4_0Store(shape));
}

}  // namespace kvpack
