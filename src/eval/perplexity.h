// Perplexity with llama.cpp's `llama-perplexity` protocol (docs/evaluation.md):
// tokenize the whole text once with BOS; non-overlapping windows of n_ctx tokens (a partial
// last window is dropped); the first token of every window is replaced by BOS; within a
// window the logits at positions n_ctx/2 .. n_ctx-2 predict the tokens at n_ctx/2+1 ..
// n_ctx-1. PPL = exp(mean NLL), standard error as llama.cpp reports it.
#ifndef KVPACK_EVAL_PERPLEXITY_H_
#define KVPACK_EVAL_PERPLEXITY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/session.h"
#include "eval/kl_divergence.h"

namespace kvpack {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t max_windows = 0;  // 0: all
  // When set, every window also runs through this session (usually an f32 cache) and the
  // scored positions' next-token distributions are compared with it (KL divergence).
  Session* reference = nullptr;
};

struct PerplexityResult {
  int64_t n_windows = 0;
  int64_t n_scored = 0;       // tokens scored
  double mean_nll = 0.0;
  double ppl = 0.0;
  double ppl_stderr = 0.0;    // ppl * sqrt(var(nll) / (n - 1)), as llama.cpp
  bool has_kld = false;       // options.reference was set
  KldSummary kld;             // KL(P_reference || P_session) over the scored positions
  double reference_ppl = 0.0; // PPL of the reference session on the same positions
};

// Progress callback: (windows done, windows total, PPL so far).
using PerplexityProgress = std::function<void(int64_t, int64_t, double)>;

// `tokens` is the whole text, BOS first. The session's context must hold n_ctx tokens.
Result<PerplexityResult> RunPerplexity(Session& session, std::span<const int32_t> tokens,
                                       int32_t bos, const PerplexityOptions& options,
                                       const PerplexityProgress& progress = nullptr);

// Accumulates NLL values and reports PPL with its standard error.
class NllAccumulator {
 public:
  void Add(double nll) {
    sum_ += nll;
    sum_sq_ += nll * nll;
    ++count_;
  }
  int64_t count() const { return count_; }
  double mean() const { return count_ ? sum_ / count_ : 0.0; }
  PerplexityResult Result() const;

 private:
  double sum_ = 0.0, sum_sq_ = 0.0;
  int64_t count_ = 0;
};

// -log softmax(logits)[target], computed stably in double. logits: [n_vocab]
double NegLogLikelihood(const float* logits, int64_t n_vocab, int32_t target);

}  // namespace kvpack

#endif  // KVPACK_EVAL_PERPLEXITY_H_
