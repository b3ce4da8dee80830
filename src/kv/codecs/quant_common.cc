#include "kv/codecs/quant_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/code_dot_i16.h"
#include "ops/code_dot_i8.h"
#include "ops/code_unpack.h"
#include "ops/packed_scores.h"
#include "ops/value_dot_i8.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

// Largest finite fp16 (65504): a scale that would overflow saturates here.
constexpr uint16_t kFp16MaxBits = 0x7bff;

uint16_t ToFp16Saturated(float x) {
  const uint16_t h = Fp32ToFp16(x);
  if ((h & 0x7fffu) == 0x7c00u) return static_cast<uint16_t>((h & 0x8000u) | kFp16MaxBits);
  return h;
}

// HQQ's shrinkage (proximal operator of the l_p "norm", p < 1):
//   shrink(x) = sign(x) * relu(|x| - |x|^(p-1) / beta).
float ShrinkLp(float x, float beta, float p) {
  const float a = std::fabs(x);
  if (a == 0.0f) return 0.0f;
  const float v = a - std::pow(a, p - 1.0f) / beta;
  return v > 0.0f ? std::copysign(v, x) : 0.0f;
}

// Half-quadratic refinement of the zero point (Badri & Shaji, "Half-Quadratic Quantization
// of Large Machine Learning Models", 2023; update rules of mobiusml/hqq,
// hqq/core/optimize.py, optimize_weights_proximal_legacy), in HQQ's parametrisation
// code = round(x * inv_scale + zero), x^ = (code - zero) / inv_scale, with the scale fixed
// at its min-max value and the library defaults lp_norm 0.7, beta 10, kappa 1.01, 20 iters:
//   W_q = clamp(round(W s + z)); W_r = (W_q - z) / s; W_e = shrink(W - W_r);
//   z = mean(W_q - (W - W_e) s); beta *= kappa.
// The zero with the smallest mean |W - W_r| seen is kept (HQQ's early stop keeps the best
// iterate too); the min-max start is iterate 0, so HQQ never does worse than min-max in l1.
float HqqZero(const float* x, int64_t n, int64_t stride, float inv_scale, float zero0, int qmax) {
  constexpr float kLpNorm = 0.7f, kKappa = 1.01f;
  constexpr int kIters = 20;
  float beta = 10.0f;
  float zero = zero0, best_zero = zero0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int it = 0; it < kIters; ++it) {
    double err = 0.0, zsum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float w = x[i * stride];
      const float q =
          std::clamp(std::nearbyint(w * inv_scale + zero), 0.0f, static_cast<float>(qmax));
      const float r = (q - zero) / inv_scale;
      err += std::fabs(w - r);
      const float e = ShrinkLp(w - r, beta, kLpNorm);
      zsum += q - (w - e) * inv_scale;
    }
    if (err < best_err) {
      best_err = err;
      best_zero = zero;
    } else {
      break;  // no progress: HQQ's early stop
    }
    zero = static_cast<float>(zsum / static_cast<double>(n));
    beta *= kKappa;
  }
  return best_zero;
}

}  // namespace

Status CheckQuantInput(const float* x, int64_t n, const StoreShape& shape, bool fp16_range) {
  // One branch-free pass (NaN and +-inf fail the comparison); the message's search only when
  // something failed.
  const float limit = fp16_range ? kMaxQuantInput : std::numeric_limits<float>::max();
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) bad |= !(std::fabs(x[i]) <= limit);
  if (!bad) return Status::Ok();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      return InvalidArgument(std::string("non-finite value in the ") +
                             (shape.component == KvComponent::kKey ? "keys" : "values") +
                             " of layer " + std::to_string(shape.layer));
    }
    if (fp16_range && std::fabs(v) > kMaxQuantInput) {
      return InvalidArgument(std::string("value ") + std::to_string(v) + " in the " +
                             (shape.component == KvComponent::kKey ? "keys" : "values") +
                             " of layer " + std::to_string(shape.layer) +
                             " exceeds the fp16 range of the quantization scales");
    }
  }
  return Status::Ok();
}

