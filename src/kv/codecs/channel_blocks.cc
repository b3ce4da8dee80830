#include "kv/codecs/channel_blocks.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/code_dot.h"
#include "ops/code_dot_i16.h"
#include "ops/code_unpack.h"
#include "ops/group_quantize.h"
#include "ops/packed_scores.h"
#include "ops/prefetch.h"
#include "ops/vec.h"

namespace kvpack {

ChannelBlocks::ChannelBlocks(int d, int bits, QuantMethod method)
    : d_(d), bits_(bits), method_(method), row_bytes_(PackedBytes(d, bits)) {}

void ChannelBlocks::AppendBlock(const float* x, int64_t n, int64_t ld) {
  if (n <= 0) return;
  std::vector<uint8_t> codes(n * d_);
  const int64_t b = n_blocks();
  params_.Resize((b + 1) * 2 * d_);
  uint16_t* sc = &params_[b * 2 * d_];
  uint16_t* mn = sc + d_;
  if (method_ == QuantMethod::kMinMax) {
    // Every channel at once (ops/group_quantize.h): the same parameters and codes as
    // QuantizeGroup per channel, whose strided scalar loops made an 8-bit block of 128 tokens
    // of a 64-channel head 14-16 us against 3.5 (docs/performance-history.md, session 49).
    std::vector<float> lo(d_), hi(d_), min(d_), inv(d_);
    ColumnMinMaxF32(x, n, ld, d_, lo.data(), hi.data());
    const float top = static_cast<float>((1 << bits_) - 1);
    for (int c = 0; c < d_; ++c) {
      const GroupCoder coder = GroupCoderOf(lo[c], (hi[c] - lo[c]) / top);
      sc[c] = coder.params.scale;
      mn[c] = coder.params.min;
      min[c] = coder.min;
      inv[c] = coder.inv;
    }
    QuantizeColumnsU8(x, n, ld, d_, min.data(), inv.data(), top, codes.data());
  } else {
    for (int c = 0; c < d_; ++c) {
      const GroupParams gp = QuantizeGroup(x + c, n, ld, bits_, method_, codes.data() + c, d_);
      sc[c] = gp.scale;
      mn[c] = gp.min;
    }
  }
  codes_.Resize((n_rows_ + n) * row_bytes_);
  for (int64_t t = 0; t < n; ++t) {
    PackCodes(codes.data() + t * d_, d_, bits_, &codes_[(n_rows_ + t) * row_bytes_]);
  }
  // The last block so far stops being last: it must have the common size.
  if (b == 0) {
    uniform_rows_ = n;
  } else if (uniform_rows_ > 0 && n_rows_ - block_start_.back() != uniform_rows_) {
    uniform_rows_ = 0;
  }
  block_start_.push_back(n_rows_);
  n_rows_ += n;
}

void ChannelBlocks::FindUniformRows() {
  uniform_rows_ = n_blocks() > 0 ? (n_blocks() > 1 ? block_start_[1] : n_rows_) : 0;
  for (int64_t b = 1; b + 1 < n_blocks() && uniform_rows_ > 0; ++b) {
    if (block_start_[b + 1] - block_start_[b] != uniform_rows_) uniform_rows_ = 0;
  }
}

int64_t ChannelBlocks::BlockOf(int64_t r) const {
  if (uniform_rows_ > 0) return std::min(r / uniform_rows_, n_blocks() - 1);
  auto it = std::upper_bound(block_start_.begin(), block_start_.end(), r);
  return static_cast<int64_t>(it - block_start_.begin()) - 1;
}

void ChannelBlocks::BlockParams(int64_t b, CodeTileScratch& t) const {
  ConvertF16ToF32(&params_[b * 2 * d_], t.scale.data(), d_);
  ConvertF16ToF32(&params_[b * 2 * d_ + d_], t.min.data(), d_);
}

void ChannelBlocks::Decode(int64_t r0, int64_t r1, float* out) const {
  if (r0 >= r1) return;
  CodeTileScratch& t = TileScratch(d_);
  for (int64_t b = BlockOf(r0); b < n_blocks() && BlockStart(b) < r1; ++b) {
    const int64_t bs = std::max(r0, BlockStart(b));
    const int64_t be = std::min(r1, BlockEnd(b));
    BlockParams(b, t);
    DequantizeRowsPerChannel(&codes_[bs * row_bytes_], be - bs, row_bytes_, bits_, d_,
                             t.scale.data(), t.min.data(), out + (bs - r0) * d_);
  }
}

const uint8_t* ChannelBlocks::TileCodes(int64_t a, int64_t e, uint8_t* scratch,
                                        int64_t* stride) const {
  *stride = d_;
  if (bits_ == 8) {  // the bytes are the codes: read them in place
    *stride = row_bytes_;
    return &codes_[a * row_bytes_];
  }
  if (row_bytes_ * 8 == static_cast<int64_t>(d_) * bits_) {
    UnpackCodesU8(&codes_[a * row_bytes_], 0, (e - a) * d_, bits_, scratch);  // one stream
    return scratch;
  }
  UnpackCodeRows(&codes_[a * row_bytes_], nullptr, e - a, row_bytes_, 0, d_, bits_, scratch);
  return scratch;
}

void ChannelBlocks::PrefetchRange(int64_t r0, int64_t r1) const {
  const int64_t b0 = BlockOf(r0), b1 = BlockOf(r1 - 1) + 1;
  PrefetchCodeStreamStart(&codes_[r0 * row_bytes_], (r1 - r0) * row_bytes_);
  PrefetchCodeStreamStart(&params_[b0 * 2 * d_], (b1 - b0) * 2 * d_ * sizeof(uint16_t));
}

// Per block: q . (code * scale + min) = (q * scale) . code + q . min. With 2- or 4-bit codes
// q * scale is quantized to int8 per (query row, block): alpha * (q8 . code) in int32.
void ChannelBlocks::Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                           int64_t ld, int64_t col0) const {
  if (r0 >= r1) return;
  PrefetchRange(r0, r1);
  // The blocks the range touches, straight from the packed rows (8-bit codes: the int16 query,
  // where a vector kernel runs; quant_common.h, UseIntegerKeys).
  if (UseIntegerKeys(bits_) || HasVectorChannelBlockScores(row_bytes_, d_, bits_)) {
    const int64_t b0 = BlockOf(r0);
    thread_local std::vector<int64_t> starts;  // relative to r0
    starts.assign(1, 0);
    for (int64_t b = b0 + 1; b < n_blocks() && BlockStart(b) < r1; ++b) {
      starts.push_back(BlockStart(b) - r0);
    }
    starts.push_back(r1 - r0);
    const size_t n_range = starts.size() - 1;
    ScoreChannelBlocksI8(&codes_[r0 * row_bytes_], row_bytes_, d_, bits_, &params_[b0 * 2 * d_],
                         starts.data(), n_range, q, n_q, scores + col0, ld,
                         static_cast<size_t>(n_blocks() - b0) - n_range);
    return;
  }
  CodeTileScratch& t = TileScratch(d_);
  t.qs.resize(static_cast<size_t>(n_q) * d_);
  t.qm.resize(n_q);
  for (int64_t b = BlockOf(r0); b < n_blocks() && BlockStart(b) < r1; ++b) {
    const int64_t bs = std::max(r0, BlockStart(b));
    const int64_t be = std::min(r1, BlockEnd(b));
    BlockParams(b, t);
    for (int i = 0; i < n_q; ++i) {
      float* qs = &t.qs[i * d_];
      for (int c = 0; c < d_; ++c) qs[c] = q[i * d_ + c] * t.scale[c];
      t.qm[i] = DotF32(q + i * d_, t.min.data(), d_);
    }
    for (int64_t a = bs; a < be; a += kTileRowsMax) {
      const int64_t e = std::min(be, a + kTileRowsMax), m = e - a;
      float* sc = scores + col0 + (a - r0);
      int64_t stride;
      const uint8_t* codes = TileCodes(a, e, t.tile_codes.data(), &stride);
      DotCodeRows(codes, m, stride, d_, t.qs.data(), n_q, sc, ld);
      for (int i = 0; i < n_q; ++i) {
        for (int64_t k = 0; k < m; ++k) sc[i * ld + k] += t.qm[i];
      }
    }
  }
}

