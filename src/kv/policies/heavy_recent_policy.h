// The structure H2O and Keyformer share (METHODS.md 2.3, 2.4): per layer and KV head, an
// accumulated score per cached token; once a head holds more than the budget, keep the
// `recent` newest tokens plus the highest-scoring of the older ones. The two methods differ
// only in the scoring softmax they request (subclasses) and in the default recent share.
//
// Score state: one float array per (layer, head), aligned with the cache's storage order;
// ObserveAttention adds the chunk's statistics to the held tokens and appends the chunk's
// own, OnRetain compacts the array with the cache's keep list, so evicted tokens' scores
// are gone (Keyformer's code zeroes them; H2O drops them) and never come back.
#ifndef KVPACK_KV_POLICIES_HEAVY_RECENT_POLICY_H_
#define KVPACK_KV_POLICIES_HEAVY_RECENT_POLICY_H_

#include <span>
#include <string>
#include <vector>

#include "kv/eviction_policy.h"

namespace kvpack {

// keep = the newest n_recent indices of [0, scores.size()) plus the n_heavy older ones
// with the highest scores (ties go to the older token), ascending. Requires
// scores.size() > n_recent + n_heavy.
void SelectHeavyAndRecent(std::span<const float> scores, int64_t n_recent, int64_t n_heavy,
                          std::vector<int64_t>* keep);

class HeavyRecentPolicy : public EvictionPolicy {
 public:
  HeavyRecentPolicy(std::string name, Budget budget, double recent_share, PositionMode positions)
      : name_(std::move(name)),
        budget_(budget),
        recent_share_(recent_share),
        positions_(positions) {}

  std::string spec() const override;
  PolicyNeeds needs() const override { return {.attention = true}; }
  PositionMode positions() const override { return positions_; }
  Status Begin(int n_layers, int n_kv_heads, const SequencePlan& plan) override;
  int64_t token_budget() const override { return n_recent_ + n_heavy_; }
  void ObserveAttention(const ChunkContext& ctx, int head, std::span<const float> scores) override;
  bool Plan(const ChunkContext& ctx, int head, std::span<const int32_t> positions,
            std::vector<int64_t>* keep) const override;
  void OnRetain(int layer, int head, std::span<const int64_t> keep) override;

  // The accumulated scores of (layer, head), storage order (tests, reports).
  std::span<const float> scores(int layer, int head) const {
    return scores_[static_cast<size_t>(layer) * n_kv_heads_ + head];
  }

 protected:
  // Parameters beyond budget/recent/positions, as ",key=value..." for spec().
  virtual std::string ExtraSpec() const { return ""; }
  const SequencePlan& plan() const { return plan_; }

 private:
  std::string name_;
  Budget budget_;
  double recent_share_;
  PositionMode positions_;
  SequencePlan plan_;
  int n_kv_heads_ = 0;
  int64_t n_recent_ = 0, n_heavy_ = 0;
  std::vector<std::vector<float>> scores_;  // [n_layers * n_kv_heads][n_tokens held]
};

}  // namespace kvpack

#endif  // KVPACK_KV_POLICIES_HEAVY_RECENT_POLICY_H_
