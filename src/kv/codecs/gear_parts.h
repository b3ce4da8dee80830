// GEAR's two error-reduction parts for one KV head (METHODS.md 1.7 steps 3-4), each with the
// fused forms attention uses, so that X^ = D^ + L + S is never materialised:
//   - LowRankBlocks: per compressed block, L = A B^T with A [n_rows, rank], B [head_dim, rank]
//     in fp16; q.L^T = (q.B).A^T and p.L = (p.A).B^T (down-projection first, paper section 4).
//     Both factors are stored transposed (A^T [rank, n_rows], B^T [rank, head_dim]) so that
//     every step is a SIMD dot or axpy along tokens or channels straight on the fp16 data;
//   - SparseOutliers: (row, channel, fp16 value) entries sorted by row, stored as three
//     arrays; q.S and p.S touch only the entries of the rows asked for.
// Rows are the head's compressed tokens in storage order. Keep() implements eviction: a
// block that loses tokens drops their rows of A and keeps B (the survivors' L rows are
// unchanged); a block with no survivor is freed; evicted tokens' entries of S are freed.
#ifndef KVPACK_KV_CODECS_GEAR_PARTS_H_
#define KVPACK_KV_CODECS_GEAR_PARTS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "kv/component_store.h"

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
  };
  // Index of the first block holding a row >= r.
  size_t FirstBlockAtOrAfter(int64_t r) const;

  int d_;
  int64_t n_rows_ = 0;
  std::vector<Block> blocks_;    // ascending `first`, contiguous rows
  AlignedBuffer<uint16_t> a_t_;  // every block's A^T, fp16
  AlignedBuffer<uint16_t> b_t_;  // every block's B^T, fp16
};

class SparseOutliers {
 public:
  // Bytes per entry, counted in MemoryUsage::sparse_bytes: row (int32), channel (uint16),
  // fp16 value. The row index (4 bytes per kIndexRows compressed rows, rounded up) is
  // counted in other_bytes.
  static constexpr size_t kEntryBytes = 8;

  explicit SparseOutliers(int d) : d_(d) {}

  int64_t n_entries() const { return static_cast<int64_t>(rows_.size()); }
  // Entries must arrive sorted by row (then channel) and after every existing row.
  void Append(int64_t row, int channel, uint16_t value_fp16);
  // The head now has n_rows compressed rows (entries only ever name rows below it): extends
  // the row index over them.
  void ExtendRows(int64_t n_rows);

  void AddDecode(int64_t r0, int64_t r1, float* out) const;  // out: [r1 - r0, d]
  void AddScores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                 int64_t ld) const;
  void AddAccumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                     float* out) const;
  // Keeps the entries of rows `keep` (ascending), renumbered to their new row indices.
  void Keep(std::span<const int64_t> keep);
  void AddMemory(MemoryUsage& m) const;

 private:
  // Rows per entry of the row index.
  static constexpr int64_t kIndexRows = 64;
  // Entries [i0, i1) of rows [r0, r1), their values as floats in `values`.
  void Range(int64_t r0, int64_t r1, size_t& i0, size_t& i1, std::vector<float>& values) const;
  // First entry with row >= r (the row index, then a search inside one index interval: a
  // binary search over all entries missed the CPU cache at every step on long caches).
  size_t FirstEntryAtOrAfter(int64_t r) const;

  int d_;
  std::vector<int32_t> rows_;        // [n_entries] ascending
  std::vector<uint16_t> channels_;   // [n_entries]
  std::vector<uint16_t> values_;     // [n_entries] fp16
  std::vector<uint32_t> row_index_;  // [ceil(n_rows / kIndexRows)] entry k: the first entry
                                     // with row >= k * kIndexRows (n_entries if none)
};

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_GEAR_PARTS_H_