// Per block: sum_r p_r (code_r * scale + min) = scale * (sum_r p_r code_r) + min * sum_r p_r.
void ChannelBlocks::Accumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                               int64_t col0, float* out) const {
  if (r0 >= r1) return;
  PrefetchRange(r0, r1);
  CodeTileScratch& t = TileScratch(d_);
  t.acc.resize(static_cast<size_t>(n_q) * d_);
  t.psum.resize(n_q);
  for (int64_t b = BlockOf(r0); b < n_blocks() && BlockStart(b) < r1; ++b) {
    const int64_t bs = std::max(r0, BlockStart(b));
    const int64_t be = std::min(r1, BlockEnd(b));
    std::fill(t.acc.begin(), t.acc.end(), 0.0f);
    std::fill(t.psum.begin(), t.psum.end(), 0.0f);
    for (int64_t a = bs; a < be; a += kTileRowsMax) {
      const int64_t e = std::min(be, a + kTileRowsMax);
      int64_t stride;
      const uint8_t* codes = TileCodes(a, e, t.tile_codes.data(), &stride);
      const float* pa = p + col0 + (a - r0);
      // One weight group spanning the row: the probabilities themselves.
      AxpyCodeRowsWeightedI16(pa, n_q, ld, codes, e - a, stride, d_, 0, d_, t.acc.data());
      for (int i = 0; i < n_q; ++i) {
        for (int64_t k = 0; k < e - a; ++k) t.psum[i] += pa[i * ld + k];
      }
    }
    BlockParams(b, t);
    for (int i = 0; i < n_q; ++i) {
      float* o = out + i * d_;
      for (int c = 0; c < d_; ++c) o[c] += t.scale[c] * t.acc[i * d_ + c] + t.min[c] * t.psum[i];
    }
  }
}

