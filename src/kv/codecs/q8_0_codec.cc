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

class Q8_0Store final : public ComponentStore {
 public:
  explicit Q8_0Store(const StoreShape& shape)
      : shape_(shape),
        n_blocks_(shape.head_dim / 32),
        heads_(shape.n_kv_heads, BlockPlanes(shape.head_dim, shape.head_dim / 32)) {}

  std::string spec() const override { return "q8_0"; }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckQuantInput(rows, n_tokens * row_len, shape_, true));
    std::vector<BlockQ8_0> blocks(n_blocks_);
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      BlockPlanes& p = heads_[h];
      const int64_t old = p.Grow(n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t) {
        QuantizeRowQ8_0(rows + t * row_len + h * d, blocks.data(), d);
        Q8_0BlocksToPlanes(blocks.data(), n_blocks_, codes(p, old + t), p.scales(old + t));
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override { return heads_[head].n_tokens(); }

  // Keys: with the integer kernel, the int8 query (one alpha per query row, as the other
  // integer key paths) against the signed codes, exact integer dots per block. Elsewhere the
  // tiles are dequantized and scored by the float kernel.
  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const int d = shape_.head_dim;
    const BlockPlanes& p = heads_[head];
    if (HasFastQ8_0Scores(d)) {
      CodeTileScratch& t = TileScratch(d);
      PrepareGroupedQueryI8(q, n_q, d, 32, t);
      ScoreQ8_0RowsI8(codes(p, t0), p.scales(t0), t1 - t0, d, t.q8.data(), t.alpha.data(), n_q,
                      scores, t1 - t0);
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
  // CPU has the kernel; elsewhere dequantized tiles and float weights.
  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const int d = shape_.head_dim;
    const BlockPlanes& pl = heads_[head];
    const bool fused = HasFusedQ8_0ValueKernel(d, kTileRowsMax);
    std::vector<float>& tile = TileBuffer(d);
    for (int64_t a = t0; a < t1; a += kTileRowsMax) {
      const int64_t e = std::min(t1, a + kTileRowsMax);
      if (fused) {
        AccumulateQ8_0RowsI16(p + (a - t0), t1 - t0, n_q, pl.scales(a), codes(pl, a), e - a, d,
                              out);
      } else {
        Decode(head, a, e, tile.data());
        AxpyRowsF32(p + (a - t0), n_q, t1 - t0, tile.data(), e - a, d, out);
      }
    }
  }

  // Through ggml's own block form and dequantizer, so the values are llama.cpp's.
  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const BlockPlanes& p = heads_[head];
    std::vector<BlockQ8_0> blocks(n_blocks_);
    for (int64_t t = t0; t < t1; ++t) {
      Q8_0PlanesToBlocks(codes(p, t), p.scales(t), n_blocks_, blocks.data());
      DequantizeQ8_0Blocks(reinterpret_cast<const uint8_t*>(blocks.data()), n_blocks_,
                           out + (t - t0) * shape_.head_dim);
    }
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    return heads_[head].Retain(keep);
  }

  // Per block: 32 code bytes and one fp16 scale (ggml's 34 bytes).
  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const BlockPlanes& p : heads_) p.AddMemory(m);
    return m;
  }

 private:
  static int8_t* codes(BlockPlanes& p, int64_t t) {
    return reinterpret_cast<int8_t*>(p.codes(t));
  }
  static const int8_t* codes(const BlockPlanes& p, int64_t t) {
    return reinterpret_cast<const int8_t*>(p.codes(t));
  }
  static std::vector<float>& TileBuffer(int d) {
    thread_local std::vector<float> tile;
    if (tile.size() < static_cast<size_t>(kTileRowsMax * d)) tile.resize(kTileRowsMax * d);
    return tile;
  }

  StoreShape shape_;
  int n_blocks_;                    // blocks per row (head_dim / 32)
  std::vector<BlockPlanes> heads_;  // per head: codes [n_tokens, head_dim] int8
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
