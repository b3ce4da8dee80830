// Small neural-network operators of the llama family. They are cheap next to the matrix
// products and the attention, so most are plain loops that double as their own scalar
// references. Two were not cheap enough in a decode step (perf, KIVI-2 at depth 8192,
// session 20): SwiGLU's scalar std::exp (1.1%, now ops/vec.h's SwiGluF32, with its twin) and
// RoPE's pow, cos and sin per layer (0.7%, now computed once per token: RopeAngles).
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

// The rotation of one position: cos and sin of each pair's angle; cos, sin: [n_rot / 2].
void RopeAngles(int64_t pos, const RopeParams& params, float* cos, float* sin);
// Rotates every head of x in place by a position's RopeAngles. x: [n_heads, head_dim].
void ApplyRopeAngles(float* x, int n_heads, int head_dim, const float* cos, const float* sin,
                     const RopeParams& params);
// Both in one: rotates every head of x in place. pos: the token's position.
void ApplyRope(float* x, int n_heads, int head_dim, int64_t pos, const RopeParams& params);

// out[i] = silu(gate[i]) * up[i] (SwiGluF32); out may alias gate.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// In-place softmax over x[n]; returns nothing, x sums to 1 afterwards.
void Softmax(float* x, int64_t n);

// y[i] += x[i]
void AddInPlace(const float* x, float* y, int64_t n);

}  // namespace kvpack

#endif  // KVPACK_OPS_NN_H_
