// GEAR's two error-reduction parts for one KV head (METHODS.md 1.7 steps 3-4), each with the
// fused forms attention uses, so that X^ = D^ + L + S is never materialised:
//   - LowRankBlocks: per compressed block, L = A B^T with A [n_rows, rank], B [head_dim, rank]
//     in fp16; q.L^T = (q.B).A^T and p.L = (p.A).B^T (down-projection first, paper section 4).
//     Both factors are stored transposed (A^T [rank, n_rows], B^T [rank, head_dim]) so that
//     every step is a SIMD dot or axpy along tokens or channels straight on the fp16 data;
//   - SparseOutliers: (row, channel, fp16 value) entries in the cells of
//     ops/outlier_cells.h (keys by row, values by channel, in row slices); q.S and p.S read
//     only the slices of the rows asked for, with no scatter, and multiply each outlier by
//     the query or weight rounded to bf16 (the cells' arithmetic rule).
// Rows are the head's compressed tokens in storage order. Keep() implements eviction: a
// block that loses tokens drops their rows of A and keeps B (the survivors' L rows are
// unchanged); a block with no survivor is freed; evicted tokens' entries of S are freed.
#ifndef KVPACK_KV_CODECS_GEAR_PARTS_H_
#define KVPACK_KV_CODECS_GEAR_PARTS_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "kv/component_store.h"
#include "ops/outlier_cells.h"

namespace kvpack {

class LowRankBlocks {
 public:
  static constexpr int kMaxRank = 64;
  // Block-table bytes per block, counted in MemoryUsage::other_bytes: the first row (int64)
  // and the rank (int32).
  static constexpr size_t kBlockTableBytes = 12;

  explicit LowRankBlocks(int d) : d_(d) {}

  int64_t n_rows() const { return n_rows_; }
  int64_t n_blocks() const { return static_cast<int64_t>(blocks_.size()); }

  // Appends a block of n rows. a_t: A^T [rank, n] fp16, b_t: B^T [rank, d] fp16;
  // rank <= kMaxRank.
  void AppendBlock(const uint16_t* a_t, const uint16_t* b_t, int64_t n, int rank);
  // out[(r - r0) * d + c] += L[r, c] for r in [r0, r1).
  void AddDecode(int64_t r0, int64_t r1, float* out) const;
  // scores[i * ld + (r - r0)] += dot(q[i], L[r]).  q: [n_q, d].
  void AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                 int64_t ld) const;
  // out[i * d + c] += sum_r p[i * ld + (r - r0)] * L[r, c].  out: [n_q, d].
  void AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                     float* out) const;
  // Asks for the start of the factors that rows [r0, r1) read (ops/prefetch.h).
  void PrefetchStart(int64_t r0, int64_t r1) const;
  void Keep(std::span<const int64_t> keep);
  // factor_bytes: 2 bytes per element of A and B; other_bytes: kBlockTableBytes per block.
  void AddMemory(MemoryUsage& m) const;

 private:
  // A block's factors live in the two arenas below, one after another in block order: the
  // read path walks them sequentially (one allocation per block scattered the factors
  // over the heap, and every block cost a cache miss once the cache outgrew the CPU's).
  struct Block {
    int64_t first = 0;  // first row
    int64_t n = 0;      // rows
    int rank = 0;
    size_t a_off = 0;   // A^T [rank, n] at a_t_[a_off]
    size_t b_off = 0;   // B^T [rank, d] at b_t_[b_off]
    bool operator==(const Block&) const = default;
  };
  // Blocks [block0, block1) of one n and rank whose factors follow each other's in the
  // arenas (rows always do): block block0 + j holds rows first + j n with A^T at a_off +
  // j n rank and B^T at b_off + j d rank. The read path finds its blocks through these, a
  // table of a few entries (a prompt block, then one run of n_b-token blocks), instead of a
  // binary search and a walk over the block table: at depth 8192 that table is fetched from
  // memory on every call, and its misses were 2.6% of GEAR-L's decode step.
  struct Run {
    int64_t first = 0;
    int64_t n = 0;
    int rank = 0;
    size_t a_off = 0, b_off = 0;
    size_t block0 = 0, block1 = 0;
    Block BlockAt(size_t j, int d) const {  // the run's j-th block
      return {first + static_cast<int64_t>(j) * n, n, rank, a_off + j * n * rank,
              b_off + j * static_cast<size_t>(d) * rank};
    }
  };
  // Adds blocks_[bi] (the last block) to the last run or starts a run with it.
  void ExtendRuns(size_t bi);
  // Index of the first block holding a row >= r.
  size_t FirstBlockAtOrAfter(int64_t r) const;
  // The pieces of rank > 0 that rows [r0, r1) touch, in order: whole_run(first block,
  // n_blocks) for each stretch of whole blocks of one run (the fused kernels take it in one
  // call, ops/lowrank_f16.h), part_block(block, s, e) for a block of which only rows [s, e)
  // are in the range.
  template <typename WholeRun, typename PartBlock>
  void ForEachPiece(int64_t r0, int64_t r1, WholeRun whole_run, PartBlock part_block) const;

  int d_;
  int64_t n_rows_ = 0;
  std::vector<Block> blocks_;    // ascending `first`, contiguous rows
  std::vector<Run> runs_;        // blocks_ in runs, in order
  AlignedBuffer<uint16_t> a_t_;  // every block's A^T, fp16
  AlignedBuffer<uint16_t> b_t_;  // every block's B^T, fp16
};

