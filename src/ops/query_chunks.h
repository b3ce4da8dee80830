// The register-blocked attention kernels hold the accumulators of M query rows at once, M a
// compile-time constant up to what the target's registers allow; a call with n_q rows runs
// them in chunks. This is that loop, written once.
#ifndef KVPACK_OPS_QUERY_CHUNKS_H_
#define KVPACK_OPS_QUERY_CHUNKS_H_

#include <cstddef>
#include <type_traits>
#include <utility>

namespace kvpack {

// For consecutive chunks [i0, i0 + M) of the query rows [0, n_q), M = kMax except for the
// last chunk: f(std::integral_constant<size_t, M>{}, i0), so f can instantiate its kernel
// template on M.
template <size_t kMax, class F>
inline void ForEachQueryChunk(size_t n_q, F&& f) {
  static_assert(kMax >= 1);
  for (size_t i0 = 0; i0 < n_q; i0 += kMax) {
    const size_t m = n_q - i0 < kMax ? n_q - i0 : kMax;
    [&]<size_t... J>(std::index_sequence<J...>) {
      ((m == J + 1 ? (f(std::integral_constant<size_t, J + 1>{}, i0), 0) : 0), ...);
    }(std::make_index_sequence<kMax>{});
  }
}

}  // namespace kvpack

#endif  // KVPACK_OPS_QUERY_CHUNKS_H_
