#include "kv/policies/h2o_policy.h"

#include "kv/policies/heavy_recent_policy.h"

namespace kvpack {
namespace {

class H2oPolicy final : public HeavyRecentPolicy {
 public:
  using HeavyRecentPolicy::HeavyRecentPolicy;
  // The plain softmax, summed: AttentionStatsRequest's defaults.
  AttentionStatsRequest StatsRequest(const ChunkContext& ctx) const override { return {}; }
};

}  // namespace

Result<std::unique_ptr<EvictionPolicy>> MakeH2oPolicy(const MethodSpec& spec) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {"budget", "recent", "positions"}));
  KVPACK_ASSIGN_OR_RETURN(Budget budget, ParseBudget(spec, "budget", nullptr));
  KVPACK_ASSIGN_OR_RETURN(double recent, ParseShare(spec, "recent", 0.5));
  KVPACK_ASSIGN_OR_RETURN(PositionMode positions, ParsePositionMode(spec));
  return std::unique_ptr<EvictionPolicy>(new H2oPolicy("h2o", budget, recent, positions));
}

}  // namespace kvpack
