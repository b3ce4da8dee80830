#include "eval/streaming_perplexity.h"

#include <algorithm>
#include <cmath>

namespace kvpack {

Result<StreamingResult> RunStreamingPerplexity(Session& session, std::span<const int32_t> tokens,
                                               int32_t bos, const StreamingOptions& options,
                                               const StreamingProgress& progress) {
  const int64_t n = options.n_tokens;
  if (n < 2) return InvalidArgument("a stream needs at least 2 tokens");
  if (options.n_streams < 1 || options.report_every < 1) {
    return InvalidArgument("streams and the report interval must be >= 1");
  }
  if (static_cast<int64_t>(tokens.size()) < n * options.n_streams) {
    return InvalidArgument("the text has " + std::to_string(tokens.size()) +
                           " tokens, fewer than " + std::to_string(options.n_streams) +
                           " streams of " + std::to_string(n));
  }
  const int64_t n_vocab = session.n_vocab();
  const size_t n_logits = static_cast<size_t>(options.n_streams) * (n - 1) * n_vocab;
  if (options.reference_logits && options.reference_logits->size() != n_logits) {
    return InvalidArgument("reference logits do not match the streams and the vocabulary");
  }
  if (options.record_logits) options.record_logits->resize(n_logits);
  std::vector<float> logits(n_vocab);
  std::vector<double> kld_sum(n - 1, 0.0);
  KldAccumulator kld;
  // nll_sum[i]: NLL of the token at i + 1 summed over streams.
  std::vector<double> nll_sum(n - 1, 0.0);
  NllAccumulator total;
  StreamingResult result;
  std::vector<int64_t> marks;
  for (int64_t m = options.report_every; m < n; m += options.report_every) marks.push_back(m);
  if (marks.empty() || marks.back() != n) marks.push_back(n);
  result.curve.resize(marks.size());

  for (int64_t s = 0; s < options.n_streams; ++s) {
    std::vector<int32_t> seg(tokens.begin() + s * n, tokens.begin() + (s + 1) * n);
    if (bos >= 0) seg[0] = bos;
    KVPACK_RETURN_IF_ERROR(session.Reset());
    KVPACK_RETURN_IF_ERROR(
        session.BeginSequence({.n_prompt = 1, .n_generate = n - 1, .budget_base = n}));
    size_t mark = 0;
    for (int64_t i = 0; i + 1 < n; ++i) {
      KVPACK_RETURN_IF_ERROR(
          session.Eval(std::span(seg).subspan(i, 1), LogitsFor::kLastToken, logits.data()));
      const double nll = NegLogLikelihood(logits.data(), n_vocab, seg[i + 1]);
      nll_sum[i] += nll;
      total.Add(nll);
      const size_t at = (static_cast<size_t>(s) * (n - 1) + i) * n_vocab;
      if (options.record_logits) {
        std::copy(logits.begin(), logits.end(), options.record_logits->begin() + at);
      }
      if (options.reference_logits) {
        const float* ref = options.reference_logits->data() + at;
        kld_sum[i] += KlDivergence(ref, logits.data(), n_vocab);
        kld.Add(ref, logits.data(), n_vocab);
      }
      result.peak_kv_bytes = std::max(result.peak_kv_bytes, session.cache().peak_bytes());
      while (mark < marks.size() && i + 1 >= std::min(marks[mark], n - 1)) {
        StreamingPoint& p = result.curve[mark];
        p.n_seen = marks[mark];
        p.n_cached = session.cache().max_tokens();
        p.kv_bytes = session.cache().Memory().payload_bytes();
        ++mark;
      }
      if (progress) progress(s * (n - 1) + i + 1, options.n_streams * (n - 1));
    }
  }
  // PPL up to each mark and over each interval, all streams pooled.
  double cum = 0.0;
  int64_t scored = 0, prev = 0;
  for (StreamingPoint& p : result.curve) {
    const int64_t end = std::min(p.n_seen, n - 1);  // tokens scored per stream by then
    double interval = 0.0, kld_interval = 0.0;
    for (int64_t i = prev; i < end; ++i) {
      interval += nll_sum[i];
      kld_interval += kld_sum[i];
    }
    cum += interval;
    const int64_t n_interval = (end - prev) * options.n_streams;
    scored += n_interval;
    p.ppl = std::exp(cum / static_cast<double>(scored));
    p.ppl_interval = n_interval > 0 ? std::exp(interval / static_cast<double>(n_interval)) : p.ppl;
    p.kld_interval = n_interval > 0 ? kld_interval / static_cast<double>(n_interval) : 0.0;
    prev = end;
  }
  result.total = total.Result();
  result.total.n_windows = options.n_streams;
  if (options.reference_logits) {
    result.has_kld = true;
    result.kld = kld.Summary();
  }
  if (const EvictionPolicy* policy = session.cache().policy())
    result.budget = policy->token_budget();
  return result;
}

}  // namespace kvpack
