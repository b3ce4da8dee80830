#include "kv/codecs/gear_parts.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/half.h"
#include "ops/lowrank_f16.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

// Per-thread scratch for the fused kernels (concurrent const calls come from different
// threads; a call never nests another).
std::vector<float>& Scratch() {
  thread_local std::vector<float> buf;
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// LowRankBlocks

static_assert(LowRankBlocks::kMaxRank <= static_cast<int>(kLowRankMaxRank),
              "the fused kernels keep one projection of kMaxRank floats on the stack");

void LowRankBlocks::AppendBlock(const uint16_t* a_t, const uint16_t* b_t, int64_t n, int rank) {
  if (n <= 0) return;
  KVPACK_CHECK(rank >= 0 && rank <= kMaxRank);
  Block blk;
  blk.first = n_rows_;
  blk.n = n;
  blk.rank = rank;
  blk.a_off = a_t_.size();
  blk.b_off = b_t_.size();
  const size_t na = static_cast<size_t>(n) * rank, nb = static_cast<size_t>(d_) * rank;
  a_t_.Resize(blk.a_off + na);
  b_t_.Resize(blk.b_off + nb);
  if (rank > 0) {
    std::memcpy(&a_t_[blk.a_off], a_t, na * sizeof(uint16_t));
    std::memcpy(&b_t_[blk.b_off], b_t, nb * sizeof(uint16_t));
  }
  blocks_.push_back(blk);
  n_rows_ += n;
}

size_t LowRankBlocks::FirstBlockAtOrAfter(int64_t r) const {
  // The block containing r: the last block whose first row is <= r.
  auto it = std::upper_bound(blocks_.begin(), blocks_.end(), r,
                             [](int64_t row, const Block& b) { return row < b.first; });
  return it == blocks_.begin() ? 0 : static_cast<size_t>(it - blocks_.begin()) - 1;
}

void LowRankBlocks::AddDecode(int64_t r0, int64_t r1, float* out) const {
  if (r0 >= r1) return;
  for (size_t bi = FirstBlockAtOrAfter(r0); bi < blocks_.size(); ++bi) {
    const Block& blk = blocks_[bi];
    if (blk.first >= r1) break;
    const int64_t s = std::max(r0, blk.first), e = std::min(r1, blk.first + blk.n);
    for (int k = 0; k < blk.rank; ++k) {
      const uint16_t* a = &a_t_[blk.a_off + static_cast<size_t>(k) * blk.n];
      const uint16_t* b = &b_t_[blk.b_off + static_cast<size_t>(k) * d_];
      for (int64_t row = s; row < e; ++row) {
        AxpyF16(Fp16ToFp32(a[row - blk.first]), b, out + (row - r0) * d_, d_);
      }
    }
  }
}

void LowRankBlocks::AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                              int64_t ld) const {
  if (r0 >= r1) return;
  for (size_t bi = FirstBlockAtOrAfter(r0); bi < blocks_.size(); ++bi) {
    const Block& blk = blocks_[bi];
    if (blk.first >= r1) break;
    if (blk.rank == 0) continue;
    const int64_t s = std::max(r0, blk.first), e = std::min(r1, blk.first + blk.n);
    // scores[i, s..e) += (q[i] . B) A^T[:, s..e)
    LowRankAddScoresF16(&a_t_[blk.a_off + (s - blk.first)], blk.n, &b_t_[blk.b_off], blk.rank,
                        d_, e - s, q, n_q, scores + (s - r0), ld);
  }
}

void LowRankBlocks::AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                                  float* out) const {
  if (r0 >= r1) return;
  for (size_t bi = FirstBlockAtOrAfter(r0); bi < blocks_.size(); ++bi) {
    const Block& blk = blocks_[bi];
    if (blk.first >= r1) break;
    if (blk.rank == 0) continue;
    const int64_t s = std::max(r0, blk.first), e = std::min(r1, blk.first + blk.n);
    // out[i] += (p[i, s..e) . A[s..e)) B^T
    LowRankAddAccumulateF16(&a_t_[blk.a_off + (s - blk.first)], blk.n, &b_t_[blk.b_off],
                            blk.rank, d_, e - s, p + (s - r0), n_q, ld, out);
  }
}

