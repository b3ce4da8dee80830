// Eviction policies (kv/policies/*): registry and spec handling, budgets respected exactly
// after every step, sinks and recent windows always kept, seeded determinism, Keyformer's
// no-noise ablation equal to H2O, the heavy-hitter selection and the temperature schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kv/policies/heavy_recent_policy.h"
#include "kv/policies/keyformer_policy.h"
#include "kv/policy_registry.h"
#include "unit/kv_eviction_test_driver.h"

namespace kvpack {
namespace {

constexpr int kLayers = 2, kKv = 2, kHeads = 4, kDim = 16;

std::unique_ptr<KvCache> MakeCache(const std::string& spec) {
  Result<std::unique_ptr<KvCache>> cache = KvCache::Create({kLayers, kKv, kDim}, spec);
  EXPECT_TRUE(cache.ok()) << spec << ": " << cache.status().message();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

// Positions held by every (layer, head) after each step of a prompt of n_prompt tokens
// (in chunks of `chunk`) followed by n_decode single-token steps.
using Trace = std::vector<std::vector<std::vector<int32_t>>>;  // [step][layer*kKv+head][t]

Trace TraceOf(const std::string& spec, int64_t n_prompt, int64_t chunk, int64_t n_decode,
              uint32_t data_seed = 1) {
  std::unique_ptr<KvCache> cache = MakeCache(spec);
  EXPECT_TRUE(cache->BeginSequence({.n_prompt = n_prompt, .n_generate = n_decode}).ok());
  const RopeParams rope{RopeLayout::kAdjacent, kDim, 10000.0f, nullptr};
  CacheDriver driver(*cache, kHeads, data_seed, &rope);
  Trace trace;
  auto record = [&] {
    trace.emplace_back();
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kKv; ++h) trace.back().push_back(cache->positions(l, h));
    }
  };
  for (int64_t done = 0; done < n_prompt; done += chunk) {
    EXPECT_TRUE(driver.Step(std::min(chunk, n_prompt - done)).ok());
    record();
  }
  for (int64_t i = 0; i < n_decode; ++i) {
    EXPECT_TRUE(driver.Step(1).ok());
    record();
  }
  return trace;
}

TEST(PolicyRegistryTest, RejectsUnknownNamesAndParametersWithTheValidList) {
  Result<std::unique_ptr<KvCache>> c = KvCache::Create({1, 1, 8}, "lru:budget=4 + f16");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("window, sink, h2o, keyformer"), std::string::npos)
      << c.status().message();
  c = KvCache::Create({1, 1, 8}, "h2o:budget=4,heavy=2 + f16");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("budget, recent, positions"), std::string::npos);
  for (const char* bad :
       {"h2o + f16", "h2o:budget=0 + f16", "h2o:budget=1.5 + f16", "h2o:budget=-3 + f16",
        "keyformer:budget=8,noise=cauchy + f16", "keyformer:budget=8,tau_init=0 + f16",
        "sink:n=4 + f16", "sink:n=4,window=8,budget=12 + f16", "window:budget=8,positions=x + f16",
        "h2o:budget=8,recent=1.5 + f16"}) {
    EXPECT_FALSE(KvCache::Create({1, 1, 8}, bad).ok()) << bad;
  }
  // Every registered policy lists its parameters.
  for (const PolicyInfo& p : RegisteredPolicies()) EXPECT_FALSE(p.params.empty()) << p.name;
}

TEST(PolicyRegistryTest, BudgetsAreTokensOrFractions) {
  MethodSpec s{"h2o", {{"budget", "1024"}}};
  Result<Budget> b = ParseBudget(s, "budget", nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->is_fraction);
  EXPECT_EQ(b->Resolve(10), 1024);
  s.params[0].second = "0.25";
  b = ParseBudget(s, "budget", nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->is_fraction);
  EXPECT_EQ(b->Resolve(1000), 250);
  EXPECT_EQ(b->Resolve(3), 1);  // at least one token
  s.params[0].second = "1.0";
  EXPECT_EQ(ParseBudget(s, "budget", nullptr)->Resolve(77), 77);
  EXPECT_EQ(ParseBudget(s, "budget", nullptr)->ToString(), "1.0");
}

TEST(PolicyRegistryTest, CanonicalSpecNamesEveryParameterAndParsesBack) {
  std::unique_ptr<KvCache> c = MakeCache("keyformer:budget=0.5 + kivi:bits=4");
  const std::string text = c->spec().ToString();
  EXPECT_EQ(text.substr(0, text.find(" + ")),
            "keyformer:budget=0.5,recent=0.3,noise=gumbel,tau_init=1,tau_end=2,seed=0,gen=0,"
            "positions=original");
  EXPECT_TRUE(KvCache::Create({kLayers, kKv, kDim}, text).ok()) << text;
  EXPECT_EQ(MakeCache("sink:n=2,window=30 + f16")->policy()->spec(),
            "sink:n=2,window=30,positions=original");
}

