// Sparse outlier entries (row, channel, fp16 value) of one KV head in "cells", a layout made
// for SIMD kernels that never scatter (GEAR's S, kv/codecs/gear_parts.h).
//
// Design goals: the fused products q.S^T (scores) and p.S (accumulate) over a row range, with
// every product landing in a register lane that is its destination. A list of entries sorted
// by row (the previous layout) made each entry a scalar load-multiply-add-store into a
// scattered destination, chained through memory when two entries shared one: seven cycles per
// entry and query row, half of GEAR's attention time. Non-goals: changing entries in place
// (a cell is rebuilt whole; blocks append, eviction rebuilds everything).
//
// Layout. Rows are cut into slices of kOutlierSliceRows(lanes) rows (slice s: rows
// [s * S, (s + 1) * S)). Each slice holds cells of 16 lanes:
//   - lanes = kRows (keys, scored): one cell per 16-row slice; lane o is row s * 16 + o, and
//     an entry carries its channel;
//   - lanes = kChannels (values, accumulated): ceil(d / 16) cells per 64-row slice, cell g's
//     lane o is channel 16 g + o, and an entry carries its row within the slice.
// In a cell, lane o has count_o entries (sorted by the other index). The lanes are ranked by
// count, most first (ties by lane), so that round k (the k-th entry of every lane that has
// one) occupies a prefix of the ranked lanes, of a_k = #{o : count_o > k} lanes.
// A cell is a run of 32-bit words of a size that depends only on its entry count:
//   counts: the lanes' counts in rank order, uint8 [16] (uint16 [16] for kRows with d > 255,
//           where a row may hold more than 255 entries);
//   rank:   uint8 [16], rank[o] = the position of lane o in the ranking;
//   entries: round 0's a_0 words, round 1's a_1 words, ...; position l of a round holds the
//           entry of the lane ranked l: value_fp16 | other << 16 (other = channel for kRows,
//           row within the slice for kChannels).
// The stream of a head is its cells in slice order (cell_begin[c]: first word of cell c,
// cell_begin[n_cells]: end); a kernel may read kOutlierStreamSlackWords words past the last
// cell, which the owner keeps allocated.
//
// Arithmetic (the same in the fast kernels and their twins, so they agree bit for bit): each
// product is the fp16 value times the query (scores) or weight (accumulate) rounded to bf16
// (Fp32ToBf16: nearest even, a NaN stays a NaN), so that the fast kernels pick a lane's factor
// with one 16-bit permutation from a table of 64 (two 32-bit permutations and a blend per
// query row before, the kernels' main cost; the query and weight are rounded to 8
// significant bits, a relative error of at most 2^-8 on the outliers' terms, against the
// int8 query and weights of the backbone's kernels). A lane's products are summed in a float
// accumulator that starts at 0, one fused multiply-add per entry in entry order; then
//   scores: scores[i, row - r0] += acc (rows in [r0, r1) only);
//   accumulate: an accumulator per channel, 0 at the call's start, gets each cell's acc
//   added; out[i, channel] += it at the end. Rows outside [r0, r1) add nothing.
#ifndef KVPACK_OPS_OUTLIER_CELLS_H_
#define KVPACK_OPS_OUTLIER_CELLS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvpack {

enum class OutlierLanes { kRows, kChannels };

constexpr int kOutlierCellLanes = 16;
constexpr size_t kOutlierStreamSlackWords = 16;

constexpr int64_t OutlierSliceRows(OutlierLanes lanes) {
  return lanes == OutlierLanes::kRows ? 16 : 64;
}
constexpr int OutlierCellsPerSlice(OutlierLanes lanes, int d) {
  return lanes == OutlierLanes::kRows ? 1 : (d + kOutlierCellLanes - 1) / kOutlierCellLanes;
}

// Bytes of a lane count, and words of a cell before its entries (counts and rank).
constexpr int OutlierCountBytes(OutlierLanes lanes, int d) {
  return lanes == OutlierLanes::kRows && d > 255 ? 2 : 1;
}
constexpr int OutlierCellHeaderWords(OutlierLanes lanes, int d) {
  return (kOutlierCellLanes * OutlierCountBytes(lanes, d) + kOutlierCellLanes) / 4;
}

struct OutlierEntry {
  int64_t row = 0;
  int channel = 0;
  uint16_t value = 0;  // fp16
};

// Appends the cells of slice `slice` to `stream` and their starts to `cell_begin` (which must
// hold the previous cells' starts; the end is not appended). entries: the slice's entries,
// sorted by (row, channel), rows inside the slice, channels < d (at most 65535).
void EncodeOutlierSlice(OutlierLanes lanes, int d, int64_t slice,
                        std::span<const OutlierEntry> entries, std::vector<uint32_t>& cell_begin,
                        std::vector<uint32_t>& stream);
// Appends the entries of cells [c0, c1) (any slices) to `out`, sorted by (row, channel).
void DecodeOutlierCells(OutlierLanes lanes, int d, const uint32_t* stream,
                        const uint32_t* cell_begin, size_t c0, size_t c1,
                        std::vector<OutlierEntry>& out);
// The number of entries in cells [c0, c1).
size_t CountOutlierEntries(OutlierLanes lanes, int d, const uint32_t* stream,
                           const uint32_t* cell_begin, size_t c0, size_t c1);

// lanes = kRows. scores[i * ld + (r - r0)] += sum over the entries (r, c, v) of q[i * d + c] * v
// for r in [r0, r1). The cells cover at least the slices of [r0, r1).
//   q: [n_q, d]; scores: [n_q, ld].
void OutlierScores(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0, int64_t r1,
                   int d, const float* q, int n_q, float* scores, int64_t ld);
void OutlierScoresRef(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0, int64_t r1,
                      int d, const float* q, int n_q, float* scores, int64_t ld);
// lanes = kChannels. out[i * d + c] += sum over the entries (r, c, v), r in [r0, r1), of
// p[i * ld + (r - r0)] * v.
//   p: [n_q, ld]; out: [n_q, d].
void OutlierAccumulate(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                       int64_t r1, int d, const float* p, int n_q, int64_t ld, float* out);
void OutlierAccumulateRef(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                          int64_t r1, int d, const float* p, int n_q, int64_t ld, float* out);
// Whether OutlierScores / OutlierAccumulate take their AVX-512 kernels
// (ops/outlier_cells_avx512.h) for this head size on this CPU.
bool HasFastOutlierScores(int d);
bool HasFastOutlierAccumulate(int d);

}  // namespace kvpack

#endif  // KVPACK_OPS_OUTLIER_CELLS_H_
