#include "kv/codecs/q8_0_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kv/codecs/block_planes.h"
#include "kv/codecs/quant_common.h"
#include "ops/code_dot_i16.h"
#include "ops/code_unpack.h"
#include "ops/packed_scores.h"
#include "ops/q8_0_dot.h"
#include "ops/vec.h"

namespace kvpack {

void Q8_0BlocksToPlanes(const BlockQ8_0* blocks, int n_blocks, int8_t* codes, uint16_t* scales) {
  for (int b = 0; b < n_blocks; ++b) {
    scales[b] = blocks[b].d;
    std::memcpy(codes + 32 * b, blocks[b].qs, 32);
  }
}

void Q8_0PlanesToBlocks(const int8_t* codes, const uint16_t* scales, int n_blocks,
                        BlockQ8_0* blocks) {
  for (int b = 0; b < n_blocks; ++b) {
    blocks[b].d = scales[b];
    std::memcpy(blocks[b].qs, codes + 32 * b, 32);
  }
}

namespace {

struct Q8_0Format {
  using Block = BlockQ8_0;
  static constexpr const char* kName = "q8_0";
  static constexpr size_t RowBytes(int head_dim) { return static_cast<size_t>(head_dim); }
  // QuantizeRowQ8_0's blocks, vectorized (ops/q8_0_dot.h).
  static void Quantize(const float* x, Block* blocks, int64_t n) {
    QuantizeRowQ8_0Fast(x, static_cast<size_t>(n), blocks);
  }
  static void ToPlanes(const Block* blocks, int n, uint8_t* codes, uint16_t* scales) {
    Q8_0BlocksToPlanes(blocks, n, reinterpret_cast<int8_t*>(codes), scales);
  }
  static void ToBlocks(const uint8_t* codes, const uint16_t* scales, int n, Block* blocks) {
    Q8_0PlanesToBlocks(reinterpret_cast<const int8_t*>(codes), scales, n, blocks);
  }
  static void Dequantize(const uint8_t* blocks, size_t n, float* out) {
    DequantizeQ8_0Blocks(blocks, n, out);
  }
};

class Q8_0Store final : public GgmlPlaneStore<Q8_0Format> {
 public:
  using GgmlPlaneStore::GgmlPlaneStore;

  // Keys: with the integer kernel, the int8 query (one alpha per query row, as the other
  // integer key paths) against the signed codes, exact integer dots per block; a head of
  // several parts is the sum of its parts' scores. Elsewhere the tiles are dequantized and
  // scored by the float kernel.
  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    PrefetchRows(head, t0, t1);
    const int d = shape().head_dim, pd = part_dim(), n = static_cast<int>(t1 - t0);
    if (HasFastQ8_0Scores(pd)) {
      CodeTileScratch& t = TileScratch(d);
      PrepareGroupedQueryI8(q, n_q, d, 32, t);
      thread_local std::vector<int8_t> q8;
      ScoresOverParts(n_q, n, scores, [&](int part, float* dst) {
        const BlockPlanes& p = planes(head, part);
        ScoreQ8_0RowsI8(Codes(p, t0), p.scales(t0), n, pd, PartOf(t.q8.data(), n_q, pd, part, q8),
                        t.alpha.data(), n_q, dst, n);
      });
      return;
    }
    std::vector<float>& tile = TileBuffer(d);
    for (int64_t a = t0; a < t1; a += kTileRowsMax) {
      const int64_t e = std::min(t1, a + kTileRowsMax);
      Decode(head, a, e, tile.data());
      DotTileF32(tile.data(), e - a, d, q, n_q, scores + (a - t0), t1 - t0);
    }
  }

  // Values: per tile, the weights p * d quantized to int16 against the signed codes where the
  // CPU has the kernel (a head of several parts accumulates each part in a buffer first);
  // elsewhere dequantized tiles and float weights.
  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    PrefetchRows(head, t0, t1);
    const int d = shape().head_dim, pd = part_dim();
    if (HasFusedQ8_0ValueKernel(pd, kTileRowsMax)) {
      AccumulateOverParts(n_q, out, [&](int part, float* dst) {
        const BlockPlanes& pl = planes(head, part);
        for (int64_t a = t0; a < t1; a += kTileRowsMax) {
          const int64_t e = std::min(t1, a + kTileRowsMax);
          AccumulateQ8_0RowsI16(p + (a - t0), t1 - t0, n_q, pl.scales(a), Codes(pl, a), e - a,
                                pd, dst);
        }
      });
      return;
    }
    std::vector<float>& tile = TileBuffer(d);
    for (int64_t a = t0; a < t1; a += kTileRowsMax) {
      const int64_t e = std::min(t1, a + kTileRowsMax);
      Decode(head, a, e, tile.data());
      AxpyRowsF32(p + (a - t0), n_q, t1 - t0, tile.data(), e - a, d, out);
    }
  }

 private:
  static const int8_t* Codes(const BlockPlanes& p, int64_t t) {
    return reinterpret_cast<const int8_t*>(p.codes(t));
  }
  static std::vector<float>& TileBuffer(int d) {
    thread_local std::vector<float> tile;
    if (tile.size() < static_cast<size_t>(kTileRowsMax * d)) tile.resize(kTileRowsMax * d);
    return tile;
  }
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeQ8_0Store(const StoreShape& shape) {
  if (shape.head_dim % 32 != 0) {
    return InvalidArgument("q8_0: head_dim " + std::to_string(shape.head_dim) +
                           " is not a multiple of the 32-channel block size");
  }
  return std::unique_ptr<ComponentStore>(new Q8_0Store(shape));
}

}  // namespace kvpack
