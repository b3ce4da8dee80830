// Next-token distribution divergence against a reference run (METHODS.md 4): the
// Kullback-Leibler divergence KL(P_ref || P_test) per scored position, summarised as llama.cpp's
// `--kl-divergence` does (mean with standard error, percentiles, same-top-1 rate).
//
// Design goals: exact in double; all per-position values are kept so percentiles are exact.
#ifndef KVPACK_EVAL_KL_DIVERGENCE_H_
#define KVPACK_EVAL_KL_DIVERGENCE_H_

#include <cstdint>
#include <vector>

namespace kvpack {

// sum_i p_ref[i] * (log p_ref[i] - log p_test[i]), with p = softmax(logits), in double.
// ref_logits, test_logits: [n_vocab]. Always >= 0 up to rounding (clamped at 0).
double KlDivergence(const float* ref_logits, const float* test_logits, int64_t n_vocab);

struct KldSummary {
  int64_t n = 0;
  double mean = 0.0;
  double mean_stderr = 0.0;  // sqrt(var / (n - 1))
  double median = 0.0;
  double p99 = 0.0;          // 99th percentile (nearest rank)
  double max = 0.0;
  double same_top1 = 0.0;    // share of positions whose argmax agrees with the reference
};

class KldAccumulator {
 public:
  // Adds one position. ref_logits, test_logits: [n_vocab]
  void Add(const float* ref_logits, const float* test_logits, int64_t n_vocab);
  int64_t count() const { return static_cast<int64_t>(values_.size()); }
  KldSummary Summary() const;

 private:
  std::vector<double> values_;
  int64_t same_top1_ = 0;
};

}  // namespace kvpack

#endif  // KVPACK_EVAL_KL_DIVERGENCE_H_
