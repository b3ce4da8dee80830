#include "kv/codecs/fp16_rows.h"

#include <cstring>

#include "core/check.h"
#include "ops/prefetch.h"
#include "ops/vec.h"

namespace kvpack {

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

void Fp16Rows::PrefetchRows(int64_t r0, int64_t r1) const {
  if (r0 < r1) PrefetchStreamStart(Row(r0), (r1 - r0) * d_ * sizeof(uint16_t));
}

// The residual rows are one contiguous fp16 tile: the plain f16 store's tile kernels.
void Fp16Rows::Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores, int64_t ld,
                      int64_t col0) const {
  if (r0 >= r1) return;
  PrefetchRows(r0, r1);
  DotRowsF16(Row(r0), r1 - r0, d_, q, n_q, scores + col0, ld);
}

void Fp16Rows::Accumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld, int64_t col0,
                          float* out) const {
  if (r0 >= r1) return;
  PrefetchRows(r0, r1);
  AxpyRowsF16(p + col0, n_q, ld, Row(r0), r1 - r0, d_, out);
}

}  // namespace kvpack