GroupParams QuantizeGroup(const float* x, int64_t n, int64_t stride, int bits, QuantMethod method,
                          uint8_t* codes, int64_t code_stride) {
  const int qmax = (1 << bits) - 1;
  float mn = std::numeric_limits<float>::infinity(), mx = -mn;
  for (int64_t i = 0; i < n; ++i) {
    mn = std::min(mn, x[i * stride]);
    mx = std::max(mx, x[i * stride]);
  }
  GroupParams gp;
  float lo = mn;
  float scale = (mx - mn) / static_cast<float>(qmax);
  if (method == QuantMethod::kHqq && scale > 0.0f) {
    const float inv = 1.0f / scale;
    const float zero = HqqZero(x, n, stride, inv, -mn * inv, qmax);
    lo = -zero * scale;
  }
  gp.min = Fp32ToFp16(lo);
  gp.scale = ToFp16Saturated(scale);
  const float s = Fp16ToFp32(gp.scale), m = Fp16ToFp32(gp.min);
  if (!(s > 0.0f)) {  // zero range (or a scale below fp16's resolution): decode to min
    gp.scale = 0;
    for (int64_t i = 0; i < n; ++i) codes[i * code_stride] = 0;
    return gp;
  }
  const float inv = 1.0f / s;
  for (int64_t i = 0; i < n; ++i) {
    const float c = std::nearbyint((x[i * stride] - m) * inv);
    codes[i * code_stride] = static_cast<uint8_t>(std::clamp(c, 0.0f, static_cast<float>(qmax)));
  }
  return gp;
}

