// Attention of a chunk of query rows over (the cache as it stands) + (the chunk's own keys
// and values in full precision, causally masked), with an online softmax that walks the
// cache tile by tile through the codecs' fused Scores/Accumulate. The chunk's K/V are
// appended to the cache only afterwards ("quantize after attention").
//
// Design goals: no float copy of the cache; GQA handled by scoring all query heads of a KV
// head group against one pass over its keys; parallel over KV heads, query-row blocks and
// token segments whose partial softmax states are merged (kv/attention_plan.h: a decode
// step's shares of equal tokens per thread).
#ifndef KVPACK_KV_ATTENTION_H_
#define KVPACK_KV_ATTENTION_H_

#include <cstdint>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace kvpack {

struct AttentionChunk {
  const float* q = nullptr;        // [n_rows, n_heads, head_dim], rotated
  const float* k = nullptr;        // [n_rows, n_kv_heads, head_dim], rotated (this chunk)
  const float* v = nullptr;        // [n_rows, n_kv_heads, head_dim]
  int64_t n_rows = 0;
  int n_heads = 0;
  float scale = 1.0f;              // usually 1 / sqrt(head_dim)
};

// out: [n_rows, n_heads, head_dim]. Every cached token of the layer is visible to every row
// (cached tokens precede the chunk); inside the chunk row i sees rows 0..i.
void Attend(const KvCache& cache, int layer, const AttentionChunk& chunk, float* out,
            ThreadPool* pool);

// Cached tokens per Scores/Accumulate call for n_q query rows: as many as keep a tile's
// scores within 3072 floats (12 KiB, L1), at least 128. A decode step's GQA group (3 rows)
// gets 1024-token tiles, which amortise what a codec does once per call (the int8 query,
// per-call scratch): on the SmolLM2-135M shape at depth 8192, 128-token tiles cost the
// 4-bit codecs 5-15% of their decode speed.
int64_t AttentionTileTokens(int n_q);

// Scalar oracle: decodes the cache to floats and runs a plain two-pass softmax in double.
void AttendRef(const KvCache& cache, int layer, const AttentionChunk& chunk, float* out);

}  // namespace kvpack

#endif  // KVPACK_KV_ATTENTION_H_
