// One KV head's llama.cpp blocks in plane form (kv/codecs/q4_0_codec.h, q8_0_codec.h): a
// plane of codes, row_bytes per token, and a plane of fp16 block scales, n_blocks per token.
// What the two formats share: growth, eviction (Retain) and the exact memory accounting.
#ifndef KVPACK_KV_CODECS_BLOCK_PLANES_H_
#define KVPACK_KV_CODECS_BLOCK_PLANES_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/aligned_buffer.h"
#include "kv/component_store.h"
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

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_BLOCK_PLANES_H_
