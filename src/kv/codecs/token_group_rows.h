// Per-token groups along channels. Row r holds row_len values in groups of `group`
// consecutive channels (the last group may be shorter). Column windows [c0, c0 + n) let one
// row span several heads (KCVT values: row_len = n_kv_heads * head_dim, one group).
// Rows that span heads are stored in planes of plane_len channels (one per head): the codes
// of plane p are [n_rows, plane bytes] apart from the others, so that a head's window is one
// contiguous stream and takes the whole-row kernels, as a row of FlexGen's does. Read as a
// window of the interleaved rows, every head's pass streamed every row (kv_codec_bench
// AccumulateCold/kcvt:bits=8/512/30: see docs/performance-history.md, session 32).
// (kv/codecs/quant_common.h: the quantizer, the tile algebra and the design the containers
// share.)
#ifndef KVPACK_KV_CODECS_TOKEN_GROUP_ROWS_H_
#define KVPACK_KV_CODECS_TOKEN_GROUP_ROWS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "kv/codecs/quant_common.h"
#include "kv/component_store.h"

namespace kvpack {

class TokenGroupRows {
 public:
  // plane_len 0: whole rows (one plane). Else row_len / plane_len planes; needs one group
  // per row (group >= row_len) and whole bytes per plane row.
  TokenGroupRows(int row_len, int group, int bits, QuantMethod method, int plane_len = 0);

  int64_t n_rows() const { return n_rows_; }
  int row_len() const { return row_len_; }
  int n_groups() const { return n_groups_; }
  int64_t row_bytes() const { return row_bytes_; }  // all planes

  // row: [row_len]
  void AppendRow(const float* row);
  // out: [r1 - r0, n], channels [c0, c0 + n) of rows [r0, r1) (any window).
  void Decode(int64_t r0, int64_t r1, int c0, int n, float* out) const;
  // For row index rows[k] (k < n_rows_sel): scores[i * ld + col0 + k] = dot(q[i], row[c0..c0+n)).
  //   q: [n_q, n]. `rows` may be null meaning rows r0 + k. Scores, Accumulate and
  //   PrefetchSelected take windows inside one plane.
  void Scores(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n, const float* q,
              int n_q, float* scores, int64_t ld, int64_t col0) const;
  // out[i] += sum_k p[i * ld + col0 + k] * row(sel k)[c0..c0+n).  p: [n_q, ld]; out: [n_q, n].
  void Accumulate(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n, const float* p,
                  int n_q, int64_t ld, int64_t col0, float* out) const;
  // Keeps rows `keep` (ascending), frees the rest.
  void Keep(std::span<const int64_t> keep);
  void Clear();
  // code_bytes += codes, scale_bytes / zero_bytes += 2 bytes per group per row.
  void AddMemory(MemoryUsage& m) const;

  // Asks for the start of the codes (of the plane holding channel c0) and parameters of a
  // call's rows (ops/prefetch.h).
  void PrefetchSelected(int64_t r0, const int64_t* rows, int64_t n_sel, int c0) const;

 private:
  // The codes a window inside one plane reads, as rows of their own: the plane's stream,
  // its row bytes, and the window's geometry in the plane. With several planes a row has one
  // group, so the window's channels all belong to group 0 and the plane is its group.
  struct Window {
    const uint8_t* codes;  // row 0 of the plane
    int64_t row_bytes;
    int row_len, group, c0;
  };
  Window WindowOf(int c0, int n) const;

  // Scores of 2/4-bit codes with an int8 query (window aligned to the groups).
  void ScoresInteger(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n,
                     const float* q, int n_q, float* scores, int64_t ld, int64_t col0,
                     CodeTileScratch& t) const;
  // Parameters of selected rows k0..k1, groups [g0, g0 + ng), into t.gscale / t.gmin
  // ([ng, tile rows] floats).
  void TileParams(int64_t r0, const int64_t* rows, int64_t k0, int64_t k1, int g0, int ng,
                  CodeTileScratch& t) const;
  // Row r's channels [c0, c0 + n) as floats.  out: [n]
  void DecodeRow(int64_t r, int c0, int n, float* out) const;
  // Codes of selected rows k0..k1 of a Scores/Accumulate call.  out: [k1 - k0, n]
  void UnpackSelected(int64_t r0, const int64_t* rows, int64_t k0, int64_t k1, int c0, int n,
                      uint8_t* out) const;
  // Selected rows k0..k1 of a Scores/Accumulate call into the scratch tile.
  void DecodeSelected(int64_t r0, const int64_t* rows, int64_t k0, int64_t k1, int c0, int n,
                      CodeTileScratch& t) const;
  GroupParams Params(int64_t r, int g) const {
    const uint16_t* p = &params_[(r * n_groups_ + g) * 2];
    return {p[0], p[1]};
  }

  int row_len_, group_, n_groups_, bits_;
  QuantMethod method_;
  int plane_len_;
  int64_t plane_bytes_, row_bytes_;
  int64_t n_rows_ = 0;
  std::vector<AlignedBuffer<uint8_t>> planes_;  // [row_len / plane_len][n_rows, plane_bytes]
  AlignedBuffer<uint16_t> params_;  // [n_rows, n_groups, 2] fp16 (scale, min)
};

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_TOKEN_GROUP_ROWS_H_