void PackCodes(const uint8_t* codes, int64_t n, int bits, uint8_t* dst) {
  std::memset(dst, 0, PackedBytes(n, bits));
  if (bits == 8) {
    std::memcpy(dst, codes, n);
    return;
  }
  int64_t pos = 0;
  for (int64_t i = 0; i < n; ++i, pos += bits) {
    const uint32_t v = static_cast<uint32_t>(codes[i]) << (pos & 7);
    dst[pos >> 3] |= static_cast<uint8_t>(v);
    if ((pos & 7) + bits > 8) dst[(pos >> 3) + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

// ---------------------------------------------------------------------------------------
// TokenGroupRows

TokenGroupRows::TokenGroupRows(int row_len, int group, int bits, QuantMethod method)
    : row_len_(row_len),
      group_(std::min(group, row_len)),
      n_groups_((row_len + group_ - 1) / group_),
      bits_(bits),
      method_(method),
      row_bytes_(PackedBytes(row_len, bits)) {}

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
  codes_.Resize((n_rows_ + 1) * row_bytes_);
  PackCodes(c, row_len_, bits_, &codes_[n_rows_ * row_bytes_]);
  ++n_rows_;
}

namespace {
constexpr int64_t kTileRows = kTileRowsMax;
static_assert(kTileRows % kCombinePad == 0, "CombineCodeDots reads whole vectors of a tile");

// Keys of 2- and 4-bit codecs are scored in the integer domain (ops/code_dot_i8.h): the
// query, with the per-channel scales folded in where the format has them, is quantized to
// int8 per (query row, key block). 8-bit codes keep the float kernels: an int8 query would
// add an error as large as the codes' own.
bool UseIntegerKeys(int bits) { return bits <= 4; }
// Values of the same codecs take int16 weights (ops/code_dot_i16.h, where the CPU has the
// kernel): 2^-16 of a tile's largest weight per unit of code, far below the 2- and 4-bit
// codes' own error; 8-bit codes keep float weights.
bool UseIntegerValues(int bits) { return bits <= 4; }

}  // namespace

CodeTileScratch& TileScratch(int64_t width) {
  thread_local CodeTileScratch s;
  if (s.width < width) {
    s.width = width;
    s.min.resize(std::max<int64_t>(kTileRows, width));
    s.values.resize(kTileRows * width);
    s.tile_codes.resize(kTileRows * width);
    s.scale.resize(width);
  }
  return s;
}

void PrepareGroupedQueryI8(const float* q, int n_q, int n, int group, CodeTileScratch& t) {
  const int ng = (n + group - 1) / group;
  t.q8.resize(static_cast<size_t>(n_q) * n);
  t.alpha.resize(n_q);
  t.qm.assign(static_cast<size_t>(n_q) * ng, 0.0f);  // [n_q, ng] sum of q over each group
  if (t.ones.size() < static_cast<size_t>(group)) t.ones.resize(group, 1.0f);
  for (int i = 0; i < n_q; ++i) {
    t.alpha[i] = QuantizeI8(q + i * n, n, &t.q8[i * n]);
    for (int g = 0; g < ng; ++g) {  // a SIMD dot with ones: a scalar sum is one long chain
      const int c0 = g * group, len = std::min(n, c0 + group) - c0;
      t.qm[i * ng + g] = DotF32(q + i * n + c0, t.ones.data(), len);
    }
  }
  t.dots.resize(static_cast<size_t>(n_q) * ng * kTileRows);
}

void ScoreGroupedTileI8(const uint8_t* codes, int64_t m, int n, int group, int n_q,
                        CodeTileScratch& t, float* scores, int64_t ld) {
  const int ng = (n + group - 1) / group;
  DotCodeRowsI8(codes, m, n, n, group, t.q8.data(), n_q, t.dots.data(), kTileRows);
  CombineCodeDots(t.dots.data(), t.gscale.data(), t.gmin.data(), kTileRows, m, n_q, ng,
                  t.alpha.data(), t.qm.data(), scores, ld);
}

namespace {

// The weights of a tile (probability x the row's group scale) into t.weights; the min part
// added to t.msum.
void GroupedTileWeights(int64_t m, int n, int first, int group, const float* p, int n_q,
                        int64_t ld, CodeTileScratch& t) {
  const int ng = (first + n - 1) / group - first / group + 1;  // groups the window touches
  t.weights.resize(static_cast<size_t>(n_q) * ng * kTileRows);
  GroupWeightsAndMinSums(p, ld, n_q, t.gscale.data(), t.gmin.data(), kTileRows, ng, m,
                         t.weights.data(), kTileRows, t.msum.data());
}

}  // namespace

void AccumulatePackedTile(const uint8_t* rows, int64_t row_bytes, int64_t m, int n, int first,
                          int group, int bits, const float* p, int n_q, int64_t ld,
                          CodeTileScratch& t, float* out) {
  GroupedTileWeights(m, n, first, group, p, n_q, ld, t);
  AxpyPackedRowsWeightedI16(t.weights.data(), n_q, kTileRows, rows, m, row_bytes, bits, n, first,
                            group, out);
}

void AccumulateGroupedTile(const uint8_t* codes, int64_t m, int n, int first, int group,
                           int bits, const float* p, int n_q, int64_t ld, CodeTileScratch& t,
                           float* out) {
  GroupedTileWeights(m, n, first, group, p, n_q, ld, t);
  if (UseIntegerValues(bits)) {
    AxpyCodeRowsWeightedI16(t.weights.data(), n_q, kTileRows, codes, m, n, n, first, group, out);
  } else {
    AxpyCodeRowsWeighted(t.weights.data(), n_q, kTileRows, codes, m, n, n, first, group, out);
  }
}

void AddGroupedMinSums(int n_q, int n, int first, int group, const CodeTileScratch& t, float* out) {
  const int g0 = first / group, ng = (first + n - 1) / group - g0 + 1;
  for (int i = 0; i < n_q; ++i) {
    for (int g = 0; g < ng; ++g) {  // channels of window group g: [a, e)
      const int a = std::max(0, (g0 + g) * group - first);
      const int e = std::min(n, (g0 + g + 1) * group - first);
      const float ms = t.msum[i * ng + g];
      for (int c = a; c < e; ++c) out[i * n + c] += ms;
    }
  }
}

void TokenGroupRows::DecodeRow(int64_t r, int c0, int n, float* out) const {
  DequantizeRowsPerToken(&codes_[r * row_bytes_], 1, row_bytes_, bits_, c0, n, group_,
                         &params_[r * n_groups_ * 2], n_groups_, out);
}

void TokenGroupRows::Decode(int64_t r0, int64_t r1, int c0, int n, float* out) const {
  if (r0 >= r1) return;
  DequantizeRowsPerToken(&codes_[r0 * row_bytes_], r1 - r0, row_bytes_, bits_, c0, n, group_,
                         &params_[r0 * n_groups_ * 2], n_groups_, out);
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
  if (rows == nullptr && c0 == 0 && n == row_len_ &&
      row_bytes_ * 8 == static_cast<int64_t>(row_len_) * bits_) {
    UnpackCodesU8(&codes_[(r0 + k0) * row_bytes_], 0, (k1 - k0) * n, bits_, out);
    return;
  }
  if (rows != nullptr) {
    UnpackCodeRows(codes_.data(), rows + k0, k1 - k0, row_bytes_, c0, n, bits_, out);
  } else {
    UnpackCodeRows(&codes_[(r0 + k0) * row_bytes_], nullptr, k1 - k0, row_bytes_, c0, n, bits_,
                   out);
  }
}

void TokenGroupRows::Scores(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n,
                            const float* q, int n_q, float* scores, int64_t ld,
                            int64_t col0) const {
  if (n_sel <= 0) return;
  CodeTileScratch& t = TileScratch(n);
  if (UseIntegerKeys(bits_) && c0 % group_ == 0) {
    ScoresInteger(r0, rows, n_sel, c0, n, q, n_q, scores, ld, col0, t);
    return;
  }
  const int g = c0 / group_;
  if (g != (c0 + n - 1) / group_) {
    // The window spans several groups: a per-group scale inside the dot product would need
    // one reduction per group, so dequantize the tile and use the float kernel.
    for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRows) {
      const int64_t k1 = std::min(n_sel, k0 + kTileRows);
      DecodeSelected(r0, rows, k0, k1, c0, n, t);
      DotTileF32(t.values.data(), k1 - k0, n, q, n_q, scores + col0 + k0, ld);
    }
    return;
  }
  // One group per row: q . (code * scale + min) = scale * (q . code) + min * sum(q).
  t.qm.resize(n_q);
  t.row_scale.resize(kTileRows);
  if (t.ones.size() < static_cast<size_t>(n)) t.ones.resize(n, 1.0f);
  for (int i = 0; i < n_q; ++i) t.qm[i] = DotF32(q + i * n, t.ones.data(), n);
  for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRows) {
    const int64_t k1 = std::min(n_sel, k0 + kTileRows);
    UnpackSelected(r0, rows, k0, k1, c0, n, t.tile_codes.data());
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r = rows ? rows[k] : r0 + k;
      const GroupParams gp = Params(r, g);
      t.row_scale[k - k0] = Fp16ToFp32(gp.scale);
      t.min[k - k0] = Fp16ToFp32(gp.min);
    }
    float* sc = scores + col0 + k0;
    DotCodeRows(t.tile_codes.data(), k1 - k0, n, n, q, n_q, sc, ld);
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
      (ng == 1 || (n % group_ == 0 && HasFastTokenRowScores(row_bytes_, n, bits_, ng)))) {
    ScoreTokenRowsI8(&codes_[r0 * row_bytes_], n_sel, row_bytes_, n, bits_, ng,
                     &params_[r0 * 2 * ng], t.q8.data(), t.alpha.data(), t.qm.data(), n_q,
                     scores + col0, ld);
    return;
  }
  for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRows) {
    const int64_t k1 = std::min(n_sel, k0 + kTileRows), m = k1 - k0;
    TileParams(r0, rows, k0, k1, g0, ng, t);
    UnpackSelected(r0, rows, k0, k1, c0, n, t.tile_codes.data());
    ScoreGroupedTileI8(t.tile_codes.data(), m, n, group_, n_q, t, scores + col0 + k0, ld);
  }
}

