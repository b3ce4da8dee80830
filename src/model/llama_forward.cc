#include "model/llama_forward.h"

#include <cmath>

#include "core/step_breakdown.h"
#include "kv/attention.h"
#include "kv/attention_stats.h"
#include "ops/nn.h"

namespace kvpack {
namespace {

void AddBias(const FloatVector& bias, int64_t n, float* y) {
  if (!bias.data) return;
  for (int64_t t = 0; t < n; ++t) AddInPlace(bias.data, y + t * bias.n, bias.n);
}

}  // namespace

Status LlamaForward(const LlamaModel& model, const int32_t* tokens, const int32_t* pos, int64_t n,
                    KvCache& cache, LogitsFor which, float* logits, ForwardScratch& s,
                    ThreadPool* pool) {
  const LlamaConfig& c = model.config();
  const LlamaWeights& w = model.weights();
  if (n <= 0) return InvalidArgument("forward pass needs at least one token");
  for (int64_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= w.token_embd.n_out) {
      return InvalidArgument("token id " + std::to_string(tokens[t]) + " is outside the vocabulary");
    }
  }
  const int64_t E = c.n_embd;
  s.x.resize(n * E);
  s.xn.resize(n * E);
  s.tmp.resize(n * E);
  s.q.resize(n * c.q_dim());
  s.k.resize(n * c.kv_dim());
  s.v.resize(n * c.kv_dim());
  s.att.resize(n * c.q_dim());
  s.gate.resize(n * c.n_ff);
  s.up.resize(n * c.n_ff);

  for (int64_t t = 0; t < n; ++t) DequantizeWeightRow(w.token_embd, tokens[t], &s.x[t * E]);

  RopeParams rope;
  rope.layout = c.rope_layout;
  rope.n_rot = c.n_rot;
  rope.freq_base = c.rope_freq_base;
  rope.freq_factors = w.rope_freqs.data;
  const int64_t n_pairs = c.n_rot / 2;
  s.rope_cos.resize(n * n_pairs);
  s.rope_sin.resize(n * n_pairs);
  for (int64_t t = 0; t < n; ++t) {
    RopeAngles(pos[t], rope, &s.rope_cos[t * n_pairs], &s.rope_sin[t * n_pairs]);
  }
  AttentionChunk chunk;
  chunk.q = s.q.data();
  chunk.k = s.k.data();
  chunk.v = s.v.data();
  chunk.n_rows = n;
  chunk.n_heads = c.n_heads;
  chunk.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Eviction (kv/eviction_policy.h): statistics only when the policy asks for them; a plan
  // is applied per layer right after the chunk's Append, so no layer ever holds more than
  // budget + n tokens per head.
  cache.set_rope(rope);
  if (cache.policy() && !cache.sequence_begun()) {
    KVPACK_RETURN_IF_ERROR(cache.BeginSequence({.n_prompt = n}));
  }
  const PolicyNeeds needs = cache.policy_needs();
  AttentionStats stats;

  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& L = w.layers[l];
    for (int64_t t = 0; t < n; ++t) RmsNorm(&s.x[t * E], L.attn_norm.data, c.rms_eps, E, &s.xn[t * E]);
    {
      const WeightMatrix* const qkv[] = {&L.wq, &L.wk, &L.wv};
      float* const out[] = {s.q.data(), s.k.data(), s.v.data()};
      MatMulShared(qkv, s.xn.data(), n, out, pool);
    }
    AddBias(L.bq, n, s.q.data());
    AddBias(L.bk, n, s.k.data());
    AddBias(L.bv, n, s.v.data());
    if (needs.pre_rope_qkv) {
      cache.ObservePreRope(l, {s.q.data(), s.k.data(), s.v.data(), n, c.n_heads});
    }
    for (int64_t t = 0; t < n; ++t) {
      const float* cos = &s.rope_cos[t * n_pairs];
      const float* sin = &s.rope_sin[t * n_pairs];
      ApplyRopeAngles(&s.q[t * c.q_dim()], c.n_heads, c.head_dim, cos, sin, rope);
      ApplyRopeAngles(&s.k[t * c.kv_dim()], c.n_kv_heads, c.head_dim, cos, sin, rope);
    }
    {
      const StepPartTimer timer(StepPart::kAttention);
      Attend(cache, l, chunk, s.att.data(), pool);
      if (needs.attention) {
        AccumulateAttentionStats(cache, l, chunk, pos, cache.StatsRequest(l, n), &stats, pool);
      }
    }
    {
      const StepPartTimer timer(StepPart::kAppend);
      KVPACK_RETURN_IF_ERROR(cache.Append(l, s.k.data(), s.v.data(), pos, n, pool));
      if (needs.attention) cache.ObserveAttention(l, stats);
      KVPACK_RETURN_IF_ERROR(cache.ApplyPolicy(l));
    }
    MatMul(L.wo, s.att.data(), n, s.tmp.data(), pool);
    AddInPlace(s.tmp.data(), s.x.data(), n * E);

    for (int64_t t = 0; t < n; ++t) RmsNorm(&s.x[t * E], L.ffn_norm.data, c.rms_eps, E, &s.xn[t * E]);
    {
      const WeightMatrix* const gate_up[] = {&L.w_gate, &L.w_up};
      float* const out[] = {s.gate.data(), s.up.data()};
      MatMulShared(gate_up, s.xn.data(), n, out, pool);
    }
    SwiGlu(s.gate.data(), s.up.data(), n * c.n_ff, s.gate.data());
    MatMul(L.w_down, s.gate.data(), n, s.tmp.data(), pool);
    AddInPlace(s.tmp.data(), s.x.data(), n * E);
  }

  const int64_t first = which == LogitsFor::kLastToken ? n - 1 : 0;
  const int64_t n_out = n - first;
  for (int64_t t = first; t < n; ++t) {
    RmsNorm(&s.x[t * E], w.output_norm.data, c.rms_eps, E, &s.xn[(t - first) * E]);
  }
  MatMul(w.output, s.xn.data(), n_out, logits, pool);
  return Status::Ok();
}

}  // namespace kvpack
