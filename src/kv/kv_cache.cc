#include "kv/kv_cache.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "kv/codec_registry.h"
#include "kv/eviction_policy_positions.h"
#include "kv/policy_registry.h"
#include "ops/vec.h"

namespace kvpack {

Result<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheShape& shape, const KvSpec& spec) {
  if (shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0) {
    return InvalidArgument("KV cache shape must be positive");
  }
  std::unique_ptr<KvCache> cache(new KvCache(shape, spec));
  KVPACK_RETURN_IF_ERROR(cache->CreateStores());
  if (spec.policy) {
    KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy, CreatePolicy(*spec.policy));
    KVPACK_RETURN_IF_ERROR(cache->SetPolicy(std::move(policy)));
    // The canonical spec names every parameter of the policy, as it does for codecs.
    KVPACK_ASSIGN_OR_RETURN(cache->spec_.policy, ParseMethodSpec(cache->policy_->spec()));
  }
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
  n_seen_.assign(shape_.n_layers, 0);
  last_rows_.assign(shape_.n_layers, 0);
  unobserved_.assign(shape_.n_layers, false);
  sequence_begun_ = false;
  layer_payload_.assign(shape_.n_layers, 0);
  payload_ = 0;
  for (int l = 0; l < shape_.n_layers; ++l) RefreshPayload(l);
  return Status::Ok();
}

Status KvCache::Append(int layer, const float* k, const float* v, const int32_t* pos, int64_t n,
                       ThreadPool* pool) {
  Layer& L = layers_[layer];
  // Check both inputs before touching either store: a store that already flushed its
  // residual cannot be rolled back exactly, so keys and values must fail together. Every
  // store takes finite values within kStoreSafeInputMax (one vector pass each); other input
  // goes by each store's own rule (ComponentStore::CheckInput).
  const int64_t n_values = n * shape_.n_kv_heads * shape_.head_dim;
  const bool in_safe_range = !AnyAbsAbove(k, n_values, kStoreSafeInputMax) &&
                             !AnyAbsAbove(v, n_values, kStoreSafeInputMax);
  if (!in_safe_range) {
    KVPACK_RETURN_IF_ERROR(L.keys->CheckInput(k, n));
    KVPACK_RETURN_IF_ERROR(L.values->CheckInput(v, n));
  }
  if (policy_ && !sequence_begun_) KVPACK_RETURN_IF_ERROR(BeginSequence({.n_prompt = n}));
  if (pool != nullptr && pool->n_threads() > 1) {
    // Neither store can fail on checked input (ComponentStore::Append), so the two appends
    // run at once, on two threads: a decode step's appends then cost about the longer of
    // the two, not their sum (docs/performance-history.md, session 55). The statuses are
    // still checked.
    Status status[2];
    pool->ParallelFor(2, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t part = begin; part < end; ++part) {
        status[part] = part == 0 ? L.keys->Append(k, n) : L.values->Append(v, n);
      }
    });
    KVPACK_RETURN_IF_ERROR(status[0]);
    KVPACK_RETURN_IF_ERROR(status[1]);
  } else {
    KVPACK_RETURN_IF_ERROR(L.keys->Append(k, n));
    KVPACK_RETURN_IF_ERROR(L.values->Append(v, n));
  }
  for (int h = 0; h < shape_.n_kv_heads; ++h) L.positions[h].insert(L.positions[h].end(), pos, pos + n);
  n_seen_[layer] += n;
  last_rows_[layer] = n;
  if (policy_needs().attention) unobserved_[layer] = true;
  RefreshPayload(layer);
  peak_bytes_ = std::max(peak_bytes_, payload_);
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
  Status st = L.keys->Retain(head, keep);
  if (st.ok()) st = L.values->Retain(head, keep);
  RefreshPayload(layer);
  KVPACK_RETURN_IF_ERROR(st);
  std::vector<int32_t>& p = L.positions[head];
  std::vector<int32_t> kept;
  kept.reserve(keep.size());
  for (int64_t i : keep) kept.push_back(p[i]);
  p.swap(kept);
  if (policy_) policy_->OnRetain(layer, head, keep);
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

Status KvCache::SetPolicy(std::unique_ptr<EvictionPolicy> policy) {
  if (max_tokens() != 0) return InvalidArgument("a policy can only be set on an empty KV cache");
  if (policy && policy->positions() == PositionMode::kCompact) {
    KVPACK_RETURN_IF_ERROR(CheckCompactPositionsCodec(spec_.keys, policy->spec()));
  }
  policy_ = std::move(policy);
  sequence_begun_ = false;
  return Status::Ok();
}

