#include "kv/attention_plan.h"

#include <algorithm>

namespace kvpack {
namespace {

void PlanRowBlocks(std::span<const int64_t> n_cached, int64_t n_rows, int n_threads,
                   AttentionPlan& plan) {
  const int n_kv = static_cast<int>(n_cached.size());
  const int64_t n_row_blocks = (n_rows + kAttentionRowBlock - 1) / kAttentionRowBlock;
  plan.items.clear();
  plan.share_first.clear();
  plan.n_segments.assign(n_kv, 0);
  const int64_t want = (2 * n_threads + n_kv * n_row_blocks - 1) / (n_kv * n_row_blocks);
  for (int g = 0; g < n_kv; ++g) {
    const int64_t n = n_cached[g];
    const int64_t segs = std::clamp<int64_t>(std::min(want, n / kAttentionMinSegment), 1, 64);
    plan.n_segments[g] = static_cast<int>(segs);
    for (int64_t rb = 0; rb < n_row_blocks; ++rb) {
      const int64_t r0 = rb * kAttentionRowBlock;
      const int64_t r1 = std::min(n_rows, r0 + kAttentionRowBlock);
      for (int64_t s = 0; s < segs; ++s) {
        plan.items.push_back({g, r0, r1, n * s / segs, n * (s + 1) / segs, s == segs - 1});
      }
    }
  }
  for (size_t w = 0; w <= plan.items.size(); ++w) plan.share_first.push_back(w);
}

// Where the heads' tokens laid end to end (head g at base[g]) reach the fraction s / n_threads
// of their cost (whole[g]: head g's, total: their sum): the last position whose cost before
// it is at most that much (with a cost proportional to tokens, the token-even cut
// total * s / n_threads rounded down).
int64_t EvenCut(std::span<const int64_t> n_cached, std::span<const int64_t> base,
                const HeadReadCost& cost, std::span<const double> whole, double total, int s,
                int n_threads) {
  const int n_kv = static_cast<int>(n_cached.size());
  if (!cost) return base[n_kv] * s / n_threads;
  double left = total * s / n_threads;
  int g = 0;
  while (g < n_kv - 1 && left > whole[g]) left -= whole[g++];
  int64_t lo = 0, hi = n_cached[g];  // the last t with cost(g, t) <= left is in [lo, hi]
  while (lo < hi) {
    const int64_t mid = hi - (hi - lo) / 2;
    if (cost(g, mid) <= left) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return base[g] + lo;
}

// Against the earlier plan (whole heads, each cut into the same number of segments of at
// least kAttentionMinSegment tokens when there were fewer heads than twice the threads), a
// decode step has fewer items: at depth 8192 SmolLM2's 3 KV heads on 2 threads are 4 items,
// not 6 (docs/performance-history.md, session 49).
void PlanTokenShares(std::span<const int64_t> n_cached, int64_t n_rows, int n_threads,
                     const HeadReadCost& cost, AttentionPlan& plan) {
  const int n_kv = static_cast<int>(n_cached.size());
  // Working arrays kept by the thread between calls (a decode step plans every layer).
  thread_local std::vector<int64_t> base, cut;
  thread_local std::vector<double> whole;
  base.assign(n_kv + 1, 0);  // head g holds [base[g], base[g + 1]) end to end
  for (int g = 0; g < n_kv; ++g) base[g + 1] = base[g] + n_cached[g];
  const int64_t total = base[n_kv];
  whole.clear();  // each head's cost, for every cut (none without a cost)
  double total_cost = 0.0;
  for (int g = 0; cost && n_threads > 1 && g < n_kv; ++g) {
    total_cost += whole.emplace_back(cost(g, n_cached[g]));
  }
  cut.assign(n_threads + 1, total);  // share s holds [cut[s], cut[s + 1])
  cut[0] = 0;
  for (int s = 1; s < n_threads; ++s) {
    int64_t c = EvenCut(n_cached, base, cost, whole, total_cost, s, n_threads);
    // The head that c falls in (the last of any empty heads at c).
    const int g = static_cast<int>(std::upper_bound(base.begin(), base.end(), c) -
                                   base.begin()) - 1;
    if (g < n_kv) {
      // Too close to an edge: to the nearer one that is too close, ties to the head's end.
      const int64_t to_start = c - base[g], to_end = base[g + 1] - c;
      if (to_end < kAttentionMinPiece && to_end <= to_start) {
        c = base[g + 1];
      } else if (to_start < kAttentionMinPiece) {
        c = base[g];
      } else if (to_end < kAttentionMinPiece) {
        c = base[g + 1];
      }
    }
    // Two boundaries inside one head closer than kAttentionMinPiece (threads many for the
    // tokens): the earlier share gives its piece to this one and stays empty.
    const bool inside = g < n_kv && c > base[g] && c < base[g + 1];
    if (inside && c - cut[s - 1] < kAttentionMinPiece) c = cut[s - 1];
    cut[s] = std::max(c, cut[s - 1]);
  }
  plan.items.clear();
  plan.share_first.clear();
  plan.n_segments.assign(n_kv, 0);
  int g = 0;
  for (int s = 0; s < n_threads; ++s) {
    plan.share_first.push_back(static_cast<int64_t>(plan.items.size()));
    const bool last = s == n_threads - 1;
    for (; g < n_kv; ++g) {
      // An empty head is a point: it goes with the share that holds its position.
      const bool empty = base[g] == base[g + 1];
      if (empty && !(base[g] < cut[s + 1] || last)) break;
      const int64_t lo = std::max(base[g], cut[s]), hi = std::min(base[g + 1], cut[s + 1]);
      if (lo < hi || empty) {
        plan.items.push_back({g, 0, n_rows, lo - base[g], hi - base[g], hi == base[g + 1]});
        ++plan.n_segments[g];
      }
      if (base[g + 1] > cut[s + 1]) break;  // the head goes on in the next share
    }
  }
  plan.share_first.push_back(static_cast<int64_t>(plan.items.size()));
}

}  // namespace

void PlanAttention(std::span<const int64_t> n_cached, int64_t n_rows, int n_threads,
                   const HeadReadCost& cost, AttentionPlan& plan) {
  n_threads = std::max(1, n_threads);
  if (n_rows <= kAttentionRowBlock) {
    PlanTokenShares(n_cached, n_rows, n_threads, cost, plan);
  } else {
    PlanRowBlocks(n_cached, n_rows, n_threads, plan);
  }
}

AttentionPlan PlanAttention(std::span<const int64_t> n_cached, int64_t n_rows, int n_threads,
                            const HeadReadCost& cost) {
  AttentionPlan plan;
  PlanAttention(n_cached, n_rows, n_threads, cost, plan);
  return plan;
}

}  // namespace kvpack
