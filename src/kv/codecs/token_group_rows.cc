#include "kv/codecs/token_group_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/code_dot_i16.h"
#include "ops/code_unpack.h"
#include "ops/packed_scores.h"
#include "ops/prefetch.h"
#include "ops/value_dot_i8.h"
#include "ops/vec.h"

namespace kvpack {

TokenGroupRows::TokenGroupRows(int row_len, int group, int bits, QuantMethod method,
                               int plane_len)
    : row_len_(row_len),
      group_(std::min(group, row_len)),
      n_groups_((row_len + group_ - 1) / group_),
      bits_(bits),
      method_(method),
      plane_len_(plane_len > 0 ? plane_len : row_len),
      plane_bytes_(PackedBytes(plane_len_, bits)),
      row_bytes_(plane_bytes_ * (row_len / plane_len_)),
      planes_(row_len / plane_len_) {
  KVPACK_CHECK(row_len % plane_len_ == 0);
  KVPACK_CHECK(planes_.size() == 1 ||
               (n_groups_ == 1 && plane_bytes_ * 8 == static_cast<int64_t>(plane_len_) * bits));
}

TokenGroupRows::Window TokenGroupRows::WindowOf(int c0, int n) const {
  const int p = c0 / plane_len_;
  KVPACK_CHECK(n > 0 && (c0 + n - 1) / plane_len_ == p);
  if (planes_.size() == 1) return {planes_[0].data(), row_bytes_, row_len_, group_, c0};
  return {planes_[p].data(), plane_bytes_, plane_len_, plane_len_, c0 - p * plane_len_};
}

void TokenGroupRows::AppendRow(const float* row) {
  uint8_t codes[1024];
  std::vector<uint8_t> big;
  uint8_t* c = codes;
  if (row_len_ > 1024) {
    big.resize(row_len_);
    c = big.data();
  }
  params_.Resize((n_rows_ + 1) * n_groups_ * 2);
  uint16_t* p = &params_[n_rows_ * n_groups_ * 2];
  for (int g = 0; g < n_groups_; ++g) {
    const int a = g * group_, len = std::min(group_, row_len_ - a);
    const GroupParams gp = QuantizeGroup(row + a, len, 1, bits_, method_, c + a, 1);
    p[2 * g] = gp.scale;
    p[2 * g + 1] = gp.min;
  }
  for (size_t p = 0; p < planes_.size(); ++p) {
    planes_[p].Resize((n_rows_ + 1) * plane_bytes_);
    PackCodes(c + p * plane_len_, plane_len_, bits_, &planes_[p][n_rows_ * plane_bytes_]);
  }
  ++n_rows_;
}

// A window across planes, plane by plane.
void TokenGroupRows::DecodeRow(int64_t r, int c0, int n, float* out) const {
  for (int a = c0; a < c0 + n;) {
    const int e = std::min(c0 + n, (a / plane_len_ + 1) * plane_len_);
    const Window w = WindowOf(a, e - a);
    DequantizeRowsPerToken(w.codes + r * w.row_bytes, 1, w.row_bytes, bits_, w.c0, e - a,
                           w.group, &params_[r * n_groups_ * 2], n_groups_, out + (a - c0));
    a = e;
  }
}

void TokenGroupRows::Decode(int64_t r0, int64_t r1, int c0, int n, float* out) const {
  if (r0 >= r1) return;
  if (c0 / plane_len_ != (c0 + n - 1) / plane_len_) {
    for (int64_t r = r0; r < r1; ++r) DecodeRow(r, c0, n, out + (r - r0) * n);
    return;
  }
  const Window w = WindowOf(c0, n);
  DequantizeRowsPerToken(w.codes + r0 * w.row_bytes, r1 - r0, w.row_bytes, bits_, w.c0, n,
                         w.group, &params_[r0 * n_groups_ * 2], n_groups_, out);
}

// Consecutive rows only: a row list (KCVT's shared value rows after eviction) has no stream.
void TokenGroupRows::PrefetchSelected(int64_t r0, const int64_t* rows, int64_t n_sel,
                                      int c0) const {
  if (rows != nullptr || n_sel <= 0) return;
  const Window w = WindowOf(c0 - c0 % plane_len_, plane_len_);
  PrefetchCodeStreamStart(w.codes + r0 * w.row_bytes, n_sel * w.row_bytes);
  PrefetchCodeStreamStart(&params_[r0 * 2 * n_groups_], n_sel * n_groups_ * 2 * sizeof(uint16_t));
}

// Selected rows k0..k1 of a Scores/Accumulate call into the scratch tile: consecutive rows in
// one kernel call, an explicit row list (KCVT's shared value rows) row by row.
void TokenGroupRows::DecodeSelected(int64_t r0, const int64_t* rows, int64_t k0, int64_t k1, int c0,
                                    int n, CodeTileScratch& t) const {
  if (rows == nullptr) {
    Decode(r0 + k0, r0 + k1, c0, n, t.values.data());
    return;
  }
  for (int64_t k = k0; k < k1; ++k) DecodeRow(rows[k], c0, n, &t.values[(k - k0) * n]);
}

// Codes of selected rows k0..k1, window [c0, c0 + n): consecutive whole rows whose packed
// form has no padding are one stream (one unpack call), anything else row by row.
void TokenGroupRows::UnpackSelected(int64_t r0, const int64_t* rows, int64_t k0, int64_t k1, int c0,
                                    int n, uint8_t* out) const {
  const Window w = WindowOf(c0, n);
  if (rows == nullptr && w.c0 == 0 && n == w.row_len &&
      w.row_bytes * 8 == static_cast<int64_t>(w.row_len) * bits_) {
    UnpackCodesU8(w.codes + (r0 + k0) * w.row_bytes, 0, (k1 - k0) * n, bits_, out);
    return;
  }
  if (rows != nullptr) {
    UnpackCodeRows(w.codes, rows + k0, k1 - k0, w.row_bytes, w.c0, n, bits_, out);
  } else {
    UnpackCodeRows(w.codes + (r0 + k0) * w.row_bytes, nullptr, k1 - k0, w.row_bytes, w.c0, n,
                   bits_, out);
  }
}

void TokenGroupRows::Scores(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n,
                            const float* q, int n_q, float* scores, int64_t ld,
                            int64_t col0) const {
  if (n_sel <= 0) return;
  PrefetchSelected(r0, rows, n_sel, c0);
  CodeTileScratch& t = TileScratch(n);
  if (UseIntegerKeys(bits_) && c0 % group_ == 0) {
    ScoresInteger(r0, rows, n_sel, c0, n, q, n_q, scores, ld, col0, t);
    return;
  }
  // 8-bit codes, consecutive whole rows: the int16 query (quant_common.h, UseIntegerKeys).
  if (bits_ == 8 && rows == nullptr && c0 == 0 && n == row_len_ &&
      HasFastTokenRowScoresI16(n, n_groups_)) {
    PrepareGroupedQueryI16(q, n_q, n, group_, t);
    ScoreTokenRowsI16(planes_[0].data() + r0 * row_bytes_, n_sel, n, n_groups_, &params_[r0 * 2 * n_groups_],
                      t.q16.data(), t.alpha.data(), t.qm.data(), n_q, scores + col0, ld);
    return;
  }
  const int g = c0 / group_;
  if (g != (c0 + n - 1) / group_) {
    // The window spans several groups: a per-group scale inside the dot product would need
    // one reduction per group, so dequantize the tile and use the float kernel.
    for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRowsMax) {
      const int64_t k1 = std::min(n_sel, k0 + kTileRowsMax);
      DecodeSelected(r0, rows, k0, k1, c0, n, t);
      DotTileF32(t.values.data(), k1 - k0, n, q, n_q, scores + col0 + k0, ld);
    }
    return;
  }
  // One group per row: q . (code * scale + min) = scale * (q . code) + min * sum(q).
  t.qm.resize(n_q);
  t.row_scale.resize(kTileRowsMax);
  if (t.ones.size() < static_cast<size_t>(n)) t.ones.resize(n, 1.0f);
  for (int i = 0; i < n_q; ++i) t.qm[i] = DotF32(q + i * n, t.ones.data(), n);
  for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRowsMax) {
    const int64_t k1 = std::min(n_sel, k0 + kTileRowsMax);
    const uint8_t* codes = t.tile_codes.data();
    int64_t stride = n;
    if (bits_ == 8 && rows == nullptr) {  // the bytes are the codes: read them in place
      const Window w = WindowOf(c0, n);
      codes = w.codes + (r0 + k0) * w.row_bytes + w.c0;
      stride = w.row_bytes;
    } else {
      UnpackSelected(r0, rows, k0, k1, c0, n, t.tile_codes.data());
    }
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r = rows ? rows[k] : r0 + k;
      const GroupParams gp = Params(r, g);
      t.row_scale[k - k0] = Fp16ToFp32(gp.scale);
      t.min[k - k0] = Fp16ToFp32(gp.min);
    }
    float* sc = scores + col0 + k0;
    DotCodeRows(codes, k1 - k0, stride, n, q, n_q, sc, ld);
    for (int i = 0; i < n_q; ++i) {
      for (int64_t k = 0; k < k1 - k0; ++k) {
        sc[i * ld + k] = t.row_scale[k] * sc[i * ld + k] + t.min[k] * t.qm[i];
      }
    }
  }
}

