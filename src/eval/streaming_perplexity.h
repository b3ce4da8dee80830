// Streaming perplexity (docs/evaluation.md; Xiao et al., "Efficient Streaming Language
// Models with Attention Sinks", ICLR 2024, section 4.1): a long text is fed one token at a
// time to a session whose cache a policy bounds, and every next token is scored; the
// result is PPL against the number of tokens seen, so that a method that collapses once its
// first tokens are evicted (window attention) shows where it does.
//
// Protocol: `n_streams` consecutive, non-overlapping segments of `n_tokens` tokens; the
// first token of each is replaced by BOS; each segment is one sequence (Reset) announced as
// a one-token prompt followed by n_tokens - 1 planned decode steps, with fraction budgets
// resolved against n_tokens (SequencePlan.budget_base): `budget=0.25` keeps a quarter of
// the stream. Every token is evaluated alone (decode semantics), the logits at t score token
// t + 1, so n_tokens - 1 tokens are scored per segment. Given the logits of a reference run
// over the same streams (normally the full f32 cache), the KL divergence of every
// next-token distribution and the same-top-1 rate are reported too, since perplexity alone
// hides damage on small models (docs/evaluation.md).
#ifndef KVPACK_EVAL_STREAMING_PERPLEXITY_H_
#define KVPACK_EVAL_STREAMING_PERPLEXITY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/session.h"
#include "eval/kl_divergence.h"
#include "eval/perplexity.h"

namespace kvpack {

struct StreamingOptions {
  int64_t n_tokens = 1024;     // tokens per stream (BOS included)
  int64_t n_streams = 1;       // consecutive segments of the text
  int64_t report_every = 128;  // distance between points of the curve
  // [n_streams, n_tokens - 1, n_vocab]: a reference run's logits (adds KLD), and where to
  // record this run's logits in the same layout (either may be null).
  const std::vector<float>* reference_logits = nullptr;
  std::vector<float>* record_logits = nullptr;
};

struct StreamingPoint {
  int64_t n_seen = 0;         // tokens fed per stream when the point was taken
  double ppl = 0.0;           // over every scored token up to n_seen (all streams)
  double ppl_interval = 0.0;  // over the tokens since the previous point
  double kld_interval = 0.0;  // mean KL divergence over those tokens (with a reference)
  int64_t n_cached = 0;       // tokens the largest (layer, head) held (last stream)
  size_t kv_bytes = 0;        // KV payload at that point (last stream)
};

struct StreamingResult {
  PerplexityResult total;             // every scored token
  bool has_kld = false;
  KldSummary kld;                     // against the reference logits, every scored token
  std::vector<StreamingPoint> curve;  // ascending n_seen; the last point is the stream's end
  int64_t budget = 0;                 // the policy's resolved budget (0: no policy)
  size_t peak_kv_bytes = 0;           // largest payload seen in any stream
};

// Progress: (tokens done, tokens total over all streams).
using StreamingProgress = std::function<void(int64_t, int64_t)>;

// `tokens` is the whole text; it must hold n_tokens * n_streams tokens.
Result<StreamingResult> RunStreamingPerplexity(Session& session, std::span<const int32_t> tokens,
                                               int32_t bos, const StreamingOptions& options,
                                               const StreamingProgress& progress = nullptr);

}  // namespace kvpack

#endif  // KVPACK_EVAL_STREAMING_PERPLEXITY_H_
