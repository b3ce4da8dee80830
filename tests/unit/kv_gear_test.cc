// GEAR / GEAR-L (src/kv/codecs/gear_codec.h, METHODS.md 1.7) beyond the conformance matrix:
// spec parameters, block streaming (prompt block, n_b blocks, no re-compression), the
// outlier filter and its exclusion from the backbone's min/max, the low-rank part as a
// projection of the backbone's error (two-sided bounds against Eigen's SVD), KIVI groups
// cut short by a block, eviction inside blocks and inside the shared buffer, memory and bits
// per value, and attention through the cache against the decode-based oracle.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include <gtest/gtest.h>

#include "kv_integer_bounds.h"
#include "kv_sparse_bounds.h"

#include "core/half.h"
#include "kv/attention.h"
#include "kv/codec_registry.h"
#include "kv/codecs/gear_codec.h"
#include "kv/kv_cache.h"

namespace kvpack {
namespace {

constexpr double kFp16Eps = 1.0 / 2048.0;

std::vector<float> Normal(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rows [n, heads, d] whose channels have offsets (as real keys do) plus a shared low-rank
// component, so that the backbone's error has structure for L to find.
std::vector<float> Structured(int64_t n, int heads, int d, uint32_t seed) {
  std::vector<float> x = Normal(n * heads * d, seed, 0.3f);
  const std::vector<float> u = Normal(n * 2, seed + 1), w = Normal(2 * heads * d, seed + 2);
  for (int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < heads * d; ++j) {
      x[t * heads * d + j] += 0.5f * (j % 7) - 1.0f + u[t * 2] * w[j] + u[t * 2 + 1] * w[heads * d + j];
    }
  }
  return x;
}

std::unique_ptr<GearStore> Make(const std::string& spec, int heads, int d, KvComponent c) {
  Result<GearConfig> config = ParseGearConfig(*ParseMethodSpec(spec));
  EXPECT_TRUE(config.ok()) << config.status().message();
  Result<std::unique_ptr<GearStore>> s = GearStore::Create(*config, {0, heads, d, c});
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s).value();
}

std::vector<float> DecodeHead(const ComponentStore& s, int h, int d) {
  std::vector<float> out(s.n_tokens(h) * d);
  s.Decode(h, 0, s.n_tokens(h), out.data());
  return out;
}

float Fp16Round(float x) { return Fp16ToFp32(Fp32ToFp16(x)); }

TEST(GearSpecTest, DefaultsAndCanonicalNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"gear", "gear:bits=2,backbone=kivi,group=64,sparsity=0.02,rank_prefill=4,rank_decode=2,"
               "iters=3,buffer=64"},
      {"gear:bits=4", "gear:bits=4,backbone=kcvt,sparsity=0.02,rank_prefill=4,rank_decode=2,"
                      "iters=3,buffer=20"},
      {"gear-l", "gear-l:bits=2,backbone=kivi,group=64,rank_prefill=4,rank_decode=2,iters=3,"
                 "buffer=64"},
      {"gear-l:bits=8,backbone=flexgen,group=32,rank_prefill=6,rank_decode=0,iters=7,buffer=9",
       "gear-l:bits=8,backbone=flexgen,group=32,rank_prefill=6,rank_decode=0,iters=7,buffer=9"},
      {"gear:backbone=kcvt,sparsity=0.1", "gear:bits=2,backbone=kcvt,sparsity=0.1,"
                                          "rank_prefill=4,rank_decode=2,iters=3,buffer=20"},
  };
  for (auto [in, canonical] : cases) {
    auto s = CreateStore(*ParseMethodSpec(in), {0, 2, 64, KvComponent::kKey});
    ASSERT_TRUE(s.ok()) << in << ": " << s.status().message();
    EXPECT_EQ((*s)->spec(), canonical);
    // The canonical name means the same configuration.
    auto again = CreateStore(*ParseMethodSpec((*s)->spec()), {0, 2, 64, KvComponent::kKey});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ((*again)->spec(), canonical);
  }
}

TEST(GearSpecTest, BadParametersAreRejectedWithTheirName) {
  const std::pair<const char*, const char*> cases[] = {
      {"gear:bits=3", "bits"},           {"gear:backbone=hf", "backbone"},
      {"gear:sparsity=0.7", "sparsity"}, {"gear:sparsity=x", "sparsity"},
      {"gear-l:sparsity=0.02", "sparsity"}, {"gear:backbone=kcvt,group=32", "group"},
      {"gear:rank_prefill=-1", "rank_prefill"}, {"gear:rank_decode=65", "rank_decode"},
      {"gear:iters=0", "iters"},         {"gear:buffer=0", "buffer"},
      {"gear:group=0", "group"},         {"gear:rank=4", "rank"},
  };
  for (auto [spec, key] : cases) {
    auto s = CreateStore(*ParseMethodSpec(spec), {0, 1, 64, KvComponent::kKey});
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_NE(s.status().message().find(key), std::string::npos) << s.status().message();
  }
}

TEST(GearSpecTest, SeparateKeyAndValueSettingsCompose) {
  auto cache = KvCache::Create({2, 2, 32}, "k=gear:bits=2 v=gear-l:bits=4");
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  EXPECT_EQ((*cache)->keys(1).spec().rfind("gear:bits=2,backbone=kivi", 0), 0u);
  EXPECT_EQ((*cache)->values(1).spec().rfind("gear-l:bits=4,backbone=kcvt", 0), 0u);
}

