#include "kv/codecs/gear_parts.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "ops/lowrank_f16.h"
#include "ops/prefetch.h"
#include "ops/vec.h"

namespace kvpack {
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
  ExtendRuns(blocks_.size() - 1);
  n_rows_ += n;
}

void LowRankBlocks::ExtendRuns(size_t bi) {
  const Block& blk = blocks_[bi];
  if (!runs_.empty()) {
    // It extends the last run when it is exactly the block that run's layout puts next.
    Run& run = runs_.back();
    if (blk == run.BlockAt(run.block1 - run.block0, d_)) {
      run.block1 = bi + 1;
      return;
    }
  }
  runs_.push_back({blk.first, blk.n, blk.rank, blk.a_off, blk.b_off, bi, bi + 1});
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

template <typename WholeRun, typename PartBlock>
void LowRankBlocks::ForEachPiece(int64_t r0, int64_t r1, WholeRun whole_run,
                                 PartBlock part_block) const {
  if (r0 >= r1) return;
  // The run holding r0: the last one that starts at or before it.
  auto it = std::upper_bound(runs_.begin(), runs_.end(), r0,
                             [](int64_t row, const Run& run) { return row < run.first; });
  for (size_t ri = it == runs_.begin() ? 0 : (it - runs_.begin()) - 1;
       ri < runs_.size() && runs_[ri].first < r1; ++ri) {
    const Run& run = runs_[ri];
    const int64_t end = run.first + static_cast<int64_t>(run.block1 - run.block0) * run.n;
    const int64_t s = std::max(r0, run.first), e = std::min(r1, end);
    if (run.rank == 0 || s >= e) continue;
    // Block js holds row s; whole blocks are [ja, jb); block jb may hold the rows up to e.
    const size_t js = static_cast<size_t>((s - run.first) / run.n);
    size_t ja = js;
    if (s > run.first + static_cast<int64_t>(js) * run.n) {  // s inside block js
      const Block blk = run.BlockAt(js, d_);
      part_block(blk, s, std::min(e, blk.first + blk.n));
      ja = js + 1;
    }
    const size_t jb = static_cast<size_t>((e - run.first) / run.n);
    if (jb > ja) whole_run(run.BlockAt(ja, d_), jb - ja);
    const int64_t jb_first = run.first + static_cast<int64_t>(jb) * run.n;
    if (jb >= ja && e > jb_first) part_block(run.BlockAt(jb, d_), jb_first, e);
  }
}

void LowRankBlocks::AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                              int64_t ld) const {
  ForEachPiece(
      r0, r1,
      [&](const Block& blk, size_t n_blocks) {
        LowRankRunAddScoresF16(&a_t_[blk.a_off], &b_t_[blk.b_off], n_blocks, blk.n, blk.rank,
                               d_, q, n_q, scores + (blk.first - r0), ld);
      },
      [&](const Block& blk, int64_t s, int64_t e) {
        // scores[i, s..e) += (q[i] . B) A^T[:, s..e)
        LowRankAddScoresF16(&a_t_[blk.a_off + (s - blk.first)], blk.n, &b_t_[blk.b_off],
                            blk.rank, d_, e - s, q, n_q, scores + (s - r0), ld);
      });
}

void LowRankBlocks::AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                                  float* out) const {
  ForEachPiece(
      r0, r1,
      [&](const Block& blk, size_t n_blocks) {
        LowRankRunAddAccumulateF16(&a_t_[blk.a_off], &b_t_[blk.b_off], n_blocks, blk.n,
                                   blk.rank, d_, p + (blk.first - r0), n_q, ld, out);
      },
      [&](const Block& blk, int64_t s, int64_t e) {
        // out[i] += (p[i, s..e) . A[s..e)) B^T
        LowRankAddAccumulateF16(&a_t_[blk.a_off + (s - blk.first)], blk.n, &b_t_[blk.b_off],
                                blk.rank, d_, e - s, p + (s - r0), n_q, ld, out);
      });
}

