#include "kv/codecs/gear_parts.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/half.h"

namespace kvpack {

// ---------------------------------------------------------------------------------------
// LowRankBlocks

void LowRankBlocks::AppendBlock(const uint16_t* a, const uint16_t* b, int64_t n, int rank) {
  if (n <= 0) return;
  KVPACK_CHECK(rank >= 0 && rank <= kMaxRank);
  Block blk;
  blk.first = n_rows_;
  blk.n = n;
  blk.rank = rank;
  blk.a.Resize(static_cast<size_t>(n) * rank);
  blk.b.Resize(static_cast<size_t>(d_) * rank);
  if (rank > 0) {
    std::memcpy(blk.a.data(), a, blk.a.size() * sizeof(uint16_t));
    std::memcpy(blk.b.data(), b, blk.b.size() * sizeof(uint16_t));
  }
  blocks_.push_back(std::move(blk));
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
  std::vector<float> bf;
  for (size_t bi = FirstBlockAtOrAfter(r0); bi < blocks_.size(); ++bi) {
    const Block& blk = blocks_[bi];
    if (blk.first >= r1) break;
    const int r = blk.rank;
    if (r == 0) continue;
    bf.resize(static_cast<size_t>(d_) * r);
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = Fp16ToFp32(blk.b[i]);
    const int64_t s = std::max(r0, blk.first), e = std::min(r1, blk.first + blk.n);
    for (int64_t row = s; row < e; ++row) {
      float a[kMaxRank];
      const uint16_t* ar = &blk.a[(row - blk.first) * r];
      for (int k = 0; k < r; ++k) a[k] = Fp16ToFp32(ar[k]);
      float* o = out + (row - r0) * d_;
      for (int c = 0; c < d_; ++c) {
        const float* bc = &bf[static_cast<size_t>(c) * r];
        float acc = 0.0f;
        for (int k = 0; k < r; ++k) acc += a[k] * bc[k];
        o[c] += acc;
      }
    }
  }
}

void LowRankBlocks::AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                              int64_t ld) const {
  if (r0 >= r1) return;
  std::vector<float> qb;  // [n_q, rank]: the queries projected on B (down-projection)
  for (size_t bi = FirstBlockAtOrAfter(r0); bi < blocks_.size(); ++bi) {
    const Block& blk = blocks_[bi];
    if (blk.first >= r1) break;
    const int r = blk.rank;
    if (r == 0) continue;
    qb.assign(static_cast<size_t>(n_q) * r, 0.0f);
    for (int c = 0; c < d_; ++c) {
      const uint16_t* bc = &blk.b[static_cast<size_t>(c) * r];
      float b[kMaxRank];
      for (int k = 0; k < r; ++k) b[k] = Fp16ToFp32(bc[k]);
      for (int i = 0; i < n_q; ++i) {
        const float qc = q[i * d_ + c];
        float* dst = &qb[static_cast<size_t>(i) * r];
        for (int k = 0; k < r; ++k) dst[k] += qc * b[k];
      }
    }
    const int64_t s = std::max(r0, blk.first), e = std::min(r1, blk.first + blk.n);
    for (int64_t row = s; row < e; ++row) {
      float a[kMaxRank];
      const uint16_t* ar = &blk.a[(row - blk.first) * r];
      for (int k = 0; k < r; ++k) a[k] = Fp16ToFp32(ar[k]);
      for (int i = 0; i < n_q; ++i) {
        const float* qbi = &qb[static_cast<size_t>(i) * r];
        float acc = 0.0f;
        for (int k = 0; k < r; ++k) acc += a[k] * qbi[k];
        scores[i * ld + (row - r0)] += acc;
      }
    }
  }
}

void LowRankBlocks::AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                                  float* out) const {
  if (r0 >= r1) return;
  std::vector<float> pa;  // [n_q, rank]: the probabilities projected on A (down-projection)
  for (size_t bi = FirstBlockAtOrAfter(r0); bi < blocks_.size(); ++bi) {
    const Block& blk = blocks_[bi];
    if (blk.first >= r1) break;
    const int r = blk.rank;
    if (r == 0) continue;
    pa.assign(static_cast<size_t>(n_q) * r, 0.0f);
    const int64_t s = std::max(r0, blk.first), e = std::min(r1, blk.first + blk.n);
    for (int64_t row = s; row < e; ++row) {
      float a[kMaxRank];
      const uint16_t* ar = &blk.a[(row - blk.first) * r];
      for (int k = 0; k < r; ++k) a[k] = Fp16ToFp32(ar[k]);
      for (int i = 0; i < n_q; ++i) {
        const float w = p[i * ld + (row - r0)];
        if (w == 0.0f) continue;
        float* dst = &pa[static_cast<size_t>(i) * r];
        for (int k = 0; k < r; ++k) dst[k] += w * a[k];
      }
    }
    for (int c = 0; c < d_; ++c) {
      const uint16_t* bc = &blk.b[static_cast<size_t>(c) * r];
      float b[kMaxRank];
      for (int k = 0; k < r; ++k) b[k] = Fp16ToFp32(bc[k]);
      for (int i = 0; i < n_q; ++i) {
        const float* pai = &pa[static_cast<size_t>(i) * r];
        float acc = 0.0f;
        for (int k = 0; k < r; ++k) acc += pai[k] * b[k];
        out[i * d_ + c] += acc;
      }
    }
  }
}

