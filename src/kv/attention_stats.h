// The statistics pass of eviction policies (METHODS.md 2.3-2.5): for a chunk of query rows,
// the probabilities of a scoring softmax over (the cache as it stands) + (the chunk's own
// keys, causally), combined over the rows and over the query heads of each KV-head group.
//
// Design goals:
//  - A separate pass, not a side output of Attend: Attend's online softmax never holds a
//    normalised row, and scoring variants (Gumbel noise, temperature) must not touch the
//    attention output (Keyformer uses noise only for scoring). The pass recomputes the
//    logits through the key store's fused Scores, so it works on every codec and costs
//    about one extra Q.K^T over the cache; it runs only for policies whose needs() ask.
//  - Deterministic: noise is a counter-based hash of (stream, query head, query position,
//    key position), so it does not depend on threads, chunking or call order; partial
//    results of row blocks are combined in a fixed order.
//  - A scalar oracle (double precision, decoded cache) for the tests.
// Non-goals: statistics over tokens the chunk cannot see (future tokens, evicted tokens).
#ifndef KVPACK_KV_ATTENTION_STATS_H_
#define KVPACK_KV_ATTENTION_STATS_H_

#include <cstdint>

#include "core/thread_pool.h"
#include "kv/attention.h"
#include "kv/eviction_policy.h"
#include "kv/kv_cache.h"

namespace kvpack {

// Mean and standard deviation of the Gumbel(0, 1) distribution; the constant and Gaussian
// ablations of Keyformer use them (METHODS.md 2.4).
inline constexpr double kGumbelMean = 0.5772156649015329;
inline constexpr double kGumbelStd = 1.2825498301618641;

// out->per_head[g][t] for t < n_tokens(layer, g): the combined score of cached token t;
// for t = n_tokens(layer, g) + i: of the chunk's token i. pos: [chunk.n_rows], the chunk's
// positions (they key the noise). The chunk's q/k are rotated, as for Attend.
void AccumulateAttentionStats(const KvCache& cache, int layer, const AttentionChunk& chunk,
                              const int32_t* pos, const AttentionStatsRequest& request,
                              AttentionStats* out, ThreadPool* pool);

// Scalar oracle: decodes the cache and computes every softmax in double.
void AccumulateAttentionStatsRef(const KvCache& cache, int layer, const AttentionChunk& chunk,
                                 const int32_t* pos, const AttentionStatsRequest& request,
                                 AttentionStats* out);

// The noise z added to the logit of key position k_pos for query head q_head at position
// q_pos: Gumbel(0, 1), N(kGumbelMean, kGumbelStd^2), the constant kGumbelMean, or 0.
double ScoreNoiseSample(ScoreNoise noise, uint64_t stream, int q_head, int64_t q_pos,
                        int64_t k_pos);

}  // namespace kvpack

#endif  // KVPACK_KV_ATTENTION_STATS_H_
