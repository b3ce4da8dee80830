#include "kv/policy_registry.h"

#include "kv/policies/h2o_policy.h"
#include "kv/policies/keyformer_policy.h"
#include "kv/policies/recency_policy.h"

namespace kvpack {
namespace {

std::vector<PolicyInfo> BuildRegistry() {
  std::vector<PolicyInfo> policies;
  policies.push_back(
      {"window", "keep the newest `budget` tokens", {"budget", "positions"}, MakeWindowPolicy});
  policies.push_back({"sink",
                      "StreamingLLM: the first n tokens (sinks) + the newest window",
                      {"n", "window", "budget", "positions"},
                      MakeSinkPolicy});
  policies.push_back({"h2o",
                      "H2O: heavy hitters by accumulated attention + recent window",
                      {"budget", "recent", "positions"},
                      MakeH2oPolicy});
  policies.push_back(
      {"keyformer",
       "Keyformer: accumulated Gumbel-softmax score + recent window",
       {"budget", "recent", "noise", "tau_init", "tau_end", "seed", "gen", "positions"},
       MakeKeyformerPolicy});
  return policies;
}

}  // namespace

const std::vector<PolicyInfo>& RegisteredPolicies() {
  static const std::vector<PolicyInfo> policies = BuildRegistry();
  return policies;
}

Result<std::unique_ptr<EvictionPolicy>> CreatePolicy(const MethodSpec& spec) {
  std::string names;
  for (const PolicyInfo& info : RegisteredPolicies()) {
    if (info.name == spec.name) return info.create(spec);
    names += (names.empty() ? "" : ", ") + info.name;
  }
  return InvalidArgument("unknown KV policy '" + spec.name + "'; valid policies: " + names);
}

}  // namespace kvpack