struct BudgetCase {
  const char* spec;
  int64_t budget;  // resolved for a 40-token prompt
  int64_t n_sink;
  int64_t n_recent;
};

class PolicyBudgetTest : public ::testing::TestWithParam<BudgetCase> {};

TEST_P(PolicyBudgetTest, BudgetExactAfterEveryStepWithSinksAndRecentKept) {
  const BudgetCase c = GetParam();
  const int64_t n_prompt = 40, chunk = 16, n_decode = 50;
  const Trace trace = TraceOf(c.spec, n_prompt, chunk, n_decode);
  int64_t seen = 0;
  for (size_t step = 0; step < trace.size(); ++step) {
    seen = step < 3 ? std::min<int64_t>((step + 1) * chunk, n_prompt) : n_prompt + step - 2;
    for (const std::vector<int32_t>& held : trace[step]) {
      ASSERT_EQ(static_cast<int64_t>(held.size()), std::min(seen, c.budget))
          << c.spec << " step " << step;
      ASSERT_TRUE(std::is_sorted(held.begin(), held.end()));
      if (seen <= c.budget) continue;
      for (int64_t i = 0; i < c.n_sink; ++i) ASSERT_EQ(held[i], i) << "sink " << i;
      for (int64_t i = 0; i < c.n_recent; ++i) {
        ASSERT_EQ(held[held.size() - 1 - i], seen - 1 - i) << c.spec << " recent " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, PolicyBudgetTest,
    ::testing::Values(BudgetCase{"window:budget=0.5 + f16", 20, 0, 20},
                      BudgetCase{"window:budget=13 + f16", 13, 0, 13},
                      BudgetCase{"sink:n=4,window=0.25 + f16", 14, 4, 10},
                      BudgetCase{"sink:n=3,budget=17 + flexgen:bits=4", 17, 3, 14},
                      BudgetCase{"h2o:budget=0.5 + f16", 20, 0, 10},
                      BudgetCase{"h2o:budget=21,recent=0.2 + kivi:bits=4,residual=32", 21, 0, 4},
                      BudgetCase{"keyformer:budget=0.5 + f16", 20, 0, 6},
                      BudgetCase{"keyformer:budget=20,noise=gaussian + f16", 20, 0, 6},
                      BudgetCase{"keyformer:budget=20,noise=constant + f32", 20, 0, 6},
                      BudgetCase{"keyformer:budget=20,noise=none,recent=0 + f32", 20, 0, 0},
                      BudgetCase{"sink:n=4,budget=20,positions=compact + f32", 20, 0, 0}));

// Every registered policy (a new one is picked up automatically) with `budget=16`: exact
// budget after every step, ascending storage, and positions=compact accepted.
TEST(PolicyConformance, EveryRegisteredPolicyHoldsItsBudget) {
  for (const PolicyInfo& info : RegisteredPolicies()) {
    for (const char* positions : {"original", "compact"}) {
      const std::string spec = info.name + ":budget=16,positions=" + positions + " + f32";
      Result<std::unique_ptr<KvCache>> made = KvCache::Create({kLayers, kKv, kDim}, spec);
      ASSERT_TRUE(made.ok()) << spec << ": " << made.status().message()
                             << " (give this policy a conformance spec)";
      const Trace trace = TraceOf(spec, 24, 8, 30);
      for (size_t step = 0; step < trace.size(); ++step) {
        const int64_t seen = step < 3 ? 8 * static_cast<int64_t>(step + 1) : 24 + step - 2;
        for (const auto& held : trace[step]) {
          ASSERT_EQ(static_cast<int64_t>(held.size()), std::min<int64_t>(seen, 16)) << spec;
          ASSERT_TRUE(std::is_sorted(held.begin(), held.end())) << spec;
          ASSERT_EQ(held.back(),
                    positions[0] == 'o' ? seen - 1 : static_cast<int32_t>(held.size()) - 1)
              << spec << ": the newest token is always kept";
        }
      }
    }
  }
}

TEST(PolicyTest, CompactPositionsAreTheStorageIndices) {
  const Trace trace = TraceOf("h2o:budget=12,positions=compact + f16", 30, 10, 20);
  for (const auto& step : trace) {
    for (const auto& held : step) {
      for (size_t t = 0; t < held.size(); ++t) ASSERT_EQ(held[t], static_cast<int32_t>(t));
    }
  }
}

TEST(PolicyTest, FixedSeedGivesIdenticalPlans) {
  const std::string a = "keyformer:budget=16,seed=7 + f16";
  EXPECT_EQ(TraceOf(a, 40, 16, 40), TraceOf(a, 40, 16, 40));
  // Another seed draws other noise and (on this data) keeps other tokens at some step.
  EXPECT_NE(TraceOf(a, 40, 16, 40), TraceOf("keyformer:budget=16,seed=8 + f16", 40, 16, 40));
  // Thread count does not matter either.
  std::unique_ptr<KvCache> c1 = MakeCache(a), c3 = MakeCache(a);
  CacheDriver d1(*c1, kHeads, 5, nullptr, 1), d3(*c3, kHeads, 5, nullptr, 3);
  for (int64_t n : {30, 1, 1, 5, 1, 1, 1}) {
    ASSERT_TRUE(d1.Step(n).ok());
    ASSERT_TRUE(d3.Step(n).ok());
  }
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKv; ++h) EXPECT_EQ(c1->positions(l, h), c3->positions(l, h));
  }
}

TEST(PolicyTest, KeyformerWithoutNoiseAtTauOneSelectsWhatH2oSelects) {
  for (const char* recent : {"0.5", "0.3"}) {
    const std::string r = recent;
    const Trace h2o = TraceOf("h2o:budget=18,recent=" + r + " + f16", 40, 16, 60);
    const Trace kf = TraceOf(
        "keyformer:budget=18,recent=" + r + ",noise=none,tau_init=1,tau_end=1 + f16", 40, 16, 60);
    EXPECT_EQ(h2o, kf) << "recent " << r;
  }
  // With the Gumbel noise the selection differs from H2O's at some step.
  EXPECT_NE(TraceOf("h2o:budget=18,recent=0.3 + f16", 40, 16, 60),
            TraceOf("keyformer:budget=18,recent=0.3 + f16", 40, 16, 60));
}

TEST(PolicyTest, ScoresMoveWithTheTokens) {
  std::unique_ptr<KvCache> cache = MakeCache("h2o:budget=10 + f32");
  CacheDriver driver(*cache, kHeads, 3);
  for (int64_t n : {20, 1, 1, 1, 4}) ASSERT_TRUE(driver.Step(n).ok());
  const auto* policy = dynamic_cast<const HeavyRecentPolicy*>(cache->policy());
  ASSERT_NE(policy, nullptr);
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKv; ++h) {
      ASSERT_EQ(policy->scores(l, h).size(), cache->positions(l, h).size());
      // Every held token has received some attention (its own row at least).
      for (float s : policy->scores(l, h)) EXPECT_GT(s, 0.0f);
    }
  }
  ASSERT_TRUE(cache->Clear().ok());
  EXPECT_FALSE(cache->sequence_begun());
}