void LowRankBlocks::PrefetchStart(int64_t r0, int64_t r1) const {
  const auto factors = [&](const Block& blk, size_t n_blocks) {
    PrefetchStreamStart(&a_t_[blk.a_off], n_blocks * blk.n * blk.rank * sizeof(uint16_t));
    PrefetchStreamStart(&b_t_[blk.b_off], n_blocks * d_ * blk.rank * sizeof(uint16_t));
  };
  // A part of a block reads A^T's columns [s, e) (the first of its rank rows asked for here).
  ForEachPiece(r0, r1, factors, [&](const Block& blk, int64_t s, int64_t e) {
    PrefetchStreamStart(&a_t_[blk.a_off + (s - blk.first)], (e - s) * sizeof(uint16_t));
    PrefetchStreamStart(&b_t_[blk.b_off], d_ * blk.rank * sizeof(uint16_t));
  });
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
  runs_.clear();
  for (size_t bi = 0; bi < blocks_.size(); ++bi) ExtendRuns(bi);
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
  const OutlierEntry e{row, channel, value_fp16};
  KVPACK_CHECK(row >= n_rows_ && channel >= 0 && channel < d_);
  KVPACK_CHECK(pending_.empty() || row > pending_.back().row ||
               (row == pending_.back().row && channel > pending_.back().channel));
  pending_.push_back(e);
}

void SparseOutliers::EncodeSlices(const std::vector<OutlierEntry>& entries, int64_t n_rows,
                                  bool with_cells) {
  if (cell_rows_ == 0 && !with_cells) {
    KVPACK_CHECK(entries.empty());
    n_rows_ = n_rows;
    return;
  }
  const int64_t rows = slice_rows();
  if (!stream_.empty()) stream_.resize(stream_.size() - kOutlierStreamSlackWords);
  if (!cell_begin_.empty()) cell_begin_.pop_back();  // the end offset
  size_t i = 0;
  for (int64_t s = static_cast<int64_t>(cell_begin_.size()) / cells_per_slice(); s * rows < n_rows; ++s) {
    size_t j = i;
    while (j < entries.size() && entries[j].row < (s + 1) * rows) ++j;
    EncodeOutlierSlice(lanes_, d_, s, std::span(entries).subspan(i, j - i), cell_begin_, stream_);
    i = j;
  }
  KVPACK_CHECK(i == entries.size());
  cell_begin_.push_back(static_cast<uint32_t>(stream_.size()));
  stream_.resize(stream_.size() + kOutlierStreamSlackWords, 0);
  n_entries_ += static_cast<int64_t>(entries.size());
  n_rows_ = cell_rows_ = n_rows;
}

void SparseOutliers::ExtendRows(int64_t n_rows, bool with_cells) {
  KVPACK_CHECK(n_rows >= n_rows_ && (pending_.empty() || pending_.back().row < n_rows));
  std::vector<OutlierEntry> entries;
  const int64_t rows = slice_rows();
  if (cell_rows_ % rows != 0) {
    // The last slice is partly filled: its cells are made again with the new rows.
    const size_t c0 = static_cast<size_t>(cell_rows_ / rows) * cells_per_slice();
    const size_t c1 = cell_begin_.size() - 1;
    DecodeOutlierCells(lanes_, d_, stream_.data(), cell_begin_.data(), c0, c1, entries);
    n_entries_ -= static_cast<int64_t>(entries.size());
    stream_.resize(cell_begin_[c0] + kOutlierStreamSlackWords);
    cell_begin_.resize(c0 + 1);
  }
  entries.insert(entries.end(), pending_.begin(), pending_.end());
  pending_.clear();
  EncodeSlices(entries, n_rows, with_cells || !entries.empty());
}

std::vector<OutlierEntry> SparseOutliers::EntriesOf(int64_t r0, int64_t r1) const {
  std::vector<OutlierEntry> all;
  r1 = Covered(r1);
  if (r0 >= r1) return all;
  const int64_t rows = slice_rows();
  const size_t per = static_cast<size_t>(cells_per_slice());
  DecodeOutlierCells(lanes_, d_, stream_.data(), cell_begin_.data(), r0 / rows * per,
                     (r1 + rows - 1) / rows * per, all);
  std::vector<OutlierEntry> in;
  for (const OutlierEntry& e : all) {
    if (e.row >= r0 && e.row < r1) in.push_back(e);
  }
  return in;
}

