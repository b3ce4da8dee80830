#include "ops/nn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/vec.h"

namespace kvpack {

void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* out) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void RopeAngles(int64_t pos, const RopeParams& params, float* cos, float* sin) {
  for (int i = 0; i < params.n_rot / 2; ++i) {
    // theta_i = pos * base^(-2i / n_rot) / freq_factor_i (llama.cpp's ggml_rope_ext).
    double theta = static_cast<double>(pos) *
                   std::pow(static_cast<double>(params.freq_base), -2.0 * i / params.n_rot);
    if (params.freq_factors) theta /= params.freq_factors[i];
    cos[i] = static_cast<float>(std::cos(theta));
    sin[i] = static_cast<float>(std::sin(theta));
  }
}

void ApplyRopeAngles(float* x, int n_heads, int head_dim, const float* cos, const float* sin,
                     const RopeParams& params) {
  const int n_pairs = params.n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < n_pairs; ++i) {
      const int a = params.layout == RopeLayout::kAdjacent ? 2 * i : i;
      const int b = params.layout == RopeLayout::kAdjacent ? 2 * i + 1 : i + n_pairs;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * cos[i] - x1 * sin[i];
      head[b] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

void ApplyRope(float* x, int n_heads, int head_dim, int64_t pos, const RopeParams& params) {
  // Angles on the stack for heads up to 512 rotated channels (callers rotate one token at a
  // time: the reference model, eviction's position shifts).
  constexpr int kStackPairs = 256;
  const int n_pairs = params.n_rot / 2;
  // Zeroed (2 KiB, next to the trigonometry) because GCC cannot see that RopeAngles writes
  // every entry ApplyRopeAngles reads and warned of a read of uninitialized memory.
  float stack[2 * kStackPairs] = {};
  std::vector<float> heap;
  float* angles = stack;
  if (n_pairs > kStackPairs) {
    heap.resize(2 * static_cast<size_t>(n_pairs));
    angles = heap.data();
  }
  RopeAngles(pos, params, angles, angles + n_pairs);
  ApplyRopeAngles(x, n_heads, head_dim, angles, angles + n_pairs, params);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  SwiGluF32(gate, up, static_cast<size_t>(n), out);
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
