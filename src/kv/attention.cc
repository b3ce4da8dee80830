#include "kv/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/aligned_buffer.h"
#include "kv/attention_plan.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

// Online-softmax state of n_q query vectors.
struct SoftmaxState {
  std::vector<float> m;    // running max, [n_q]
  std::vector<float> l;    // running sum of exp, [n_q]
  AlignedBuffer<float> acc;  // unnormalised output, [n_q, head_dim] (aligned: see qbuf below)
  void Reset(int n_q, int head_dim) {
    m.assign(n_q, -std::numeric_limits<float>::infinity());
    l.assign(n_q, 0.0f);
    acc.Resize(static_cast<size_t>(n_q) * head_dim);
    acc.Zero();
  }
};

// What Attend keeps between calls on the thread that calls it (its plan, the segments'
// softmax states, the chunk's own rows), so that a decode step's 30 calls reuse their
// capacity: made afresh on every call, they and the per-share buffers below were about 25
// heap allocations a call, 0.5% of a decode step's samples with `malloc` and `free`
// (docs/performance-history.md, session 56). Nothing in it carries over from one call to
// the next but capacity.
struct AttendScratch {
  std::vector<int64_t> n_cached;
  AttentionPlan plan;
  std::vector<SoftmaxState> states;
  std::vector<float> fresh_k, fresh_v;
};

AttendScratch& CallerScratch() {
  thread_local AttendScratch scratch;
  return scratch;
}

// Folds a tile of raw scores s [n_q, n] into the state: rescales, turns s into
// probabilities relative to the new max in place. Masked entries are -inf.
void FoldTile(SoftmaxState& st, float* s, int n_q, int64_t n, int head_dim) {
  for (int i = 0; i < n_q; ++i) {
    float* row = s + i * n;
    const float mx = std::max(st.m[i], MaxF32(row, n));
    if (mx == -std::numeric_limits<float>::infinity()) {
      std::fill(row, row + n, 0.0f);
      continue;
    }
    const float corr = std::exp(st.m[i] - mx);  // exp(-inf) = 0 on the first tile
    const float sum = ExpSubtractSum(row, n, mx);
    st.l[i] = st.l[i] * corr + sum;
    st.m[i] = mx;
    if (corr != 1.0f) {
      float* a = &st.acc[static_cast<size_t>(i) * head_dim];
      for (int c = 0; c < head_dim; ++c) a[c] *= corr;
    }
  }
}

}  // namespace

int64_t AttentionTileTokens(int n_q) {
  constexpr int64_t kTileScores = 3072, kMinTile = 128;
  return std::max<int64_t>(kMinTile, kTileScores / std::max(n_q, 1));
}

