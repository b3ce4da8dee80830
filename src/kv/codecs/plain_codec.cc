#include "kv/codecs/plain_codec.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/check.h"
#include "core/half.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

// Element traits: storage type, conversion, and the tile kernels of attention (ops/vec.h).
struct F32Traits {
  using T = float;
  static constexpr const char* kName = "f32";
  // Any finite value (the input gate's limit and the range its message names).
  static constexpr float kMaxInput = std::numeric_limits<float>::max();
  static constexpr const char* kRange = "the float range";
  static void EncodeRow(const float* x, T* out, size_t n) { std::copy_n(x, n, out); }
  static float DecodeOne(T x) { return x; }
  static void DotRows(const T* rows, size_t n, size_t d, const float* q, size_t n_q, float* s,
                      size_t ld) {
    DotRowsF32(rows, n, d, q, n_q, s, ld);
  }
  static void AxpyRows(const float* p, size_t n_q, size_t ld, const T* rows, size_t n, size_t d,
                       float* out) {
    AxpyRowsF32(p, n_q, ld, rows, n, d, out);
  }
};

struct F16Traits {
  using T = uint16_t;
  static constexpr const char* kName = "f16";
  // fp16's largest finite value: beyond it the conversion rounds to infinity, and the
  // attention over that key or value to NaN (until session 56 such values were taken).
  static constexpr float kMaxInput = kStoreSafeInputMax;
  static constexpr const char* kRange = "the fp16 range of the f16 cache (65504)";
  // ConvertF32ToF16 rounds as Fp32ToFp16 on every target (tests/unit/ops_vec_test.cc); with
  // the scalar conversion kv_codec_bench's AppendToken/f16 took 1.8 us, now 1.4-1.7.
  static void EncodeRow(const float* x, T* out, size_t n) { ConvertF32ToF16(x, out, n); }
  static float DecodeOne(T x) { return Fp16ToFp32(x); }
  static void DotRows(const T* rows, size_t n, size_t d, const float* q, size_t n_q, float* s,
                      size_t ld) {
    DotRowsF16(rows, n, d, q, n_q, s, ld);
  }
  static void AxpyRows(const float* p, size_t n_q, size_t ld, const T* rows, size_t n, size_t d,
                       float* out) {
    AxpyRowsF16(p, n_q, ld, rows, n, d, out);
  }
};

struct BF16Traits {
  using T = uint16_t;
  static constexpr const char* kName = "bf16";
  // The largest float that Fp32ToBf16 rounds to a finite value (bits 0x7f7f7fff; from
  // 0x7f7f8000 on it rounds to infinity).
  static constexpr float kMaxInput = 0x1.fefffep+127f;
  static constexpr const char* kRange = "the bf16 range";
  static void EncodeRow(const float* x, T* out, size_t n) {
    for (size_t c = 0; c < n; ++c) out[c] = Fp32ToBf16(x[c]);
  }
  static float DecodeOne(T x) { return Bf16ToFp32(x); }
  // bf16 rows take the fp16 cache's tile kernels with a bf16 row load (ops/vec.h); until
  // session 31 they ran a dot per row and query and a scalar axpy: 0.80x of f16's decode
  // speed at depth 512 and 0.37x at 8192.
  static void DotRows(const T* rows, size_t n, size_t d, const float* q, size_t n_q, float* s,
                      size_t ld) {
    DotRowsBF16(rows, n, d, q, n_q, s, ld);
  }
  static void AxpyRows(const float* p, size_t n_q, size_t ld, const T* rows, size_t n, size_t d,
                       float* out) {
    AxpyRowsBF16(p, n_q, ld, rows, n, d, out);
  }
};

template <typename Traits>
class PlainStore final : public ComponentStore {
  using T = typename Traits::T;

 public:
  explicit PlainStore(const StoreShape& shape) : shape_(shape), heads_(shape.n_kv_heads) {}

  std::string spec() const override { return Traits::kName; }

  // Finite values that the format holds as finite values (Traits::kMaxInput).
  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    const int64_t row_len = static_cast<int64_t>(shape_.n_kv_heads) * shape_.head_dim;
    return CheckStoreInput(rows, n_tokens * row_len, shape_, Traits::kMaxInput, Traits::kRange);
  }

  Status Append(const float* rows, int64_t n_tokens) override {
    KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
    const int64_t row_len = static_cast<int64_t>(shape_.n_kv_heads) * shape_.head_dim;
    const size_t d = shape_.head_dim;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      AlignedBuffer<T>& buf = heads_[h];
      const size_t old = buf.size();
      buf.Resize(old + n_tokens * d);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* src = rows + t * row_len + static_cast<int64_t>(h) * d;
        T* dst = buf.data() + old + t * d;
        Traits::EncodeRow(src, dst, d);
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return static_cast<int64_t>(heads_[head].size()) / shape_.head_dim;
  }

  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const size_t d = shape_.head_dim;
    const int64_t n = t1 - t0;
    const T* base = heads_[head].data();
    Traits::DotRows(base + t0 * d, n, d, q, n_q, scores, n);
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const size_t d = shape_.head_dim;
    const int64_t n = t1 - t0;
    const T* base = heads_[head].data();
    Traits::AxpyRows(p, n_q, n, base + t0 * d, n, d, out);
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const size_t d = shape_.head_dim;
    const T* base = heads_[head].data();
    for (int64_t i = t0 * d; i < t1 * static_cast<int64_t>(d); ++i) {
      out[i - t0 * d] = Traits::DecodeOne(base[i]);
    }
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    const size_t d = shape_.head_dim;
    AlignedBuffer<T>& buf = heads_[head];
    const int64_t n = n_tokens(head);
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n));
    int64_t w = 0;
    for (int64_t idx : keep) {
      if (idx != w) std::copy(buf.data() + idx * d, buf.data() + (idx + 1) * d, buf.data() + w * d);
      ++w;
    }
    buf.Resize(w * d);
    buf.ShrinkToFit();
    return Status::Ok();
  }

  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const auto& buf : heads_) {
      m.code_bytes += buf.size() * sizeof(T);
      m.reserved_bytes += (buf.capacity() - buf.size()) * sizeof(T);
      m.n_values += static_cast<int64_t>(buf.size());
    }
    return m;
  }

 private:
  StoreShape shape_;
  std::vector<AlignedBuffer<T>> heads_;  // per head: [n_tokens, head_dim]
};

}  // namespace

std::unique_ptr<ComponentStore> MakePlainStore(PlainFormat format, const StoreShape& shape) {
  switch (format) {
    case PlainFormat::kF32:
      return std::make_unique<PlainStore<F32Traits>>(shape);
    case PlainFormat::kF16:
      return std::make_unique<PlainStore<F16Traits>>(shape);
    case PlainFormat::kBF16:
      return std::make_unique<PlainStore<BF16Traits>>(shape);
  }
  return nullptr;
}

}  // namespace kvpack
