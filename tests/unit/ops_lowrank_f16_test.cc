// The fused low-rank kernels (ops/lowrank_f16.h) against their double-precision twins, over
// ranks, block lengths (SIMD bodies and scalar tails), strides and query counts. Bound: a
// float sum of m products has |error| <= m * u * sum |products| (u = 2^-24); the fast path
// sums d (or n) products per projection and rank + 1 terms per output, so
//   |fast - ref| <= (max(d, n) + rank + 2) * u * M,
// with M the same expression evaluated on absolute values (computed here in double), on every
// SIMD target compiled in (their reductions differ), and likewise for runs of blocks.
#include "ops/lowrank_f16.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include "core/half.h"

namespace kvpack {
namespace {

constexpr double kU = 1.0 / (1 << 24);

std::vector<uint16_t> RandomF16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = Fp32ToFp16(g(rng));
  return v;
}

std::vector<float> RandomF32(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

struct Shape {
  size_t rank, d, n, n_q;
};

const Shape kShapes[] = {{1, 64, 64, 3},  {2, 64, 20, 1},   {4, 64, 37, 5}, {3, 8, 5, 2},
                         {0, 64, 64, 3},  {64, 72, 130, 2}, {2, 128, 1, 4}, {5, 64, 64, 4},
                         {2, 64, 128, 3}, {7, 16, 48, 4}};

TEST(LowRankF16, ScoresMatchTheTwinWithinTheFloatBoundOnEveryTarget) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(3);
    for (const Shape& s : kShapes) {
      const size_t a_stride = s.n + 5, ld = s.n + 2;
      const auto a = RandomF16(std::max<size_t>(s.rank, 1) * a_stride, rng);
      const auto b = RandomF16(std::max<size_t>(s.rank, 1) * s.d, rng);
      const auto q = RandomF32(s.n_q * s.d, rng);
      const auto init = RandomF32(s.n_q * ld, rng);
      std::vector<float> fast = init, ref = init;
      LowRankAddScoresF16(a.data(), a_stride, b.data(), s.rank, s.d, s.n, q.data(), s.n_q,
                          fast.data(), ld);
      LowRankAddScoresF16Ref(a.data(), a_stride, b.data(), s.rank, s.d, s.n, q.data(), s.n_q,
                             ref.data(), ld);
      for (size_t i = 0; i < s.n_q; ++i) {
        for (size_t j = 0; j < ld; ++j) {
          const size_t x = i * ld + j;
          if (j >= s.n) {
            ASSERT_EQ(fast[x], init[x]) << "column " << j << " is outside the block";
            continue;
          }
          double mass = std::fabs(init[x]);
          for (size_t k = 0; k < s.rank; ++k) {
            double qb = 0.0;
            for (size_t c = 0; c < s.d; ++c)
              qb += std::fabs(q[i * s.d + c] * Fp16ToFp32(b[k * s.d + c]));
            mass += qb * std::fabs(Fp16ToFp32(a[k * a_stride + j]));
          }
          const double bound = (std::max(s.d, s.n) + s.rank + 2) * kU * mass;
          ASSERT_LE(std::fabs(fast[x] - ref[x]), bound)
              << hwy::TargetName(target) << " rank " << s.rank << " d " << s.d << " n " << s.n
              << " row " << i << " col " << j;
        }
      }
      // The twin itself moved the scores when there is a rank: the comparison is not vacuous.
      if (s.rank > 0) {
        EXPECT_NE(ref, init);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(LowRankF16, AccumulateMatchesTheTwinWithinTheFloatBoundOnEveryTarget) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(4);
    for (const Shape& s : kShapes) {
      const size_t a_stride = s.n + 3, ld = s.n + 1;
      const auto a = RandomF16(std::max<size_t>(s.rank, 1) * a_stride, rng);
      const auto b = RandomF16(std::max<size_t>(s.rank, 1) * s.d, rng);
      const auto p = RandomF32(s.n_q * ld, rng);
      const auto init = RandomF32(s.n_q * s.d, rng);
      std::vector<float> fast = init, ref = init;
      LowRankAddAccumulateF16(a.data(), a_stride, b.data(), s.rank, s.d, s.n, p.data(), s.n_q, ld,
                              fast.data());
      LowRankAddAccumulateF16Ref(a.data(), a_stride, b.data(), s.rank, s.d, s.n, p.data(), s.n_q,
                                 ld, ref.data());
      for (size_t i = 0; i < s.n_q; ++i) {
        for (size_t c = 0; c < s.d; ++c) {
          const size_t x = i * s.d + c;
          double mass = std::fabs(init[x]);
          for (size_t k = 0; k < s.rank; ++k) {
            double pa = 0.0;
            for (size_t j = 0; j < s.n; ++j)
              pa += std::fabs(p[i * ld + j] * Fp16ToFp32(a[k * a_stride + j]));
            mass += pa * std::fabs(Fp16ToFp32(b[k * s.d + c]));
          }
          const double bound = (std::max(s.d, s.n) + s.rank + 2) * kU * mass;
          ASSERT_LE(std::fabs(fast[x] - ref[x]), bound)
              << hwy::TargetName(target) << " rank " << s.rank << " d " << s.d << " n " << s.n
              << " row " << i << " ch " << c;
        }
      }
      if (s.rank > 0) {
        EXPECT_NE(ref, init);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Runs of blocks (LowRankRunAdd*): the AVX-512 run kernels' shapes (rank 1..4, d and n
// multiples of 16; group tails of 1..3 blocks; query passes of 4 + 1; runs longer than the
// values pass's 16 groups, with 64-channel windows and tails of 16, 32 and 48 channels) and
// shapes that fall back to the per-block kernels (n 20, rank 5, rank 0). Per column, the scores bound is the
// per-block one; an output channel of Accumulate adds n_blocks * rank products, each with a
// projection of n terms, so its bound is (max(d, n) + n_blocks * rank + 2) u M.
struct RunShape {
  size_t n_blocks, n, rank, d, n_q;
};

const RunShape kRunShapes[] = {{5, 64, 2, 64, 3}, {3, 64, 4, 64, 4}, {7, 16, 1, 64, 5},
                               {2, 64, 3, 128, 2}, {1, 64, 2, 64, 3}, {4, 32, 4, 128, 1},
                               {9, 64, 1, 64, 2},  {3, 20, 2, 64, 3}, {2, 64, 5, 64, 3},
                               {2, 64, 0, 64, 3},  {37, 16, 2, 64, 3}, {34, 16, 3, 80, 3},
                               {70, 16, 1, 176, 4}, {33, 32, 4, 96, 2}};

TEST(LowRankF16, RunScoresMatchTheTwinWithinTheFloatBoundOnEveryTarget) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(5);
    for (const RunShape& s : kRunShapes) {
      const size_t cols = s.n_blocks * s.n, ld = cols + 3;
      const auto a = RandomF16(std::max<size_t>(s.n_blocks * s.rank * s.n, 1), rng);
      const auto b = RandomF16(std::max<size_t>(s.n_blocks * s.rank * s.d, 1), rng);
      const auto q = RandomF32(s.n_q * s.d, rng);
      const auto init = RandomF32(s.n_q * ld, rng);
      std::vector<float> fast = init, ref = init;
      LowRankRunAddScoresF16(a.data(), b.data(), s.n_blocks, s.n, s.rank, s.d, q.data(), s.n_q,
                             fast.data(), ld);
      LowRankRunAddScoresF16Ref(a.data(), b.data(), s.n_blocks, s.n, s.rank, s.d, q.data(),
                                s.n_q, ref.data(), ld);
      for (size_t i = 0; i < s.n_q; ++i) {
        for (size_t col = 0; col < ld; ++col) {
          const size_t x = i * ld + col;
          if (col >= cols) {
            ASSERT_EQ(fast[x], init[x]) << "column " << col << " is outside the run";
            continue;
          }
          const size_t j = col / s.n, t = col % s.n;
          const uint16_t* aj = a.data() + j * s.rank * s.n;
          const uint16_t* bj = b.data() + j * s.rank * s.d;
          double mass = std::fabs(init[x]);
          for (size_t k = 0; k < s.rank; ++k) {
            double qb = 0.0;
            for (size_t c = 0; c < s.d; ++c)
              qb += std::fabs(q[i * s.d + c] * Fp16ToFp32(bj[k * s.d + c]));
            mass += qb * std::fabs(Fp16ToFp32(aj[k * s.n + t]));
          }
          const double bound = (std::max(s.d, s.n) + s.rank + 2) * kU * mass;
          ASSERT_LE(std::fabs(fast[x] - ref[x]), bound)
              << hwy::TargetName(target) << " blocks " << s.n_blocks << " rank " << s.rank
              << " d " << s.d << " n " << s.n << " row " << i << " col " << col;
        }
      }
      if (s.rank > 0) {
        EXPECT_NE(ref, init);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(LowRankF16, RunAccumulateMatchesTheTwinWithinTheFloatBoundOnEveryTarget) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(6);
    for (const RunShape& s : kRunShapes) {
      const size_t cols = s.n_blocks * s.n, ld = cols + 5;
      const auto a = RandomF16(std::max<size_t>(s.n_blocks * s.rank * s.n, 1), rng);
      const auto b = RandomF16(std::max<size_t>(s.n_blocks * s.rank * s.d, 1), rng);
      const auto p = RandomF32(s.n_q * ld, rng);
      const auto init = RandomF32(s.n_q * s.d, rng);
      std::vector<float> fast = init, ref = init;
      LowRankRunAddAccumulateF16(a.data(), b.data(), s.n_blocks, s.n, s.rank, s.d, p.data(),
                                 s.n_q, ld, fast.data());
      LowRankRunAddAccumulateF16Ref(a.data(), b.data(), s.n_blocks, s.n, s.rank, s.d, p.data(),
                                    s.n_q, ld, ref.data());
      for (size_t i = 0; i < s.n_q; ++i) {
        for (size_t c = 0; c < s.d; ++c) {
          const size_t x = i * s.d + c;
          double mass = std::fabs(init[x]);
          for (size_t j = 0; j < s.n_blocks; ++j) {
            const uint16_t* aj = a.data() + j * s.rank * s.n;
            const uint16_t* bj = b.data() + j * s.rank * s.d;
            for (size_t k = 0; k < s.rank; ++k) {
              double pa = 0.0;
              for (size_t t = 0; t < s.n; ++t)
                pa += std::fabs(p[i * ld + j * s.n + t] * Fp16ToFp32(aj[k * s.n + t]));
              mass += pa * std::fabs(Fp16ToFp32(bj[k * s.d + c]));
            }
          }
          const double bound = (std::max(s.d, s.n) + s.n_blocks * s.rank + 2) * kU * mass;
          ASSERT_LE(std::fabs(fast[x] - ref[x]), bound)
              << hwy::TargetName(target) << " blocks " << s.n_blocks << " rank " << s.rank
              << " d " << s.d << " n " << s.n << " row " << i << " ch " << c;
        }
      }
      if (s.rank > 0) {
        EXPECT_NE(ref, init);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace kvpack