void Attend(const KvCache& cache, int layer, const AttentionChunk& chunk, float* out,
            ThreadPool* pool) {
  const int n_kv = cache.shape().n_kv_heads;
  const int d = cache.shape().head_dim;
  const int n_rep = chunk.n_heads / n_kv;
  const ComponentStore& keys = cache.keys(layer);
  const ComponentStore& values = cache.values(layer);

  const int64_t n_row_blocks = (chunk.n_rows + kAttentionRowBlock - 1) / kAttentionRowBlock;
  AttendScratch& scratch = CallerScratch();
  std::vector<int64_t>& n_cached = scratch.n_cached;
  n_cached.resize(n_kv);
  for (int g = 0; g < n_kv; ++g) n_cached[g] = cache.n_tokens(layer, g);
  AttentionPlan& plan = scratch.plan;
  PlanAttention(n_cached, chunk.n_rows, pool->n_threads(),
                [&](int g, int64_t t) { return keys.ReadCost(g, t) + values.ReadCost(g, t); },
                plan);
  const std::vector<AttentionWorkItem>& items = plan.items;
  std::vector<SoftmaxState>& states = scratch.states;
  if (states.size() < items.size()) states.resize(items.size());

  // The chunk's own keys and values, one contiguous block of rows per KV head, so that the
  // fresh part is read with the same tile kernels as a cache: [n_kv, n_rows, d] each.
  const size_t head_block = static_cast<size_t>(chunk.n_rows) * d;
  std::vector<float>& fresh_k = scratch.fresh_k;
  std::vector<float>& fresh_v = scratch.fresh_v;
  fresh_k.resize(n_kv * head_block);
  fresh_v.resize(n_kv * head_block);
  for (int64_t t = 0; t < chunk.n_rows; ++t) {
    for (int g = 0; g < n_kv; ++g) {
      std::copy_n(chunk.k + (t * n_kv + g) * d, d, &fresh_k[g * head_block + t * d]);
      std::copy_n(chunk.v + (t * n_kv + g) * d, d, &fresh_v[g * head_block + t * d]);
    }
  }

  const int64_t n_shares = static_cast<int64_t>(plan.share_first.size()) - 1;
  pool->ParallelFor(n_shares, 1, [&](int64_t share_begin, int64_t share_end, int) {
    // The executing thread's gathered queries and one tile's scores, kept between calls.
    // 64-byte aligned, as the softmax states' outputs: the codecs' kernels read a query row,
    // a tile's probabilities and the output in 64-byte vectors, and from a std::vector (16
    // bytes aligned; 16, 32 or 48 past a line in a decode step, varying by run and thread)
    // each of those loads spanned two cache lines (docs/performance-history.md, session 57).
    thread_local AlignedBuffer<float> qbuf, sbuf;
    const int64_t begin = plan.share_first[share_begin], end = plan.share_first[share_end];
    for (int64_t w = begin; w < end; ++w) {
      const AttentionWorkItem& it = items[w];
      const int64_t n_rows = it.row1 - it.row0;
      const int n_q = static_cast<int>(n_rows) * n_rep;
      // Gather the group's queries, pre-scaled: qbuf[(r * n_rep + j), :] = q[r, g*n_rep+j, :].
      qbuf.Resize(static_cast<size_t>(n_q) * d);
      for (int64_t r = 0; r < n_rows; ++r) {
        for (int j = 0; j < n_rep; ++j) {
          const float* src = chunk.q + ((it.row0 + r) * chunk.n_heads + it.kv_head * n_rep + j) * d;
          float* dst = &qbuf[(r * n_rep + j) * d];
          for (int c = 0; c < d; ++c) dst[c] = src[c] * chunk.scale;
        }
      }
      SoftmaxState& st = states[w];
      st.Reset(n_q, d);
      const int64_t tile = AttentionTileTokens(n_q);
      for (int64_t t0 = it.t0; t0 < it.t1; t0 += tile) {
        const int64_t t1 = std::min(it.t1, t0 + tile), n = t1 - t0;
        sbuf.Resize(static_cast<size_t>(n_q) * n);
        // Each call's first lines are asked for one call ahead (ComponentStore::Prefetch):
        // the tile's values while its keys are scored, the next keys (the next tile, or this
        // thread's next item) while the values are read. A short cache is a call or two per
        // head, and its first lines otherwise came from memory while the call waited
        // (docs/performance-history.md, session 25).
        values.Prefetch(it.kv_head, t0, t1);
        keys.Scores(it.kv_head, qbuf.data(), n_q, t0, t1, sbuf.data());
        FoldTile(st, sbuf.data(), n_q, n, d);
        if (t1 < it.t1) {
          keys.Prefetch(it.kv_head, t1, std::min(it.t1, t1 + tile));
        } else if (w + 1 < end) {
          const AttentionWorkItem& next = items[w + 1];
          keys.Prefetch(next.kv_head, next.t0, std::min(next.t1, next.t0 + tile));
        }
        values.Accumulate(it.kv_head, sbuf.data(), n_q, t0, t1, st.acc.data());
      }
      if (!it.fresh) continue;
      // The chunk's own tokens 0..row1-1, full precision, causal mask: row r's query heads
      // (a GQA group) see the first row0 + r + 1 of them.
      const int64_t n = it.row1;
      const float* kg = &fresh_k[it.kv_head * head_block];
      const float* vg = &fresh_v[it.kv_head * head_block];
      sbuf.Resize(static_cast<size_t>(n_q) * n);
      for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t visible = it.row0 + r + 1;
        float* s_r = &sbuf[r * n_rep * n];
        DotTileF32(kg, visible, d, &qbuf[r * n_rep * d], n_rep, s_r, n);
        for (int j = 0; j < n_rep; ++j) {
          std::fill(s_r + j * n + visible, s_r + (j + 1) * n,
                    -std::numeric_limits<float>::infinity());
        }
      }
      FoldTile(st, sbuf.data(), n_q, n, d);
      for (int64_t r = 0; r < n_rows; ++r) {
        AxpyRowsF32(&sbuf[r * n_rep * n], n_rep, n, vg, it.row0 + r + 1, d,
                    &st.acc[r * n_rep * d]);
      }
    }
  });

  // Merge segments in order and normalise into out[row, head, :].
  size_t w = 0;
  for (int g = 0; g < n_kv; ++g) {
    for (int64_t rb = 0; rb < n_row_blocks; ++rb) {
      const int64_t r0 = rb * kAttentionRowBlock;
      const int64_t r1 = std::min(chunk.n_rows, r0 + kAttentionRowBlock);
      const int n_q = static_cast<int>(r1 - r0) * n_rep;
      SoftmaxState& total = states[w];
      for (int s = 1; s < plan.n_segments[g]; ++s) {
        const SoftmaxState& part = states[w + s];
        for (int qi = 0; qi < n_q; ++qi) {
          const float mx = std::max(total.m[qi], part.m[qi]);
          if (mx == -std::numeric_limits<float>::infinity()) continue;
          const float a = std::exp(total.m[qi] - mx), b = std::exp(part.m[qi] - mx);
          total.l[qi] = total.l[qi] * a + part.l[qi] * b;
          total.m[qi] = mx;
          for (int c = 0; c < d; ++c) {
            total.acc[qi * d + c] = total.acc[qi * d + c] * a + part.acc[qi * d + c] * b;
          }
        }
      }
      for (int qi = 0; qi < n_q; ++qi) {
        const int64_t r = r0 + qi / n_rep;
        const int h = g * n_rep + qi % n_rep;
        const float inv = total.l[qi] > 0.0f ? 1.0f / total.l[qi] : 0.0f;
        float* o = out + (r * chunk.n_heads + h) * d;
        for (int c = 0; c < d; ++c) o[c] = total.acc[qi * d + c] * inv;
      }
      w += plan.n_segments[g];
    }
  }
}