// The prompt is one block; later tokens stream through the n_b buffer; compressed tokens
// never change again; after the prompt, chunking does not matter.
TEST(GearStreamingTest, PromptBlockThenBuffersOfNbWithoutRecompression) {
  const int heads = 2, d = 16, nb = 8;
  const std::string spec = "gear:bits=2,group=4,buffer=8,sparsity=0.1";
  for (KvComponent c : {KvComponent::kKey, KvComponent::kValue}) {
    const int64_t n = 61;
    const auto rows = Structured(n, heads, d, 3);
    auto one = Make(spec, heads, d, c), chunked = Make(spec, heads, d, c);
    ASSERT_TRUE(one->Append(rows.data(), 13).ok());
    EXPECT_EQ(one->n_blocks(0), 1);
    EXPECT_EQ(one->n_buffered(0), 0);
    std::vector<float> prev = DecodeHead(*one, 1, d);
    int64_t prev_compressed = one->n_compressed(1);
    for (int64_t t = 13; t < n; ++t) {
      ASSERT_TRUE(one->Append(&rows[t * heads * d], 1).ok());
      const int64_t after_prompt = t + 1 - 13;
      ASSERT_EQ(one->n_buffered(0), after_prompt % nb) << t;
      ASSERT_EQ(one->n_blocks(0), 1 + after_prompt / nb) << t;
      ASSERT_EQ(one->Memory().residual_bytes,
                static_cast<size_t>(after_prompt % nb * heads * d * 2));
      const auto now = DecodeHead(*one, 1, d);
      // Everything compressed before this token arrived is bit-identical (never
      // re-compressed); buffered tokens are their fp16 values.
      ASSERT_EQ(0, std::memcmp(now.data(), prev.data(), prev_compressed * d * sizeof(float)));
      for (int64_t k = one->n_compressed(1); k <= t; ++k) {
        for (int ch = 0; ch < d; ++ch) {
          ASSERT_EQ(now[k * d + ch], Fp16Round(rows[(k * heads + 1) * d + ch]));
        }
      }
      prev = now;
      prev_compressed = one->n_compressed(1);
    }
    // Same stored form with chunks of 1..9 after the same prompt.
    ASSERT_TRUE(chunked->Append(rows.data(), 13).ok());
    for (int64_t t = 13, m = 1; t < n; t += m, m = m % 9 + 1) {
      ASSERT_TRUE(chunked->Append(&rows[t * heads * d], std::min(m, n - t)).ok());
    }
    for (int h = 0; h < heads; ++h) {
      const auto a = DecodeHead(*one, h, d), b = DecodeHead(*chunked, h, d);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    }
    EXPECT_EQ(one->Memory().payload_bytes(), chunked->Memory().payload_bytes());
  }
}

TEST(GearOutlierTest, CountsAndExtremesPerChannelForKeysPerTokenForValues) {
  EXPECT_EQ(OutliersPerSide(0.02, 64), 1);   // 0.64 -> 1
  EXPECT_EQ(OutliersPerSide(0.02, 32), 0);   // 0.32 -> 0
  EXPECT_EQ(OutliersPerSide(0.02, 500), 5);
  EXPECT_EQ(OutliersPerSide(0.5, 5), 1);     // 1.25 -> 1, never more than (m - 1) / 2
  EXPECT_EQ(OutliersPerSide(0.5, 4), 1);     // 1 -> 1
  EXPECT_EQ(OutliersPerSide(0.0, 1000), 0);
  const int64_t n = 40;
  const int heads = 2, d = 8, row = heads * d;
  const auto x = Normal(n * row, 5);
  std::vector<uint8_t> mask(n * row);
  const double s = 0.2;  // 4 per side over 40 tokens; 2 per side over 16 entries
  SelectOutliers(x.data(), n, heads, d, KvComponent::kKey, s, mask.data());
  for (int j = 0; j < row; ++j) {
    std::vector<float> col(n);
    for (int64_t t = 0; t < n; ++t) col[t] = x[t * row + j];
    std::vector<float> sorted = col;
    std::sort(sorted.begin(), sorted.end());
    int marked = 0;
    for (int64_t t = 0; t < n; ++t) {
      const bool extreme = col[t] <= sorted[3] || col[t] >= sorted[n - 4];
      ASSERT_EQ(mask[t * row + j] != 0, extreme) << j << " " << t;
      marked += mask[t * row + j];
    }
    EXPECT_EQ(marked, 8);
  }
  SelectOutliers(x.data(), n, heads, d, KvComponent::kValue, s, mask.data());
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> r(x.begin() + t * row, x.begin() + (t + 1) * row), sorted = r;
    std::sort(sorted.begin(), sorted.end());
    for (int j = 0; j < row; ++j) {
      ASSERT_EQ(mask[t * row + j] != 0, r[j] <= sorted[1] || r[j] >= sorted[row - 2]);
    }
  }
}

