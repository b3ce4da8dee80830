// The codec seam: how one component (keys or values) of one layer's KV cache is stored.
//
// Design goals:
//  - A store owns the real (compressed) representation of every cached token of every KV
//    head of one layer; nothing outside it knows the layout (packed codes, transposed
//    groups, residual buffers, outlier lists, low-rank factors).
//  - Attention never materialises a float copy of the cache: it walks token tiles and asks
//    the store for fused `Scores` (keys) and `Accumulate` (values). Virtual calls happen
//    per layer x head x tile, never per element (docs/design.md).
//  - Tokens are appended after they attended in full precision ("quantize after
//    attention"); a store may keep a full-precision residual internally (KIVI, GEAR).
//  - Eviction is applied by the cache through `Retain`; freed storage is really released.
// Non-goals: thread safety of concurrent Append and attention (the session serialises them;
// concurrent const calls on different heads are safe).
#ifndef KVPACK_KV_COMPONENT_STORE_H_
#define KVPACK_KV_COMPONENT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvpack/status.h"

namespace kvpack {

enum class KvComponent { kKey, kValue };

struct StoreShape {
  int layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  KvComponent component = KvComponent::kKey;
};

// Exact byte accounting of a store; every category counts real allocations' payloads.
struct MemoryUsage {
  size_t code_bytes = 0;      // packed quantization codes (or raw elements for plain codecs)
  size_t scale_bytes = 0;     // scales
  size_t zero_bytes = 0;      // zero points / minima
  size_t residual_bytes = 0;  // full-precision residual tokens
  size_t sparse_bytes = 0;    // outlier values and indices
  size_t factor_bytes = 0;    // low-rank factors
  size_t other_bytes = 0;     // page tables, per-token metadata
  size_t reserved_bytes = 0;  // allocated capacity beyond the payload (growth slack)
  int64_t n_values = 0;       // values represented: tokens x heads x head_dim

  size_t payload_bytes() const {
    return code_bytes + scale_bytes + zero_bytes + residual_bytes + sparse_bytes + factor_bytes +
           other_bytes;
  }
  double bits_per_value() const {
    return n_values ? 8.0 * static_cast<double>(payload_bytes()) / static_cast<double>(n_values)
                    : 0.0;
  }
  MemoryUsage& operator+=(const MemoryUsage& o);
};

// The largest input magnitude that every store accepts: `f16` keeps its values and the
// quantized codecs their scales and minimums in fp16, whose largest finite value this is.
constexpr float kStoreSafeInputMax = 65504.0f;

class ComponentStore {
 public:
  virtual ~ComponentStore() = default;

  // The codec's canonical spec string ("f16", "kivi:bits=2,group=32,residual=128").
  virtual std::string spec() const = 0;

  // Appends n_tokens tokens for every head. rows: [n_tokens, n_kv_heads, head_dim].
  // Fails only on input that CheckInput refuses, with its InvalidArgument, leaving the store
  // unchanged: values its format cannot hold. Non-finite values everywhere; beyond
  // kStoreSafeInputMax in magnitude in stores that keep fp16 values or parameters (`f16`, the
  // quantized codecs); beyond bf16's largest finite value in `bf16`. KvCache relies on
  // this: once both inputs of a layer passed, it may append the keys and the values at
  // once, on two threads.
  virtual Status Append(const float* rows, int64_t n_tokens) = 0;

  // What Append(rows, n_tokens) would refuse, changing nothing: OK, or the InvalidArgument
  // that Append would return (KvCache asks both stores of a layer before it appends to
  // either, so that keys and values fail together).
  virtual Status CheckInput(const float* rows, int64_t n_tokens) const = 0;

  // Tokens currently held for `head` (after eviction heads may differ).
  virtual int64_t n_tokens(int head) const = 0;

  // Keys: scores[i * (t1 - t0) + (t - t0)] = dot(q[i], K[head, t]) for t in [t0, t1).
  //   q: [n_q, head_dim]; scores: [n_q, t1 - t0].
  virtual void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
                      float* scores) const = 0;

  // Values: out[i] += sum_t p[i * (t1 - t0) + (t - t0)] * V[head, t] for t in [t0, t1).
  //   p: [n_q, t1 - t0]; out: [n_q, head_dim].
  virtual void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                          float* out) const = 0;

  // Asks for the first lines of what Scores or Accumulate over [t0, t1) of `head` reads, so
  // that a caller can have them on the way while it works on something else. No effect on
  // any result; stores that do not implement it ignore it.
  virtual void Prefetch(int head, int64_t t0, int64_t t1) const {
    (void)head, (void)t0, (void)t1;
  }

  // The attention's cost model: what a Scores or Accumulate pass over tokens [0, t) of
  // `head` reads, in fp16 rows of head_dim (an f16 token costs 1). A decode step's shares
  // (kv/attention_plan.h) hold equal sums of the keys' and the values' costs. The default, 1
  // a token, makes them shares of equal tokens whenever both stores read every token alike
  // (whatever their bytes a token: a sum of two costs proportional to t is one); stores whose
  // newest tokens stay in full precision behind quantized ones (KIVI, HF) override it. Paired
  // with such a store (`k=kivi:... v=q4_0`), a default store counts as fp16 rows: the cut is
  // off by its bytes' ratio to fp16's.
  virtual double ReadCost(int head, int64_t t) const {
    (void)head;
    return static_cast<double>(t);
  }

  // Reconstruction of tokens [t0, t1) as floats (test oracle, error reports).
  //   out: [t1 - t0, head_dim].
  virtual void Decode(int head, int64_t t0, int64_t t1, float* out) const = 0;

  // Keeps only tokens `keep` (ascending indices into the head's current tokens) of `head`.
  virtual Status Retain(int head, std::span<const int64_t> keep) = 0;

  // True when Retain may be applied to heads independently (false for codecs whose groups
  // span several heads, e.g. KCVT values).
  virtual bool per_head_retain() const { return true; }

  virtual MemoryUsage Memory() const = 0;
};

// InvalidArgument unless `keep` is strictly ascending within [0, n_tokens).
Status CheckRetainIndices(std::span<const int64_t> keep, int64_t n_tokens);

// A store's input gate (CheckInput): OK when every x[0..n) is finite and no larger in
// magnitude than `limit`, else InvalidArgument naming the component and the layer of `shape`
// ("non-finite value in the keys of layer 3", or "value 70000.000000 in the values of layer
// 3 exceeds <range>").
// `range` is a literal: every append passes here, so no string is built unless it fails.
Status CheckStoreInput(const float* x, int64_t n, const StoreShape& shape, float limit,
                       const char* range);

}  // namespace kvpack

#endif  // KVPACK_KV_COMPONENT_STORE_H_
