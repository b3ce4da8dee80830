#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

namespace kvpack {

double NegLogLikelihood(const float* logits, int64_t n_vocab, int32_t target) {
  const float mx = *std::max_element(logits, logits + n_vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  return std::log(sum) - static_cast<double>(logits[target] - mx);
}

PerplexityResult NllAccumulator::Result() const {
  PerplexityResult r;
  r.n_scored = count_;
  r.mean_nll = mean();
  r.ppl = std::exp(r.mean_nll);
  if (count_ > 1) {
    const double var = sum_sq_ / count_ - r.mean_nll * r.mean_nll;
    r.ppl_stderr = var > 0.0 ? r.ppl * std::sqrt(var / (count_ - 1)) : 0.0;
  }
  return r;
}

Result<PerplexityResult> RunPerplexity(Session& session, std::span<const int32_t> tokens,
                                       int32_t bos, const PerplexityOptions& options,
                                       const PerplexityProgress& progress) {
  const int64_t ctx = options.n_ctx;
  if (ctx < 4) return InvalidArgument("perplexity context must be at least 4 tokens");
  if (ctx > session.n_ctx()) {
    return InvalidArgument("perplexity context " + std::to_string(ctx) +
                           " exceeds the session context " + std::to_string(session.n_ctx()));
  }
  int64_t n_windows = static_cast<int64_t>(tokens.size()) / ctx;
  if (options.max_windows > 0) n_windows = std::min(n_windows, options.max_windows);
  if (n_windows == 0) {
    return InvalidArgument("the text has " + std::to_string(tokens.size()) +
                           " tokens, fewer than one window of " + std::to_string(ctx));
  }
  const int64_t n_vocab = session.n_vocab();
  Session* ref = options.reference;
  if (ref != nullptr && (ref->n_vocab() != n_vocab || ctx > ref->n_ctx())) {
    return InvalidArgument("the reference session does not match the evaluated one");
  }
  std::vector<float> logits(ctx * n_vocab);
  std::vector<float> ref_logits(ref != nullptr ? ctx * n_vocab : 0);
  NllAccumulator ref_acc;
  KldAccumulator kld;
  std::vector<int32_t> window(ctx);
  NllAccumulator acc;
  const int64_t first = ctx / 2;
  for (int64_t w = 0; w < n_windows; ++w) {
    std::copy(tokens.begin() + w * ctx, tokens.begin() + (w + 1) * ctx, window.begin());
    if (bos >= 0) window[0] = bos;
    KVPACK_RETURN_IF_ERROR(session.Reset());
    KVPACK_RETURN_IF_ERROR(session.Eval(window, LogitsFor::kEveryToken, logits.data()));
    for (int64_t j = first; j < ctx - 1; ++j) {
      acc.Add(NegLogLikelihood(&logits[j * n_vocab], n_vocab, window[j + 1]));
    }
    if (ref != nullptr) {
      KVPACK_RETURN_IF_ERROR(ref->Reset());
      KVPACK_RETURN_IF_ERROR(ref->Eval(window, LogitsFor::kEveryToken, ref_logits.data()));
      for (int64_t j = first; j < ctx - 1; ++j) {
        ref_acc.Add(NegLogLikelihood(&ref_logits[j * n_vocab], n_vocab, window[j + 1]));
        kld.Add(&ref_logits[j * n_vocab], &logits[j * n_vocab], n_vocab);
      }
    }
    if (progress) progress(w + 1, n_windows, std::exp(acc.mean()));
  }
  PerplexityResult r = acc.Result();
  r.n_windows = n_windows;
  if (ref != nullptr) {
    r.has_kld = true;
    r.kld = kld.Summary();
    r.reference_ppl = ref_acc.Result().ppl;
  }
  return r;
}

}  // namespace kvpack