// Per row and group g of the window (aligned to the groups):
//   q . (code * s_g + m_g) = s_g * alpha * (q8 . code)_g + m_g * sum_{c in g} q_c,
// with q ~= alpha * q8 (int8, one alpha per query row) and the code dots in int32.
void TokenGroupRows::ScoresInteger(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n,
                                   const float* q, int n_q, float* scores, int64_t ld, int64_t col0,
                                   CodeTileScratch& t) const {
  const int g0 = c0 / group_;
  const int ng = (n + group_ - 1) / group_;  // groups of the window
  PrepareGroupedQueryI8(q, n_q, n, group_, t);
  // Consecutive whole rows with one group each, or with two where the single-pass kernel
  // takes them: one pass over the packed rows.
  if (rows == nullptr && c0 == 0 && n == row_len_ &&
      (ng == 1 || (n % group_ == 0 && HasSinglePassTokenRowScores(row_bytes_, n, bits_, ng)))) {
    ScoreTokenRowsI8(planes_[0].data() + r0 * row_bytes_, n_sel, row_bytes_, n, bits_, ng,
                     &params_[r0 * 2 * ng], t.q8.data(), t.alpha.data(), t.qm.data(), n_q,
                     scores + col0, ld);
    return;
  }
  for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRowsMax) {
    const int64_t k1 = std::min(n_sel, k0 + kTileRowsMax), m = k1 - k0;
    TileParams(r0, rows, k0, k1, g0, ng, t);
    UnpackSelected(r0, rows, k0, k1, c0, n, t.tile_codes.data());
    ScoreGroupedTileI8(t.tile_codes.data(), m, n, group_, n_q, t, scores + col0 + k0, ld);
  }
}

