// The work plan of one Attend call (kv/attention_plan.h): every head's tokens covered once,
// in order, by its items; shares of equal tokens, or of equal cost, for a decode step; the
// prompt-chunk plan.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kv/attention_plan.h"

namespace kvpack {
namespace {

// For each head and row block: its items are consecutive, cover [0, n_cached) in order
// without gaps, number n_segments[g], and only the last is fresh. Shares partition the items.
void ExpectCoversEveryToken(const AttentionPlan& plan, const std::vector<int64_t>& n_cached,
                            int64_t n_rows) {
  const int n_kv = static_cast<int>(n_cached.size());
  const int64_t n_row_blocks = (n_rows + kAttentionRowBlock - 1) / kAttentionRowBlock;
  ASSERT_EQ(plan.n_segments.size(), n_cached.size());
  size_t w = 0;
  for (int g = 0; g < n_kv; ++g) {
    ASSERT_GE(plan.n_segments[g], 1) << g;
    for (int64_t rb = 0; rb < n_row_blocks; ++rb) {
      int64_t next = 0;
      for (int s = 0; s < plan.n_segments[g]; ++s, ++w) {
        ASSERT_LT(w, plan.items.size());
        const AttentionWorkItem& it = plan.items[w];
        EXPECT_EQ(it.kv_head, g);
        EXPECT_EQ(it.row0, rb * kAttentionRowBlock);
        EXPECT_EQ(it.row1, std::min(n_rows, (rb + 1) * kAttentionRowBlock));
        EXPECT_EQ(it.t0, next) << "head " << g << " segment " << s;
        EXPECT_TRUE(it.t1 > it.t0 || n_cached[g] == 0) << "head " << g << " segment " << s;
        EXPECT_EQ(it.fresh, s == plan.n_segments[g] - 1);
        next = it.t1;
      }
      EXPECT_EQ(next, n_cached[g]) << "head " << g;
    }
  }
  EXPECT_EQ(w, plan.items.size());
  ASSERT_GE(plan.share_first.size(), 2u);
  EXPECT_EQ(plan.share_first.front(), 0);
  EXPECT_EQ(plan.share_first.back(), static_cast<int64_t>(plan.items.size()));
  EXPECT_TRUE(std::is_sorted(plan.share_first.begin(), plan.share_first.end()));
}

int64_t ShareTokens(const AttentionPlan& plan, size_t s) {
  int64_t n = 0;
  for (int64_t w = plan.share_first[s]; w < plan.share_first[s + 1]; ++w) {
    n += plan.items[w].t1 - plan.items[w].t0;
  }
  return n;
}

// A KIVI-like head (kv/codecs/kivi_codec.cc): its first 400 tokens cost half of an fp16 row,
// the rest (the full-precision residual) a whole one.
double HalfThenWhole(int, int64_t t) {
  const int64_t q = std::min<int64_t>(t, 400);
  return 0.5 * static_cast<double>(q) + static_cast<double>(t - q);
}

TEST(AttentionPlanTest, DecodeSharesCoverEveryTokenAndBalanceTheThreads) {
  const std::vector<std::vector<int64_t>> caches = {
      {528, 528, 528}, {8200, 8200, 8200}, {600, 0, 250}, {0, 0, 0}, {5, 3000, 0, 40},
      {1, 2, 3},       {100, 100, 100},    {4096},        {0, 700}, {700, 0},
      {1, 1, 1, 1, 2000}, {10, 10, 1500}, {3000}};
  for (const auto& n_cached : caches) {
    for (int threads : {1, 2, 3, 4, 5, 8}) {
      for (int64_t rows : {1, 3, 16}) {
        SCOPED_TRACE(::testing::Message() << "heads " << n_cached.size() << " first "
                                          << n_cached[0] << " threads " << threads
                                          << " rows " << rows);
        // With costs the shares' tokens differ; the covering and the pieces' rule hold.
        const AttentionPlan by_cost = PlanAttention(n_cached, rows, threads, HalfThenWhole);
        ExpectCoversEveryToken(by_cost, n_cached, rows);
        ASSERT_EQ(by_cost.share_first.size(), static_cast<size_t>(threads) + 1);
        for (const AttentionWorkItem& it : by_cost.items) {
          if (it.t1 - it.t0 != n_cached[it.kv_head]) {
            EXPECT_GE(it.t1 - it.t0, kAttentionMinPiece) << "head " << it.kv_head;
          }
        }
        const AttentionPlan plan = PlanAttention(n_cached, rows, threads);
        ExpectCoversEveryToken(plan, n_cached, rows);
        ASSERT_EQ(plan.share_first.size(), static_cast<size_t>(threads) + 1);
        int64_t total = 0;
        for (int64_t n : n_cached) total += n;
        // Each boundary moves by less than kAttentionMinPiece from its even place.
        for (int s = 0; s < threads; ++s) {
          EXPECT_LE(std::llabs(ShareTokens(plan, s) - total / threads),
                    2 * kAttentionMinPiece) << "share " << s;
        }
        // No cut-off piece shorter than kAttentionMinPiece.
        for (const AttentionWorkItem& it : plan.items) {
          if (it.t1 - it.t0 != n_cached[it.kv_head]) {
            EXPECT_GE(it.t1 - it.t0, kAttentionMinPiece) << "head " << it.kv_head;
          }
        }
      }
    }
  }
}

TEST(AttentionPlanTest, DecodeStepOfThreeHeadsOnTwoThreads) {
  // SmolLM2-135M's 3 KV heads. At depth 8200 the middle head is split in half: 2 items per
  // thread (whole heads in 2 segments each were 3).
  std::vector<int64_t> n_cached = {8200, 8200, 8200};
  AttentionPlan plan = PlanAttention(n_cached, 1, 2);
  ASSERT_EQ(plan.items.size(), 4u);
  EXPECT_EQ(plan.share_first, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(ShareTokens(plan, 0), 12300);
  EXPECT_EQ(ShareTokens(plan, 1), 12300);
  EXPECT_EQ(plan.n_segments, (std::vector<int>{1, 2, 1}));
  EXPECT_EQ(plan.items[1].t1, 4100);
  EXPECT_FALSE(plan.items[1].fresh);
  EXPECT_TRUE(plan.items[2].fresh);
  // At depth 528 too (halves of 264 tokens).
  n_cached = {528, 528, 528};
  plan = PlanAttention(n_cached, 1, 2);
  ASSERT_EQ(plan.items.size(), 4u);
  EXPECT_EQ(plan.share_first, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(plan.items[1].t1, 264);
  // At depth 200 half a head is shorter than kAttentionMinPiece: the boundary moves to the
  // middle head's end (the nearer edge on a tie), two whole heads and one.
  n_cached = {200, 200, 200};
  plan = PlanAttention(n_cached, 1, 2);
  ASSERT_EQ(plan.items.size(), 3u);
  EXPECT_EQ(plan.share_first, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(plan.n_segments, (std::vector<int>{1, 1, 1}));
  // Nearer edge: a boundary 100 tokens into a 1000-token head moves to its start.
  n_cached = {900, 1000, 100};
  plan = PlanAttention(n_cached, 1, 2);
  EXPECT_EQ(plan.share_first, (std::vector<int64_t>{0, 1, 3}));
}

TEST(AttentionPlanTest, DecodeSharesOfEqualCost) {
  // Each head costs 200 + 128 = 328, the threads 492 each: head 0 and the first 328 tokens
  // of head 1 (164), then its last 200 (36 + 128) and head 2.
  const std::vector<int64_t> n_cached = {528, 528, 528};
  const AttentionPlan plan = PlanAttention(n_cached, 1, 2, HalfThenWhole);
  ExpectCoversEveryToken(plan, n_cached, 1);
  ASSERT_EQ(plan.items.size(), 4u);
  EXPECT_EQ(plan.share_first, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(plan.items[1].t1, 328);
  EXPECT_EQ(ShareTokens(plan, 0), 856);
  EXPECT_EQ(ShareTokens(plan, 1), 728);
  // A cut that the costs put closer than kAttentionMinPiece to a head's edge moves there:
  // with the first 300 tokens free, the 128-token residuals hold all the cost and the even
  // cut (half of head 1's residual) is 64 tokens from its end.
  const std::vector<int64_t> short_tail = {428, 428, 428};
  const AttentionPlan moved = PlanAttention(short_tail, 1, 2, [](int, int64_t t) {
    return static_cast<double>(std::max<int64_t>(0, t - 300));
  });
  ExpectCoversEveryToken(moved, short_tail, 1);
  EXPECT_EQ(moved.share_first, (std::vector<int64_t>{0, 2, 3}));
}

TEST(AttentionPlanTest, ACostProportionalToTokensGivesTheTokenPlan) {
  const std::vector<std::vector<int64_t>> caches = {
      {528, 528, 528}, {8200, 8200, 8201}, {600, 0, 250}, {0, 0, 0}, {5, 3000, 0, 40},
      {1, 2, 3},       {10, 10, 1500},     {3000}};
  const auto two_a_token = [](int, int64_t t) { return 2.0 * static_cast<double>(t); };
  for (const auto& n_cached : caches) {
    for (int threads : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "first " << n_cached[0] << " threads " << threads);
      const AttentionPlan tokens = PlanAttention(n_cached, 1, threads);
      const AttentionPlan costs = PlanAttention(n_cached, 1, threads, two_a_token);
      EXPECT_EQ(costs.share_first, tokens.share_first);
      EXPECT_EQ(costs.n_segments, tokens.n_segments);
      ASSERT_EQ(costs.items.size(), tokens.items.size());
      for (size_t w = 0; w < costs.items.size(); ++w) {
        EXPECT_EQ(costs.items[w].kv_head, tokens.items[w].kv_head) << w;
        EXPECT_EQ(costs.items[w].t0, tokens.items[w].t0) << w;
        EXPECT_EQ(costs.items[w].t1, tokens.items[w].t1) << w;
      }
    }
  }
}

TEST(AttentionPlanTest, OneThreadGetsEveryHeadWhole) {
  const std::vector<int64_t> n_cached = {8200, 17, 0};
  const AttentionPlan plan = PlanAttention(n_cached, 1, 1);
  ASSERT_EQ(plan.items.size(), 3u);
  EXPECT_EQ(plan.share_first, (std::vector<int64_t>{0, 3}));
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(plan.items[g].t0, 0);
    EXPECT_EQ(plan.items[g].t1, n_cached[g]);
    EXPECT_TRUE(plan.items[g].fresh);
  }
}

TEST(AttentionPlanTest, PromptChunksSplitRowBlocksAndLongCaches) {
  for (const auto& n_cached :
       std::vector<std::vector<int64_t>>{{3000, 3000, 3000}, {0, 5000}, {600, 100}}) {
    for (int threads : {1, 2, 4, 8}) {
      for (int64_t rows : {17, 40, 512}) {
        SCOPED_TRACE(::testing::Message() << "first " << n_cached[0] << " threads " << threads
                                          << " rows " << rows);
        const AttentionPlan plan = PlanAttention(n_cached, rows, threads);
        ExpectCoversEveryToken(plan, n_cached, rows);
        // Every item is its own share.
        ASSERT_EQ(plan.share_first.size(), plan.items.size() + 1);
        for (int g = 0; g < static_cast<int>(n_cached.size()); ++g) {
          EXPECT_LE(plan.n_segments[g], std::max<int64_t>(1, n_cached[g] / kAttentionMinSegment));
        }
      }
    }
  }
  // 2 rows blocks of 3 heads on 8 threads: 6 items are fewer than 16, so the caches of at
  // least 2 * 512 tokens are cut into segments.
  const std::vector<int64_t> n_cached = {3000, 3000, 3000};
  const AttentionPlan plan = PlanAttention(n_cached, 32, 8);
  EXPECT_EQ(plan.n_segments, (std::vector<int>{3, 3, 3}));
}

// Attend plans into one reused plan: whatever the plan held before (more items, other
// heads, row blocks or token shares), it comes out as a fresh plan would.
TEST(AttentionPlanTest, AReusedPlanEqualsAFreshOne) {
  struct Case {
    std::vector<int64_t> n_cached;
    int64_t rows;
    int threads;
    bool costed;
  };
  const std::vector<Case> cases = {
      {{8200, 8200, 8200}, 1, 2, false}, {{528, 528, 528}, 1, 2, true},
      {{3000, 10, 0, 700}, 40, 3, false}, {{200, 200, 200}, 1, 2, false},
      {{900}, 1, 4, true},                {{0, 0}, 17, 2, false},
      {{528, 528, 528}, 1, 1, true},      {{5000, 5000}, 100, 2, false},
  };
  AttentionPlan reused;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "heads " << c.n_cached.size() << " rows " << c.rows
                                        << " threads " << c.threads);
      const HeadReadCost cost = c.costed ? HeadReadCost(HalfThenWhole) : HeadReadCost();
      const AttentionPlan fresh = PlanAttention(c.n_cached, c.rows, c.threads, cost);
      PlanAttention(c.n_cached, c.rows, c.threads, cost, reused);
      ASSERT_EQ(reused.items.size(), fresh.items.size());
      for (size_t w = 0; w < fresh.items.size(); ++w) {
        const AttentionWorkItem &a = reused.items[w], &b = fresh.items[w];
        EXPECT_EQ(std::tie(a.kv_head, a.row0, a.row1, a.t0, a.t1, a.fresh),
                  std::tie(b.kv_head, b.row0, b.row1, b.t0, b.t1, b.fresh));
      }
      EXPECT_EQ(reused.share_first, fresh.share_first);
      EXPECT_EQ(reused.n_segments, fresh.n_segments);
    }
  }
}

}  // namespace
}  // namespace kvpack
