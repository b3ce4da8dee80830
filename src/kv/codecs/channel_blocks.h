// Per-channel groups along tokens: tokens are stored as packed code rows of d channels; a
// block of consecutive tokens shares one (scale, min) per channel. Eviction inside a block
// keeps the block's parameters and drops the evicted rows: the survivors decode exactly as
// before (no re-quantization error); the block's parameters are freed with its last token.
// (kv/codecs/quant_common.h: the quantizer, the tile algebra and the design the containers
// share.)
#ifndef KVPACK_KV_CODECS_CHANNEL_BLOCKS_H_
#define KVPACK_KV_CODECS_CHANNEL_BLOCKS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "kv/codecs/quant_common.h"
#include "kv/component_store.h"

namespace kvpack {

class ChannelBlocks {
 public:
  ChannelBlocks(int d, int bits, QuantMethod method);

  int64_t n_rows() const { return n_rows_; }
  int64_t n_blocks() const { return static_cast<int64_t>(block_start_.size()); }
  // Quantizes x [n, d] (row stride ld) as one block: one group of n tokens per channel.
  void AppendBlock(const float* x, int64_t n, int64_t ld);
  void Decode(int64_t r0, int64_t r1, float* out) const;  // out: [r1 - r0, d]
  // scores[i * ld + col0 + (r - r0)] = dot(q[i], row r) for r in [r0, r1). q: [n_q, d].
  void Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores, int64_t ld,
              int64_t col0) const;
  // out[i] += sum_r p[i * ld + col0 + (r - r0)] * row r.  out: [n_q, d].
  void Accumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld, int64_t col0,
                  float* out) const;
  void Keep(std::span<const int64_t> keep);
  void Clear();
  void AddMemory(MemoryUsage& m) const;

  // Asks for the start of the codes and parameters of rows [r0, r1) (ops/prefetch.h).
  void PrefetchRange(int64_t r0, int64_t r1) const;

 private:
  int64_t BlockOf(int64_t r) const;  // index of the block holding row r
  // First row of block b (b < n_blocks()).
  int64_t BlockStart(int64_t b) const {
    return uniform_rows_ > 0 ? b * uniform_rows_ : block_start_[b];
  }
  // One past the last row of block b.
  int64_t BlockEnd(int64_t b) const { return b + 1 < n_blocks() ? BlockStart(b + 1) : n_rows_; }
  // uniform_rows_ from block_start_ (after Keep).
  void FindUniformRows();
  // Block b's scales and mins as floats, into t.scale and t.min ([d] each).
  void BlockParams(int64_t b, CodeTileScratch& t) const;
  // Codes of rows [a, e), one byte per code, *stride bytes from one row to the next: 8-bit
  // rows in place, narrower ones unpacked into scratch ([e - a, d], stride d).
  const uint8_t* TileCodes(int64_t a, int64_t e, uint8_t* scratch, int64_t* stride) const;

  int d_, bits_;
  QuantMethod method_;
  int64_t row_bytes_;
  int64_t n_rows_ = 0;
  AlignedBuffer<uint8_t> codes_;        // [n_rows, row_bytes] packed
  AlignedBuffer<uint16_t> params_;      // [n_blocks, 2, d] fp16: scales then mins
  std::vector<int64_t> block_start_;    // [n_blocks] first row of each block (ascending)
  // The rows of every block but the last when they are all equal (a cache without eviction:
  // KIVI's and HF's groups, KCVT's blocks of the buffer), else 0. Block lookups are then
  // arithmetic. The binary search over block_start_, whose lines come from memory on every
  // decode step, made ChannelBlocks::Scores 1.3% of a KIVI-2 step at depth 8192, about 8% of
  // the key pass's time (perf, session 20; 40% of it was one compare of the search).
  int64_t uniform_rows_ = 0;
};

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_CHANNEL_BLOCKS_H_
