// The error GEAR's sparse part adds to the fused products (ops/outlier_cells.h): every
// outlier value v is multiplied by the query (scores) or the weight (accumulate) rounded to
// bf16, and the rounding to nearest with 8 significant bits gives
//   |x - bf16(x)| <= 2^-8 |x| + 2^-134   (the second term: fp32 subnormals)
// so against the exact products
//   a score of token t moves by at most   sum over t's outliers (c, v)  (2^-8 |q_c| + 2^-134) |v|,
//   an output channel c by at most        sum over c's outliers (t, v)  (2^-8 |p_t| + 2^-134) |v|.
// The float summation of the terms is covered by the tests' own rounding terms.
#ifndef KVPACK_TESTS_KV_SPARSE_BOUNDS_H_
#define KVPACK_TESTS_KV_SPARSE_BOUNDS_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/half.h"
#include "kv/codecs/gear_codec.h"
#include "kv/component_store.h"

namespace kvpack {

inline double Bf16RoundingOf(double x) { return std::ldexp(std::fabs(x), -8) + std::ldexp(1.0, -134); }

// outliers: a head's entries (GearStore::OutliersOf); q: [d] one query row.
inline double SparseScoreBound(const std::vector<OutlierEntry>& outliers, const float* q,
                               int64_t t) {
  double bound = 0.0;
  for (const OutlierEntry& e : outliers) {
    if (e.row == t) bound += Bf16RoundingOf(q[e.channel]) * std::fabs(Fp16ToFp32(e.value));
  }
  return bound;
}

// p: [t1 - t0] one weight row over tokens [t0, t1).
inline double SparseAccumulateBound(const std::vector<OutlierEntry>& outliers, const float* p,
                                    int64_t t0, int64_t t1, int c) {
  double bound = 0.0;
  for (const OutlierEntry& e : outliers) {
    if (e.channel == c && e.row >= t0 && e.row < t1) {
      bound += Bf16RoundingOf(p[e.row - t0]) * std::fabs(Fp16ToFp32(e.value));
    }
  }
  return bound;
}

// A GEAR store's outliers of tokens [t0, t1) of `head`; none for other stores.
inline std::vector<OutlierEntry> OutliersOfStore(const ComponentStore& s, int head, int64_t t0,
                                                 int64_t t1) {
  const auto* gear = dynamic_cast<const GearStore*>(&s);
  return gear ? gear->OutliersOf(head, t0, t1) : std::vector<OutlierEntry>{};
}

}  // namespace kvpack

#endif  // KVPACK_TESTS_KV_SPARSE_BOUNDS_H_