void LowRankBlocks::Keep(std::span<const int64_t> keep) {
  std::vector<Block> kept_blocks;
  AlignedBuffer<uint16_t> a_t, b_t;
  size_t k = 0;
  int64_t next_row = 0;
  for (const Block& blk : blocks_) {
    const int64_t end = blk.first + blk.n;
    const size_t k0 = k;
    while (k < keep.size() && keep[k] < end) ++k;
    const int64_t n_kept = static_cast<int64_t>(k - k0);
    if (n_kept == 0) continue;  // no survivor: A and B are freed with the block
    // The survivors' rows of A (columns of A^T); B, shared by the block, stays.
    Block nb{next_row, n_kept, blk.rank, a_t.size(), b_t.size()};
    a_t.Resize(nb.a_off + static_cast<size_t>(n_kept) * blk.rank);
    b_t.Resize(nb.b_off + static_cast<size_t>(d_) * blk.rank);
    for (int r = 0; r < blk.rank; ++r) {
      for (int64_t j = 0; j < n_kept; ++j) {
        a_t[nb.a_off + r * n_kept + j] = a_t_[blk.a_off + r * blk.n + (keep[k0 + j] - blk.first)];
      }
    }
    if (blk.rank > 0) {
      std::memcpy(&b_t[nb.b_off], &b_t_[blk.b_off], static_cast<size_t>(d_) * blk.rank * sizeof(uint16_t));
    }
    next_row += n_kept;
    kept_blocks.push_back(nb);
  }
  a_t.ShrinkToFit();
  b_t.ShrinkToFit();
  a_t_ = std::move(a_t);
  b_t_ = std::move(b_t);
  blocks_ = std::move(kept_blocks);
  n_rows_ = next_row;
}

void LowRankBlocks::AddMemory(MemoryUsage& m) const {
  m.factor_bytes += (a_t_.size() + b_t_.size()) * sizeof(uint16_t);
  m.reserved_bytes += a_t_.capacity_bytes() - a_t_.size() * sizeof(uint16_t) +
                      b_t_.capacity_bytes() - b_t_.size() * sizeof(uint16_t);
  m.other_bytes += blocks_.size() * kBlockTableBytes;
}

// ---------------------------------------------------------------------------------------
// SparseOutliers

void SparseOutliers::Append(int64_t row, int channel, uint16_t value_fp16) {
  KVPACK_CHECK(rows_.empty() || row >= rows_.back());
  KVPACK_CHECK(row >= 0 && row <= std::numeric_limits<int32_t>::max());
  KVPACK_CHECK(rows_.size() < std::numeric_limits<uint32_t>::max());  // the row index's range
  // Index entries already made stay right: an entry with no row at or after its start
  // holds n_entries, which is where this entry goes.
  rows_.push_back(static_cast<int32_t>(row));
  channels_.push_back(static_cast<uint16_t>(channel));
  values_.push_back(value_fp16);
}

void SparseOutliers::ExtendRows(int64_t n_rows) {
  KVPACK_CHECK(rows_.empty() || rows_.back() < n_rows);
  while (static_cast<int64_t>(row_index_.size()) * kIndexRows < n_rows) {
    const int64_t start = static_cast<int64_t>(row_index_.size()) * kIndexRows;
    row_index_.push_back(
        static_cast<uint32_t>(std::lower_bound(rows_.begin(), rows_.end(), start) - rows_.begin()));
  }
}

size_t SparseOutliers::FirstEntryAtOrAfter(int64_t r) const {
  const int64_t k = r / kIndexRows;
  if (r <= 0) return 0;
  if (k >= static_cast<int64_t>(row_index_.size())) return rows_.size();
  const auto lo = rows_.begin() + row_index_[k];
  const auto hi = k + 1 < static_cast<int64_t>(row_index_.size()) ? rows_.begin() + row_index_[k + 1]
                                                                   : rows_.end();
  return std::lower_bound(lo, hi, r) - rows_.begin();
}

void SparseOutliers::Range(int64_t r0, int64_t r1, size_t& i0, size_t& i1,
                           std::vector<float>& values) const {
  i0 = FirstEntryAtOrAfter(r0);
  i1 = std::max(i0, FirstEntryAtOrAfter(r1));
  values.resize(i1 - i0);
  if (i1 > i0) ConvertF16ToF32(&values_[i0], values.data(), i1 - i0);
}

void SparseOutliers::AddDecode(int64_t r0, int64_t r1, float* out) const {
  size_t i0, i1;
  std::vector<float>& v = Scratch();
  Range(r0, r1, i0, i1, v);
  for (size_t j = i0; j < i1; ++j) out[(rows_[j] - r0) * d_ + channels_[j]] += v[j - i0];
}

