#include "kv/codecs/quant_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "ops/code_dot.h"
#include "ops/code_dot_i16.h"
#include "ops/code_dot_i8.h"
#include "ops/group_quantize.h"
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

// PackCodes for widths that divide 8: a fixed number of codes per byte, so the compiler
// unrolls and vectorises the loop.
template <int kBits>
void PackWholeBytes(const uint8_t* codes, int64_t n, uint8_t* dst) {
  constexpr int kPerByte = 8 / kBits;
  const int64_t full = n / kPerByte;
  for (int64_t j = 0; j < full; ++j) {
    uint32_t b = 0;
    for (int i = 0; i < kPerByte; ++i) {
      b |= static_cast<uint32_t>(codes[j * kPerByte + i]) << (i * kBits);
    }
    dst[j] = static_cast<uint8_t>(b);
  }
  uint32_t b = 0;
  for (int64_t i = full * kPerByte; i < n; ++i) {
    b |= static_cast<uint32_t>(codes[i]) << ((i - full * kPerByte) * kBits);
  }
  if (full * kPerByte < n) dst[full] = static_cast<uint8_t>(b);
}

}  // namespace

Status CheckQuantInput(const float* x, int64_t n, const StoreShape& shape, bool fp16_range) {
  return CheckStoreInput(x, n, shape,
                         fp16_range ? kMaxQuantInput : std::numeric_limits<float>::max(),
                         "the fp16 range of the quantization scales");
}

GroupCoder GroupCoderOf(float lo, float scale) {
  GroupCoder coder;
  coder.params.min = Fp32ToFp16(lo);
  coder.params.scale = ToFp16Saturated(scale);
  const float s = Fp16ToFp32(coder.params.scale);
  coder.min = Fp16ToFp32(coder.params.min);
  if (!(s > 0.0f)) {  // zero range (or a scale below fp16's resolution): decode to min
    coder.params.scale = 0;
    return coder;
  }
  coder.inv = 1.0f / s;
  return coder;
}

GroupParams QuantizeGroup(const float* x, int64_t n, int64_t stride, int bits, QuantMethod method,
                          uint8_t* codes, int64_t code_stride) {
  const int qmax = (1 << bits) - 1;
  float mn = 0.0f, mx = 0.0f;
  if (n > 0 && stride == 1) {
    MinMaxF32(x, static_cast<size_t>(n), &mn, &mx);  // vector passes: ops/group_quantize.h
  } else if (n > 0) {
    mn = mx = x[0];
    for (int64_t i = 1; i < n; ++i) {
      mn = std::min(mn, x[i * stride]);
      mx = std::max(mx, x[i * stride]);
    }
    mn += 0.0f;  // a zero extreme is +0, as MinMaxF32 gives it
    mx += 0.0f;
  }
  float lo = mn;
  const float scale = (mx - mn) / static_cast<float>(qmax);
  if (method == QuantMethod::kHqq && scale > 0.0f) {
    const float inv = 1.0f / scale;
    const float zero = HqqZero(x, n, stride, inv, -mn * inv, qmax);
    lo = -zero * scale;
  }
  const GroupCoder coder = GroupCoderOf(lo, scale);
  const float top = static_cast<float>(qmax);
  if (coder.inv == 0.0f) {
    for (int64_t i = 0; i < n; ++i) codes[i * code_stride] = 0;
  } else if (stride == 1 && code_stride == 1) {
    QuantizeCodesU8(x, static_cast<size_t>(n), coder.min, coder.inv, top, codes);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      codes[i * code_stride] = QuantizeCode(x[i * stride], coder.min, coder.inv, top);
    }
  }
  return coder.params;
}

