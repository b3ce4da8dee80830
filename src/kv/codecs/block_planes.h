// llama.cpp's blocks in plane form (kv/codecs/q4_0_codec.h, q8_0_codec.h). BlockPlanes: one
// KV head's plane of codes, row_bytes per token, and plane of fp16 block scales, n_blocks per
// token, with growth, eviction (Retain) and the exact memory accounting.
#ifndef KVPACK_KV_CODECS_BLOCK_PLANES_H_
#define KVPACK_KV_CODECS_BLOCK_PLANES_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "kv/codecs/quant_common.h"
#include "kv/component_store.h"
#include "ops/prefetch.h"
#include "kvpack/status.h"

namespace kvpack {

class BlockPlanes {
 public:
  BlockPlanes(size_t row_bytes, int n_blocks) : row_bytes_(row_bytes), n_blocks_(n_blocks) {}

  int64_t n_tokens() const { return static_cast<int64_t>(scales_.size()) / n_blocks_; }
  // Room for n more tokens; returns the first new token's index.
  int64_t Grow(int64_t n);

  uint8_t* codes(int64_t t) { return codes_.data() + t * row_bytes_; }
  const uint8_t* codes(int64_t t) const { return codes_.data() + t * row_bytes_; }
  uint16_t* scales(int64_t t) { return scales_.data() + t * n_blocks_; }
  const uint16_t* scales(int64_t t) const { return scales_.data() + t * n_blocks_; }

  // Asks for the start of both planes' rows [t0, t1) (ops/prefetch.h).
  void PrefetchRows(int64_t t0, int64_t t1) const {
    PrefetchCodeStreamStart(codes(t0), (t1 - t0) * row_bytes_);
    PrefetchCodeStreamStart(scales(t0), (t1 - t0) * n_blocks_ * sizeof(uint16_t));
  }
  // Keeps the tokens `keep` (ascending, validated here), in order, and frees the rest.
  Status Retain(std::span<const int64_t> keep);
  // Codes and scales; n_values = 32 per block.
  void AddMemory(MemoryUsage& m) const;

 private:
  size_t row_bytes_;
  int n_blocks_;
  AlignedBuffer<uint8_t> codes_;    // [n_tokens, row_bytes]
  AlignedBuffer<uint16_t> scales_;  // [n_tokens, n_blocks] fp16
};

// What a llama.cpp block format's store does the same way for q4_0 and q8_0: each appended
// row quantized by ggml's reference quantizer into blocks and split into the planes, Decode
// back through ggml's blocks and dequantizer (so the values are llama.cpp's), eviction and
// memory accounting. The formats' stores add their fused Scores and Accumulate. Format:
//   using Block = BlockQ4_0 | BlockQ8_0;  static const char* kName;
//   static constexpr size_t RowBytes(int channels);   // code bytes per row
//   static void Quantize(const float* x, Block* blocks, int64_t n);
//   static void ToPlanes(const Block*, int n_blocks, uint8_t* codes, uint16_t* scales);
//   static void ToBlocks(const uint8_t* codes, const uint16_t* scales, int n_blocks, Block*);
//   static void Dequantize(const uint8_t* blocks, size_t n_blocks, float* out);
// Parts: a head of more than 64 channels, a multiple of 64 (head_dim 128: Llama-3-8B,
// Mistral-7B, Qwen2.5-1.5B and larger), is kept as head_dim / 64 parts of 64 channels, each
// with its own planes, so that the single-pass kernels made for 64 channels read every part;
// the blocks and their bytes are the same (ggml's blocks are independent 32-channel units).
template <class Format>
class GgmlPlaneStore : public ComponentStore {
 public:
  explicit GgmlPlaneStore(const StoreShape& shape)
      : shape_(shape),
        n_parts_(shape.head_dim > 64 && shape.head_dim % 64 == 0 ? shape.head_dim / 64 : 1),
        part_dim_(shape.head_dim / n_parts_),
        heads_(static_cast<size_t>(shape.n_kv_heads) * n_parts_,
               BlockPlanes(Format::RowBytes(part_dim_), part_dim_ / 32)) {}

