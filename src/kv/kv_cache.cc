#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "kv/codec_registry.h"

namespace kvpack {

Result<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheShape& shape, const KvSpec& spec) {
  if (shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    return InvalidArgument("KV cache shape must be positive");
  }
  if (spec.policy) {
    return Unimplemented("KV policy '" + spec.policy->name +
                         "': eviction policies are not available yet");
  }
  std::unique_ptr<KvCache> cache(new KvCache(shape, spec));
  KVPACK_RETURN_IF_ERROR(cache->CreateStores());
  return cache;
}

Result<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheShape& shape,
                                                 std::string_view spec_text) {
  KVPACK_ASSIGN_OR_RETURN(KvSpec spec, ParseKvSpec(spec_text));
  return Create(shape, spec);
}

Status KvCache::CreateStores() {
  layers_.clear();
  layers_.resize(shape_.n_layers);
  for (int l = 0; l < shape_.n_layers; ++l) {
    StoreShape s{l, shape_.n_kv_heads, shape_.head_dim, KvComponent::kKey};
    KVPACK_ASSIGN_OR_RETURN(layers_[l].keys, CreateStore(spec_.keys, s));
    s.component = KvComponent::kValue;
    KVPACK_ASSIGN_OR_RETURN(layers_[l].values, CreateStore(spec_.values, s));
    layers_[l].positions.assign(shape_.n_kv_heads, {});
  }
  return Status::Ok();
}

Status KvCache::Append(int layer, const float* k, const float* v, const int32_t* pos, int64_t n) {
  Layer& L = layers_[layer];
  // Check both inputs before touching either store: a store that already flushed its
  // residual cannot be rolled back exactly, so keys and values must fail together.
  const int64_t n_values = n * shape_.n_kv_heads * shape_.head_dim;
  for (int64_t i = 0; i < n_values; ++i) {
    if (!std::isfinite(k[i]) || !std::isfinite(v[i])) {
      return InvalidArgument(std::string("non-finite value in the ") +
                             (std::isfinite(k[i]) ? "values" : "keys") + " of layer " +
                             std::to_string(layer));
    }
  }
  KVPACK_RETURN_IF_ERROR(L.keys->Append(k, n));
  KVPACK_RETURN_IF_ERROR(L.values->Append(v, n));
  for (int h = 0; h < shape_.n_kv_heads; ++h) L.positions[h].insert(L.positions[h].end(), pos, pos + n);
  UpdatePeak();
  return Status::Ok();
}

int64_t KvCache::max_tokens() const {
  int64_t m = 0;
  for (const Layer& L : layers_) {
    for (const auto& p : L.positions) m = std::max<int64_t>(m, static_cast<int64_t>(p.size()));
  }
  return m;
}

Status KvCache::Retain(int layer, int head, std::span<const int64_t> keep) {
  Layer& L = layers_[layer];
  // Validate once up front so that keys, values and positions stay consistent.
  KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(layer, head)));
  KVPACK_RETURN_IF_ERROR(L.keys->Retain(head, keep));
  KVPACK_RETURN_IF_ERROR(L.values->Retain(head, keep));
  std::vector<int32_t>& p = L.positions[head];
  std::vector<int32_t> kept;
  kept.reserve(keep.size());
  for (int64_t i : keep) kept.push_back(p[i]);
  p.swap(kept);
  return Status::Ok();
}

Status KvCache::Clear() {
  peak_bytes_ = 0;
  return CreateStores();
}

MemoryUsage KvCache::MemoryOf(int layer, KvComponent component) const {
  const Layer& L = layers_[layer];
  return component == KvComponent::kKey ? L.keys->Memory() : L.values->Memory();
}

MemoryUsage KvCache::Memory() const {
  MemoryUsage total;
  for (const Layer& L : layers_) {
    total += L.keys->Memory();
    total += L.values->Memory();
  }
  return total;
}

void KvCache::UpdatePeak() { peak_bytes_ = std::max(peak_bytes_, Memory().payload_bytes()); }

}  // namespace kvpack
