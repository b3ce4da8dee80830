#include "kv/codecs/quant_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/half.h"
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
float HqqZero(const float* x, int64_t n, int64_t stride, float inv_scale, float zero0,
              int qmax) {
  constexpr float kLpNorm = 0.7f, kKappa = 1.01f;
  constexpr int kIters = 20;
  float beta = 10.0f;
  float zero = zero0, best_zero = zero0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int it = 0; it < kIters; ++it) {
    double err = 0.0, zsum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float w = x[i * stride];
      const float q = std::clamp(std::nearbyint(w * inv_scale + zero), 0.0f,
                                 static_cast<float>(qmax));
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

GroupParams QuantizeGroup(const float* x, int64_t n, int64_t stride, int bits,
                          QuantMethod method, uint8_t* codes, int64_t code_stride) {
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

void UnpackCodes(const uint8_t* src, int64_t first, int64_t n, int bits, float* dst) {
  const int64_t bit0 = first * bits;
  if ((bit0 & 7) == 0) {
    const uint8_t* p = src + (bit0 >> 3);
    if (bits == 8) {
      for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
      return;
    }
    if (bits == 4) {
      int64_t i = 0;
      for (; i + 2 <= n; i += 2) {
        const uint8_t b = p[i >> 1];
        dst[i] = static_cast<float>(b & 15);
        dst[i + 1] = static_cast<float>(b >> 4);
      }
      if (i < n) dst[i] = static_cast<float>(p[i >> 1] & 15);
      return;
    }
    if (bits == 2) {
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        const uint8_t b = p[i >> 2];
        dst[i] = static_cast<float>(b & 3);
        dst[i + 1] = static_cast<float>((b >> 2) & 3);
        dst[i + 2] = static_cast<float>((b >> 4) & 3);
        dst[i + 3] = static_cast<float>(b >> 6);
      }
      for (; i < n; ++i) dst[i] = static_cast<float>((p[i >> 2] >> (2 * (i & 3))) & 3);
      return;
    }
  }
  const uint32_t mask = (1u << bits) - 1;
  int64_t pos = bit0;
  for (int64_t i = 0; i < n; ++i, pos += bits) {
    uint32_t v = src[pos >> 3] >> (pos & 7);
    if ((pos & 7) + bits > 8) v |= static_cast<uint32_t>(src[(pos >> 3) + 1]) << (8 - (pos & 7));
    dst[i] = static_cast<float>(v & mask);
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

void TokenGroupRows::Decode(int64_t r0, int64_t r1, int c0, int n, float* out) const {
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * n;
    UnpackCodes(&codes_[r * row_bytes_], c0, n, bits_, o);
    for (int j = 0; j < n; ++j) {
      const GroupParams gp = Params(r, (c0 + j) / group_);
      o[j] = o[j] * Fp16ToFp32(gp.scale) + Fp16ToFp32(gp.min);
    }
  }
}

namespace {
// The parts of a column window [c0, c0 + n) that fall in each group: window offsets
// [a, b) of group g.
struct Segment {
  int g, a, b;
};
int WindowSegments(int c0, int n, int group, Segment* segs) {
  int k = 0;
  for (int c = c0; c < c0 + n;) {
    const int g = c / group;
    const int end = std::min(c0 + n, (g + 1) * group);
    segs[k++] = {g, c - c0, end - c0};
    c = end;
  }
  return k;
}
}  // namespace

void TokenGroupRows::Scores(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n,
                            const float* q, int n_q, float* scores, int64_t ld,
                            int64_t col0) const {
  std::vector<Segment> segs(n / group_ + 2);
  const int n_seg = WindowSegments(c0, n, group_, segs.data());
  // sum of each query over each segment: the min term.
  std::vector<float> qsum(static_cast<size_t>(n_q) * n_seg);
  for (int i = 0; i < n_q; ++i) {
    for (int s = 0; s < n_seg; ++s) {
      float acc = 0.0f;
      for (int c = segs[s].a; c < segs[s].b; ++c) acc += q[i * n + c];
      qsum[i * n_seg + s] = acc;
    }
  }
  std::vector<float> buf(n);
  std::vector<float> sc(n_seg), mn(n_seg);
  for (int64_t k = 0; k < n_sel; ++k) {
    const int64_t r = rows ? rows[k] : r0 + k;
    UnpackCodes(&codes_[r * row_bytes_], c0, n, bits_, buf.data());
    for (int s = 0; s < n_seg; ++s) {
      const GroupParams gp = Params(r, segs[s].g);
      sc[s] = Fp16ToFp32(gp.scale);
      mn[s] = Fp16ToFp32(gp.min);
    }
    for (int i = 0; i < n_q; ++i) {
      float acc = 0.0f;
      for (int s = 0; s < n_seg; ++s) {
        const int a = segs[s].a, len = segs[s].b - a;
        acc += sc[s] * DotF32(q + i * n + a, buf.data() + a, len) + mn[s] * qsum[i * n_seg + s];
      }
      scores[i * ld + col0 + k] = acc;
    }
  }
}

void TokenGroupRows::Accumulate(int64_t r0, const int64_t* rows, int64_t n_sel, int c0, int n,
                                const float* p, int n_q, int64_t ld, int64_t col0,
                                float* out) const {
  std::vector<Segment> segs(n / group_ + 2);
  const int n_seg = WindowSegments(c0, n, group_, segs.data());
  std::vector<float> buf(n);
  std::vector<float> sc(n_seg), mn(n_seg);
  for (int64_t k = 0; k < n_sel; ++k) {
    const int64_t r = rows ? rows[k] : r0 + k;
    UnpackCodes(&codes_[r * row_bytes_], c0, n, bits_, buf.data());
    for (int s = 0; s < n_seg; ++s) {
      const GroupParams gp = Params(r, segs[s].g);
      sc[s] = Fp16ToFp32(gp.scale);
      mn[s] = Fp16ToFp32(gp.min);
    }
    for (int i = 0; i < n_q; ++i) {
      const float w = p[i * ld + col0 + k];
      if (w == 0.0f) continue;
      float* o = out + i * n;
      for (int s = 0; s < n_seg; ++s) {
        const float a_s = w * sc[s], b_s = w * mn[s];
        const float* b = buf.data();
        for (int c = segs[s].a; c < segs[s].b; ++c) o[c] += a_s * b[c] + b_s;
      }
    }
  }
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
  std::vector<float> sc(d_), mn(d_);
  int64_t cur = -1;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = BlockOf(r);
    if (b != cur) {
      cur = b;
      for (int c = 0; c < d_; ++c) {
        sc[c] = Fp16ToFp32(params_[b * 2 * d_ + c]);
        mn[c] = Fp16ToFp32(params_[b * 2 * d_ + d_ + c]);
      }
    }
    float* o = out + (r - r0) * d_;
    UnpackCodes(&codes_[r * row_bytes_], 0, d_, bits_, o);
    for (int c = 0; c < d_; ++c) o[c] = o[c] * sc[c] + mn[c];
  }
}

void ChannelBlocks::Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                           int64_t ld, int64_t col0) const {
  if (r0 >= r1) return;
  const size_t d = d_;
  std::vector<float> qs(n_q * d), qm(n_q), buf(d), sc(d), mn(d);
  for (int64_t b = BlockOf(r0); b < n_blocks() && block_start_[b] < r1; ++b) {
    const int64_t bs = std::max(r0, block_start_[b]);
    const int64_t be = std::min(r1, b + 1 < n_blocks() ? block_start_[b + 1] : n_rows_);
    for (size_t c = 0; c < d; ++c) {
      sc[c] = Fp16ToFp32(params_[b * 2 * d + c]);
      mn[c] = Fp16ToFp32(params_[b * 2 * d + d + c]);
    }
    // q.(code*scale + min) = (q*scale).code + q.min
    for (int i = 0; i < n_q; ++i) {
      for (size_t c = 0; c < d; ++c) qs[i * d + c] = q[i * d + c] * sc[c];
      qm[i] = DotF32(q + i * d, mn.data(), d);
    }
    for (int64_t r = bs; r < be; ++r) {
      UnpackCodes(&codes_[r * row_bytes_], 0, d_, bits_, buf.data());
      for (int i = 0; i < n_q; ++i) {
        scores[i * ld + col0 + (r - r0)] = DotF32(&qs[i * d], buf.data(), d) + qm[i];
      }
    }
  }
}

