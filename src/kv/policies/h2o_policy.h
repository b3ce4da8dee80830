// H2O heavy hitters (METHODS.md 2.3; Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient
// Generative Inference of Large Language Models", NeurIPS 2023): the score of a token is the
// causal attention probability it received, summed over the query rows of every chunk and
// the query heads of its KV-head group (GQA). Keep `recent` (share of the budget, default
// 0.5) newest tokens plus the heaviest older ones.
// Spec `h2o:budget=N|0.F,recent=0.5,positions=original|compact`.
#ifndef KVPACK_KV_POLICIES_H2O_POLICY_H_
#define KVPACK_KV_POLICIES_H2O_POLICY_H_

#include <memory>

#include "kv/eviction_policy.h"

namespace kvpack {

Result<std::unique_ptr<EvictionPolicy>> MakeH2oPolicy(const MethodSpec& spec);

}  // namespace kvpack

#endif  // KVPACK_KV_POLICIES_H2O_POLICY_H_