// With ties the marked set is the k smallest and k largest by (value, position), whichever
// selection runs (one pass with sorted insertion up to 16 per side, nth_element beyond), for
// keys (sets: channels over the tokens) and values (sets: a token's entries), on inputs
// with many ties and on sorted ones (every offer renews a boundary): compared with a sort.
TEST(GearOutlierTest, TiesAreBrokenByPosition) {
  enum class Order { kTies, kAscending, kDescending, kTiedStart };
  for (const KvComponent component : {KvComponent::kKey, KvComponent::kValue}) {
    const bool keys = component == KvComponent::kKey;
    // Keys, d = 64 channels: k = 1, 5, 32 over 24, 100, 640 tokens with s = 0.1. Values,
    // 4 tokens: k = 1, 5, 32 over rows of 24, 100, 640 entries (heads x d).
    for (int64_t set_len : {24, 100, 640}) {
      const int heads = keys ? 1 : static_cast<int>(set_len / 4), d = keys ? 64 : 4;
      const int64_t n = keys ? set_len : 4, row = int64_t{heads} * d;
      const int64_t k = OutliersPerSide(0.1, set_len), n_sets = keys ? row : n;
      for (const Order order :
             {Order::kTies, Order::kAscending, Order::kDescending, Order::kTiedStart}) {
        // Sorted orders go in equal pairs (0, 0, 1, 1, ...): a pair straddles the boundary
        // of the kept entries and is then pushed out, which only the right order among
        // equal values survives. kTiedStart: k equal entries, one larger (which must push
        // out the first of them), then smaller ones.
        std::vector<float> x(n * row);
        std::mt19937 rng(static_cast<uint32_t>(set_len));
        for (int64_t set = 0; set < n_sets; ++set) {
          for (int64_t i = 0; i < set_len; ++i) {
            const float pair = static_cast<float>(i / 2);
            float v = order == Order::kAscending ? pair : -pair;
            if (order == Order::kTies) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);
            if (order == Order::kTiedStart) v = i < k ? 0.0f : i == k ? 1.0f : -1.0f - i;
            x[keys ? i * row + set : set * row + i] = v;
          }
        }
        std::vector<uint8_t> mask(n * row);
        SelectOutliers(x.data(), n, heads, d, component, 0.1, mask.data());
        for (int64_t set = 0; set < n_sets; ++set) {
          std::vector<std::pair<float, int64_t>> entries(set_len);  // (value, position)
          for (int64_t i = 0; i < set_len; ++i) {
            const int64_t p = keys ? i * row + set : set * row + i;
            entries[i] = {x[p], p};
          }
          std::sort(entries.begin(), entries.end());
          std::vector<uint8_t> want(n * row, 0);
          for (int64_t i = 0; i < k; ++i) {
            want[entries[i].second] = want[entries[set_len - 1 - i].second] = 1;
          }
          for (int64_t i = 0; i < set_len; ++i) {
            const int64_t p = entries[i].second;
            ASSERT_EQ(mask[p], want[p]) << (keys ? "keys" : "values") << " set length " << set_len
                                        << " order " << static_cast<int>(order) << " set " << set
                                        << " position " << p;
          }
        }
      }
    }
  }
}

TEST(GearOutlierTest, SubstitutionKeepsEveryGroupRangeToItsKeptEntries) {
  const int64_t n = 30;
  const int heads = 2, d = 12, row = heads * d;
  auto x = Normal(n * row, 6);
  std::vector<uint8_t> mask(n * row);
  SelectOutliers(x.data(), n, heads, d, KvComponent::kKey, 0.3, mask.data());
  const BackboneGroups layouts[] = {
      {BackboneGroups::Kind::kTokenRunsPerChannel, 7},
      {BackboneGroups::Kind::kChannelRunsPerToken, 5},
      {BackboneGroups::Kind::kWholeTokenRow, 0},
  };
  std::vector<float> y(x.size());
  for (const BackboneGroups& g : layouts) {
    SubstituteOutliers(x.data(), mask.data(), n, heads, d, g, y.data());
    // Enumerate the groups again and compare ranges.
    std::vector<std::vector<int64_t>> groups;
    if (g.kind == BackboneGroups::Kind::kTokenRunsPerChannel) {
      for (int j = 0; j < row; ++j) {
        for (int64_t t0 = 0; t0 < n; t0 += g.run) {
          groups.emplace_back();
          for (int64_t t = t0; t < std::min(n, t0 + g.run); ++t) groups.back().push_back(t * row + j);
        }
      }
    } else if (g.kind == BackboneGroups::Kind::kChannelRunsPerToken) {
      for (int64_t t = 0; t < n; ++t) {
        for (int h = 0; h < heads; ++h) {
          for (int c0 = 0; c0 < d; c0 += g.run) {
            groups.emplace_back();
            for (int c = c0; c < std::min<int>(d, c0 + g.run); ++c) groups.back().push_back(t * row + h * d + c);
          }
        }
      }
    } else {
      for (int64_t t = 0; t < n; ++t) {
        groups.emplace_back();
        for (int j = 0; j < row; ++j) groups.back().push_back(t * row + j);
      }
    }
    for (const auto& grp : groups) {
      float kept_lo = INFINITY, kept_hi = -INFINITY, lo = INFINITY, hi = -INFINITY;
      for (int64_t i : grp) {
        if (!mask[i]) {
          kept_lo = std::min(kept_lo, x[i]);
          kept_hi = std::max(kept_hi, x[i]);
          ASSERT_EQ(y[i], x[i]);
        }
        lo = std::min(lo, y[i]);
        hi = std::max(hi, y[i]);
      }
      if (std::isfinite(kept_lo)) {
        ASSERT_EQ(lo, kept_lo);
        ASSERT_EQ(hi, kept_hi);
      } else {
        ASSERT_EQ(lo, hi);  // all outliers: a constant group
      }
    }
  }
}

// With rank 0, X^ = D^ + S: away from outliers the error is the backbone's on the kept
// range of its group (a planted spike does not widen it); at outliers X comes back to the
// fp16 rounding of X - D^.
TEST(GearOutlierTest, PlantedSpikesAreExactAndDoNotWidenTheirGroups) {
  const int heads = 2, d = 16;
  const int64_t n = 64;
  for (KvComponent c : {KvComponent::kKey, KvComponent::kValue}) {
    auto x = Normal(n * heads * d, 8);
    for (int64_t t = 3; t < n; t += 9) x[(t * heads + t % heads) * d + (t * 5) % d] = 40.0f;
    auto gear = Make("gear:bits=2,backbone=kivi,group=16,sparsity=0.1,rank_prefill=0", heads, d, c);
    auto plain = Make("gear-l:bits=2,backbone=kivi,group=16,rank_prefill=0", heads, d, c);
    ASSERT_TRUE(gear->Append(x.data(), n).ok());
    ASSERT_TRUE(plain->Append(x.data(), n).ok());
    double max_spike_err = 0.0, err_gear = 0.0, err_plain = 0.0;
    for (int h = 0; h < heads; ++h) {
      const auto g = DecodeHead(*gear, h, d), p = DecodeHead(*plain, h, d);
      for (int64_t t = 0; t < n; ++t) {
        for (int ch = 0; ch < d; ++ch) {
          const float v = x[(t * heads + h) * d + ch];
          if (v == 40.0f) max_spike_err = std::max(max_spike_err, std::fabs(double(g[t * d + ch]) - v));
          err_gear += std::pow(g[t * d + ch] - v, 2);
          err_plain += std::pow(p[t * d + ch] - v, 2);
        }
      }
    }
    // |X - D^| <= 40 + 4.5 here: its fp16 rounding is below 45 * 2^-11 ~ 0.022.
    EXPECT_LE(max_spike_err, 45 * kFp16Eps);
    // N(0,1) ranges ~ 4-5 instead of ~ 42: the 2-bit error drops by several times; both are
    // still lossy.
    EXPECT_LT(err_gear, 0.3 * err_plain) << (c == KvComponent::kKey ? "K" : "V");
    EXPECT_GT(err_gear, 0.01 * n * heads * d);
  }
}