class SparseOutliers {
 public:
  // Bytes per entry, counted in MemoryUsage::sparse_bytes: one word holding the fp16 value
  // and the channel (keys) or the row within its slice (values); the entry's other index is
  // its lane. The cells' headers and lane ranks, their start offsets and the stream's slack
  // (ops/outlier_cells.h) are counted in other_bytes (index_bytes()).
  static constexpr size_t kEntryBytes = 4;

  // lanes: kRows for keys (scored), kChannels for values (accumulated); each layout serves
  // the other product too, through a scalar loop over its decoded entries.
  SparseOutliers(int d, OutlierLanes lanes) : d_(d), lanes_(lanes) {}

  int64_t n_entries() const { return n_entries_ + static_cast<int64_t>(pending_.size()); }
  // Entries must arrive sorted by row (then channel), at or after the rows ExtendRows has
  // covered; they are stored (and seen by the products) at the next ExtendRows.
  void Append(int64_t row, int channel, uint16_t value_fp16);
  // The head now has n_rows compressed rows (entries only ever name rows below it): encodes
  // the new rows' cells; the last, partly filled slice is decoded and encoded again.
  // with_cells = false: the new rows could hold no entry (their block's outlier sets were
  // too small); while every block has been so the head keeps no cells at all. The choice
  // depends on the configuration only, never on the data, so memory stays a formula.
  void ExtendRows(int64_t n_rows, bool with_cells = true);

  // The stored entries of rows [r0, r1), sorted by (row, channel).
  std::vector<OutlierEntry> EntriesOf(int64_t r0, int64_t r1) const;
  void AddDecode(int64_t r0, int64_t r1, float* out) const;  // out: [r1 - r0, d]
  void AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                 int64_t ld) const;
  void AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                     float* out) const;
  // Asks for the start of the cells that rows [r0, r1) read (ops/prefetch.h).
  void PrefetchStart(int64_t r0, int64_t r1) const;
  // Keeps the entries of rows `keep` (ascending), renumbered to their new row indices.
  void Keep(std::span<const int64_t> keep);
  void AddMemory(MemoryUsage& m) const;
  // Bytes of the layout besides the entries (other_bytes).
  size_t index_bytes() const;

 private:
  int64_t slice_rows() const { return OutlierSliceRows(lanes_); }
  int cells_per_slice() const { return OutlierCellsPerSlice(lanes_, d_); }
  // Rows [0, cell_rows_) hold cells; r1 past them is cut there.
  int64_t Covered(int64_t r1) const { return std::min(r1, cell_rows_); }
  // Encodes slices from cell_begin_'s end up to the one holding row n_rows - 1, taking the
  // sorted `entries` (rows of those slices only).
  // with_cells = false while no cells exist: only n_rows_ moves (entries must be empty).
  void EncodeSlices(const std::vector<OutlierEntry>& entries, int64_t n_rows, bool with_cells);

  int d_;
  OutlierLanes lanes_;
  int64_t n_rows_ = 0;                 // rows extended to
  int64_t cell_rows_ = 0;              // rows the cells cover: n_rows_, or 0 while every
                                       // block was extended without cells
  int64_t n_entries_ = 0;              // entries in the cells
  std::vector<uint32_t> cell_begin_;   // [n_cells + 1] word offsets into stream_
  std::vector<uint32_t> stream_;       // the cells, then kOutlierStreamSlackWords zeros
  std::vector<OutlierEntry> pending_;  // appended, not yet encoded
};

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_GEAR_PARTS_H_
