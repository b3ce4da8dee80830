// Low-rank approximation by seeded power (subspace) iteration with QR, GEAR's SVDSolver
// (METHODS.md 1.7 step 3; Kang et al. 2024, Algorithm 2, after Vogels et al., "PowerSGD",
// 2019): for X [n, d] and rank r,
//   B <- random [d, r]; repeat `iters` times { B <- qr(B); A = X B; A <- qr(A); B = X^T A }
// so that X ~ A B^T with A [n, r] orthonormal (A B^T = A A^T X, a projection of X).
//
// Design goals: deterministic (own seeded generator, no std:: distributions, whose output
// is implementation-defined); in double, with no dependency (the matrices are one block of
// one KV head: n tokens x head_dim, r <= 8). The cost is paid once per block at append
// time (bench/gear_breakdown_bench, BM_PowerIteration): a 64 x 64 decode block at rank 2
// takes 61-63 us with the products' inner loops over the rank (the scalar twin, the old
// code) and 17-19 us with them over contiguous tokens or channels; an 8192-token prompt
// block at rank 4, 9.6-9.7 ms against 6.4-6.7 ms.
// Algorithm 2 orthonormalises only in its last iteration; the column spans it produces are
// the same in exact arithmetic whether or not the intermediate B's are orthonormalised, and
// doing it every time keeps the columns from collapsing onto the top singular vector in
// floating point (which happens for larger `iters`).
// Non-goals: exact SVD (tests compare with Eigen's); ranks beyond min(n, d) (clamped).
#ifndef KVPACK_KV_LOWRANK_H_
#define KVPACK_KV_LOWRANK_H_

#include <cstdint>
#include <vector>

namespace kvpack {

struct LowRankFactors {
  int64_t n = 0;          // rows of X
  int d = 0;              // columns of X
  int rank = 0;           // min(requested rank, n, d)
  std::vector<double> a;  // [n, rank] row-major, orthonormal columns (or zero columns)
  std::vector<double> b;  // [d, rank] row-major, b = X^T a
};

// The random start B0 [d, rank] (row-major, entries uniform in [-1, 1)) for `seed`.
std::vector<double> PowerIterationStart(uint64_t seed, int d, int rank);

// x: [n, d] with row stride ld. iters >= 1.
LowRankFactors PowerIterationLowRank(const float* x, int64_t n, int d, int64_t ld, int rank,
                                     int iters, uint64_t seed);
// Its scalar twin (each product element by element, its inner loop over the rank): the
// same sums in the same order, so the same doubles bit for bit (tested).
LowRankFactors PowerIterationLowRankRef(const float* x, int64_t n, int d, int64_t ld,
                                        int rank, int iters, uint64_t seed);

// QR's Q in place: m [rows, cols] row-major gets orthonormal columns spanning the same
// nested subspaces (modified Gram-Schmidt, applied twice: "twice is enough"). A column that
// is (numerically) dependent on the previous ones becomes zero.
void OrthonormalizeColumns(double* m, int64_t rows, int cols);

}  // namespace kvpack

#endif  // KVPACK_KV_LOWRANK_H_
