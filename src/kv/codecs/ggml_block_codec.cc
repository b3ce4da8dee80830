#include "kv/codecs/ggml_block_codec.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/half.h"
#include "kv/codecs/q4_0_codec.h"
#include "kv/codecs/quant_common.h"
#include "ops/code_unpack.h"
#include "ops/ggml_quants.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

// q8_0, stored as ggml's interleaved blocks (q4_0 is kv/codecs/q4_0_codec.h).
class Q8_0Store final : public ComponentStore {
 public:
  explicit Q8_0Store(const StoreShape& shape)
      : shape_(shape),
        n_blocks_(shape.head_dim / 32),
        row_bytes_(n_blocks_ * sizeof(BlockQ8_0)),
        heads_(shape.n_kv_heads) {}

  std::string spec() const override { return "q8_0"; }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckQuantInput(rows, n_tokens * row_len, shape_, true));
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      AlignedBuffer<uint8_t>& buf = heads_[h];
      const size_t old = buf.size();
      buf.Resize(old + n_tokens * row_bytes_);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* src = rows + t * row_len + h * d;
        QuantizeRowQ8_0(src, buf.data() + old + t * row_bytes_, d);
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return static_cast<int64_t>(heads_[head].size() / row_bytes_);
  }

  // Codes up to 255 after the +128 shift (beyond the integer key path) and a min term 16x
  // larger than q4_0's (an int8 query would add an error as large as the codes'): tiles are
  // dequantized into a thread-local buffer and handed to the f32 tile kernels.
  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const int d = shape_.head_dim;
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
    std::vector<float>& tile = TileBuffer(d);
    for (int64_t a = t0; a < t1; a += kTileRowsMax) {
      const int64_t e = std::min(t1, a + kTileRowsMax);
      Decode(head, a, e, tile.data());
      AxpyRowsF32(p + (a - t0), n_q, t1 - t0, tile.data(), e - a, d, out);
    }
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const uint8_t* rows = heads_[head].data() + t0 * row_bytes_;
    DequantizeQ8_0Blocks(rows, static_cast<size_t>(t1 - t0) * n_blocks_, out);
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

  // Per block: 32 code bytes and one fp16 scale.
  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const auto& buf : heads_) {
      const size_t blocks = buf.size() / sizeof(BlockQ8_0);
      m.code_bytes += blocks * (sizeof(BlockQ8_0) - sizeof(uint16_t));
      m.scale_bytes += blocks * sizeof(uint16_t);
      m.reserved_bytes += buf.capacity() - buf.size();
      m.n_values += static_cast<int64_t>(blocks) * 32;
    }
    return m;
  }

 private:
  static std::vector<float>& TileBuffer(int d) {
    thread_local std::vector<float> tile;
    if (tile.size() < static_cast<size_t>(kTileRowsMax * d)) tile.resize(kTileRowsMax * d);
    return tile;
  }

  StoreShape shape_;
  int n_blocks_;      // blocks per row (head_dim / 32)
  size_t row_bytes_;  // n_blocks * 34
  std::vector<AlignedBuffer<uint8_t>> heads_;  // per head: [n_tokens, n_blocks] block_q8_0
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeGgmlBlockStore(GgmlBlockFormat format,
                                                           const StoreShape& shape) {
  if (format == GgmlBlockFormat::kQ4_0) return MakeQ4_0Store(shape);
  if (shape.head_dim % 32 != 0) {
    return InvalidArgument("q8_0: head_dim " + std::to_string(shape.head_dim) +
                           " is not a multiple of the 32-channel block size");
  }
  return std::unique_ptr<ComponentStore>(new Q8_0Store(shape));
}

}  // namespace kvpack
