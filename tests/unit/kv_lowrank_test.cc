// GEAR's power iteration (src/kv/lowrank.h) against Eigen's exact SVD of the same matrix.
//
// Bound used (derived here, the argument of Halko, Martinsson & Tropp 2011 / Gu 2015): after
// `iters` iterations A spans Y = (M M^T)^q M Omega with q = iters - 1 and Omega the random
// start [d, r]. With M = U S V^T, Omega_1 = V_r^T Omega [r, r], Omega_2 = V_rest^T Omega,
// Y Omega_1^-1 S_r^-(2q+1) = U_r + U_rest F, ||F|| <= gamma = C (s_{r+1}/s_r)^(2q+1),
// C = ||Omega_2|| ||Omega_1^-1||. The projector P onto span(Y) maps U_r to
// Q (I + F^T F)^(-1/2), so for j <= r
//   s_j / sqrt(1 + gamma^2) <= s_j(P M) = s_j(A B^T) <= s_j        (P is a projection).
// The tests compute C from the actual seeded start, so the lower side is a real bound.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include <gtest/gtest.h>

#include "kv/lowrank.h"

namespace kvpack {
namespace {

using Eigen::MatrixXd;

MatrixXd RandomOrthonormal(int64_t rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist;
  MatrixXd g(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) g(i, j) = dist(rng);
  }
  Eigen::HouseholderQR<MatrixXd> qr(g);
  return qr.householderQ() * MatrixXd::Identity(rows, cols);
}

// M = U diag(s) V^T, [n, d].
MatrixXd WithSpectrum(int64_t n, int d, const std::vector<double>& s, uint32_t seed) {
  const MatrixXd u = RandomOrthonormal(n, d, seed), v = RandomOrthonormal(d, d, seed + 1);
  MatrixXd sd = MatrixXd::Zero(d, d);
  for (int i = 0; i < d; ++i) sd(i, i) = s[i];
  return u * sd * v.transpose();
}

std::vector<float> ToFloatRows(const MatrixXd& m) {
  std::vector<float> x(m.rows() * m.cols());
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) x[i * m.cols() + j] = static_cast<float>(m(i, j));
  }
  return x;
}

MatrixXd Factor(const std::vector<double>& v, int64_t rows, int cols) {
  MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) m(i, j) = v[i * cols + j];
  }
  return m;
}

struct Case {
  double decay;
  int iters;
};

class PowerIterationVsSvd : public ::testing::TestWithParam<Case> {};

TEST_P(PowerIterationVsSvd, LeadingSingularValuesWithinDerivedBound) {
  const int64_t n = 200;
  const int d = 64, r = 4;
  const uint64_t seed = 12345;
  std::vector<double> s(d);
  for (int i = 0; i < d; ++i) s[i] = 10.0 * std::pow(GetParam().decay, i);
  // The float matrix is what the codec hands over; its exact SVD is the reference.
  const std::vector<float> x = ToFloatRows(WithSpectrum(n, d, s, 7));
  MatrixXd m(n, d);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) m(i, j) = x[i * d + j];
  }
  Eigen::JacobiSVD<MatrixXd> svd(m, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::VectorXd sigma = svd.singularValues();

  const LowRankFactors f = PowerIterationLowRank(x.data(), n, d, d, r, GetParam().iters, seed);
  ASSERT_EQ(f.rank, r);
  const MatrixXd a = Factor(f.a, n, r), b = Factor(f.b, d, r);
  const MatrixXd l = a * b.transpose();
  Eigen::JacobiSVD<MatrixXd> lsvd(l);
  const Eigen::VectorXd got = lsvd.singularValues();

  // C from the actual start and the exact right singular vectors.
  const MatrixXd omega = Factor(PowerIterationStart(seed, d, r), d, r);
  const MatrixXd v = svd.matrixV();
  const MatrixXd o1 = v.leftCols(r).transpose() * omega;
  const MatrixXd o2 = v.rightCols(d - r).transpose() * omega;
  Eigen::JacobiSVD<MatrixXd> s1(o1), s2(o2);
  const double c = s2.singularValues()(0) / s1.singularValues()(r - 1);
  const int q = GetParam().iters - 1;
  const double gamma = c * std::pow(sigma(r) / sigma(r - 1), 2 * q + 1);
  const double shrink = 1.0 / std::sqrt(1.0 + gamma * gamma);
  for (int j = 0; j < r; ++j) {
    // 1e-9 relative: double arithmetic on a 200 x 64 matrix (the float input is the
    // reference matrix itself, so no float rounding enters).
    EXPECT_LE(got(j), sigma(j) * (1 + 1e-9)) << "j=" << j;
    EXPECT_GE(got(j), sigma(j) * shrink * (1 - 1e-9)) << "j=" << j << " C=" << c;
  }
  std::printf("  decay %.2f iters %d: C=%.2f bound factor %.6f, sigma_j(L)/sigma_j:", GetParam().decay,
              GetParam().iters, c, shrink);
  for (int j = 0; j < r; ++j) std::printf(" %.9f", got(j) / sigma(j));
  std::printf("\n");
  // A projection of M: ||M - L||_F^2 = ||M||_F^2 - ||L||_F^2 >= the Eckart-Young tail.
  double tail = 0.0;
  for (int i = r; i < d; ++i) tail += sigma(i) * sigma(i);
  const double err2 = (m - l).squaredNorm();
  EXPECT_NEAR(err2, m.squaredNorm() - l.squaredNorm(), 1e-9 * m.squaredNorm());
  EXPECT_GE(err2, tail * (1 - 1e-9));
}

