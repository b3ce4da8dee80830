// KIVI's residual rules (METHODS.md 1.4) token by token against a direct model of the rule:
// which tokens are full precision (fp16) after every Append, for one-at-a-time and chunked
// appends, keys and values, and the attention's cost model (ComponentStore::ReadCost).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "kv/codec_registry.h"

namespace kvpack {
namespace {

constexpr int kHeads = 2, kDim = 32, kGroup = 8, kResidual = 16;

// The rule, stated directly: after T tokens, keys keep the last T mod R in full precision
// (the buffer is flushed whenever it reaches R); values keep the last min(T, R).
int64_t ExpectedFullPrecision(KvComponent c, int64_t n_total) {
  return c == KvComponent::kKey ? n_total % kResidual : std::min<int64_t>(n_total, kResidual);
}

void CheckState(const ComponentStore& s, const std::vector<float>& rows, int64_t n_total,
                KvComponent c) {
  const int64_t n_full = ExpectedFullPrecision(c, n_total);
  for (int h = 0; h < kHeads; ++h) {
    ASSERT_EQ(s.n_tokens(h), n_total);
    std::vector<float> dec(n_total * kDim);
    s.Decode(h, 0, n_total, dec.data());
    for (int64_t t = 0; t < n_total; ++t) {
      bool exact_fp16 = true;
      for (int ch = 0; ch < kDim; ++ch) {
        const float x = rows[(t * kHeads + h) * kDim + ch];
        exact_fp16 = exact_fp16 && dec[t * kDim + ch] == Fp16ToFp32(Fp32ToFp16(x));
      }
      // 2-bit codes of N(0,1) data never reproduce a whole 32-channel row exactly.
      ASSERT_EQ(exact_fp16, t >= n_total - n_full)
          << (c == KvComponent::kKey ? "keys" : "values") << " T=" << n_total << " t=" << t;
    }
  }
  const MemoryUsage m = s.Memory();
  ASSERT_EQ(m.residual_bytes, static_cast<size_t>(kHeads * n_full * kDim * 2)) << n_total;
  // The attention's cost model follows the same rule: a quantized token costs 2 / 16 (its
  // 2-bit codes) + 2 / 8 (an fp16 scale and min per 8 values) of an fp16 row, a residual one
  // a whole row (binary fractions: the sums are exact).
  const int64_t n_quantized = n_total - n_full;
  for (int64_t t : {int64_t{0}, n_quantized / 2, n_quantized, n_total}) {
    const int64_t q = std::min(t, n_quantized);
    ASSERT_EQ(s.ReadCost(0, t), 0.375 * static_cast<double>(q) + static_cast<double>(t - q))
        << "T=" << n_total << " t=" << t;
  }
}

class KiviResidualTest : public ::testing::TestWithParam<KvComponent> {};

TEST_P(KiviResidualTest, OneAtATimeAndChunkedFollowTheRule) {
  const KvComponent c = GetParam();
  const int64_t n = 150;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> rows(n * kHeads * kDim);
  for (float& x : rows) x = dist(rng);
  const MethodSpec spec = *ParseMethodSpec("kivi:bits=2,group=8,residual=16");
  auto one = CreateStore(spec, {0, kHeads, kDim, c});
  auto chunked = CreateStore(spec, {0, kHeads, kDim, c});
  ASSERT_TRUE(one.ok() && chunked.ok());
  for (int64_t t = 0; t < n; ++t) {
    ASSERT_TRUE((*one)->Append(&rows[t * kHeads * kDim], 1).ok());
    CheckState(**one, rows, t + 1, c);
  }
  // Chunks around and across R: 1, 15, 16, 17, 33, 5, ...
  const int64_t sizes[] = {1, 15, 16, 17, 33, 5, 40, 23};
  int64_t t = 0;
  for (int64_t sz : sizes) {
    sz = std::min(sz, n - t);
    ASSERT_TRUE((*chunked)->Append(&rows[t * kHeads * kDim], sz).ok());
    t += sz;
    CheckState(**chunked, rows, t, c);
  }
  ASSERT_EQ(t, n);
  for (int h = 0; h < kHeads; ++h) {
    std::vector<float> a(n * kDim), b(n * kDim);
    (*one)->Decode(h, 0, n, a.data());
    (*chunked)->Decode(h, 0, n, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  }
}

TEST_P(KiviResidualTest, PrefillRule) {
  // Prefill of T tokens: keys quantize the first T - (T mod R), values keep min(T, R).
  const KvComponent c = GetParam();
  for (int64_t T : {5, 16, 37, 64}) {
    std::vector<float> rows(T * kHeads * kDim);
    std::mt19937 rng(T);
    std::normal_distribution<float> dist;
    for (float& x : rows) x = dist(rng);
    auto s = CreateStore(*ParseMethodSpec("kivi:bits=2,group=8,residual=16"), {0, kHeads, kDim, c});
    ASSERT_TRUE((*s)->Append(rows.data(), T).ok());
    CheckState(**s, rows, T, c);
  }
}

INSTANTIATE_TEST_SUITE_P(KeysAndValues, KiviResidualTest,
                         ::testing::Values(KvComponent::kKey, KvComponent::kValue));

}  // namespace
}  // namespace kvpack
