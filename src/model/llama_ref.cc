#include "model/llama_ref.h"

#include <algorithm>
#include <cmath>

#include "ops/nn.h"

namespace kvpack {
namespace {

// y[o] = sum_i W[o, i] x[i] in double. y: [n_out]
std::vector<float> MatVecRef(const WeightMatrix& w, const std::vector<float>& x) {
  std::vector<float> y(w.n_out);
  MatMulRef(w, x.data(), 1, y.data());
  return y;
}

void AddBiasRef(const FloatVector& b, std::vector<float>& y) {
  if (b.data) {
    for (int64_t i = 0; i < b.n; ++i) y[i] += b.data[i];
  }
}

}  // namespace

LlamaRef::LlamaRef(const LlamaModel& model)
    : model_(model), k_cache_(model.config().n_layers), v_cache_(model.config().n_layers) {}

std::vector<float> LlamaRef::Step(int32_t token, bool want_logits) {
  const LlamaConfig& c = model_.config();
  const LlamaWeights& w = model_.weights();
  const int E = c.n_embd, D = c.head_dim;
  std::vector<float> x(E), xn(E);
  DequantizeWeightRow(w.token_embd, token, x.data());
  RopeParams rope{c.rope_layout, c.n_rot, c.rope_freq_base, w.rope_freqs.data};
  const int64_t pos = n_past_;

  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& L = w.layers[l];
    RmsNorm(x.data(), L.attn_norm.data, c.rms_eps, E, xn.data());
    std::vector<float> q = MatVecRef(L.wq, xn), k = MatVecRef(L.wk, xn), v = MatVecRef(L.wv, xn);
    AddBiasRef(L.bq, q);
    AddBiasRef(L.bk, k);
    AddBiasRef(L.bv, v);
    ApplyRope(q.data(), c.n_heads, D, pos, rope);
    ApplyRope(k.data(), c.n_kv_heads, D, pos, rope);
    if (observer_) observer_(l, q.data(), k.data(), v.data());
    k_cache_[l].insert(k_cache_[l].end(), k.begin(), k.end());
    v_cache_[l].insert(v_cache_[l].end(), v.begin(), v.end());
    const int64_t n_tok = pos + 1;
    std::vector<float> att(c.q_dim());
    for (int h = 0; h < c.n_heads; ++h) {
      const int g = h / c.n_rep();
      std::vector<double> s(n_tok);
      for (int64_t t = 0; t < n_tok; ++t) {
        double dot = 0.0;
        for (int i = 0; i < D; ++i) dot += static_cast<double>(q[h * D + i]) * k_cache_[l][(t * c.n_kv_heads + g) * D + i];
        s[t] = dot / std::sqrt(static_cast<double>(D));
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int i = 0; i < D; ++i) {
        double acc = 0.0;
        for (int64_t t = 0; t < n_tok; ++t) acc += s[t] * v_cache_[l][(t * c.n_kv_heads + g) * D + i];
        att[h * D + i] = static_cast<float>(acc / sum);
      }
    }
    std::vector<float> o = MatVecRef(L.wo, att);
    for (int i = 0; i < E; ++i) x[i] += o[i];
    RmsNorm(x.data(), L.ffn_norm.data, c.rms_eps, E, xn.data());
    std::vector<float> gate = MatVecRef(L.w_gate, xn), up = MatVecRef(L.w_up, xn);
    for (int i = 0; i < c.n_ff; ++i) gate[i] = static_cast<float>(gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i])))) * up[i];
    std::vector<float> down = MatVecRef(L.w_down, gate);
    for (int i = 0; i < E; ++i) x[i] += down[i];
  }
  ++n_past_;
  if (!want_logits) return {};
  RmsNorm(x.data(), w.output_norm.data, c.rms_eps, E, xn.data());
  return MatVecRef(w.output, xn);
}

}  // namespace kvpack
