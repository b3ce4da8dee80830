#include "kv/codecs/ggml_block_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/half.h"
#include "kv/codecs/quant_common.h"
#include "ops/code_unpack.h"
#include "ops/ggml_quants.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

class GgmlBlockStore final : public ComponentStore {
 public:
  GgmlBlockStore(GgmlBlockFormat format, const StoreShape& shape)
      : format_(format),
        shape_(shape),
        n_blocks_(shape.head_dim / 32),
        block_bytes_(format == GgmlBlockFormat::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0)),
        row_bytes_(n_blocks_ * block_bytes_),
        heads_(shape.n_kv_heads) {}

  std::string spec() const override { return format_ == GgmlBlockFormat::kQ8_0 ? "q8_0" : "q4_0"; }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckQuantInput(rows, n_tokens * row_len, shape_, true));
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      AlignedBuffer<uint8_t>& buf = heads_[h];
      const size_t old = buf.size();
      buf.Resize(old + n_tokens * row_bytes_);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* src = rows + t * row_len + h * d;
        uint8_t* dst = buf.data() + old + t * row_bytes_;
        if (format_ == GgmlBlockFormat::kQ8_0) {
          QuantizeRowQ8_0(src, dst, d);
        } else {
          QuantizeRowQ4_0(src, dst, d);
        }
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return static_cast<int64_t>(heads_[head].size() / row_bytes_);
  }

  // q4_0: a 32-channel block is a group with scale d and min -8d, read with the per-token
  // group algebra of quant_common.h (int8 query and integer code dots for keys, one FMA per
  // code for values). q8_0 (codes up to 255 after the +128 shift, beyond the integer key
  // path, and a min term 16x larger than q4_0's): tiles are dequantized into a thread-local
  // buffer and handed to the f32 tile kernels.
  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const int d = shape_.head_dim;
    if (format_ == GgmlBlockFormat::kQ4_0) {
      CodeTileScratch& t = TileScratch(d);
      PrepareGroupedQueryI8(q, n_q, d, 32, t);
      for (int64_t a = t0; a < t1; a += kTileRowsMax) {
        const int64_t e = std::min(t1, a + kTileRowsMax);
        Q4_0Tile(head, a, e, t);
        ScoreGroupedTileI8(t.tile_codes.data(), e - a, d, 32, n_q, t, scores + (a - t0), t1 - t0);
      }
      return;
    }
    std::vector<float>& tile = TileBuffer(d);
    for (int64_t a = t0; a < t1; a += kTileRowsMax) {
      const int64_t e = std::min(t1, a + kTileRowsMax);
      Decode(head, a, e, tile.data());
      DotTileF32(tile.data(), e - a, d, q, n_q, scores + (a - t0), t1 - t0);
    }
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const int d = shape_.head_dim;
    if (format_ == GgmlBlockFormat::kQ4_0) {
      CodeTileScratch& t = TileScratch(d);
      t.msum.assign(static_cast<size_t>(n_q) * n_blocks_, 0.0f);
      for (int64_t a = t0; a < t1; a += kTileRowsMax) {
        const int64_t e = std::min(t1, a + kTileRowsMax);
        Q4_0Tile(head, a, e, t);
        AccumulateGroupedTile(t.tile_codes.data(), e - a, d, 0, 32, /*bits=*/4, p + (a - t0), n_q,
                              t1 - t0, t, out);
      }
      AddGroupedMinSums(n_q, d, 0, 32, t, out);
      return;
    }
    std::vector<float>& tile = TileBuffer(d);
    for (int64_t a = t0; a < t1; a += kTileRowsMax) {
      const int64_t e = std::min(t1, a + kTileRowsMax);
      Decode(head, a, e, tile.data());
      AxpyRowsF32(p + (a - t0), n_q, t1 - t0, tile.data(), e - a, d, out);
    }
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const uint8_t* rows = heads_[head].data() + t0 * row_bytes_;
    const size_t n_blocks = static_cast<size_t>(t1 - t0) * n_blocks_;
    if (format_ == GgmlBlockFormat::kQ8_0) {
      DequantizeQ8_0Blocks(rows, n_blocks, out);
    } else {
      DequantizeQ4_0Blocks(rows, n_blocks, out);
    }
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    AlignedBuffer<uint8_t>& buf = heads_[head];
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
    int64_t w = 0;
    for (int64_t idx : keep) {
      if (idx != w) std::memmove(buf.data() + w * row_bytes_, buf.data() + idx * row_bytes_, row_bytes_);
      ++w;
    }
    buf.Resize(w * row_bytes_);
    buf.ShrinkToFit();
    return Status::Ok();
  }

  // Per block: 32 codes (32 bytes for q8_0, 16 for q4_0) and one fp16 scale.
  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const auto& buf : heads_) {
      const size_t blocks = buf.size() / block_bytes_;
      m.code_bytes += blocks * (block_bytes_ - sizeof(uint16_t));
      m.scale_bytes += blocks * sizeof(uint16_t);
      m.reserved_bytes += buf.capacity() - buf.size();
      m.n_values += static_cast<int64_t>(blocks) * 32;
    }
    return m;
  }

 private:
  // Rows [a, e) of a q4_0 head as codes (t.tile_codes [e - a, d]) and per-block parameters
  // by group (t.gscale = d, t.gmin = -8d, [n_blocks, kTileRowsMax]).
  void Q4_0Tile(int head, int64_t a, int64_t e, CodeTileScratch& t) const {
    t.gscale.resize(static_cast<size_t>(n_blocks_) * kTileRowsMax);
    t.gmin.resize(t.gscale.size());
    UnpackQ4_0Rows(heads_[head].data() + a * row_bytes_, e - a, n_blocks_, t.tile_codes.data(),
                   t.gscale.data(), t.gmin.data(), kTileRowsMax);
  }
  static std::vector<float>& TileBuffer(int d) {
    thread_local std::vector<float> tile;
    if (tile.size() < static_cast<size_t>(kTileRowsMax * d)) tile.resize(kTileRowsMax * d);
    return tile;
  }

  GgmlBlockFormat format_;
  StoreShape shape_;
  int n_blocks_;        // blocks per row (head_dim / 32)
  size_t block_bytes_;  // 34 (q8_0) or 18 (q4_0)
  size_t row_bytes_;
  std::vector<AlignedBuffer<uint8_t>> heads_;  // per head: [n_tokens, n_blocks] ggml blocks
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeGgmlBlockStore(GgmlBlockFormat format,
                                                           const StoreShape& shape) {
  if (shape.head_dim % 32 != 0) {
    return InvalidArgument(std::string(format == GgmlBlockFormat::kQ8_0 ? "q8_0" : "q4_0") +
                           ": head_dim " + std::to_string(shape.head_dim) +
                           " is not a multiple of the 32-channel block size");
  }
  return std::unique_ptr<ComponentStore>(new GgmlBlockStore(format, shape));
}

}  // namespace kvpack
