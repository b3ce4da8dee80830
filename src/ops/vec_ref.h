// Scalar reference twins of the kernels in vec.h: straightforward loops, the test oracle.
#ifndef KVPACK_OPS_VEC_REF_H_
#define KVPACK_OPS_VEC_REF_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

float DotF32Ref(const float* a, const float* b, size_t n);
float DotF16F32Ref(const uint16_t* a, const float* b, size_t n);
float DotBF16F32Ref(const uint16_t* a, const float* b, size_t n);
float DotQ8_0F32Ref(const void* a, const float* b, size_t n);
void AxpyF32Ref(float s, const float* x, float* y, size_t n);
void AxpyF16Ref(float s, const uint16_t* x, float* y, size_t n);
void AxpyBF16Ref(float s, const uint16_t* x, float* y, size_t n);
void ConvertF32ToF16Ref(const float* src, uint16_t* dst, size_t n);
void ConvertF16ToF32Ref(const uint16_t* src, float* dst, size_t n);
bool AnyAbsAboveRef(const float* x, size_t n, float limit);
float MaxF32Ref(const float* x, size_t n);
float ExpSubtractSumRef(float* x, size_t n, float shift);
void SwiGluF32Ref(const float* gate, const float* up, size_t n, float* out);

}  // namespace kvpack

#endif  // KVPACK_OPS_VEC_REF_H_
