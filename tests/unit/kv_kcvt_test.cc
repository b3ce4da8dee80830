// KCVT (METHODS.md 1.5): value groups span all KV heads; Retain on one head keeps the other
// heads intact, frees rows only when no head uses them, and collapses back to the shared
// layout when every head keeps the same tokens.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kv/codec_registry.h"

namespace kvpack {
namespace {

constexpr int kHeads = 3, kDim = 16;

TEST(KcvtTest, ValueRetainPerHeadOverSharedRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  std::vector<float> rows(60 * kHeads * kDim);
  for (float& x : rows) x = dist(rng);
  auto s = CreateStore(*ParseMethodSpec("kcvt:bits=4,buffer=20"),
                       {0, kHeads, kDim, KvComponent::kValue});
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE((*s)->per_head_retain());
  ASSERT_TRUE((*s)->Append(rows.data(), 50).ok());  // one compressed block of 50
  ASSERT_TRUE((*s)->Append(&rows[50 * kHeads * kDim], 5).ok());  // 5 buffered
  std::vector<std::vector<float>> full(kHeads, std::vector<float>(55 * kDim));
  for (int h = 0; h < kHeads; ++h) (*s)->Decode(h, 0, 55, full[h].data());
  const size_t bytes = (*s)->Memory().payload_bytes();

  std::vector<int64_t> keep = {0, 3, 7, 49, 50, 54};
  ASSERT_TRUE((*s)->Retain(1, keep).ok());
  EXPECT_EQ((*s)->n_tokens(0), 55);
  EXPECT_EQ((*s)->n_tokens(1), 6);
  std::vector<float> dec(6 * kDim);
  (*s)->Decode(1, 0, 6, dec.data());
  for (size_t k = 0; k < keep.size(); ++k) {
    ASSERT_EQ(0, std::memcmp(&dec[k * kDim], &full[1][keep[k] * kDim], kDim * sizeof(float)));
  }
  // Head 0 is untouched; rows are still used by heads 0 and 2, so only the row lists cost.
  std::vector<float> h0(55 * kDim);
  (*s)->Decode(0, 0, 55, h0.data());
  ASSERT_EQ(0, std::memcmp(h0.data(), full[0].data(), h0.size() * sizeof(float)));
  EXPECT_GT((*s)->Memory().other_bytes, 0u);

  // Fused kernels on a divergent head agree with its decode.
  std::vector<float> q(kDim, 0.5f), scores(6), out(kDim, 0.0f), p(6, 1.0f);
  (*s)->Scores(1, q.data(), 1, 0, 6, scores.data());
  (*s)->Accumulate(1, p.data(), 1, 0, 6, out.data());
  for (int k = 0; k < 6; ++k) {
    float ref = 0.0f;
    for (int c = 0; c < kDim; ++c) ref += 0.5f * dec[k * kDim + c];
    EXPECT_NEAR(scores[k], ref, 1e-4f);
  }
  for (int c = 0; c < kDim; ++c) {
    float ref = 0.0f;
    for (int k = 0; k < 6; ++k) ref += dec[k * kDim + c];
    EXPECT_NEAR(out[c], ref, 1e-4f);
  }

  // Same keep on the other heads: rows are freed and the layout is shared again.
  ASSERT_TRUE((*s)->Retain(0, keep).ok());
  ASSERT_TRUE((*s)->Retain(2, keep).ok());
  const MemoryUsage m = (*s)->Memory();
  EXPECT_EQ(m.other_bytes, 0u);
  EXPECT_LT(m.payload_bytes(), bytes);
  // 4 quantized rows (codes kHeads*kDim*4/8 bytes + scale + min) and 2 buffered fp16 rows.
  EXPECT_EQ(m.payload_bytes(), static_cast<size_t>(4 * (kHeads * kDim / 2 + 4) + 2 * kHeads * kDim * 2));
  // Appending continues: the buffer (2 + 20 >= 20) is compressed.
  ASSERT_TRUE((*s)->Append(&rows[55 * kHeads * kDim], 5).ok());
  EXPECT_EQ((*s)->n_tokens(2), 11);
  EXPECT_EQ((*s)->Memory().residual_bytes, static_cast<size_t>(7 * kHeads * kDim * 2));
}

}  // namespace
}  // namespace kvpack