void TokenGroupRows::TileParams(int64_t r0, const int64_t* rows, int64_t k0, int64_t k1, int g0,
                                int ng, CodeTileScratch& t) const {
  const int64_t pk = 2 * n_groups_, m = k1 - k0;
  t.gscale.resize(static_cast<size_t>(ng) * kTileRowsMax);
  t.gmin.resize(static_cast<size_t>(ng) * kTileRowsMax);
  if (rows == nullptr) {  // consecutive rows: one SIMD pass from the fp16 pairs
    SplitGroupParams(&params_[(r0 + k0) * pk], m, n_groups_, g0, ng, t.gscale.data(),
                     t.gmin.data(), kTileRowsMax);
    return;
  }
  t.params.resize(kTileRowsMax * pk);
  for (int64_t k = k0; k < k1; ++k) {
    ConvertF16ToF32(&params_[rows[k] * pk], &t.params[(k - k0) * pk], pk);
  }
  for (int g = 0; g < ng; ++g) {
    const float* src = &t.params[2 * (g0 + g)];
    float* sc = &t.gscale[g * kTileRowsMax];
    float* mn = &t.gmin[g * kTileRowsMax];
    for (int64_t k = 0; k < m; ++k) {
      sc[k] = src[k * pk];
      mn[k] = src[k * pk + 1];
    }
  }
}

