// CheckQuantInput (kv/codecs/quant_common.h), the quantized codecs' gate on Append: every
// value finite and, with `fp16_range`, no larger in magnitude than 65504 (the scales and mins
// are fp16). Each bad value is found wherever it sits (the first, a middle, the last
// position, past any SIMD width), and its message names the component, the layer and the
// kind of problem.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kv/codecs/quant_common.h"

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

}  // namespace
}  // namespace kvpack
