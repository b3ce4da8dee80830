#include "kv/policies/recency_policy.h"

namespace kvpack {
namespace {

// Keeps storage indices [0, n_sink) and the newest `window`; sinks are the sequence's first
// tokens because they are never evicted and storage order is append order.
class RecencyPolicy final : public EvictionPolicy {
 public:
  RecencyPolicy(std::string name, int64_t n_sink, Budget window, PositionMode positions,
                bool window_is_total)
      : name_(std::move(name)),
        n_sink_(n_sink),
        window_(window),
        positions_(positions),
        window_is_total_(window_is_total) {}

  std::string spec() const override {
    std::string s = name_ + ":";
    if (name_ == "sink") s += "n=" + std::to_string(n_sink_) + ",";
    s += (window_is_total_ ? "budget=" : "window=") + window_.ToString();
    return s + ",positions=" + (positions_ == PositionMode::kCompact ? "compact" : "original");
  }
  PolicyNeeds needs() const override { return {}; }
  PositionMode positions() const override { return positions_; }

  Status Begin(int n_layers, int n_kv_heads, const SequencePlan& plan) override {
    const int64_t base = plan.budget_base > 0 ? plan.budget_base : plan.n_prompt;
    const int64_t resolved = window_.Resolve(base);
    n_window_ = window_is_total_ ? resolved - n_sink_ : resolved;
    if (n_window_ < 1) {
      return InvalidArgument("'" + name_ + "': a budget of " + std::to_string(resolved) +
                             " tokens leaves no room for a recent window next to " +
                             std::to_string(n_sink_) + " sinks");
    }
    return Status::Ok();
  }
  int64_t token_budget() const override { return n_sink_ + n_window_; }

  bool Plan(const ChunkContext& ctx, int head, std::span<const int32_t> positions,
            std::vector<int64_t>* keep) const override {
    const int64_t n = static_cast<int64_t>(positions.size());
    if (n <= token_budget()) return false;
    keep->clear();
    for (int64_t i = 0; i < n_sink_; ++i) keep->push_back(i);
    for (int64_t i = n - n_window_; i < n; ++i) keep->push_back(i);
    return true;
  }

 private:
  std::string name_;
  int64_t n_sink_;
  Budget window_;
  PositionMode positions_;
  bool window_is_total_;  // `budget` (sinks included) rather than `window`
  int64_t n_window_ = 0;
};

}  // namespace

Result<std::unique_ptr<EvictionPolicy>> MakeWindowPolicy(const MethodSpec& spec) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {"budget", "positions"}));
  KVPACK_ASSIGN_OR_RETURN(Budget budget, ParseBudget(spec, "budget", nullptr));
  KVPACK_ASSIGN_OR_RETURN(PositionMode positions, ParsePositionMode(spec));
  return std::unique_ptr<EvictionPolicy>(
      new RecencyPolicy("window", 0, budget, positions, /*window_is_total=*/true));
}

Result<std::unique_ptr<EvictionPolicy>> MakeSinkPolicy(const MethodSpec& spec) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {"n", "window", "budget", "positions"}));
  KVPACK_ASSIGN_OR_RETURN(int64_t n_sink, ParamAsInt(spec, "n", 4));
  if (n_sink < 0) return InvalidArgument("'sink': n (the number of sinks) must be >= 0");
  const bool has_window = spec.Find("window") != nullptr, has_budget = spec.Find("budget");
  if (has_window == has_budget) {
    return InvalidArgument(
        "'sink' needs exactly one of window= (recent tokens) or budget= "
        "(sinks + recent tokens)");
  }
  KVPACK_ASSIGN_OR_RETURN(Budget size,
                          ParseBudget(spec, has_window ? "window" : "budget", nullptr));
  KVPACK_ASSIGN_OR_RETURN(PositionMode positions, ParsePositionMode(spec));
  return std::unique_ptr<EvictionPolicy>(
      new RecencyPolicy("sink", n_sink, size, positions, /*window_is_total=*/has_budget));
}

}  // namespace kvpack