// Per row and group: sum_t p_t (code_t * scale_t + min_t) = sum_t (p_t * scale_t) code_t +
// sum_t p_t min_t; the weights p_t * scale_t are formed once per tile, the code part is one
// FMA per code and query row (ops/code_dot.h), the min part one dot per group.
void TokenGroupRows::Accumulate(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n,
                                const float* p, int n_q, int64_t ld, int64_t col0,
                                float* out) const {
  if (n_sel <= 0) return;
  PrefetchSelected(r0, rows, n_sel, c0);
  CodeTileScratch& t = TileScratch(n);
  // The window in its plane: with several planes a row has one group (g0 0, ng 1) and the
  // plane stands for it, so the kernels see whole rows of one group.
  const Window w = WindowOf(c0, n);
  const int g0 = w.c0 / w.group, ng = (w.c0 + n - 1) / w.group - g0 + 1;  // groups it touches
  t.msum.assign(static_cast<size_t>(n_q) * ng, 0.0f);
  // Consecutive rows with the int16 kernel: the codes are read from the packed rows.
  const bool packed = rows == nullptr && HasPackedInt16ValueKernel(bits_, n, w.c0, w.group);
  // Whole rows of 2-bit codes (heads of 64, 128, ... channels): int8 weights, four rows per
  // multiply (ops/value_dot_i8.h: half the multiply work of the int16 kernel; its coarser
  // weights move a 2-bit cache's KLD by a few percent of the codes' own error).
  // All the rows in one call, which quantizes the weights per tile of kTileRowsMax rows.
  static_assert(kTileRowsMax == static_cast<int64_t>(kI8ValueTileRowsMax));
  if (rows == nullptr && bits_ == 2 && w.c0 == 0 && n % 64 == 0 && w.row_bytes == n / 4 &&
      HasI8ValueKernel(n, n_groups_)) {
    AccumulateTwoBitRowsI8(p + col0, ld, n_q, &params_[r0 * 2 * n_groups_], n_groups_,
                           w.codes + r0 * w.row_bytes, n, n_sel, out, t.msum.data());
    AddGroupedMinSums(n_q, n, w.c0, w.group, t, out);
    return;
  }
  for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRowsMax) {
    const int64_t k1 = std::min(n_sel, k0 + kTileRowsMax), m = k1 - k0;
    const uint8_t* tile = w.codes + (r0 + k0) * w.row_bytes;
    if (packed && HasFusedPackedValueKernel(bits_, n, w.c0, w.group, n_groups_, m)) {
      // Parameters, weights and their quantization in registers (ops/code_dot_i16.h).
      AccumulatePackedRowsI16(p + col0 + k0, ld, n_q, &params_[(r0 + k0) * 2 * n_groups_],
                              n_groups_, g0, ng, tile, m, w.row_bytes, bits_, n, w.c0, w.group,
                              out, t.msum.data());
      continue;
    }
    TileParams(r0, rows, k0, k1, g0, ng, t);
    if (packed) {
      AccumulatePackedTile(tile, w.row_bytes, m, n, w.c0, w.group, bits_, p + col0 + k0, n_q, ld,
                           t, out);
      continue;
    }
    UnpackSelected(r0, rows, k0, k1, c0, n, t.tile_codes.data());
    AccumulateGroupedTile(t.tile_codes.data(), m, n, w.c0, w.group, p + col0 + k0, n_q, ld, t,
                          out);
  }
  AddGroupedMinSums(n_q, n, w.c0, w.group, t, out);
}

void TokenGroupRows::Keep(std::span<const int64_t> keep) {
  int64_t w = 0;
  const int64_t pn = static_cast<int64_t>(n_groups_) * 2;
  for (int64_t r : keep) {
    if (r != w) {
      for (auto& plane : planes_) {
        std::memmove(&plane[w * plane_bytes_], &plane[r * plane_bytes_], plane_bytes_);
      }
      std::memmove(&params_[w * pn], &params_[r * pn], pn * sizeof(uint16_t));
    }
    ++w;
  }
  n_rows_ = w;
  for (auto& plane : planes_) {
    plane.Resize(w * plane_bytes_);
    plane.ShrinkToFit();
  }
  params_.Resize(w * pn);
  params_.ShrinkToFit();
}

void TokenGroupRows::Clear() {
  n_rows_ = 0;
  for (auto& plane : planes_) plane = AlignedBuffer<uint8_t>();
  params_ = AlignedBuffer<uint16_t>();
}

void TokenGroupRows::AddMemory(MemoryUsage& m) const {
  for (const auto& plane : planes_) {
    m.code_bytes += plane.size();
    m.reserved_bytes += plane.capacity_bytes() - plane.size();
  }
  m.scale_bytes += static_cast<size_t>(n_rows_) * n_groups_ * sizeof(uint16_t);
  m.zero_bytes += static_cast<size_t>(n_rows_) * n_groups_ * sizeof(uint16_t);
  m.reserved_bytes += params_.capacity_bytes() - params_.size() * sizeof(uint16_t);
}

}  // namespace kvpack
