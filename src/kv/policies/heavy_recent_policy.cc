#include "kv/policies/heavy_recent_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace kvpack {

void SelectHeavyAndRecent(std::span<const float> scores, int64_t n_recent, int64_t n_heavy,
                          std::vector<int64_t>* keep) {
  const int64_t n = static_cast<int64_t>(scores.size());
  KVPACK_CHECK(n > n_recent + n_heavy);
  const int64_t n_old = n - n_recent;
  keep->clear();
  if (n_heavy > 0) {
    std::vector<int64_t> order(n_old);
    for (int64_t i = 0; i < n_old; ++i) order[i] = i;
    auto better = [&](int64_t a, int64_t b) {
      return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    };
    std::nth_element(order.begin(), order.begin() + (n_heavy - 1), order.end(), better);
    keep->assign(order.begin(), order.begin() + n_heavy);
    std::sort(keep->begin(), keep->end());
  }
  for (int64_t i = n_old; i < n; ++i) keep->push_back(i);
}

std::string HeavyRecentPolicy::spec() const {
  char share[32];
  std::snprintf(share, sizeof(share), "%g", recent_share_);
  return name_ + ":budget=" + budget_.ToString() + ",recent=" + share + ExtraSpec() +
         ",positions=" + (positions_ == PositionMode::kCompact ? "compact" : "original");
}

Status HeavyRecentPolicy::Begin(int n_layers, int n_kv_heads, const SequencePlan& plan) {
  plan_ = plan;
  n_kv_heads_ = n_kv_heads;
  const int64_t budget = budget_.Resolve(plan.budget_base > 0 ? plan.budget_base : plan.n_prompt);
  n_recent_ = static_cast<int64_t>(std::floor(recent_share_ * static_cast<double>(budget) + 1e-9));
  n_heavy_ = budget - n_recent_;
  scores_.assign(static_cast<size_t>(n_layers) * n_kv_heads, {});
  return Status::Ok();
}

void HeavyRecentPolicy::ObserveAttention(const ChunkContext& ctx, int head,
                                         std::span<const float> scores) {
  std::vector<float>& s = scores_[static_cast<size_t>(ctx.layer) * n_kv_heads_ + head];
  // The held tokens gain this chunk's attention; the chunk's own tokens start with theirs.
  KVPACK_CHECK(scores.size() == s.size() + static_cast<size_t>(ctx.n_rows));
  for (size_t i = 0; i < s.size(); ++i) s[i] += scores[i];
  s.insert(s.end(), scores.begin() + s.size(), scores.end());
}

bool HeavyRecentPolicy::Plan(const ChunkContext& ctx, int head, std::span<const int32_t> positions,
                             std::vector<int64_t>* keep) const {
  const std::vector<float>& s = scores_[static_cast<size_t>(ctx.layer) * n_kv_heads_ + head];
  KVPACK_CHECK(s.size() == positions.size());
  if (static_cast<int64_t>(s.size()) <= token_budget()) return false;
  SelectHeavyAndRecent(s, n_recent_, n_heavy_, keep);
  return true;
}

void HeavyRecentPolicy::OnRetain(int layer, int head, std::span<const int64_t> keep) {
  std::vector<float>& s = scores_[static_cast<size_t>(layer) * n_kv_heads_ + head];
  for (size_t i = 0; i < keep.size(); ++i) s[i] = s[keep[i]];  // keep is ascending: safe
  s.resize(keep.size());
}

}  // namespace kvpack