// L = A A^T R is a projection of the backbone's error R = X16 - D^ (per head, per block):
//   sqrt(sum_{i>r} sigma_i(R)^2) <= ||R - L||_F <= ||R||_F,
// up to the fp16 rounding of A and B (|dL| <= 2 * 2^-11 * sqrt(n) max|R| per element).
TEST(GearLowRankTest, ErrorIsAProjectionOfTheBackboneErrorWithinEckartYoung) {
  const int heads = 2, d = 32;
  const int64_t n = 96;
  for (const char* backbone : {"kivi", "kcvt", "flexgen"}) {
    for (KvComponent c : {KvComponent::kKey, KvComponent::kValue}) {
      const auto x = Structured(n, heads, d, 11);
      const std::string base = std::string("gear-l:bits=2,backbone=") + backbone;
      auto r0 = Make(base + ",rank_prefill=0", heads, d, c);
      auto r4 = Make(base + ",rank_prefill=4", heads, d, c);
      ASSERT_TRUE(r0->Append(x.data(), n).ok());
      ASSERT_TRUE(r4->Append(x.data(), n).ok());
      for (int h = 0; h < heads; ++h) {
        const auto dhat = DecodeHead(*r0, h, d), xhat = DecodeHead(*r4, h, d);
        Eigen::MatrixXd resid(n, d);
        double err2 = 0.0, max_r = 0.0;
        for (int64_t t = 0; t < n; ++t) {
          for (int ch = 0; ch < d; ++ch) {
            const float x16 = Fp16Round(x[(t * heads + h) * d + ch]);
            resid(t, ch) = x16 - dhat[t * d + ch];
            max_r = std::max(max_r, std::fabs(resid(t, ch)));
            err2 += std::pow(double(x16) - xhat[t * d + ch], 2);
          }
        }
        Eigen::JacobiSVD<Eigen::MatrixXd> svd(resid);
        double tail = 0.0;
        for (int i = 4; i < d; ++i) tail += std::pow(svd.singularValues()(i), 2);
        const double err = std::sqrt(err2), slack = 2 * kFp16Eps * std::sqrt(n) * max_r *
                                                        std::sqrt(double(n) * d);
        EXPECT_GE(err, std::sqrt(tail) - slack) << backbone << " head " << h;
        EXPECT_LE(err, resid.norm() + slack) << backbone << " head " << h;
        // Structured data: the low-rank part removes a real share of the error.
        EXPECT_LT(err, 0.95 * resid.norm()) << backbone << " head " << h;
      }
    }
  }
}

TEST(GearLowRankTest, ErrorFallsAsTheRankGrows) {
  const int heads = 2, d = 32;
  const int64_t n = 128;
  const auto x = Structured(n, heads, d, 12);
  for (KvComponent c : {KvComponent::kKey, KvComponent::kValue}) {
    double prev = INFINITY;
    for (int r : {0, 1, 2, 4, 8, 16}) {
      auto s = Make("gear-l:bits=2,rank_prefill=" + std::to_string(r), heads, d, c);
      ASSERT_TRUE(s->Append(x.data(), n).ok());
      double err = 0.0;
      for (int h = 0; h < heads; ++h) {
        const auto dec = DecodeHead(*s, h, d);
        for (int64_t t = 0; t < n; ++t) {
          for (int ch = 0; ch < d; ++ch) err += std::pow(dec[t * d + ch] - x[(t * heads + h) * d + ch], 2);
        }
      }
      EXPECT_LT(err, prev) << "rank " << r;
      prev = err;
    }
  }
}

// KIVI keys group along tokens: a block whose length is not a multiple of G ends with a
// shorter group; every token is compressed (nothing left in fp16) and each group's error is
// within Q_b of that group's own range.
TEST(GearBackboneTest, KiviKeyGroupsCutShortByTheBlock) {
  const int heads = 2, d = 8, g = 16;
  const int64_t n = 37;  // groups of 16, 16, 5
  const auto x = Normal(n * heads * d, 13);
  auto s = Make("gear-l:bits=2,group=16,rank_prefill=0", heads, d, KvComponent::kKey);
  ASSERT_TRUE(s->Append(x.data(), n).ok());
  const MemoryUsage m = s->Memory();
  EXPECT_EQ(m.residual_bytes, 0u);
  EXPECT_EQ(m.scale_bytes, static_cast<size_t>(heads * 3 * d * 2));
  EXPECT_EQ(m.code_bytes, static_cast<size_t>(heads * n * (d * 2 / 8)));
  for (int h = 0; h < heads; ++h) {
    const auto dec = DecodeHead(*s, h, d);
    for (int ch = 0; ch < d; ++ch) {
      for (int64_t t0 = 0; t0 < n; t0 += g) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t t = t0; t < std::min<int64_t>(n, t0 + g); ++t) {
          lo = std::min(lo, Fp16Round(x[(t * heads + h) * d + ch]));
          hi = std::max(hi, Fp16Round(x[(t * heads + h) * d + ch]));
        }
        const double scale = (hi - lo) / 3.0;
        for (int64_t t = t0; t < std::min<int64_t>(n, t0 + g); ++t) {
          const double e = std::fabs(dec[t * d + ch] - Fp16Round(x[(t * heads + h) * d + ch]));
          ASSERT_LE(e, scale / 2 + 4 * scale * kFp16Eps + 8 * kFp16Eps) << t << " " << ch;
        }
      }
    }
  }
}