namespace {

// The sparse terms in one pass over m entries for all query rows:
//   dst[i * ld_dst + dst_index[j] - dst_offset] += src[i * ld_src + src_index[j] - src_offset] * v[j]
// (scores: dst index = row, src index = channel; accumulate: the other way round).
// kNq > 0 fixes the number of query rows so that the loop over them unrolls and each
// entry's indices and value are read once; kNq = 0 reads n_q.
template <int kNq, typename DstIndex, typename SrcIndex>
void AddEntryProducts(const DstIndex* dst_index, int64_t dst_offset, const SrcIndex* src_index,
                      int64_t src_offset, const float* v, size_t m, const float* src,
                      int64_t ld_src, int n_q, float* dst, int64_t ld_dst) {
  const int nq = kNq > 0 ? kNq : n_q;
  for (size_t j = 0; j < m; ++j) {
    const int64_t di = dst_index[j] - dst_offset, si = src_index[j] - src_offset;
    for (int i = 0; i < nq; ++i) dst[i * ld_dst + di] += src[i * ld_src + si] * v[j];
  }
}

template <typename DstIndex, typename SrcIndex>
void AddEntryProductsAnyNq(const DstIndex* dst_index, int64_t dst_offset,
                           const SrcIndex* src_index, int64_t src_offset, const float* v,
                           size_t m, const float* src, int64_t ld_src, int n_q, float* dst,
                           int64_t ld_dst) {
  static constexpr decltype(&AddEntryProducts<0, DstIndex, SrcIndex>) kByRows[] = {
      &AddEntryProducts<0, DstIndex, SrcIndex>, &AddEntryProducts<1, DstIndex, SrcIndex>,
      &AddEntryProducts<2, DstIndex, SrcIndex>, &AddEntryProducts<3, DstIndex, SrcIndex>,
      &AddEntryProducts<4, DstIndex, SrcIndex>};
  kByRows[n_q >= 1 && n_q <= 4 ? n_q : 0](dst_index, dst_offset, src_index, src_offset, v, m, src,
                                          ld_src, n_q, dst, ld_dst);
}

}  // namespace

void SparseOutliers::AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                               int64_t ld) const {
  size_t i0, i1;
  std::vector<float>& v = Scratch();
  Range(r0, r1, i0, i1, v);
  // scores[i, row - r0] += q[i, channel] * value
  AddEntryProductsAnyNq(rows_.data() + i0, r0, channels_.data() + i0, 0, v.data(), i1 - i0, q,
                        d_, n_q, scores, ld);
}

void SparseOutliers::AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                                   float* out) const {
  size_t i0, i1;
  std::vector<float>& v = Scratch();
  Range(r0, r1, i0, i1, v);
  // out[i, channel] += p[i, row - r0] * value
  AddEntryProductsAnyNq(channels_.data() + i0, 0, rows_.data() + i0, r0, v.data(), i1 - i0, p,
                        ld, n_q, out, d_);
}

void SparseOutliers::Keep(std::span<const int64_t> keep) {
  size_t w = 0, k = 0;
  for (size_t j = 0; j < rows_.size(); ++j) {
    while (k < keep.size() && keep[k] < rows_[j]) ++k;
    if (k == keep.size()) break;
    if (keep[k] != rows_[j]) continue;  // the token was evicted
    rows_[w] = static_cast<int32_t>(k);
    channels_[w] = channels_[j];
    values_[w] = values_[j];
    ++w;
  }
  rows_.resize(w);
  channels_.resize(w);
  values_.resize(w);
  rows_.shrink_to_fit();
  channels_.shrink_to_fit();
  values_.shrink_to_fit();
  if (!row_index_.empty()) {  // gear-l never indexes (nor has entries)
    row_index_.clear();
    ExtendRows(static_cast<int64_t>(keep.size()));
    row_index_.shrink_to_fit();
  }
}

void SparseOutliers::AddMemory(MemoryUsage& m) const {
  static_assert(kEntryBytes == sizeof(int32_t) + 2 * sizeof(uint16_t));
  m.sparse_bytes += rows_.size() * kEntryBytes;
  m.other_bytes += row_index_.size() * sizeof(uint32_t);
  m.reserved_bytes += (rows_.capacity() - rows_.size()) * sizeof(int32_t) +
                      (channels_.capacity() - channels_.size()) * sizeof(uint16_t) +
                      (values_.capacity() - values_.size()) * sizeof(uint16_t);
}

}  // namespace kvpack