void SparseOutliers::AddDecode(int64_t r0, int64_t r1, float* out) const {
  for (const OutlierEntry& e : EntriesOf(r0, r1)) {
    out[(e.row - r0) * d_ + e.channel] += Fp16ToFp32(e.value);
  }
}

void SparseOutliers::AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                               int64_t ld) const {
  if (lanes_ == OutlierLanes::kRows) {
    if (Covered(r1) > r0) {
      OutlierScores(stream_.data(), cell_begin_.data(), r0, Covered(r1), d_, q, n_q, scores, ld);
    }
    return;
  }
  for (const OutlierEntry& e : EntriesOf(r0, r1)) {  // scores[i, row - r0] += q[i, channel] * v
    const float v = Fp16ToFp32(e.value);
    for (int i = 0; i < n_q; ++i) {
      scores[i * ld + (e.row - r0)] += Bf16ToFp32(Fp32ToBf16(q[i * d_ + e.channel])) * v;
    }
  }
}

void SparseOutliers::AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                                   float* out) const {
  if (lanes_ == OutlierLanes::kChannels) {
    if (Covered(r1) > r0) {
      OutlierAccumulate(stream_.data(), cell_begin_.data(), r0, Covered(r1), d_, p, n_q, ld, out);
    }
    return;
  }
  for (const OutlierEntry& e : EntriesOf(r0, r1)) {  // out[i, channel] += p[i, row - r0] * v
    const float v = Fp16ToFp32(e.value);
    for (int i = 0; i < n_q; ++i) {
      out[i * d_ + e.channel] += Bf16ToFp32(Fp32ToBf16(p[i * ld + (e.row - r0)])) * v;
    }
  }
}

void SparseOutliers::PrefetchStart(int64_t r0, int64_t r1) const {
  if (Covered(r1) <= r0) return;
  const size_t c0 = static_cast<size_t>(r0 / slice_rows()) * cells_per_slice();
  const size_t c1 = static_cast<size_t>((Covered(r1) - 1) / slice_rows() + 1) * cells_per_slice();
  PrefetchStreamStart(&cell_begin_[c0], (c1 - c0 + 1) * sizeof(uint32_t));
  PrefetchStreamStart(&stream_[cell_begin_[c0]],
                      (cell_begin_[c1] - cell_begin_[c0]) * sizeof(uint32_t));
}

void SparseOutliers::Keep(std::span<const int64_t> keep) {
  KVPACK_CHECK(pending_.empty());
  const bool had_cells = cell_rows_ > 0;
  std::vector<OutlierEntry> kept;
  size_t k = 0;
  for (const OutlierEntry& e : EntriesOf(0, cell_rows_)) {
    while (k < keep.size() && keep[k] < e.row) ++k;
    if (k == keep.size()) break;
    if (keep[k] != e.row) continue;  // the token was evicted
    kept.push_back({static_cast<int64_t>(k), e.channel, e.value});
  }
  cell_begin_.clear();
  stream_.clear();
  n_entries_ = 0;
  n_rows_ = cell_rows_ = 0;
  EncodeSlices(kept, static_cast<int64_t>(keep.size()), had_cells);
  cell_begin_.shrink_to_fit();
  stream_.shrink_to_fit();
}

size_t SparseOutliers::index_bytes() const {
  return (stream_.size() - static_cast<size_t>(n_entries_)) * sizeof(uint32_t) +
         cell_begin_.size() * sizeof(uint32_t);
}

void SparseOutliers::AddMemory(MemoryUsage& m) const {
  m.sparse_bytes += static_cast<size_t>(n_entries()) * kEntryBytes;
  m.other_bytes += index_bytes();
  m.reserved_bytes += (stream_.capacity() - stream_.size() + cell_begin_.capacity() -
                       cell_begin_.size()) * sizeof(uint32_t) +
                      pending_.capacity() * sizeof(OutlierEntry);
}

}  // namespace kvpack
