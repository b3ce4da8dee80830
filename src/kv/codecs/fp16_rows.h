// Full-precision residual rows (fp16), with cheap removal from the front (KIVI's value
// window releases its oldest token on every step).
// (kv/codecs/quant_common.h: the quantizer, the tile algebra and the design the containers
// share.)
#ifndef KVPACK_KV_CODECS_FP16_ROWS_H_
#define KVPACK_KV_CODECS_FP16_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/aligned_buffer.h"

namespace kvpack {

class Fp16Rows {
 public:
  explicit Fp16Rows(int d) : d_(d) {}
  int64_t n_rows() const { return n_rows_; }
  void Append(const float* row);                          // row: [d]
  const uint16_t* Row(int64_t r) const { return data_.data() + (start_ + r) * d_; }
  void Row(int64_t r, float* out) const;                  // out: [d]
  void PopFront(int64_t n);
  void Keep(std::span<const int64_t> keep);
  void Clear();
  // Asks for the start of rows [r0, r1) (ops/prefetch.h), as Scores and Accumulate do.
  void PrefetchRows(int64_t r0, int64_t r1) const;
  void Scores(int64_t r0, int64_t r1, const float* q, int n_q, float* scores, int64_t ld,
              int64_t col0) const;
  void Accumulate(int64_t r0, int64_t r1, const float* p, int n_q, int64_t ld, int64_t col0,
                  float* out) const;
  size_t bytes() const { return static_cast<size_t>(n_rows_) * d_ * sizeof(uint16_t); }
  size_t reserved_bytes() const { return data_.capacity_bytes() - bytes(); }

 private:
  int d_;
  int64_t start_ = 0, n_rows_ = 0;
  AlignedBuffer<uint16_t> data_;  // [start + n_rows, d]
};

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_FP16_ROWS_H_
