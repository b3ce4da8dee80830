// KL divergence and its summary: analytic cases, invariances, exact percentiles.
#include "eval/kl_divergence.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace kvpack {
namespace {

TEST(KlDivergence, IdenticalDistributionsGiveZero) {
  const float a[5] = {0.5f, -2.0f, 3.0f, 0.0f, 1.0f};
  EXPECT_EQ(KlDivergence(a, a, 5), 0.0);
  // Softmax is shift-invariant: a constant offset of the logits changes nothing.
  float b[5];
  for (int i = 0; i < 5; ++i) b[i] = a[i] + 7.0f;
  EXPECT_NEAR(KlDivergence(a, b, 5), 0.0, 1e-12);
}

TEST(KlDivergence, MatchesTheClosedFormForTwoOutcomes) {
  // p = (0.8, 0.2), q = (0.5, 0.5): KL = 0.8 ln 1.6 + 0.2 ln 0.4.
  const float ref[2] = {std::log(0.8f), std::log(0.2f)};
  const float test[2] = {0.0f, 0.0f};
  const double expected = 0.8 * std::log(1.6) + 0.2 * std::log(0.4);
  EXPECT_NEAR(KlDivergence(ref, test, 2), expected, 1e-7);
  // Not symmetric: KL(q || p) = 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2).
  EXPECT_NEAR(KlDivergence(test, ref, 2), 0.5 * std::log(0.625) + 0.5 * std::log(2.5), 1e-7);
}

TEST(KlDivergence, StableForExtremeLogits) {
  const float ref[3] = {1000.0f, 0.0f, -1000.0f};
  const float test[3] = {0.0f, 1000.0f, -1000.0f};
  // p puts all mass on 0, q all on 1: KL = 1000 (the logit gap).
  EXPECT_NEAR(KlDivergence(ref, test, 3), 1000.0, 1e-6);
  EXPECT_TRUE(std::isfinite(KlDivergence(test, ref, 3)));
}

TEST(KldAccumulator, SummaryUsesNearestRankPercentilesAndCountsTopOneAgreement) {
  KldAccumulator acc;
  // 100 positions with KL values k/1000 for k = 0..99 (two outcomes, chosen so that the
  // test distribution puts q on outcome 0), top-1 disagreeing on the last 10.
  std::vector<double> expected;
  for (int k = 0; k < 100; ++k) {
    const float ref[2] = {0.0f, -1.0f};
    // Shift outcome 0 of the test logits by d: KL grows with |d|; top-1 flips for d < -1.
    const float d = k < 90 ? -0.01f * k : -1.5f - 0.01f * k;
    const float test[2] = {d, -1.0f};
    expected.push_back(KlDivergence(ref, test, 2));
    acc.Add(ref, test, 2);
  }
  const KldSummary s = acc.Summary();
  EXPECT_EQ(s.n, 100);
  EXPECT_DOUBLE_EQ(s.same_top1, 0.9);
  double sum = 0.0;
  for (double v : expected) sum += v;
  EXPECT_NEAR(s.mean, sum / 100.0, 1e-12);
  std::sort(expected.begin(), expected.end());
  EXPECT_DOUBLE_EQ(s.median, expected[49]);  // ceil(0.5 * 100) = rank 50
  EXPECT_DOUBLE_EQ(s.p99, expected[98]);     // ceil(0.99 * 100) = rank 99
  EXPECT_DOUBLE_EQ(s.max, expected[99]);
  EXPECT_GT(s.mean_stderr, 0.0);
}

TEST(KldAccumulator, EmptySummaryIsZero) {
  const KldSummary s = KldAccumulator().Summary();
  EXPECT_EQ(s.n, 0);
  EXPECT_EQ(s.mean, 0.0);
}

}  // namespace
}  // namespace kvpack
