// Recency policies, which need no statistics at all:
//  - `window` (METHODS.md 2.1): keep the newest `budget` tokens.
//  - `sink` (METHODS.md 2.2; Xiao et al., "Efficient Streaming Language Models with
//    Attention Sinks", ICLR 2024): keep the first `n` tokens (the attention sinks, default
//    4) plus the newest `window` tokens; give either `window` or the total `budget`
//    (= n + window). StreamingLLM's own positions are compact (`positions=compact`).
// Both accept `positions=original|compact`.
#ifndef KVPACK_KV_POLICIES_RECENCY_POLICY_H_
#define KVPACK_KV_POLICIES_RECENCY_POLICY_H_

#include <memory>

#include "kv/eviction_policy.h"

namespace kvpack {

Result<std::unique_ptr<EvictionPolicy>> MakeWindowPolicy(const MethodSpec& spec);
Result<std::unique_ptr<EvictionPolicy>> MakeSinkPolicy(const MethodSpec& spec);

}  // namespace kvpack

#endif  // KVPACK_KV_POLICIES_RECENCY_POLICY_H_