void TokenGroupRows::TileParams(int64_t r0, const int64_t* rows, int64_t k0, int64_t k1, int g0,
                                int ng, CodeTileScratch& t) const {
  const int64_t pk = 2 * n_groups_, m = k1 - k0;
  t.gscale.resize(static_cast<size_t>(ng) * kTileRows);
  t.gmin.resize(static_cast<size_t>(ng) * kTileRows);
  if (rows == nullptr) {  // consecutive rows: one SIMD pass from the fp16 pairs
    SplitGroupParams(&params_[(r0 + k0) * pk], m, n_groups_, g0, ng, t.gscale.data(),
                     t.gmin.data(), kTileRows);
    return;
  }
  t.params.resize(kTileRows * pk);
  for (int64_t k = k0; k < k1; ++k) {
    ConvertF16ToF32(&params_[rows[k] * pk], &t.params[(k - k0) * pk], pk);
  }
  for (int g = 0; g < ng; ++g) {
    const float* src = &t.params[2 * (g0 + g)];
    float* sc = &t.gscale[g * kTileRows];
    float* mn = &t.gmin[g * kTileRows];
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
  CodeTileScratch& t = TileScratch(n);
  const int g0 = c0 / group_, ng = (c0 + n - 1) / group_ - g0 + 1;  // groups the window touches
  t.msum.assign(static_cast<size_t>(n_q) * ng, 0.0f);
  // Consecutive whole rows with the int16 kernel: the codes are read from the packed rows.
  // (A window of a row spanning heads, KCVT's values, measured 50% slower this way on a cache
  // read from memory: every head's pass then streams every row; those keep the unpacking.)
  const bool packed = rows == nullptr && UseIntegerValues(bits_) &&
                      HasPackedInt16ValueKernel(bits_, n, c0, group_);
  // Whole rows of 2-bit codes (heads of 64, 128, ... channels): int8 weights, four rows per
  // multiply (ops/value_dot_i8.h: half the multiply work of the int16 kernel; its coarser
  // weights move a 2-bit cache's KLD by a few percent of the codes' own error).
  const bool two_bit_rows =
      packed && bits_ == 2 && c0 == 0 && n % 64 == 0 && row_bytes_ == n / 4;
  for (int64_t k0 = 0; k0 < n_sel; k0 += kTileRows) {
    const int64_t k1 = std::min(n_sel, k0 + kTileRows), m = k1 - k0;
    if (two_bit_rows && HasI8ValueKernel(n, n_groups_, m)) {
      AccumulateTwoBitRowsI8(p + col0 + k0, ld, n_q, &params_[(r0 + k0) * 2 * n_groups_],
                             n_groups_, &codes_[(r0 + k0) * row_bytes_], n, m, out,
                             t.msum.data());
      continue;
    }
    if (packed && HasFusedPackedValueKernel(bits_, n, c0, group_, n_groups_, m)) {
      // Parameters, weights and their quantization in registers (ops/code_dot_i16.h).
      AccumulatePackedRowsI16(p + col0 + k0, ld, n_q, &params_[(r0 + k0) * 2 * n_groups_],
                              n_groups_, g0, ng, &codes_[(r0 + k0) * row_bytes_], m, row_bytes_,
                              bits_, n, c0, group_, out, t.msum.data());
      continue;
    }
    TileParams(r0, rows, k0, k1, g0, ng, t);
    if (packed) {
      AccumulatePackedTile(&codes_[(r0 + k0) * row_bytes_], row_bytes_, m, n, c0, group_, bits_,
                           p + col0 + k0, n_q, ld, t, out);
      continue;
    }
    UnpackSelected(r0, rows, k0, k1, c0, n, t.tile_codes.data());
    AccumulateGroupedTile(t.tile_codes.data(), m, n, c0, group_, bits_, p + col0 + k0, n_q, ld, t,
                          out);
  }
  AddGroupedMinSums(n_q, n, c0, group_, t, out);
}

void TokenGroupRows::Keep(std::span<const int64_t> keep) {
  int64_t w = 0;
  const int64_t pn = static_cast<int64_t>(n_groups_) * 2;
  for (int64_t r : keep) {
    if (r != w) {
      std::memmove(&codes_[w * row_bytes_], &codes_[r * row_bytes_], row_bytes_);
      std::memmove(&params_[w * pn], &params_[r * pn], pn * sizeof(uint16_t));
    }
    ++w;
  }
  n_rows_ = w;
  codes_.Resize(w * row_bytes_);
  params_.Resize(w * pn);
  codes_.ShrinkToFit();
  params_.ShrinkToFit();
}

void TokenGroupRows::Clear() {
  n_rows_ = 0;
  codes_ = AlignedBuffer<uint8_t>();
  params_ = AlignedBuffer<uint16_t>();
}

void TokenGroupRows::AddMemory(MemoryUsage& m) const {
  m.code_bytes += codes_.size();
  m.scale_bytes += static_cast<size_t>(n_rows_) * n_groups_ * sizeof(uint16_t);
  m.zero_bytes += static_cast<size_t>(n_rows_) * n_groups_ * sizeof(uint16_t);
  m.reserved_bytes += codes_.capacity_bytes() - codes_.size() + params_.capacity_bytes() -
                      params_.size() * sizeof(uint16_t);
}

// ---------------------------------------------------------------------------------------
// ChannelBlocks

ChannelBlocks::ChannelBlocks(int d, int bits, QuantMethod method)
    : d_(d), bits_(bits), method_(method), row_bytes_(PackedBytes(d, bits)) {}

void ChannelBlocks::AppendBlock(const float* x, int64_t n, int64_t ld) {
  if (n <= 0) return;
  std::vector<uint8_t> codes(n * d_);
  const int64_t b = n_blocks();
  params_.Resize((b + 1) * 2 * d_);
  uint16_t* sc = &params_[b * 2 * d_];
  uint16_t* mn = sc + d_;
  for (int c = 0; c < d_; ++c) {
    const GroupParams gp = QuantizeGroup(x + c, n, ld, bits_, method_, codes.data() + c, d_);
    sc[c] = gp.scale;
    mn[c] = gp.min;
  }
  codes_.Resize((n_rows_ + n) * row_bytes_);
  for (int64_t t = 0; t < n; ++t) {
    PackCodes(codes.data() + t * d_, d_, bits_, &codes_[(n_rows_ + t) * row_bytes_]);
  }
  block_start_.push_back(n_rows_);
  n_rows_ += n;
}

int64_t ChannelBlocks::BlockOf(int64_t r) const {
  auto it = std::upper_bound(block_start_.begin(), block_start_.end(), r);
  return static_cast<int64_t>(it - block_start_.begin()) - 1;
}

void ChannelBlocks::Decode(int64_t r0, int64_t r1, float* out) const {
  if (r0 >= r1) return;
  CodeTileScratch& t = TileScratch(d_);
  for (int64_t b = BlockOf(r0); b < n_blocks() && block_start_[b] < r1; ++b) {
    const int64_t bs = std::max(r0, block_start_[b]);
    const int64_t be = std::min(r1, b + 1 < n_blocks() ? block_start_[b + 1] : n_rows_);
    ConvertF16ToF32(&params_[b * 2 * d_], t.scale.data(), d_);
    ConvertF16ToF32(&params_[b * 2 * d_ + d_], t.min.data(), d_);
    DequantizeRowsPerChannel(&codes_[bs * row_bytes_], be - bs, row_bytes_, bits_, d_,
                             t.scale.data(), t.min.data(), out + (bs - r0) * d_);
  }
}

void ChannelBlocks::UnpackTile(int64_t a, int64_t e, uint8_t* out) const {
  if (row_bytes_ * 8 == static_cast<int64_t>(d_) * bits_) {
    UnpackCodesU8(&codes_[a * row_bytes_], 0, (e - a) * d_, bits_, out);  // one stream
    return;
  }
  UnpackCodeRows(&codes_[a * row_bytes_], nullptr, e - a, row_bytes_, 0, d_, bits_, out);
}

// Per block: q . (code * scale + min) = (q * scale) . code + q . min. With 2- or 4-bit codes
// q * scale is quantized to int8 per (query row, block): alpha * (q8 . code) in int32.
void ChannelBlocks::Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                           int64_t ld, int64_t col0) const {
  if (r0 >= r1) return;
  if (UseIntegerKeys(bits_)) {  // the blocks the range touches, straight from the packed rows
    const int64_t b0 = BlockOf(r0);
    thread_local std::vector<int64_t> starts;  // relative to r0
    starts.assign(1, 0);
    for (int64_t b = b0 + 1; b < n_blocks() && block_start_[b] < r1; ++b) {
      starts.push_back(block_start_[b] - r0);
    }
    starts.push_back(r1 - r0);
    ScoreChannelBlocksI8(&codes_[r0 * row_bytes_], row_bytes_, d_, bits_, &params_[b0 * 2 * d_],
                         starts.data(), starts.size() - 1, q, n_q, scores + col0, ld);
    return;
  }
  CodeTileScratch& t = TileScratch(d_);
  t.qs.resize(static_cast<size_t>(n_q) * d_);
  t.qm.resize(n_q);
  for (int64_t b = BlockOf(r0); b < n_blocks() && block_start_[b] < r1; ++b) {
    const int64_t bs = std::max(r0, block_start_[b]);
    const int64_t be = std::min(r1, b + 1 < n_blocks() ? block_start_[b + 1] : n_rows_);
    ConvertF16ToF32(&params_[b * 2 * d_], t.scale.data(), d_);
    ConvertF16ToF32(&params_[b * 2 * d_ + d_], t.min.data(), d_);
    for (int i = 0; i < n_q; ++i) {
      float* qs = &t.qs[i * d_];
      for (int c = 0; c < d_; ++c) qs[c] = q[i * d_ + c] * t.scale[c];
      t.qm[i] = DotF32(q + i * d_, t.min.data(), d_);
    }
    for (int64_t a = bs; a < be; a += kTileRows) {
      const int64_t e = std::min(be, a + kTileRows), m = e - a;
      float* sc = scores + col0 + (a - r0);
      UnpackTile(a, e, t.tile_codes.data());
      DotCodeRows(t.tile_codes.data(), m, d_, d_, t.qs.data(), n_q, sc, ld);
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
  CodeTileScratch& t = TileScratch(d_);
  t.acc.resize(static_cast<size_t>(n_q) * d_);
  t.psum.resize(n_q);
  for (int64_t b = BlockOf(r0); b < n_blocks() && block_start_[b] < r1; ++b) {
    const int64_t bs = std::max(r0, block_start_[b]);
    const int64_t be = std::min(r1, b + 1 < n_blocks() ? block_start_[b + 1] : n_rows_);
    std::fill(t.acc.begin(), t.acc.end(), 0.0f);
    std::fill(t.psum.begin(), t.psum.end(), 0.0f);
    for (int64_t a = bs; a < be; a += kTileRows) {
      const int64_t e = std::min(be, a + kTileRows);
      UnpackTile(a, e, t.tile_codes.data());
      const float* pa = p + col0 + (a - r0);
      // One weight group spanning the row: the probabilities themselves.
      if (UseIntegerValues(bits_)) {
        AxpyCodeRowsWeightedI16(pa, n_q, ld, t.tile_codes.data(), e - a, d_, d_, 0, d_,
                                t.acc.data());
      } else {
        AxpyCodeRowsWeighted(pa, n_q, ld, t.tile_codes.data(), e - a, d_, d_, 0, d_, t.acc.data());
      }
      for (int i = 0; i < n_q; ++i) {
        for (int64_t k = 0; k < e - a; ++k) t.psum[i] += pa[i * ld + k];
      }
    }
    ConvertF16ToF32(&params_[b * 2 * d_], t.scale.data(), d_);
    ConvertF16ToF32(&params_[b * 2 * d_ + d_], t.min.data(), d_);
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
    const int64_t be = b + 1 < n_blocks() ? block_start_[b + 1] : n_rows_;
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
}

void ChannelBlocks::Clear() {
  n_rows_ = 0;
  codes_ = AlignedBuffer<uint8_t>();
  params_ = AlignedBuffer<uint16_t>();
  block_start_.clear();
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

// ---------------------------------------------------------------------------------------
// Fp16Rows

void Fp16Rows::Append(const float* row) {
  data_.Resize((start_ + n_rows_ + 1) * d_);
  uint16_t* dst = &data_[(start_ + n_rows_) * d_];
  ConvertF32ToF16(row, dst, d_);  // rounds as Fp32ToFp16 (tests/unit/ops_vec_test.cc)
  ++n_rows_;
}

void Fp16Rows::Row(int64_t r, float* out) const {
  ConvertF16ToF32(Row(r), out, d_);  // exact, as Fp16ToFp32 (tests/unit/ops_vec_test.cc)
}

void Fp16Rows::PopFront(int64_t n) {
  KVPACK_CHECK(n <= n_rows_);
  start_ += n;
  n_rows_ -= n;
  // Compact once the dead prefix outgrows the live rows (amortised O(1) per row).
  if (start_ > 0 && start_ >= n_rows_) {
    if (n_rows_) std::memmove(data_.data(), Row(0), n_rows_ * d_ * sizeof(uint16_t));
    start_ = 0;
    data_.Resize(n_rows_ * d_);
  }
}

void Fp16Rows::Keep(std::span<const int64_t> keep) {
  int64_t w = 0;
  for (int64_t r : keep) {
    if (start_ + r != w) {
      std::memmove(&data_[w * d_], &data_[(start_ + r) * d_], d_ * sizeof(uint16_t));
    }
    ++w;
  }
  start_ = 0;
  n_rows_ = w;
  data_.Resize(w * d_);
  data_.ShrinkToFit();
}

void Fp16Rows::Clear() {
  start_ = n_rows_ = 0;
  data_ = AlignedBuffer<uint16_t>();
}

// The residual rows are one contiguous fp16 tile: the plain f16 store's tile kernels.
void Fp16Rows::Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores, int64_t ld,
                      int64_t col0) const {
  if (r0 >= r1) return;
  DotRowsF16(Row(r0), r1 - r0, d_, q, n_q, scores + col0, ld);
}

void Fp16Rows::Accumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld, int64_t col0,
                          float* out) const {
  if (r0 >= r1) return;
  AxpyRowsF16(p + col0, n_q, ld, Row(r0), r1 - r0, d_, out);
}

Result<int64_t> ParamChoice(const MethodSpec& spec, const std::string& key, int64_t fallback,
                            const std::vector<int64_t>& allowed) {
  KVPACK_ASSIGN_OR_RETURN(int64_t v, ParamAsInt(spec, key, fallback));
  if (allowed.empty()) {
    if (v < 1) {
      return InvalidArgument("'" + spec.name + "': " + key + "=" + std::to_string(v) +
                             " must be at least 1");
    }
    return v;
  }
  std::string list;
  for (int64_t a : allowed) {
    if (a == v) return v;
    list += (list.empty() ? "" : ", ") + std::to_string(a);
  }
  return InvalidArgument("'" + spec.name + "': " + key + "=" + std::to_string(v) +
                         " is not supported; valid: " + list);
}

}  // namespace kvpack