INSTANTIATE_TEST_SUITE_P(Spectra, PowerIterationVsSvd,
                         ::testing::Values(Case{0.5, 3}, Case{0.8, 3}, Case{0.5, 1},
                                           Case{0.8, 12}, Case{0.5, 20}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "decay" + std::to_string(static_cast<int>(info.param.decay * 10)) +
                                  "_iters" + std::to_string(info.param.iters);
                         });

TEST(PowerIteration, FactorsAreOrthonormalAndProjectTheInput) {
  const int64_t n = 90;
  const int d = 24, r = 5;
  std::vector<double> s(d);
  for (int i = 0; i < d; ++i) s[i] = 1.0 / (1 + i);
  const std::vector<float> x = ToFloatRows(WithSpectrum(n, d, s, 3));
  const LowRankFactors f = PowerIterationLowRank(x.data(), n, d, d, r, 3, 9);
  const MatrixXd a = Factor(f.a, n, r), b = Factor(f.b, d, r);
  EXPECT_LT((a.transpose() * a - MatrixXd::Identity(r, r)).cwiseAbs().maxCoeff(), 1e-12);
  MatrixXd m(n, d);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) m(i, j) = x[i * d + j];
  }
  EXPECT_LT((b - m.transpose() * a).cwiseAbs().maxCoeff(), 1e-12);
}

