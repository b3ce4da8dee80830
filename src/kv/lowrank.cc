#include "kv/lowrank.h"

#include <algorithm>
#include <cmath>

namespace kvpack {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a fixed, portable sequence for a seed.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<double> PowerIterationStart(uint64_t seed, int d, int rank) {
  std::vector<double> b(static_cast<size_t>(d) * rank);
  uint64_t state = seed;
  // 53 random bits -> [0, 1) -> [-1, 1).
  for (double& v : b) v = 2.0 * (static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53) - 1.0;
  return b;
}

void OrthonormalizeColumns(double* m, int64_t rows, int cols) {
  for (int j = 0; j < cols; ++j) {
    double norm0 = 0.0;
    for (int64_t i = 0; i < rows; ++i) norm0 += m[i * cols + j] * m[i * cols + j];
    norm0 = std::sqrt(norm0);
    for (int pass = 0; pass < 2; ++pass) {
      for (int k = 0; k < j; ++k) {
        double dot = 0.0;
        for (int64_t i = 0; i < rows; ++i) dot += m[i * cols + k] * m[i * cols + j];
        for (int64_t i = 0; i < rows; ++i) m[i * cols + j] -= dot * m[i * cols + k];
      }
    }
    double norm = 0.0;
    for (int64_t i = 0; i < rows; ++i) norm += m[i * cols + j] * m[i * cols + j];
    norm = std::sqrt(norm);
    // What is left after removing the earlier directions is rounding noise when it is this
    // small relative to the column (or the column was zero): the column adds no direction.
    const bool dependent = !(norm > 1e-10 * norm0) || norm == 0.0;
    const double inv = dependent ? 0.0 : 1.0 / norm;
    for (int64_t i = 0; i < rows; ++i) m[i * cols + j] *= inv;
  }
}

namespace {

// Factors of rank min(rank, n, d), A zero and B the seeded start (none for rank 0).
LowRankFactors StartFactors(int64_t n, int d, int rank, uint64_t seed) {
  LowRankFactors f;
  f.n = n;
  f.d = d;
  f.rank = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>({rank, n, d})));
  f.a.assign(static_cast<size_t>(n) * f.rank, 0.0);
  f.b = f.rank > 0 ? PowerIterationStart(seed, d, f.rank) : std::vector<double>{};
  return f;
}

}  // namespace

LowRankFactors PowerIterationLowRank(const float* x, int64_t n, int d, int64_t ld, int rank,
                                     int iters, uint64_t seed) {
  LowRankFactors f = StartFactors(n, d, rank, seed);
  const int r = f.rank;
  if (r == 0) return f;
  // X^T [d, n], so that both products run along contiguous rows: A = X B one column of X
  // (a row of X^T) at a time, B = X^T A one row of X at a time, each adding into a
  // rank-major scratch [r, n] or [r, d]. Every element still sums its products in the
  // twin's order (channels ascending for A, tokens ascending for B), so the factors are
  // the twin's bit for bit.
  std::vector<float> xt(static_cast<size_t>(d) * n);
  for (int64_t t = 0; t < n; ++t) {
    for (int c = 0; c < d; ++c) xt[static_cast<size_t>(c) * n + t] = x[t * ld + c];
  }
  std::vector<double> by_rank(static_cast<size_t>(r) * std::max<int64_t>(n, d));
  for (int it = 0; it < std::max(iters, 1); ++it) {
    OrthonormalizeColumns(f.b.data(), d, r);
    // A = X B  [n, r]
    std::fill_n(by_rank.begin(), static_cast<size_t>(r) * n, 0.0);
    for (int c = 0; c < d; ++c) {
      const float* col = &xt[static_cast<size_t>(c) * n];
      for (int k = 0; k < r; ++k) {
        const double b = f.b[static_cast<size_t>(c) * r + k];
        double* a = &by_rank[static_cast<size_t>(k) * n];
        for (int64_t t = 0; t < n; ++t) a[t] += static_cast<double>(col[t]) * b;
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      for (int k = 0; k < r; ++k) f.a[t * r + k] = by_rank[static_cast<size_t>(k) * n + t];
    }
    OrthonormalizeColumns(f.a.data(), n, r);
    // B = X^T A  [d, r]
    std::fill_n(by_rank.begin(), static_cast<size_t>(r) * d, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const float* row = x + t * ld;
      for (int k = 0; k < r; ++k) {
        const double a = f.a[t * r + k];
        double* b = &by_rank[static_cast<size_t>(k) * d];
        for (int c = 0; c < d; ++c) b[c] += static_cast<double>(row[c]) * a;
      }
    }
    for (int c = 0; c < d; ++c) {
      for (int k = 0; k < r; ++k) f.b[static_cast<size_t>(c) * r + k] = by_rank[static_cast<size_t>(k) * d + c];
    }
  }
  return f;
}

LowRankFactors PowerIterationLowRankRef(const float* x, int64_t n, int d, int64_t ld,
                                        int rank, int iters, uint64_t seed) {
  LowRankFactors f = StartFactors(n, d, rank, seed);
  const int r = f.rank;
  if (r == 0) return f;
  for (int it = 0; it < std::max(iters, 1); ++it) {
    OrthonormalizeColumns(f.b.data(), d, r);
    // A = X B  [n, r]
    for (int64_t t = 0; t < n; ++t) {
      const float* row = x + t * ld;
      double* a = &f.a[t * r];
      for (int k = 0; k < r; ++k) a[k] = 0.0;
      for (int c = 0; c < d; ++c) {
        const double v = row[c];
        const double* b = &f.b[static_cast<size_t>(c) * r];
        for (int k = 0; k < r; ++k) a[k] += v * b[k];
      }
    }
    OrthonormalizeColumns(f.a.data(), n, r);
    // B = X^T A  [d, r]
    std::fill(f.b.begin(), f.b.end(), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const float* row = x + t * ld;
      const double* a = &f.a[t * r];
      for (int c = 0; c < d; ++c) {
        const double v = row[c];
        double* b = &f.b[static_cast<size_t>(c) * r];
        for (int k = 0; k < r; ++k) b[k] += v * a[k];
      }
    }
  }
  return f;
}

}  // namespace kvpack
