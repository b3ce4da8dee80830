#include "ops/nn.h"

#include <algorithm>
#include <cmath>

namespace kvpack {

void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void ApplyRope(float* x, int n_heads, int head_dim, int64_t pos, const RopeParams& params) {
  const int n_pairs = params.n_rot / 2;
  for (int i = 0; i < n_pairs; ++i) {
    // theta_i = pos * base^(-2i / n_rot) / freq_factor_i (llama.cpp's ggml_rope_ext).
    double theta = static_cast<double>(pos) *
                   std::pow(static_cast<double>(params.freq_base), -2.0 * i / params.n_rot);
    if (params.freq_factors) theta /= params.freq_factors[i];
    const float c = static_cast<float>(std::cos(theta));
    const float s = static_cast<float>(std::sin(theta));
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + static_cast<int64_t>(h) * head_dim;
      const int a = params.layout == RopeLayout::kAdjacent ? 2 * i : i;
      const int b = params.layout == RopeLayout::kAdjacent ? 2 * i + 1 : i + params.n_rot / 2;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * c - x1 * s;
      head[b] = x0 * s + x1 * c;
    }
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void AddInPlace(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace kvpack
