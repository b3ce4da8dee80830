// QuantizeGroup's codes against the rule of METHODS.md 0 written with nearbyint, and
// CheckQuantInput (kv/codecs/quant_common.h), the quantized codecs' gate on Append: every
// value finite and, with `fp16_range`, no larger in magnitude than 65504 (the scales and mins
// are fp16). Each bad value is found wherever it sits (the first, a middle, the last
// position, past any SIMD width), and its message names the component, the layer and the
// kind of problem.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "kv/codecs/quant_common.h"
#include "ops/code_unpack.h"

namespace kvpack {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CheckQuantInputTest, AcceptsTheFp16RangeAndRejectsPastIt) {
  const StoreShape keys{7, 2, 8, KvComponent::kKey};
  for (int64_t n : {1, 15, 16, 17, 100}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i)) * 100.0f;
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> y = x;
      y[at] = -65504.0f;  // the largest fp16 magnitude: accepted
      EXPECT_TRUE(CheckQuantInput(y.data(), n, keys, true).ok());
      for (float bad : {65505.0f, -7.0e4f, std::numeric_limits<float>::max()}) {
        y[at] = bad;
        const Status st = CheckQuantInput(y.data(), n, keys, true);
        ASSERT_FALSE(st.ok()) << "n " << n << " at " << at << " value " << bad;
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(st.message().find("exceeds the fp16 range"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("keys of layer 7"), std::string::npos) << st.message();
        // Without the range rule any finite value passes.
        EXPECT_TRUE(CheckQuantInput(y.data(), n, keys, false).ok());
      }
    }
  }
}

TEST(CheckQuantInputTest, RejectsNonFiniteValuesWithOrWithoutTheRange) {
  const StoreShape values{3, 1, 64, KvComponent::kValue};
  for (int64_t n : {1, 16, 33}) {
    for (int64_t at : {int64_t{0}, n - 1}) {
      for (float bad : {std::nanf(""), -std::nanf(""), kInf, -kInf}) {
        std::vector<float> x(n, 0.5f);
        x[at] = bad;
        for (bool fp16_range : {true, false}) {
          const Status st = CheckQuantInput(x.data(), n, values, fp16_range);
          ASSERT_FALSE(st.ok()) << "n " << n << " at " << at;
          EXPECT_NE(st.message().find("non-finite value in the values of layer 3"),
                    std::string::npos)
              << st.message();
        }
      }
    }
  }
  EXPECT_TRUE(CheckQuantInput(nullptr, 0, values, true).ok());  // nothing to check
}

// QuantizeGroup rounds with an add-and-subtract of 1.5 * 2^23: its codes must equal
// clamp(nearbyint((x - min) / scale), 0, 2^b - 1) with the stored fp16 scale and min, for
// every width, both strides, ties (x exactly between two levels: round half to even), and
// groups near 60000, whose fp16 min is up to 16 away from the data (codes clamped at either
// end).
TEST(QuantizeGroupTest, CodesFollowTheRoundingRuleExactly) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const auto expected = [](const std::vector<float>& x, GroupParams gp, int bits) {
    const float s = Fp16ToFp32(gp.scale), m = Fp16ToFp32(gp.min), inv = 1.0f / s;
    std::vector<uint8_t> c(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = std::nearbyint((x[i] - m) * inv);
      c[i] = s > 0.0f ? static_cast<uint8_t>(std::clamp(v, 0.0f, float((1 << bits) - 1))) : 0;
    }
    return c;
  };
  int ties = 0;
  for (int bits : {2, 4, 8}) {
    for (int trial = 0; trial < 40; ++trial) {
      const size_t n = 1 + rng() % 70;
      std::vector<float> x(n);
      const float offset = trial % 5 == 0 ? 60000.0f : 0.0f;
      const float spread = trial % 7 == 0 ? 1e-6f : 1.0f;
      for (auto& v : x) v = offset + spread * g(rng);
      if (trial % 3 == 0 && n > 2) {
        // Exact ties: levels k + 1/2 of a group with min 0 and scale 1 (fp16-exact).
        x[0] = 0.0f;
        x[1] = static_cast<float>((1 << bits) - 1);
        for (size_t i = 2; i < n; ++i) {
          x[i] = static_cast<float>(rng() % ((1 << bits) - 1)) + 0.5f;
          ++ties;
        }
      }
      std::vector<uint8_t> codes(n), strided(3 * n, 77);
      const GroupParams gp = QuantizeGroup(x.data(), n, 1, bits, QuantMethod::kMinMax,
                                           codes.data(), 1);
      ASSERT_EQ(codes, expected(x, gp, bits)) << "bits " << bits << " trial " << trial;
      std::vector<float> xs(2 * n);
      for (size_t i = 0; i < n; ++i) xs[2 * i] = x[i];
      const GroupParams gs = QuantizeGroup(xs.data(), n, 2, bits, QuantMethod::kMinMax,
                                           strided.data(), 3);
      EXPECT_EQ(gs.scale, gp.scale);
      EXPECT_EQ(gs.min, gp.min);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(strided[3 * i], codes[i]);
        if (i + 1 < n) {
          ASSERT_EQ(strided[3 * i + 1], 77);  // untouched between codes
        }
      }
    }
  }
  EXPECT_GT(ties, 100);
}

// PackCodes writes the LSB-first stream that ops/code_unpack.h reads: every width, lengths
// that end inside a byte, the padding bits of the last byte zero, the bytes past it untouched.
TEST(PackCodesTest, UnpackReadsBackEveryWidthAndLength) {
  std::mt19937 rng(9);
  for (int bits = 1; bits <= 8; ++bits) {
    for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 31, 64, 67, 130}) {
      std::vector<uint8_t> codes(n), back(n);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() % (1u << bits));
      const int64_t bytes = PackedBytes(n, bits);
      std::vector<uint8_t> packed(bytes + 2, 0xa5);
      PackCodes(codes.data(), n, bits, packed.data());
      UnpackCodesU8Ref(packed.data(), 0, n, bits, back.data());
      ASSERT_EQ(back, codes) << "bits " << bits << " n " << n;
      const int used = static_cast<int>((n * bits) % 8);
      if (used != 0) {
        EXPECT_EQ(packed[bytes - 1] >> used, 0) << "bits " << bits << " n " << n;
      }
      EXPECT_EQ(packed[bytes], 0xa5);
      EXPECT_EQ(packed[bytes + 1], 0xa5);
    }
  }
}

}  // namespace
}  // namespace kvpack