void ChannelBlocks::Keep(std::span<const int64_t> keep) {
  std::vector<int64_t> new_start;
  AlignedBuffer<uint16_t> new_params;
  int64_t w = 0;
  size_t k = 0;
  for (int64_t b = 0; b < n_blocks(); ++b) {
    const int64_t be = BlockEnd(b);
    const int64_t first = w;
    for (; k < keep.size() && keep[k] < be; ++k, ++w) {
      if (keep[k] != w) {
        std::memmove(&codes_[w * row_bytes_], &codes_[keep[k] * row_bytes_], row_bytes_);
      }
    }
    if (w > first) {  // the block survives with its parameters unchanged
      const size_t nb = new_start.size();
      new_params.Resize((nb + 1) * 2 * d_);
      std::memcpy(&new_params[nb * 2 * d_], &params_[b * 2 * d_], 2 * d_ * sizeof(uint16_t));
      new_start.push_back(first);
    }
  }
  n_rows_ = w;
  codes_.Resize(w * row_bytes_);
  codes_.ShrinkToFit();
  new_params.ShrinkToFit();
  params_ = std::move(new_params);
  block_start_ = std::move(new_start);
  FindUniformRows();
}

void ChannelBlocks::Clear() {
  n_rows_ = 0;
  codes_ = AlignedBuffer<uint8_t>();
  params_ = AlignedBuffer<uint16_t>();
  block_start_.clear();
  uniform_rows_ = 0;
}

void ChannelBlocks::AddMemory(MemoryUsage& m) const {
  m.code_bytes += codes_.size();
  m.scale_bytes += static_cast<size_t>(n_blocks()) * d_ * sizeof(uint16_t);
  m.zero_bytes += static_cast<size_t>(n_blocks()) * d_ * sizeof(uint16_t);
  // The block table (first row of each block) is metadata.
  m.other_bytes += block_start_.size() * sizeof(int64_t);
  m.reserved_bytes += codes_.capacity_bytes() - codes_.size() + params_.capacity_bytes() -
                      params_.size() * sizeof(uint16_t);
}

}  // namespace kvpack
