#include "kv/policies/keyformer_policy.h"

#include <algorithm>
#include <cstdio>

#include "kv/policies/heavy_recent_policy.h"

namespace kvpack {
namespace {

struct KeyformerParams {
  ScoreNoise noise = ScoreNoise::kGumbel;
  double tau_init = 1.0, tau_end = 2.0;
  uint64_t seed = 0;
  int64_t gen = 0;
};

const char* NoiseName(ScoreNoise n) {
  switch (n) {
    case ScoreNoise::kNone:
      return "none";
    case ScoreNoise::kConstant:
      return "constant";
    case ScoreNoise::kGaussian:
      return "gaussian";
    case ScoreNoise::kGumbel:
      return "gumbel";
  }
  return "?";
}

class KeyformerPolicy final : public HeavyRecentPolicy {
 public:
  KeyformerPolicy(Budget budget, double recent, PositionMode positions, KeyformerParams p)
      : HeavyRecentPolicy("keyformer", budget, recent, positions), p_(p) {}

  Status Begin(int n_layers, int n_kv_heads, const SequencePlan& plan) override {
    SequencePlan sp = plan;
    if (sp.n_generate == 0) sp.n_generate = p_.gen;
    return HeavyRecentPolicy::Begin(n_layers, n_kv_heads, sp);
  }

  AttentionStatsRequest StatsRequest(const ChunkContext& ctx) const override {
    AttentionStatsRequest r;
    r.noise = p_.noise;
    r.tau = KeyformerTau(p_.tau_init, p_.tau_end, plan(), ctx);
    // One noise stream per layer: layers draw independent noise from the same seed.
    r.noise_stream = p_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(ctx.layer) + 1;
    return r;
  }

 protected:
  std::string ExtraSpec() const override {
    char buf[160];
    std::snprintf(buf, sizeof(buf), ",noise=%s,tau_init=%g,tau_end=%g,seed=%llu,gen=%lld",
                  NoiseName(p_.noise), p_.tau_init, p_.tau_end,
                  static_cast<unsigned long long>(p_.seed), static_cast<long long>(p_.gen));
    return buf;
  }

 private:
  KeyformerParams p_;
};

}  // namespace

double KeyformerTau(double tau_init, double tau_end, const SequencePlan& plan,
                    const ChunkContext& ctx) {
  if (ctx.n_before < plan.n_prompt || plan.n_generate <= 0) return tau_init;
  const int64_t t = std::min(ctx.n_before - plan.n_prompt + 1, plan.n_generate);
  return tau_init +
         static_cast<double>(t) * (tau_end - tau_init) / static_cast<double>(plan.n_generate);
}

Result<std::unique_ptr<EvictionPolicy>> MakeKeyformerPolicy(const MethodSpec& spec) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(
      spec, {"budget", "recent", "noise", "tau_init", "tau_end", "seed", "gen", "positions"}));
  KVPACK_ASSIGN_OR_RETURN(Budget budget, ParseBudget(spec, "budget", nullptr));
  KVPACK_ASSIGN_OR_RETURN(double recent, ParseShare(spec, "recent", 0.3));
  KVPACK_ASSIGN_OR_RETURN(PositionMode positions, ParsePositionMode(spec));
  KeyformerParams p;
  KVPACK_ASSIGN_OR_RETURN(std::string noise, ParamAsString(spec, "noise", "gumbel"));
  if (noise == "none")
    p.noise = ScoreNoise::kNone;
  else if (noise == "constant")
    p.noise = ScoreNoise::kConstant;
  else if (noise == "gaussian")
    p.noise = ScoreNoise::kGaussian;
  else if (noise == "gumbel")
    p.noise = ScoreNoise::kGumbel;
  else {
    return InvalidArgument("'keyformer': noise=" + noise +
                           " is not one of: none, constant, gaussian, gumbel");
  }
  KVPACK_ASSIGN_OR_RETURN(p.tau_init, ParamAsDouble(spec, "tau_init", 1.0));
  KVPACK_ASSIGN_OR_RETURN(p.tau_end, ParamAsDouble(spec, "tau_end", 2.0));
  if (!(p.tau_init > 0.0) || !(p.tau_end > 0.0)) {
    return InvalidArgument("'keyformer': tau_init and tau_end must be > 0");
  }
  KVPACK_ASSIGN_OR_RETURN(int64_t seed, ParamAsInt(spec, "seed", 0));
  KVPACK_ASSIGN_OR_RETURN(p.gen, ParamAsInt(spec, "gen", 0));
  if (seed < 0 || p.gen < 0) return InvalidArgument("'keyformer': seed and gen must be >= 0");
  p.seed = static_cast<uint64_t>(seed);
  return std::unique_ptr<EvictionPolicy>(new KeyformerPolicy(budget, recent, positions, p));
}

}  // namespace kvpack