// Eviction inside a compressed block drops rows of A and entries of S and keeps B; a block
// with no survivor frees B too. A buffered token evicted from one head stays in the shared
// buffer until its block is compressed, then leaves that head's block; evicted from every
// head it is freed at once.
TEST(GearRetainTest, PartlyEvictedBlocksAndSharedBuffer) {
  const int heads = 2, d = 16;
  const std::string spec = "gear:bits=2,group=8,buffer=10,sparsity=0.2,rank_prefill=3,rank_decode=2";
  auto s = Make(spec, heads, d, KvComponent::kKey);
  const auto x = Structured(60, heads, d, 14);
  ASSERT_TRUE(s->Append(x.data(), 30).ok());                    // prompt block: rows 0..29
  ASSERT_TRUE(s->Append(&x[30 * heads * d], 14).ok());          // block 30..39, buffer 40..43
  ASSERT_EQ(s->n_blocks(0), 2);
  ASSERT_EQ(s->n_buffered(0), 4);
  const auto full0 = DecodeHead(*s, 0, d), full1 = DecodeHead(*s, 1, d);
  const MemoryUsage m0 = s->Memory();
  const int64_t outliers0 = s->n_outliers(0);
  const size_t outlier_index0 = s->outlier_index_bytes(0);

  // Head 0: evict rows 0..4 of the prompt block, the whole second block, and buffered 41.
  std::vector<int64_t> keep;
  for (int64_t t = 5; t < 30; ++t) keep.push_back(t);
  for (int64_t t : {40, 42, 43}) keep.push_back(t);
  ASSERT_TRUE(s->Retain(0, keep).ok());
  EXPECT_EQ(s->n_tokens(0), 28);
  EXPECT_EQ(s->n_blocks(0), 1);      // the second block had no survivor
  EXPECT_EQ(s->n_buffered(0), 3);
  EXPECT_EQ(s->n_buffered(1), 4);
  const MemoryUsage m1 = s->Memory();
  // A: 3 fp16 per evicted prompt row; the second block's A (10 x 2) and B (16 x 2) freed.
  EXPECT_EQ(m0.factor_bytes - m1.factor_bytes, static_cast<size_t>(2 * (5 * 3 + 10 * 2 + 16 * 2)));
  EXPECT_EQ(m0.residual_bytes, m1.residual_bytes);  // head 1 still holds buffered row 41
  // Block tables: head 0 loses 2 of its 6 backbone key groups (8-byte entries: rows 30..37
  // and 38..39) and 1 of its 2 factor blocks; the heads' buffer row lists (3 + 4 rows) appear;
  // head 0's outlier cells are rebuilt over fewer rows.
  EXPECT_LT(s->outlier_index_bytes(0), outlier_index0);
  EXPECT_EQ(m1.other_bytes + 2 * 8 + LowRankBlocks::kBlockTableBytes +
                (outlier_index0 - s->outlier_index_bytes(0)),
            m0.other_bytes + 7 * 8);
  EXPECT_LT(s->n_outliers(0), outliers0);
  const auto after0 = DecodeHead(*s, 0, d);
  for (size_t k = 0; k < keep.size(); ++k) {
    ASSERT_EQ(0, std::memcmp(&after0[k * d], &full0[keep[k] * d], d * sizeof(float))) << k;
  }
  ASSERT_EQ(0, std::memcmp(DecodeHead(*s, 1, d).data(), full1.data(), full1.size() * sizeof(float)));

  // Fused kernels on the diverged head agree with its decode.
  const auto q = Normal(2 * d, 15, 0.5f);
  std::vector<float> scores(2 * 28), out(2 * d, 0.0f), p = Normal(2 * 28, 16, 0.3f);
  s->Scores(0, q.data(), 2, 0, 28, scores.data());
  s->Accumulate(0, p.data(), 2, 0, 28, out.data());
  const auto outliers = s->OutliersOf(0, 0, 28);  // their products take bf16 factors
  for (int i = 0; i < 2; ++i) {
    for (int64_t t = 0; t < 28; ++t) {
      double ref = 0.0;
      for (int c = 0; c < d; ++c) ref += q[i * d + c] * after0[t * d + c];
      // The 2-bit backbone is scored with an int8 query (kv_integer_bounds.h); its
      // groups span at most the data's spread.
      EXPECT_NEAR(scores[i * 28 + t], ref,
                  1e-4 + IntegerKeyScoreBound(&q[i * d], d, SpreadOf(x)) +
                      SparseScoreBound(outliers, &q[i * d], t));
    }
    for (int c = 0; c < d; ++c) {
      double ref = 0.0;
      for (int64_t t = 0; t < 28; ++t) ref += p[i * 28 + t] * after0[t * d + c];
      EXPECT_NEAR(out[i * d + c], ref, 1e-4 + SparseAccumulateBound(outliers, &p[i * 28], 0, 28, c));
    }
  }

  // Head 1 evicts buffered row 41 too: the row is freed now.
  std::vector<int64_t> keep1;
  for (int64_t t = 0; t < 44; ++t) {
    if (t != 41) keep1.push_back(t);
  }
  ASSERT_TRUE(s->Retain(1, keep1).ok());
  EXPECT_EQ(s->Memory().residual_bytes, static_cast<size_t>(3 * heads * d * 2));

  // Diverge again (head 1 drops buffered row 40), then fill the buffer: the block is
  // compressed with every row, and row 40 leaves head 1's compressed block at once.
  std::vector<int64_t> keep2;
  for (int64_t t = 0; t < 43; ++t) {
    if (t != 40) keep2.push_back(t);
  }
  ASSERT_TRUE(s->Retain(1, keep2).ok());
  ASSERT_EQ(s->n_buffered(1), 2);
  ASSERT_TRUE(s->Append(&x[44 * heads * d], 7).ok());  // buffer 3 + 7 = 10 -> flush
  EXPECT_EQ(s->n_buffered(0), 0);
  EXPECT_EQ(s->n_buffered(1), 0);
  EXPECT_EQ(s->n_tokens(0), 25 + 10);
  EXPECT_EQ(s->n_tokens(1), 40 + 9);
  EXPECT_EQ(s->Memory().residual_bytes, 0u);
  const auto h1 = DecodeHead(*s, 1, d);
  // Head 1's last 9 tokens are x rows 42, 43, 44..50 (2-bit lossy, as in the conformance
  // test's check after eviction).
  const int64_t src[] = {42, 43, 44, 45, 46, 47, 48, 49, 50};
  for (int k = 0; k < 9; ++k) {
    for (int c = 0; c < d; ++c) {
      ASSERT_NEAR(h1[(40 + k) * d + c], x[(src[k] * heads + 1) * d + c], 4.0) << k;
    }
  }
}

