// Small neural-network operators of the llama family. They are cheap next to the matrix
// products and the attention, so they are plain loops that the compiler vectorises; they
// double as their own scalar references.
#ifndef KVPACK_OPS_NN_H_
#define KVPACK_OPS_NN_H_

#include <cstdint>

namespace kvpack {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]; x, out, weight: [n]; out may alias x.
void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* out);

// How RoPE pairs channels: kAdjacent rotates (x[2i], x[2i+1]) (llama GGUFs, whose converter
// permutes Q/K); kHalves rotates (x[i], x[i + d/2]) (GPT-NeoX style; llama.cpp uses it for
// qwen2, whose weights are not permuted).
enum class RopeLayout { kAdjacent, kHalves };

struct RopeParams {
  RopeLayout layout = RopeLayout::kAdjacent;
  int n_rot = 0;                         // rotated channels per head (<= head_dim)
  float freq_base = 10000.0f;
  const float* freq_factors = nullptr;   // [n_rot / 2] or null (Llama-3 `rope_freqs`)
};

// Rotates every head of x in place. x: [n_heads, head_dim]; pos: the token's position.
void ApplyRope(float* x, int n_heads, int head_dim, int64_t pos, const RopeParams& params);

// out[i] = silu(gate[i]) * up[i]; out may alias gate.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// In-place softmax over x[n]; returns nothing, x sums to 1 afterwards.
void Softmax(float* x, int64_t n);

// y[i] += x[i]
void AddInPlace(const float* x, float* y, int64_t n);

}  // namespace kvpack

#endif  // KVPACK_OPS_NN_H_
