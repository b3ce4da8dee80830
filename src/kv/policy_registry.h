// Registry of eviction policies by spec name, mirroring codec_registry.h. Adding a policy =
// one file in policies/ + one line in policy_registry.cc; the eviction tests iterate over
// `RegisteredPolicies()`.
#ifndef KVPACK_KV_POLICY_REGISTRY_H_
#define KVPACK_KV_POLICY_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/eviction_policy.h"
#include "kv/spec.h"

namespace kvpack {

struct PolicyInfo {
  std::string name;
  std::string summary;
  std::vector<std::string> params;  // accepted parameter names
  // Creates the policy; validates the spec's parameters.
  std::function<Result<std::unique_ptr<EvictionPolicy>>(const MethodSpec&)> create;
};

const std::vector<PolicyInfo>& RegisteredPolicies();

// Looks the name up and creates the policy; an unknown name lists the valid ones.
Result<std::unique_ptr<EvictionPolicy>> CreatePolicy(const MethodSpec& spec);

}  // namespace kvpack

#endif  // KVPACK_KV_POLICY_REGISTRY_H_