// The contiguous-loop products equal the scalar twin's bit for bit: every element sums the
// same products in the same order. Shapes with n below and above d, a row stride past d,
// ranks clamped to min(n, d) and zero, and one to four iterations; the data mixes scales so
// that a changed order of additions would show in the low bits.
TEST(PowerIteration, EqualsTheScalarTwinBitForBit) {
  struct Shape {
    int64_t n;
    int d;
    int64_t ld;
    int rank, iters;
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> g;
  for (const Shape& sh : {Shape{64, 64, 64, 2, 3}, Shape{5, 64, 70, 4, 3}, Shape{300, 24, 24, 4, 1},
                          Shape{1, 8, 8, 2, 2}, Shape{129, 128, 131, 8, 4}, Shape{40, 16, 16, 0, 3},
                          Shape{3, 4, 4, 8, 3}}) {
    std::vector<float> x(static_cast<size_t>(sh.n) * sh.ld);
    for (size_t i = 0; i < x.size(); ++i) x[i] = g(rng) * (i % 7 == 0 ? 1000.0f : 1.0f);
    const LowRankFactors fast = PowerIterationLowRank(x.data(), sh.n, sh.d, sh.ld, sh.rank, sh.iters, 5);
    const LowRankFactors ref = PowerIterationLowRankRef(x.data(), sh.n, sh.d, sh.ld, sh.rank, sh.iters, 5);
    ASSERT_EQ(fast.rank, ref.rank);
    ASSERT_EQ(fast.a.size(), ref.a.size());
    ASSERT_EQ(fast.b.size(), ref.b.size());
    if (ref.rank == 0) {  // no factors (and no data to compare: memcmp takes no null)
      EXPECT_TRUE(ref.a.empty() && ref.b.empty() && fast.a.empty() && fast.b.empty());
      continue;
    }
    EXPECT_EQ(0, std::memcmp(fast.a.data(), ref.a.data(), ref.a.size() * sizeof(double)))
        << "n " << sh.n << " d " << sh.d << " rank " << sh.rank;
    EXPECT_EQ(0, std::memcmp(fast.b.data(), ref.b.data(), ref.b.size() * sizeof(double)))
        << "n " << sh.n << " d " << sh.d << " rank " << sh.rank;
    EXPECT_NE(ref.b[0], 0.0);  // the comparison is not of zeros
  }
}

TEST(PowerIteration, DeterministicForASeed) {
  const int64_t n = 50;
  const int d = 16;
  std::vector<double> s(d);
  for (int i = 0; i < d; ++i) s[i] = std::pow(0.7, i);
  const std::vector<float> x = ToFloatRows(WithSpectrum(n, d, s, 5));
  const LowRankFactors a = PowerIterationLowRank(x.data(), n, d, d, 3, 3, 77);
  const LowRankFactors b = PowerIterationLowRank(x.data(), n, d, d, 3, 3, 77);
  const LowRankFactors c = PowerIterationLowRank(x.data(), n, d, d, 3, 3, 78);
  ASSERT_EQ(0, std::memcmp(a.a.data(), b.a.data(), a.a.size() * sizeof(double)));
  ASSERT_EQ(0, std::memcmp(a.b.data(), b.b.data(), a.b.size() * sizeof(double)));
  EXPECT_NE(0, std::memcmp(a.a.data(), c.a.data(), a.a.size() * sizeof(double)));
}

TEST(PowerIteration, RankIsClampedAndLowRankInputIsExact) {
  // n < r: rank n, and the factors reproduce the matrix.
  std::vector<float> x = {1, 2, 3, 4, -1, 0.5f, 2, 2, 0, 1, -3, 1};  // [3, 4]
  LowRankFactors f = PowerIterationLowRank(x.data(), 3, 4, 4, 8, 3, 1);
  ASSERT_EQ(f.rank, 3);
  for (int t = 0; t < 3; ++t) {
    for (int c = 0; c < 4; ++c) {
      double l = 0.0;
      for (int k = 0; k < 3; ++k) l += f.a[t * 3 + k] * f.b[c * 3 + k];
      EXPECT_NEAR(l, x[t * 4 + c], 1e-12);
    }
  }
  // Rank-1 input with r = 4: exact, and the surplus directions are zero columns.
  std::vector<float> r1(20 * 6);
  for (int t = 0; t < 20; ++t) {
    for (int c = 0; c < 6; ++c) r1[t * 6 + c] = static_cast<float>((t - 7) * (c + 1)) * 0.25f;
  }
  f = PowerIterationLowRank(r1.data(), 20, 6, 6, 4, 3, 2);
  ASSERT_EQ(f.rank, 4);
  for (int t = 0; t < 20; ++t) {
    for (int c = 0; c < 6; ++c) {
      double l = 0.0;
      for (int k = 0; k < 4; ++k) l += f.a[t * 4 + k] * f.b[c * 4 + k];
      EXPECT_NEAR(l, r1[t * 6 + c], 1e-12);
    }
  }
  for (int k = 1; k < 4; ++k) {
    double norm = 0.0;
    for (int t = 0; t < 20; ++t) norm += f.a[t * 4 + k] * f.a[t * 4 + k];
    EXPECT_EQ(norm, 0.0) << k;
  }
  // Zero input: zero factors, no NaN.
  std::vector<float> zero(10 * 4, 0.0f);
  f = PowerIterationLowRank(zero.data(), 10, 4, 4, 2, 3, 3);
  for (double v : f.a) EXPECT_EQ(v, 0.0);
  for (double v : f.b) EXPECT_EQ(v, 0.0);
}

TEST(PowerIteration, OrthonormalizeZeroesDependentColumns) {
  // Columns: e1, 2*e1 (dependent), e2 + e1.
  std::vector<double> m = {1, 2, 1, 0, 0, 1, 0, 0, 0};  // [3, 3]
  OrthonormalizeColumns(m.data(), 3, 3);
  EXPECT_DOUBLE_EQ(m[0], 1.0);
  EXPECT_EQ(m[1], 0.0);
  EXPECT_EQ(m[4], 0.0);
  EXPECT_EQ(m[7], 0.0);
  EXPECT_DOUBLE_EQ(m[5], 1.0);  // e2
}

}  // namespace
}  // namespace kvpack