// Bits per value count everything stored: backbone codes and parameters, the fp16 factors,
// the outliers' indices and values, the buffer and the block tables.
TEST(GearMemoryTest, BitsPerValueIncludeLowRankAndSparseParts) {
  const int heads = 4, d = 64;
  const int64_t n = 2048;
  for (KvComponent c : {KvComponent::kKey, KvComponent::kValue}) {
    const auto x = Normal(n * heads * d, 17);
    double prev_bpv = 0.0;
    for (const char* spec : {"gear-l:rank_prefill=0,rank_decode=0", "gear-l", "gear"}) {
      auto s = CreateStore(*ParseMethodSpec(spec), {0, heads, d, c});
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE((*s)->Append(x.data(), 256).ok());
      for (int64_t t = 256; t < n; ++t) ASSERT_TRUE((*s)->Append(&x[t * heads * d], 1).ok());
      const MemoryUsage m = (*s)->Memory();
      EXPECT_EQ(m.n_values, n * heads * d);
      EXPECT_DOUBLE_EQ(m.bits_per_value(), 8.0 * m.payload_bytes() / (n * heads * d));
      const int64_t blocks = 1 + (n - 256) / 64;
      const int64_t factors = std::string(spec) == "gear-l:rank_prefill=0,rank_decode=0"
                                  ? 0
                                  : heads * 2 * (256 * 4 + d * 4 + (n - 256) * 2 + (blocks - 1) * d * 2);
      EXPECT_EQ(m.factor_bytes, static_cast<size_t>(factors)) << spec;
      EXPECT_EQ(m.sparse_bytes > 0, std::string(spec) == "gear") << spec;
      EXPECT_GT(m.bits_per_value(), prev_bpv) << spec;
      prev_bpv = m.bits_per_value();
      std::printf("  %s %s bits/value at %lld tokens (256 prompt + decode): %.3f (factors %.3f, sparse %.3f)\n",
                  c == KvComponent::kKey ? "K" : "V", spec, static_cast<long long>(n),
                  m.bits_per_value(), 8.0 * m.factor_bytes / m.n_values,
                  8.0 * m.sparse_bytes / m.n_values);
    }
  }
}

// Attention through the cache (fused Scores/Accumulate of every part) equals attention over
// the explicit reconstruction (AttendRef decodes the cache).
// 8-bit backbones keep float scores, so attention must match its reference to float
// rounding; 2- and 4-bit keys are scored with an int8 query, whose bounded error the
// conformance test (FusedKernelsMatchDecode) checks score by score. Values (Accumulate)
// never quantize the probabilities, so the 2/4-bit value specs stay here.
TEST(GearAttentionTest, FusedAttentionMatchesAttentionOverDecode) {
  for (const char* spec : {"gear:bits=8", "gear-l:bits=8", "k=gear:bits=8 v=gear-l:bits=4",
                           "gear:bits=8,backbone=kcvt,buffer=5,sparsity=0.1",
                           "k=gear-l:bits=8,backbone=flexgen,group=8 v=gear:group=16,buffer=16"}) {
    const int n_kv = 2, n_heads = 4, d = 32;
    auto cache = KvCache::Create({1, n_kv, d}, spec);
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    std::mt19937 rng(3);
    int32_t pos = 0;
    for (int64_t n : {150, 1, 1, 40, 1, 70}) {
      const auto k = Structured(n, n_kv, d, pos + 1), v = Normal(n * n_kv * d, pos + 2);
      std::vector<int32_t> p(n);
      for (auto& x : p) x = pos++;
      ASSERT_TRUE((*cache)->Append(0, k.data(), v.data(), p.data(), n).ok());
    }
    for (int64_t rows : {1, 9}) {
      const auto q = Normal(rows * n_heads * d, 21, 0.5f);
      const auto k = Normal(rows * n_kv * d, 22), v = Normal(rows * n_kv * d, 23);
      const float scale = 1.0f / std::sqrt(32.0f);
      AttentionChunk chunk{q.data(), k.data(), v.data(), rows, n_heads, scale};
      std::vector<float> out(rows * n_heads * d), ref(out.size());
      ThreadPool pool(2);
      Attend(**cache, 0, chunk, out.data(), &pool);
      AttendRef(**cache, 0, chunk, ref.data());
      // A convex combination of value rows (|v| < ~6): float rounding of the softmax and of
      // the regrouped dot products stays far below 1e-4 (as in kv_attention_test.cc).
      // The sparse part's bf16 factors (kv_sparse_bounds.h) add: every score moves by at
      // most eps, so every softmax weight by a factor in [e^-2eps, e^2eps] and an output by
      // at most (e^2eps - 1) max|v|; the values' outliers move it by at most 2^-8 max|v_S|
      // (weights summing to 1). A worst case (every rounding error aligned, ~100x the
      // observed); the conformance test bounds each score and output on its own.
      const ComponentStore &ks = (*cache)->keys(0), &vs = (*cache)->values(0);
      double eps = 0.0, v_max = 0.0, v_outlier_max = 0.0;
      for (int g = 0; g < n_kv; ++g) {
        const auto k_out = OutliersOfStore(ks, g, 0, ks.n_tokens(g));
        for (int64_t r = 0; r < rows; ++r) {
          for (int hh = g * (n_heads / n_kv); hh < (g + 1) * (n_heads / n_kv); ++hh) {
            for (int64_t t = 0; t < ks.n_tokens(g); ++t) {
              eps = std::max(eps, scale * SparseScoreBound(k_out, &q[(r * n_heads + hh) * d], t));
            }
          }
        }
        for (float x : DecodeHead(vs, g, d)) v_max = std::max(v_max, std::fabs(static_cast<double>(x)));
        for (const OutlierEntry& e : OutliersOfStore(vs, g, 0, vs.n_tokens(g))) {
          v_outlier_max = std::max(v_outlier_max, std::fabs(static_cast<double>(Fp16ToFp32(e.value))));
        }
      }
      for (float x : v) v_max = std::max(v_max, std::fabs(static_cast<double>(x)));
      const double tol = 1e-4 + std::expm1(2.0 * eps) * v_max + Bf16RoundingOf(v_outlier_max);
      for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], tol) << spec << " " << i;
    }
  }
}

}  // namespace
}  // namespace kvpack

