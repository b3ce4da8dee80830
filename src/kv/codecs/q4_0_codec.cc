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

class Q4_0Store final : public ComponentStore {
 public:
  explicit Q4_0Store(const StoreShape& shape)
      : shape_(shape),
        n_blocks_(shape.head_dim / 32),
        heads_(shape.n_kv_heads, BlockPlanes(shape.head_dim / 2, shape.head_dim / 32)) {}

  std::string spec() const override { return "q4_0"; }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckQuantInput(rows, n_tokens * row_len, shape_, true));
    std::vector<BlockQ4_0> blocks(n_blocks_);
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      BlockPlanes& p = heads_[h];
      const int64_t old = p.Grow(n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t) {
        QuantizeRowQ4_0(rows + t * row_len + h * d, blocks.data(), d);
        Q4_0BlocksToPlanes(blocks.data(), n_blocks_, p.codes(old + t), p.scales(old + t));
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override { return heads_[head].n_tokens(); }

  // Keys: the int8 query of the grouped algebra (quant_common.h) scored straight from the
  // planes (ScoreQ4_0RowsI8: 32-channel groups with scale d and min -8d).
  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const int d = shape_.head_dim;
    CodeTileScratch& t = TileScratch(d);
    PrepareGroupedQueryI8(q, n_q, d, 32, t);
    const BlockPlanes& p = heads_[head];
    ScoreQ4_0RowsI8(p.codes(t0), p.scales(t0), t1 - t0, d, t.q8.data(), t.alpha.data(),
                    t.qm.data(), n_q, scores, t1 - t0);
  }

  // Values: per tile of rows, the weights p * d with int16 quantization where the CPU has
  // the kernel (AccumulateQ4_0RowsI16), the -8d part as min sums added once at the end.
  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const int d = shape_.head_dim;
    CodeTileScratch& t = TileScratch(d);
    t.msum.assign(static_cast<size_t>(n_q) * n_blocks_, 0.0f);
    const BlockPlanes& pl = heads_[head];
    for (int64_t a = t0; a < t1; a += kTileRowsMax) {
      const int64_t e = std::min(t1, a + kTileRowsMax);
      AccumulateQ4_0RowsI16(p + (a - t0), t1 - t0, n_q, pl.scales(a), pl.codes(a), e - a, d,
                            out, t.msum.data());
    }
    AddGroupedMinSums(n_q, d, 0, 32, t, out);
  }

  // Through ggml's own block form and dequantizer, so the values are llama.cpp's.
  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const BlockPlanes& p = heads_[head];
    std::vector<BlockQ4_0> blocks(n_blocks_);
    for (int64_t t = t0; t < t1; ++t) {
      Q4_0PlanesToBlocks(p.codes(t), p.scales(t), n_blocks_, blocks.data());
      DequantizeQ4_0Blocks(reinterpret_cast<const uint8_t*>(blocks.data()), n_blocks_,
                           out + (t - t0) * shape_.head_dim);
    }
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    return heads_[head].Retain(keep);
  }

  // Per block: 16 code bytes and one fp16 scale (ggml's 18 bytes).
  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const BlockPlanes& p : heads_) p.AddMemory(m);
    return m;
  }

 private:
  StoreShape shape_;
  int n_blocks_;                    // blocks per row (head_dim / 32)
  std::vector<BlockPlanes> heads_;  // per head: codes [n_tokens, head_dim / 2] packed 4-bit
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