void LowRankBlocks::Keep(std::span<const int64_t> keep) {
  std::vector<Block> kept_blocks;
  size_t k = 0;
  int64_t next_row = 0;
  for (Block& blk : blocks_) {
    const int64_t end = blk.first + blk.n;
    const size_t k0 = k;
    while (k < keep.size() && keep[k] < end) ++k;
    const int64_t n_kept = static_cast<int64_t>(k - k0);
    if (n_kept == 0) continue;  // no survivor: A and B are freed with the block
    if (n_kept != blk.n) {
      // Drop the evicted tokens' rows of A; B (shared by the block's rows) stays.
      const int r = blk.rank;
      for (int64_t j = 0; j < n_kept; ++j) {
        const int64_t src = keep[k0 + j] - blk.first;
        if (src != j && r > 0) {
          std::memmove(&blk.a[j * r], &blk.a[src * r], r * sizeof(uint16_t));
        }
      }
      blk.a.Resize(static_cast<size_t>(n_kept) * r);
      blk.a.ShrinkToFit();
      blk.n = n_kept;
    }
    blk.first = next_row;
    next_row += blk.n;
    kept_blocks.push_back(std::move(blk));
  }
  blocks_ = std::move(kept_blocks);
  n_rows_ = next_row;
}

void LowRankBlocks::AddMemory(MemoryUsage& m) const {
  for (const Block& blk : blocks_) {
    m.factor_bytes += (blk.a.size() + blk.b.size()) * sizeof(uint16_t);
    m.reserved_bytes += blk.a.capacity_bytes() - blk.a.size() * sizeof(uint16_t) +
                        blk.b.capacity_bytes() - blk.b.size() * sizeof(uint16_t);
  }
  m.other_bytes += blocks_.size() * kBlockTableBytes;
}

// ---------------------------------------------------------------------------------------
// SparseOutliers

std::vector<SparseOutliers::Entry>::const_iterator SparseOutliers::LowerBound(int64_t row) const {
  return std::lower_bound(entries_.begin(), entries_.end(), row,
                          [](const Entry& e, int64_t r) { return e.row < r; });
}

void SparseOutliers::AddDecode(int64_t r0, int64_t r1, float* out) const {
  for (auto it = LowerBound(r0); it != entries_.end() && it->row < r1; ++it) {
    out[(it->row - r0) * d_ + it->channel] += Fp16ToFp32(it->value);
  }
}

void SparseOutliers::AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                               int64_t ld) const {
  for (auto it = LowerBound(r0); it != entries_.end() && it->row < r1; ++it) {
    const float v = Fp16ToFp32(it->value);
    for (int i = 0; i < n_q; ++i) scores[i * ld + (it->row - r0)] += q[i * d_ + it->channel] * v;
  }
}

void SparseOutliers::AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                                   float* out) const {
  for (auto it = LowerBound(r0); it != entries_.end() && it->row < r1; ++it) {
    const float v = Fp16ToFp32(it->value);
    for (int i = 0; i < n_q; ++i) out[i * d_ + it->channel] += p[i * ld + (it->row - r0)] * v;
  }
}

void SparseOutliers::Keep(std::span<const int64_t> keep) {
  size_t w = 0, k = 0;
  for (const Entry& e : entries_) {
    while (k < keep.size() && keep[k] < e.row) ++k;
    if (k == keep.size()) break;
    if (keep[k] != e.row) continue;  // the token was evicted
    entries_[w] = e;
    entries_[w].row = static_cast<int32_t>(k);
    ++w;
  }
  entries_.resize(w);
  entries_.shrink_to_fit();
}

void SparseOutliers::AddMemory(MemoryUsage& m) const {
  m.sparse_bytes += entries_.size() * sizeof(Entry);
  m.reserved_bytes += (entries_.capacity() - entries_.size()) * sizeof(Entry);
}

}  // namespace kvpack
