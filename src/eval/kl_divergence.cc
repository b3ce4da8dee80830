#include "eval/kl_divergence.h"

#include <algorithm>
#include <cmath>

#include "engine/sampler.h"

namespace kvpack {
namespace {

// log sum_i exp(x_i), stable, in double.
double LogSumExp(const float* x, int64_t n) {
  const double mx = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  return mx + std::log(sum);
}

}  // namespace

double KlDivergence(const float* ref_logits, const float* test_logits, int64_t n_vocab) {
  const double lse_ref = LogSumExp(ref_logits, n_vocab);
  const double lse_test = LogSumExp(test_logits, n_vocab);
  double kl = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const double log_p = static_cast<double>(ref_logits[i]) - lse_ref;
    const double log_q = static_cast<double>(test_logits[i]) - lse_test;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);
}

void KldAccumulator::Add(const float* ref_logits, const float* test_logits, int64_t n_vocab) {
  values_.push_back(KlDivergence(ref_logits, test_logits, n_vocab));
  if (ArgMax(ref_logits, n_vocab) == ArgMax(test_logits, n_vocab)) ++same_top1_;
}

KldSummary KldAccumulator::Summary() const {
  KldSummary s;
  s.n = count();
  if (s.n == 0) return s;
  double sum = 0.0, sum_sq = 0.0;
  for (double v : values_) {
    sum += v;
    sum_sq += v * v;
  }
  s.mean = sum / s.n;
  if (s.n > 1) {
    const double var = std::max(0.0, sum_sq / s.n - s.mean * s.mean);
    s.mean_stderr = std::sqrt(var / (s.n - 1));
  }
  std::vector<double> sorted = values_;
  std::sort(sorted.begin(), sorted.end());
  // Nearest-rank percentile: the smallest value with at least p% of the values at or below.
  auto percentile = [&](double p) {
    const int64_t rank = static_cast<int64_t>(std::ceil(p / 100.0 * s.n));
    return sorted[std::clamp<int64_t>(rank - 1, 0, s.n - 1)];
  };
  s.median = percentile(50.0);
  s.p99 = percentile(99.0);
  s.max = sorted.back();
  s.same_top1 = static_cast<double>(same_top1_) / s.n;
  return s;
}

}  // namespace kvpack