Status KvCache::BeginSequence(const SequencePlan& plan) {
  if (max_tokens() != 0) {
    return InvalidArgument("a sequence can only begin on an empty KV cache (Clear it first)");
  }
  if (plan.n_prompt < 0 || plan.n_generate < 0 || plan.budget_base < 0) {
    return InvalidArgument("sequence plan lengths must be >= 0");
  }
  if (policy_) KVPACK_RETURN_IF_ERROR(policy_->Begin(shape_.n_layers, shape_.n_kv_heads, plan));
  n_seen_.assign(shape_.n_layers, 0);
  last_rows_.assign(shape_.n_layers, 0);
  sequence_begun_ = true;
  return Status::Ok();
}

int64_t KvCache::NextPosition(int64_t n_past) const {
  return position_mode() == PositionMode::kCompact ? n_tokens(0, 0) : n_past;
}

ChunkContext KvCache::PendingChunk(int layer, int64_t n_rows) const {
  return {layer, n_seen_[layer], n_rows};
}

ChunkContext KvCache::LastChunk(int layer) const {
  return {layer, n_seen_[layer] - last_rows_[layer], last_rows_[layer]};
}

AttentionStatsRequest KvCache::StatsRequest(int layer, int64_t n_rows) const {
  return policy_ ? policy_->StatsRequest(PendingChunk(layer, n_rows)) : AttentionStatsRequest{};
}

void KvCache::ObservePreRope(int layer, const PreRopeChunk& chunk) {
  if (policy_) policy_->ObservePreRope(PendingChunk(layer, chunk.n_rows), chunk);
}

void KvCache::ObserveAttention(int layer, const AttentionStats& stats) {
  if (!policy_) return;
  const ChunkContext ctx = LastChunk(layer);
  for (int h = 0; h < shape_.n_kv_heads; ++h) policy_->ObserveAttention(ctx, h, stats.per_head[h]);
  unobserved_[layer] = false;
}

Status KvCache::ApplyPolicy(int layer) {
  if (!policy_) return Status::Ok();
  if (unobserved_[layer]) {
    return InvalidArgument("policy '" + policy_->spec() + "' needs the attention statistics of "
                           "every chunk appended to layer " + std::to_string(layer) +
                           " (append through the forward pass, or call ObserveAttention)");
  }
  const ChunkContext ctx = LastChunk(layer);
  std::vector<int64_t> keep;
  bool evicted = false;
  for (int h = 0; h < shape_.n_kv_heads; ++h) {
    if (!policy_->Plan(ctx, h, positions(layer, h), &keep)) continue;
    if (static_cast<int64_t>(keep.size()) > policy_->token_budget()) {
      return Internal("policy '" + policy_->spec() + "' planned " + std::to_string(keep.size()) +
                      " tokens, over its budget of " + std::to_string(policy_->token_budget()));
    }
    KVPACK_RETURN_IF_ERROR(Retain(layer, h, keep));
    evicted = true;
  }
  if (evicted && position_mode() == PositionMode::kCompact) {
    KVPACK_RETURN_IF_ERROR(ShiftToCompactPositions(layer));
  }
  return Status::Ok();
}

Status KvCache::ShiftToCompactPositions(int layer) {
  Layer& L = layers_[layer];
  if (PositionsAreCompact(L.positions)) return Status::Ok();
  if (!has_rope_) return Internal("positions=compact needs the RoPE parameters (set_rope)");
  const StoreShape shape{layer, shape_.n_kv_heads, shape_.head_dim, KvComponent::kKey};
  KVPACK_ASSIGN_OR_RETURN(
      L.keys, RotateKeysToCompactPositions(*L.keys, spec_.keys, shape, L.positions, rope_));
  for (auto& p : L.positions) {
    for (size_t t = 0; t < p.size(); ++t) p[t] = static_cast<int32_t>(t);
  }
  RefreshPayload(layer);
  return Status::Ok();
}

void KvCache::RefreshPayload(int layer) {
  const Layer& L = layers_[layer];
  MemoryUsage m = L.keys->Memory();
  m += L.values->Memory();
  payload_ = payload_ - layer_payload_[layer] + m.payload_bytes();
  layer_payload_[layer] = m.payload_bytes();
}

}  // namespace kvpack