  std::string spec() const override { return Format::kName; }

  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    return CheckQuantRows(rows, n_tokens, shape_);
  }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
    std::vector<typename Format::Block> blocks(part_dim_ / 32);
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      for (int part = 0; part < n_parts_; ++part) {
        BlockPlanes& p = heads_[h * n_parts_ + part];
        const int64_t old = p.Grow(n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t) {
          Format::Quantize(rows + t * row_len + h * d + part * part_dim_, blocks.data(),
                           part_dim_);
          Format::ToPlanes(blocks.data(), part_dim_ / 32, p.codes(old + t), p.scales(old + t));
        }
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override { return planes(head, 0).n_tokens(); }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    std::vector<typename Format::Block> blocks(part_dim_ / 32);
    for (int part = 0; part < n_parts_; ++part) {
      const BlockPlanes& p = planes(head, part);
      for (int64_t t = t0; t < t1; ++t) {
        Format::ToBlocks(p.codes(t), p.scales(t), part_dim_ / 32, blocks.data());
        Format::Dequantize(reinterpret_cast<const uint8_t*>(blocks.data()), part_dim_ / 32,
                           out + (t - t0) * shape_.head_dim + part * part_dim_);
      }
    }
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    for (int part = 0; part < n_parts_; ++part) {  // the same check passes or fails for all
      KVPACK_RETURN_IF_ERROR(heads_[head * n_parts_ + part].Retain(keep));
    }
    return Status::Ok();
  }

  // Per block: the code bytes and one fp16 scale (ggml's block size).
  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const BlockPlanes& p : heads_) p.AddMemory(m);
    return m;
  }

  void Prefetch(int head, int64_t t0, int64_t t1) const override { PrefetchRows(head, t0, t1); }

 protected:
  const StoreShape& shape() const { return shape_; }
  int n_parts() const { return n_parts_; }
  int part_dim() const { return part_dim_; }
  const BlockPlanes& planes(int head, int part) const { return heads_[head * n_parts_ + part]; }
  // Every part's PrefetchRows(t0, t1): the start of a Scores or Accumulate call.
  void PrefetchRows(int head, int64_t t0, int64_t t1) const {
    for (int part = 0; part < n_parts_; ++part) planes(head, part).PrefetchRows(t0, t1);
  }

  // Part `part` of rows x [n_q, head_dim] with `width` values per part: x itself with one
  // part, else copied to buf as [n_q, width].
  template <class T>
  const T* PartOf(const T* x, int n_q, int width, int part, std::vector<T>& buf) const {
    if (n_parts_ == 1) return x;
    buf.resize(static_cast<size_t>(n_q) * width);
    for (int i = 0; i < n_q; ++i) {
      std::copy_n(x + (static_cast<size_t>(i) * n_parts_ + part) * width, width,
                  &buf[static_cast<size_t>(i) * width]);
    }
    return buf.data();
  }
  // scores [n_q, n] = the sum over the parts of score_part(part, dst): part 0 writes
  // `scores` itself, each other part a buffer that is then added.
  template <class ScorePart>
  void ScoresOverParts(int n_q, int64_t n, float* scores, ScorePart score_part) const {
    score_part(0, scores);
    thread_local std::vector<float> buf;
    for (int part = 1; part < n_parts_; ++part) {
      buf.resize(static_cast<size_t>(n_q) * n);
      score_part(part, buf.data());
      for (size_t i = 0; i < buf.size(); ++i) scores[i] += buf[i];
    }
  }
  // accumulate_part(part, dst) adds the part's products to dst [n_q, part_dim]: `out`
  // [n_q, head_dim] itself with one part, else a zeroed buffer whose channels are then added
  // to the part's channels of out.
  template <class AccumulatePart>
  void AccumulateOverParts(int n_q, float* out, AccumulatePart accumulate_part) const {
    if (n_parts_ == 1) {
      accumulate_part(0, out);
      return;
    }
    thread_local std::vector<float> buf;
    for (int part = 0; part < n_parts_; ++part) {
      buf.assign(static_cast<size_t>(n_q) * part_dim_, 0.0f);
      accumulate_part(part, buf.data());
      for (int i = 0; i < n_q; ++i) {
        float* o = out + static_cast<size_t>(i) * shape_.head_dim + part * part_dim_;
        for (int c = 0; c < part_dim_; ++c) o[c] += buf[static_cast<size_t>(i) * part_dim_ + c];
      }
    }
  }

 private:
  StoreShape shape_;
  int n_parts_;                     // parts per head
  int part_dim_;                    // channels per part
  std::vector<BlockPlanes> heads_;  // [n_kv_heads, n_parts]
};

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_BLOCK_PLANES_H_
