// Hugging Face QuantizedCache (METHODS.md 1.6): the transformers-compatible mode=hf
// re-quantizes the whole cache at every flush and compounds error; the append-only default
// does not. Also: HQQ's refinement never does worse than min-max in mean |error|; the
// attention's cost model of a quantized part and an fp16 residual.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kv/codec_registry.h"

namespace kvpack {
namespace {

constexpr int kHeads = 2, kDim = 64;

std::vector<float> Rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n * kHeads * kDim);
  for (float& x : v) x = dist(rng);
  return v;
}

// Mean |x - x^| over tokens [0, n_eval) of every head after a prompt and decode steps.
double MeanError(const std::string& spec, KvComponent c, const std::vector<float>& rows,
                 int64_t n_prompt, int64_t n_total, int64_t n_eval) {
  auto s = CreateStore(*ParseMethodSpec(spec), {0, kHeads, kDim, c});
  if (!s.ok()) {
    ADD_FAILURE() << s.status().message();
    return -1.0;
  }
  EXPECT_TRUE((*s)->Append(rows.data(), n_prompt).ok());
  for (int64_t t = n_prompt; t < n_total; ++t) {
    EXPECT_TRUE((*s)->Append(&rows[t * kHeads * kDim], 1).ok());
  }
  double err = 0.0;
  for (int h = 0; h < kHeads; ++h) {
    std::vector<float> dec(n_eval * kDim);
    (*s)->Decode(h, 0, n_eval, dec.data());
    for (int64_t t = 0; t < n_eval; ++t) {
      for (int ch = 0; ch < kDim; ++ch) {
        err += std::fabs(dec[t * kDim + ch] - rows[(t * kHeads + h) * kDim + ch]);
      }
    }
  }
  return err / (kHeads * n_eval * kDim);
}

TEST(HfQuantizedCache, HfModeCompoundsErrorAppendModeDoesNot) {
  // Prompt of 100 tokens, then 4 flushes of residual_length 32 (228 tokens). Error measured
  // on the first 224 tokens, which both modes hold quantized at the end (append: 7 blocks of
  // 32; hf: everything).
  const auto rows = Rows(228, 1);
  for (const char* cfg : {"axis_key=-1,axis_value=-1,nbits=2,q_group_size=32",
                          "backend=hqq,nbits=2,q_group_size=32", "nbits=2,q_group_size=32"}) {
    for (KvComponent c : {KvComponent::kKey, KvComponent::kValue}) {
      const std::string base = std::string("hf:") + cfg + ",residual_length=32";
      const double e_append = MeanError(base + ",mode=append", c, rows, 100, 228, 224);
      const double e_hf = MeanError(base + ",mode=hf", c, rows, 100, 228, 224);
      std::printf("  %-50s %s: mean |err| append %.5f  hf %.5f\n", cfg,
                  c == KvComponent::kKey ? "K" : "V", e_append, e_hf);
      // Per-channel groups that straddle a flush (the prompt's tail group, then every
      // flush's) are re-formed over already-quantized values: their tokens are rounded twice,
      // strictly worse. Re-quantizing a per-token row that is already on its grid is
      // idempotent for min-max and in practice for HQQ (measured equal): never better.
      if (std::string(cfg).find("axis_key=-1") != std::string::npos) {
        // Measured: +0.4% here (4 of 7 groups straddle a flush, 4 of their 32 tokens twice
        // rounded); larger with fewer tokens per flush relative to the group size.
        EXPECT_GT(e_hf, e_append * 1.002) << cfg;
      } else {
        EXPECT_GE(e_hf, e_append * 0.999) << cfg;
      }
    }
  }
}

TEST(HfQuantizedCache, HqqNoWorseThanMinMaxInMeanError) {
  const auto rows = Rows(256, 2);
  for (int bits : {2, 4}) {
    const std::string tail = ",nbits=" + std::to_string(bits) + ",q_group_size=64,residual_length=32";
    const double e_mm = MeanError("hf:backend=quanto" + tail, KvComponent::kValue, rows, 256, 256, 256);
    const double e_hqq = MeanError("hf:backend=hqq" + tail, KvComponent::kValue, rows, 256, 256, 256);
    std::printf("  %d bits: mean |err| min-max %.5f  hqq %.5f\n", bits, e_mm, e_hqq);
    EXPECT_LE(e_hqq, e_mm * 1.001);
    EXPECT_GT(e_hqq, 0.0);
  }
}

TEST(HfQuantizedCache, HfModeQuantizesThePromptAtOnce) {
  const auto rows = Rows(50, 3);
  auto s = CreateStore(*ParseMethodSpec("hf:mode=hf,residual_length=32"),
                       {0, kHeads, kDim, KvComponent::kKey});
  ASSERT_TRUE((*s)->Append(rows.data(), 40).ok());
  EXPECT_EQ((*s)->Memory().residual_bytes, 0u);  // all 40 quantized
  for (int t = 40; t < 50; ++t) ASSERT_TRUE((*s)->Append(&rows[t * kHeads * kDim], 1).ok());
  EXPECT_EQ((*s)->Memory().residual_bytes, static_cast<size_t>(kHeads * 10 * kDim * 2));
  EXPECT_EQ((*s)->spec(),
            "hf:nbits=4,q_group_size=64,residual_length=32,axis_key=0,axis_value=0,"
            "backend=quanto,mode=hf");
  // The attention's cost model (ComponentStore::ReadCost): 40 quantized tokens at 4 / 16 +
  // 2 / 64 of an fp16 row each (4-bit codes, an fp16 scale and min per 64 values), then 10
  // fp16 rows. Binary fractions: exact.
  EXPECT_EQ((*s)->ReadCost(1, 50), 40 * 0.28125 + 10);
  EXPECT_EQ((*s)->ReadCost(1, 20), 20 * 0.28125);
  // Per-channel groups (axis_key=-1): one scale and min per channel and 32 tokens; appending
  // 40 flushes the residual once: 32 quantized tokens, 8 in fp16.
  auto channels = CreateStore(
      *ParseMethodSpec("hf:nbits=2,q_group_size=32,residual_length=32,axis_key=-1"),
      {0, kHeads, kDim, KvComponent::kKey});
  ASSERT_TRUE(channels.ok()) << channels.status().message();
  ASSERT_TRUE((*channels)->Append(rows.data(), 40).ok());
  EXPECT_EQ((*channels)->ReadCost(0, 40), 32 * (2.0 / 16 + 2.0 / 32) + 8);
  // A store that reads every token alike keeps the default, one a token.
  auto plain = CreateStore(*ParseMethodSpec("q4_0"), {0, kHeads, kDim, KvComponent::kKey});
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE((*plain)->Append(rows.data(), 40).ok());
  EXPECT_EQ((*plain)->ReadCost(0, 40), 40.0);
}

}  // namespace
}  // namespace kvpack