void ChannelBlocks::Accumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                               int64_t col0, float* out) const {
  if (r0 >= r1) return;
  const size_t d = d_;
  std::vector<float> acc(n_q * d), psum(n_q), buf(d);
  for (int64_t b = BlockOf(r0); b < n_blocks() && block_start_[b] < r1; ++b) {
    const int64_t bs = std::max(r0, block_start_[b]);
    const int64_t be = std::min(r1, b + 1 < n_blocks() ? block_start_[b + 1] : n_rows_);
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(psum.begin(), psum.end(), 0.0f);
    // sum_r p_r (code_r*scale + min) = scale * (sum_r p_r code_r) + min * sum_r p_r
    for (int64_t r = bs; r < be; ++r) {
      UnpackCodes(&codes_[r * row_bytes_], 0, d_, bits_, buf.data());
      for (int i = 0; i < n_q; ++i) {
        const float w = p[i * ld + col0 + (r - r0)];
        psum[i] += w;
        if (w != 0.0f) AxpyF32(w, buf.data(), &acc[i * d], d);
      }
    }
    const uint16_t* sc = &params_[b * 2 * d];
    const uint16_t* mn = sc + d;
    for (int i = 0; i < n_q; ++i) {
      float* o = out + i * d;
      for (size_t c = 0; c < d; ++c) {
        o[c] += Fp16ToFp32(sc[c]) * acc[i * d + c] + Fp16ToFp32(mn[c]) * psum[i];
      }
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
  for (int c = 0; c < d_; ++c) dst[c] = Fp32ToFp16(row[c]);
  ++n_rows_;
}

void Fp16Rows::Row(int64_t r, float* out) const {
  const uint16_t* src = Row(r);
  for (int c = 0; c < d_; ++c) out[c] = Fp16ToFp32(src[c]);
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

void Fp16Rows::Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores,
                      int64_t ld, int64_t col0) const {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* row = Row(r);
    for (int i = 0; i < n_q; ++i) {
      scores[i * ld + col0 + (r - r0)] = DotF16F32(row, q + i * d_, d_);
    }
  }
}

void Fp16Rows::Accumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld,
                          int64_t col0, float* out) const {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* row = Row(r);
    for (int i = 0; i < n_q; ++i) {
      const float w = p[i * ld + col0 + (r - r0)];
      if (w != 0.0f) AxpyF16(w, row, out + i * d_, d_);
    }
  }
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
