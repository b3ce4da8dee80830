// The AVX2 form of ops/value_dot_i8.h's integer kernel (2-bit rows, int8 weights), for CPUs
// with AVX2 but without AVX512-VNNI + VBMI (Zen 3, most laptops), chosen at run time by
// AccumulateTwoBitRowsI8. Internal to ops/.
//
// Design: two rows per step. Their 64-channel windows (16 bytes each) are interleaved byte by
// byte, so that each 16-bit lane holds the byte of row k and the byte of row k + 1 that carry
// the same four channels; a shift by 2 s and a mask leave in every lane the two rows' codes of
// channel 4 j + s (j the lane), and one `vpmaddubsw` per query row multiplies them with the
// pair (wq_k, wq_k+1) into int16 (at most 2 x 3 x 127 per lane). Those are added in int16
// over the whole tile of at most 64 rows, which is exact (at most 64 x 3 x 127 = 24384 <
// 2^15), then put back in channel order, widened, and multiplied by the tile's step: out is
// the twin's bit for bit (ops/value_dot_i8.h). 32 products per multiply, against 8 per float
// FMA, and no conversion of the codes to floats.
#ifndef KVPACK_OPS_VALUE_DOT_I8_AVX2_H_
#define KVPACK_OPS_VALUE_DOT_I8_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace kvpack {

// Whether the CPU has what the AVX2 kernel needs (AVX2, FMA, F16C).
bool CpuHasAvx2I8ValueKernel();

// AccumulateTwoBitRowsI8's contract for d a multiple of 64 and 1, 2 or 4 groups whose size
// is a multiple of 64, or is 32 or 16 (HasI8ValueKernel's shapes); only on such a CPU.
void AccumulateTwoBitRowsI8Avx2(const float* p, size_t ldp, size_t n_q, const uint16_t* params,
                                size_t n_groups, const uint8_t* codes, size_t d, size_t n_rows,
                                float* out, float* msum);

}  // namespace kvpack

#endif  // KVPACK_OPS_VALUE_DOT_I8_AVX2_H_