void AttendRef(const KvCache& cache, int layer, const AttentionChunk& chunk, float* out) {
  const int n_kv = cache.shape().n_kv_heads;
  const int d = cache.shape().head_dim;
  const int n_rep = chunk.n_heads / n_kv;
  for (int g = 0; g < n_kv; ++g) {
    const int64_t n_cached = cache.n_tokens(layer, g);
    std::vector<float> kc(n_cached * d), vc(n_cached * d);
    cache.keys(layer).Decode(g, 0, n_cached, kc.data());
    cache.values(layer).Decode(g, 0, n_cached, vc.data());
    for (int64_t r = 0; r < chunk.n_rows; ++r) {
      for (int j = 0; j < n_rep; ++j) {
        const int h = g * n_rep + j;
        const float* q = chunk.q + (r * chunk.n_heads + h) * d;
        const int64_t n = n_cached + r + 1;
        std::vector<double> s(n);
        for (int64_t t = 0; t < n; ++t) {
          const float* k = t < n_cached ? &kc[t * d] : chunk.k + ((t - n_cached) * n_kv + g) * d;
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
          s[t] = dot * chunk.scale;
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0.0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        float* o = out + (r * chunk.n_heads + h) * d;
        for (int c = 0; c < d; ++c) {
          double acc = 0.0;
          for (int64_t t = 0; t < n; ++t) {
            const float* v = t < n_cached ? &vc[t * d] : chunk.v + ((t - n_cached) * n_kv + g) * d;
            acc += s[t] * v[c];
          }
          o[c] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

}  // namespace kvpack
