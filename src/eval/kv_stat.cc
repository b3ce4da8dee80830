#include "eval/kv_stat.h"

#include <algorithm>
#include <cmath>

#include "kv/kv_cache.h"
#include "model/llama_ref.h"

namespace kvpack {
namespace {

// Sums of squared differences and of squared references, to form relative norms.
struct ErrorSum {
  double diff = 0.0, ref = 0.0;
  void Add(double x, double x_hat) {
    diff += (x - x_hat) * (x - x_hat);
    ref += x * x;
  }
  void Add(const ErrorSum& o) {
    diff += o.diff;
    ref += o.ref;
  }
  double Relative() const { return ref > 0.0 ? std::sqrt(diff / ref) : 0.0; }
};

// Attention output of query row q [head_dim] at position t over tokens [0, t] of one KV head.
//   k, v: token-major [n_tokens, n_kv_heads, head_dim]; out: [head_dim].
void AttendOne(const float* q, const float* k, const float* v, int64_t t, int n_kv_heads, int g,
               int head_dim, std::vector<double>& s, std::vector<double>& out) {
  const int64_t row = static_cast<int64_t>(n_kv_heads) * head_dim;
  s.resize(t + 1);
  double mx = -INFINITY;
  for (int64_t j = 0; j <= t; ++j) {
    const float* kj = k + j * row + g * head_dim;
    double dot = 0.0;
    for (int i = 0; i < head_dim; ++i) dot += static_cast<double>(q[i]) * kj[i];
    s[j] = dot / std::sqrt(static_cast<double>(head_dim));
    mx = std::max(mx, s[j]);
  }
  double sum = 0.0;
  for (double& e : s) sum += (e = std::exp(e - mx));
  out.assign(head_dim, 0.0);
  for (int64_t j = 0; j <= t; ++j) {
    const float* vj = v + j * row + g * head_dim;
    for (int i = 0; i < head_dim; ++i) out[i] += s[j] * vj[i];
  }
  for (double& o : out) o /= sum;
}

}  // namespace

Result<CapturedQkv> CaptureQkv(const LlamaModel& model, std::span<const int32_t> tokens) {
  if (tokens.empty()) return InvalidArgument("kvstat needs at least one prompt token");
  const LlamaConfig& c = model.config();
  if (static_cast<int64_t>(tokens.size()) > c.n_ctx_train) {
    return OutOfRange("the prompt has " + std::to_string(tokens.size()) +
                      " tokens, more than the model's context of " + std::to_string(c.n_ctx_train));
  }
  CapturedQkv qkv;
  qkv.n_heads = c.n_heads;
  qkv.n_kv_heads = c.n_kv_heads;
  qkv.head_dim = c.head_dim;
  qkv.n_tokens = static_cast<int64_t>(tokens.size());
  qkv.q.resize(c.n_layers);
  qkv.k.resize(c.n_layers);
  qkv.v.resize(c.n_layers);
  const int q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  LlamaRef ref(model);
  ref.set_qkv_observer([&](int l, const float* q, const float* k, const float* v) {
    qkv.q[l].insert(qkv.q[l].end(), q, q + q_dim);
    qkv.k[l].insert(qkv.k[l].end(), k, k + kv_dim);
    qkv.v[l].insert(qkv.v[l].end(), v, v + kv_dim);
  });
  for (int32_t t : tokens) {
    if (t < 0 || t >= model.weights().output.n_out) {
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary");
    }
    ref.Step(t, /*want_logits=*/false);
  }
  return qkv;
}

Result<KvStat> MeasureKvStat(const CapturedQkv& qkv, const std::string& spec_text,
                             const KvStatOptions& options) {
  KVPACK_ASSIGN_OR_RETURN(KvSpec spec, ParseKvSpec(spec_text));
  if (spec.policy) {
    return InvalidArgument("kvstat measures how a codec reconstructs K and V; '" +
                           spec.policy->name + "' is an eviction policy (drop it from the spec)");
  }
  const int L = qkv.n_layers(), H = qkv.n_kv_heads, D = qkv.head_dim;
  const int n_rep = qkv.n_heads / H;
  const int64_t n = qkv.n_tokens, row = static_cast<int64_t>(H) * D;
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                          KvCache::Create(KvCacheShape{L, H, D}, spec));
  const int64_t chunk = options.n_batch > 0 ? options.n_batch : n;
  std::vector<int32_t> pos;
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t m = std::min(chunk, n - t0);
    pos.resize(m);
    for (int64_t i = 0; i < m; ++i) pos[i] = static_cast<int32_t>(t0 + i);
    for (int l = 0; l < L; ++l) {
      KVPACK_RETURN_IF_ERROR(cache->Append(l, &qkv.k[l][t0 * row], &qkv.v[l][t0 * row], pos.data(), m));
    }
  }
  KvStat stat;
  stat.spec = cache->spec().ToString();
  stat.heads.assign(L, std::vector<HeadError>(H));
  stat.layers.resize(L);
  ErrorSum all_k, all_v, all_a;
  std::vector<float> k_hat(n * row), v_hat(n * row), head(n * D);
  std::vector<double> s, o, o_hat;
  const int64_t q0 = std::max<int64_t>(0, n - std::max<int64_t>(1, options.n_queries));
  for (int l = 0; l < L; ++l) {
    ErrorSum layer_k, layer_v, layer_a;
    for (int g = 0; g < H; ++g) {
      for (int c = 0; c < 2; ++c) {
        (c == 0 ? cache->keys(l) : cache->values(l)).Decode(g, 0, n, head.data());
        std::vector<float>& dst = c == 0 ? k_hat : v_hat;
        for (int64_t t = 0; t < n; ++t) std::copy_n(&head[t * D], D, &dst[t * row + g * D]);
      }
      ErrorSum ek, ev, ea;
      for (int64_t t = 0; t < n; ++t) {
        for (int i = 0; i < D; ++i) {
          ek.Add(qkv.k[l][t * row + g * D + i], k_hat[t * row + g * D + i]);
          ev.Add(qkv.v[l][t * row + g * D + i], v_hat[t * row + g * D + i]);
        }
      }
      for (int64_t t = q0; t < n; ++t) {
        for (int r = 0; r < n_rep; ++r) {
          const float* q = &qkv.q[l][(t * qkv.n_heads + g * n_rep + r) * D];
          AttendOne(q, qkv.k[l].data(), qkv.v[l].data(), t, H, g, D, s, o);
          AttendOne(q, k_hat.data(), v_hat.data(), t, H, g, D, s, o_hat);
          for (int i = 0; i < D; ++i) ea.Add(o[i], o_hat[i]);
        }
      }
      stat.heads[l][g] = {ek.Relative(), ev.Relative(), ea.Relative()};
      layer_k.Add(ek);
      layer_v.Add(ev);
      layer_a.Add(ea);
    }
    stat.layers[l] = {layer_k.Relative(), layer_v.Relative(), layer_a.Relative()};
    all_k.Add(layer_k);
    all_v.Add(layer_v);
    all_a.Add(layer_a);
  }
  stat.total = {all_k.Relative(), all_v.Relative(), all_a.Relative()};
  for (int l = 0; l < L; ++l) {
    stat.keys += cache->MemoryOf(l, KvComponent::kKey);
    stat.values += cache->MemoryOf(l, KvComponent::kValue);
  }
  return stat;
}

}  // namespace kvpack