void PackCodes(const uint8_t* codes, int64_t n, int bits, uint8_t* dst) {
  if (bits == 8) {
    std::memcpy(dst, codes, n);
    return;
  }
  // 1, 2 or 4 bits: whole codes per byte, a byte at a time (the bit-position loop below made
  // a 2-bit key block's packing about 6 of its 9 us, docs/performance-history.md, session 49).
  if (bits == 1) return PackWholeBytes<1>(codes, n, dst);
  if (bits == 2) return PackWholeBytes<2>(codes, n, dst);
  if (bits == 4) return PackWholeBytes<4>(codes, n, dst);
  std::memset(dst, 0, PackedBytes(n, bits));
  int64_t pos = 0;
  for (int64_t i = 0; i < n; ++i, pos += bits) {
    const uint32_t v = static_cast<uint32_t>(codes[i]) << (pos & 7);
    dst[pos >> 3] |= static_cast<uint8_t>(v);
    if ((pos & 7) + bits > 8) dst[(pos >> 3) + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

// ---------------------------------------------------------------------------------------
// Tiles of rows with per-(row, group) parameters

static_assert(kTileRowsMax % kCombinePad == 0, "CombineCodeDots reads whole vectors of a tile");

CodeTileScratch& TileScratch(int64_t width) {
  thread_local CodeTileScratch s;
  if (s.width < width) {
    s.width = width;
    s.min.resize(std::max<int64_t>(kTileRowsMax, width));
    s.values.resize(kTileRowsMax * width);
    s.tile_codes.resize(kTileRowsMax * width);
    s.scale.resize(width);
  }
  return s;
}

namespace {

// t.qm [n_q, ng]: the sum of each query row over each group.
void GroupedQuerySums(const float* q, int n_q, int n, int group, CodeTileScratch& t) {
  const int ng = (n + group - 1) / group;
  t.qm.assign(static_cast<size_t>(n_q) * ng, 0.0f);
  if (t.ones.size() < static_cast<size_t>(group)) t.ones.resize(group, 1.0f);
  for (int i = 0; i < n_q; ++i) {
    for (int g = 0; g < ng; ++g) {  // a SIMD dot with ones: a scalar sum is one long chain
      const int c0 = g * group, len = std::min(n, c0 + group) - c0;
      t.qm[i * ng + g] = DotF32(q + i * n + c0, t.ones.data(), len);
    }
  }
}

}  // namespace

void PrepareGroupedQueryI8(const float* q, int n_q, int n, int group, CodeTileScratch& t) {
  const int ng = (n + group - 1) / group;
  t.q8.resize(static_cast<size_t>(n_q) * n);
  t.alpha.resize(n_q);
  for (int i = 0; i < n_q; ++i) t.alpha[i] = QuantizeI8(q + i * n, n, &t.q8[i * n]);
  GroupedQuerySums(q, n_q, n, group, t);
  t.dots.resize(static_cast<size_t>(n_q) * ng * kTileRowsMax);
}

void PrepareGroupedQueryI16(const float* q, int n_q, int n, int group, CodeTileScratch& t) {
  t.q16.resize(static_cast<size_t>(n_q) * n);
  t.alpha.resize(n_q);
  for (int i = 0; i < n_q; ++i) t.alpha[i] = QuantizeI16(q + i * n, n, &t.q16[i * n]);
  GroupedQuerySums(q, n_q, n, group, t);
}

void ScoreGroupedTileI8(const uint8_t* codes, int64_t m, int n, int group, int n_q,
                        CodeTileScratch& t, float* scores, int64_t ld) {
  const int ng = (n + group - 1) / group;
  DotCodeRowsI8(codes, m, n, n, group, t.q8.data(), n_q, t.dots.data(), kTileRowsMax);
  CombineCodeDots(t.dots.data(), t.gscale.data(), t.gmin.data(), kTileRowsMax, m, n_q, ng,
                  t.alpha.data(), t.qm.data(), scores, ld);
}

namespace {

// The weights of a tile (probability x the row's group scale) into t.weights; the min part
// added to t.msum.
void GroupedTileWeights(int64_t m, int n, int first, int group, const float* p, int n_q,
                        int64_t ld, CodeTileScratch& t) {
  const int ng = (first + n - 1) / group - first / group + 1;  // groups the window touches
  t.weights.resize(static_cast<size_t>(n_q) * ng * kTileRowsMax);
  GroupWeightsAndMinSums(p, ld, n_q, t.gscale.data(), t.gmin.data(), kTileRowsMax, ng, m,
                         t.weights.data(), kTileRowsMax, t.msum.data());
}

}  // namespace

void AccumulatePackedTile(const uint8_t* rows, int64_t row_bytes, int64_t m, int n, int first,
                          int group, int bits, const float* p, int n_q, int64_t ld,
                          CodeTileScratch& t, float* out) {
  GroupedTileWeights(m, n, first, group, p, n_q, ld, t);
  AxpyPackedRowsWeightedI16(t.weights.data(), n_q, kTileRowsMax, rows, m, row_bytes, bits, n, first,
                            group, out);
}

void AccumulateGroupedTile(const uint8_t* codes, int64_t m, int n, int first, int group,
                           const float* p, int n_q, int64_t ld, CodeTileScratch& t, float* out) {
  GroupedTileWeights(m, n, first, group, p, n_q, ld, t);
  AxpyCodeRowsWeightedI16(t.weights.data(), n_q, kTileRowsMax, codes, m, n, n, first, group, out);
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

double QuantizedThenFp16Cost(int64_t t, int64_t n_quantized, int bits, int group) {
  const int64_t quantized = std::min(t, n_quantized);
  const double per_token = bits / 16.0 + 2.0 / std::max(group, 1);
  return static_cast<double>(quantized) * per_token + static_cast<double>(t - quantized);
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