TEST(PolicyTest, SelectHeavyAndRecentKeepsTheTopOlderScoresAndTheNewest) {
  const std::vector<float> scores = {5, 1, 9, 9, 0, 3, 7, 2, 8, 1};
  std::vector<int64_t> keep;
  SelectHeavyAndRecent(scores, 3, 3, &keep);
  // Recent: 7, 8, 9. Heavy among 0..6: 9 (2), 9 (3), 7 (6); ties go to the older token.
  EXPECT_EQ(keep, (std::vector<int64_t>{2, 3, 6, 7, 8, 9}));
  SelectHeavyAndRecent(std::vector<float>(8, 1.0f), 2, 3, &keep);
  EXPECT_EQ(keep, (std::vector<int64_t>{0, 1, 2, 6, 7}));
  SelectHeavyAndRecent(scores, 0, 2, &keep);
  EXPECT_EQ(keep, (std::vector<int64_t>{2, 3}));
}

TEST(PolicyTest, KeyformerTemperatureSchedule) {
  const SequencePlan plan{.n_prompt = 100, .n_generate = 10};
  EXPECT_DOUBLE_EQ(KeyformerTau(1, 2, plan, {0, 0, 100}), 1.0);            // the prompt
  EXPECT_DOUBLE_EQ(KeyformerTau(1, 2, plan, {0, 100, 1}), 1.1);            // decode step 1
  EXPECT_DOUBLE_EQ(KeyformerTau(1, 2, plan, {0, 104, 1}), 1.5);            // decode step 5
  EXPECT_DOUBLE_EQ(KeyformerTau(1, 2, plan, {0, 109, 1}), 2.0);            // step T
  EXPECT_DOUBLE_EQ(KeyformerTau(1, 2, plan, {0, 150, 1}), 2.0);            // past T: tau_end
  EXPECT_DOUBLE_EQ(KeyformerTau(1, 2, {.n_prompt = 5}, {0, 50, 1}), 1.0);  // no plan
}

}  // namespace
}  // namespace kvpack