namespace kvpack {
namespace {

// Calls fn(r0, r1, p) for each non-empty range [r0, min(rows, r0 + len)) of the given starts
// and lengths, with small integer weights p [n_q, r1 - r0] (the products stay exact).
template <typename Fn>
void ForEachRowRange(std::initializer_list<int64_t> starts, std::initializer_list<int64_t> lens,
                     int64_t rows, int n_q, Fn fn) {
  for (int64_t r0 : starts) {
    for (int64_t len : lens) {
      const int64_t r1 = std::min(rows, r0 + len), n = r1 - r0;
      if (n <= 0) continue;
      std::vector<float> p(n_q * n);
      for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
      fn(r0, r1, p);
    }
  }
}

// The outlier cells, in both layouts: every row range [r0, r1), aligned to the slices or
// not, before and after eviction, sees exactly the entries of its rows in both products and
// in decode (brute force over a plain list; small integers keep every sum exact). Blocks of
// 1..150 rows end inside slices, so partly filled slices are encoded again.
TEST(GearSparsePartTest, RowRangesSeeExactlyTheirEntries) {
  constexpr int d = 24;  // two channel cells, the second half used
  for (OutlierLanes lanes : {OutlierLanes::kRows, OutlierLanes::kChannels}) {
    std::mt19937 rng(21);
    struct Entry {
      int64_t row;
      int ch;
      float v;
    };
    std::vector<Entry> all;
    SparseOutliers s(d, lanes);
    int64_t n_rows = 0;
    for (int block = 0; block < 9; ++block) {  // some blocks without entries
      const int64_t n = 1 + rng() % 150;
      for (int64_t r = n_rows; r < n_rows + n; ++r) {
        if (block % 4 == 3 || rng() % 3) continue;
        for (int c = static_cast<int>(rng() % 3); c < d; c += 1 + rng() % (r % 5 == 0 ? 2 : 9)) {
          const float v = static_cast<float>(static_cast<int>(rng() % 64) - 32);
          s.Append(r, c, Fp32ToFp16(v));
          all.push_back({r, c, v});
        }
      }
      n_rows += n;
      s.ExtendRows(n_rows);
    }
    ASSERT_EQ(s.n_entries(), static_cast<int64_t>(all.size()));
    constexpr int n_q = 5;  // a pass of 4 query rows and one of 1
    std::vector<float> q(n_q * d);
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    auto check = [&](const std::vector<Entry>& entries, int64_t rows) {
      ForEachRowRange({0, 1, 15, 64, 100, rows / 2}, {1, 5, 64, 128, 300, 2000}, rows, n_q,
                      [&](int64_t r0, int64_t r1, const std::vector<float>& p) {
                        const int64_t n = r1 - r0;
                        std::vector<float> got_s(n_q * n, 1.0f), want_s = got_s;
                        std::vector<float> got_o(n_q * d, 2.0f), want_o = got_o;
                        std::vector<float> got_x(n * d, 0.0f), want_x = got_x;
                        s.AddScores(r0, r1, q.data(), n_q, got_s.data(), n);
                        s.AddAccumulate(r0, r1, p.data(), n_q, n, got_o.data());
                        s.AddDecode(r0, r1, got_x.data());
                        for (const Entry& e : entries) {
                          if (e.row < r0 || e.row >= r1) continue;
                          for (int i = 0; i < n_q; ++i) {
                            want_s[i * n + e.row - r0] += q[i * d + e.ch] * e.v;
                            want_o[i * d + e.ch] += p[i * n + e.row - r0] * e.v;
                          }
                          want_x[(e.row - r0) * d + e.ch] += e.v;
                        }
                        ASSERT_EQ(got_s, want_s) << "scores, rows [" << r0 << ", " << r1 << ")";
                        ASSERT_EQ(got_o, want_o) << "accumulate, rows [" << r0 << ", " << r1 << ")";
                        ASSERT_EQ(got_x, want_x) << "decode, rows [" << r0 << ", " << r1 << ")";
                      });
    };
    check(all, n_rows);
    // Evict every third row; survivors are renumbered.
    std::vector<int64_t> keep;
    for (int64_t r = 0; r < n_rows; ++r) {
      if (r % 3) keep.push_back(r);
    }
    std::vector<Entry> kept;
    for (const Entry& e : all) {
      if (e.row % 3 == 0) continue;
      const auto renumbered = std::lower_bound(keep.begin(), keep.end(), e.row) - keep.begin();
      kept.push_back({static_cast<int64_t>(renumbered), e.ch, e.v});
    }
    const size_t index_before = s.index_bytes();
    s.Keep(keep);
    EXPECT_EQ(s.n_entries(), static_cast<int64_t>(kept.size()));
    EXPECT_LT(s.index_bytes(), index_before);
    check(kept, static_cast<int64_t>(keep.size()));
    MemoryUsage m;
    s.AddMemory(m);
    EXPECT_EQ(m.sparse_bytes, kept.size() * SparseOutliers::kEntryBytes);
    EXPECT_EQ(m.other_bytes, s.index_bytes());
  }
}

// Blocks whose outlier sets are too small for any outlier add no cells while every block
// has been so (no memory at all); the first block that may hold some brings the cells of
// every row, the earlier ones empty.
TEST(GearSparsePartTest, NoCellsUntilABlockMayHoldOutliers) {
  constexpr int d = 8;
  SparseOutliers s(d, OutlierLanes::kRows);
  s.ExtendRows(40, false);
  s.ExtendRows(70, false);
  EXPECT_EQ(s.index_bytes(), 0u);
  std::vector<float> q(d, 1.0f), scores(70, 0.0f);
  s.AddScores(0, 70, q.data(), 1, scores.data(), 70);
  EXPECT_EQ(scores, std::vector<float>(70, 0.0f));
  s.Append(75, 3, Fp32ToFp16(2.0f));
  s.ExtendRows(90, true);
  // 90 rows: 6 cells of 16 rows, each 36 bytes with its offset, plus the end offset and the
  // 16 words of slack.
  EXPECT_EQ(s.index_bytes(), 6u * 36 + 4 + 64);
  std::vector<float> all(90, 0.0f);
  s.AddScores(0, 90, q.data(), 1, all.data(), 90);
  for (int r = 0; r < 90; ++r) EXPECT_EQ(all[r], r == 75 ? 2.0f : 0.0f) << r;
}

// The low-rank part over every kind of row range: runs of whole blocks (the fused run
// kernels, lengths a multiple of 16), blocks cut by the range, rank-0 blocks that break a
// run, and blocks whose length or rank differs, before and after eviction (which relays the
// factors, so blocks on either side of a freed one become one run). Small integers in A, B,
// q and p keep every sum exact, so the products must equal those of the decoded L exactly.
TEST(GearLowRankPartTest, RowRangesMatchTheDecodedFactorsAcrossRuns) {
  constexpr int d = 32;
  std::mt19937 rng(5);
  LowRankBlocks lr(d);
  const std::pair<int64_t, int> blocks[] = {{200, 4}, {64, 2}, {64, 2}, {64, 2}, {64, 0},
                                            {64, 2},  {64, 2}, {32, 2}, {64, 2}, {64, 2},
                                            {48, 3},  {48, 3}, {5, 1}};
  for (const auto& [n, rank] : blocks) {
    std::vector<uint16_t> a(n * rank), b(d * rank);
    for (auto& x : a) x = Fp32ToFp16(static_cast<float>(static_cast<int>(rng() % 7) - 3));
    for (auto& x : b) x = Fp32ToFp16(static_cast<float>(static_cast<int>(rng() % 7) - 3));
    lr.AppendBlock(a.data(), b.data(), n, rank);
  }
  constexpr int n_q = 3;
  std::vector<float> q(n_q * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  auto check = [&](const char* when) {
    const int64_t rows = lr.n_rows();
    std::vector<float> all(rows * d, 0.0f);
    lr.AddDecode(0, rows, all.data());
    ForEachRowRange(
        {0, 1, 200, 263, 264, 392, rows / 2}, {1, 16, 64, 100, 128, 1024, 5000}, rows, n_q,
        [&](int64_t r0, int64_t r1, const std::vector<float>& p) {
          const int64_t n = r1 - r0;
          std::vector<float> got_s(n_q * n, 1.0f), want_s = got_s;
          std::vector<float> got_o(n_q * d, 2.0f), want_o = got_o;
          lr.AddScores(r0, r1, q.data(), n_q, got_s.data(), n);
          lr.AddAccumulate(r0, r1, p.data(), n_q, n, got_o.data());
          for (int64_t r = r0; r < r1; ++r) {
            for (int i = 0; i < n_q; ++i) {
              for (int c = 0; c < d; ++c) {
                want_s[i * n + r - r0] += q[i * d + c] * all[r * d + c];
                want_o[i * d + c] += p[i * n + r - r0] * all[r * d + c];
              }
            }
          }
          ASSERT_EQ(got_s, want_s) << when << ": scores, rows [" << r0 << ", " << r1 << ")";
          ASSERT_EQ(got_o, want_o) << when << ": accumulate, rows [" << r0 << ", " << r1 << ")";
        });
    MemoryUsage m;
    lr.AddMemory(m);
    EXPECT_EQ(m.other_bytes, lr.n_blocks() * LowRankBlocks::kBlockTableBytes);
  };
  check("appended");
  // Free the rank-0 block, rows [392, 456), whole: the rank-2 blocks on either side of it
  // become one run.
  std::vector<int64_t> keep;
  for (int64_t r = 0; r < lr.n_rows(); ++r) {
    if (r < 392 || r >= 456) keep.push_back(r);
  }
  const int64_t blocks_before = lr.n_blocks();
  lr.Keep(keep);
  ASSERT_EQ(lr.n_blocks(), blocks_before - 1);
  check("one block freed");
  // Every third row: blocks shrink to lengths that are not multiples of 16.
  keep.clear();
  for (int64_t r = 0; r < lr.n_rows(); ++r) {
    if (r % 3) keep.push_back(r);
  }
  lr.Keep(keep);
  check("every third row evicted");
}

}  // namespace
}  // namespace kvpack
