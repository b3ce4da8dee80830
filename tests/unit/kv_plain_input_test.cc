// The full-precision stores' input gate (kv/codecs/plain_codec.h, CheckInput and Append):
// each takes exactly the values its format holds as finite values. `f32` any finite float;
// `f16` up to 65504 in magnitude (past it the conversion gives infinity, and attention over
// that token NaN); `bf16` up to the largest float that rounds to a finite bf16. A refused
// append names the component, the layer and the range, and changes nothing.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kv/codec_registry.h"
#include "kv/spec.h"

namespace kvpack {
namespace {

constexpr int kHeads = 2, kDim = 16;

std::unique_ptr<ComponentStore> Make(const std::string& name, KvComponent component) {
  auto spec = ParseMethodSpec(name);
  EXPECT_TRUE(spec.ok());
  auto store = CreateStore(*spec, StoreShape{5, kHeads, kDim, component});
  EXPECT_TRUE(store.ok()) << store.status().message();
  return std::move(*store);
}

// One token whose second head's channel 3 is `x`, the rest small.
std::vector<float> TokenWith(float x) {
  std::vector<float> row(kHeads * kDim);
  for (size_t i = 0; i < row.size(); ++i) row[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  row[kDim + 3] = x;
  return row;
}

struct Case {
  const char* name;
  std::vector<float> taken, refused;
  const char* range;  // in the refusal's message
};

TEST(PlainStoreInputTest, TakesWhatTheFormatHoldsAndRefusesTheRest) {
  constexpr float kMax = std::numeric_limits<float>::max();
  // bf16's largest finite value is 0x7f7f (0x1.fep+127); floats round to it up to bits
  // 0x7f7f7fff, and from 0x7f7f8000 (the tie, which rounds to even: 0x7f80, infinity) on.
  const float bf16_last = 0x1.fefffep+127f, bf16_first_inf = 0x1.ff0000p+127f;
  const std::vector<Case> cases = {
      {"f32", {kMax, -kMax, 1.0e30f}, {}, ""},
      {"f16", {65504.0f, -65504.0f, 1.0f}, {65504.004f, -65505.0f, 1.0e6f, kMax},
       "fp16 range of the f16 cache"},
      {"bf16", {bf16_last, -bf16_last, 1.0e30f}, {bf16_first_inf, -kMax}, "bf16 range"},
  };
  for (const Case& c : cases) {
    for (KvComponent component : {KvComponent::kKey, KvComponent::kValue}) {
      const char* part = component == KvComponent::kKey ? "keys" : "values";
      auto store = Make(c.name, component);
      for (float x : c.taken) {
        SCOPED_TRACE(std::string(c.name) + " " + part + " takes " + std::to_string(x));
        const std::vector<float> row = TokenWith(x);
        EXPECT_TRUE(store->CheckInput(row.data(), 1).ok());
        const int64_t before = store->n_tokens(1);
        ASSERT_TRUE(store->Append(row.data(), 1).ok());
        std::vector<float> back(kDim);
        store->Decode(1, before, before + 1, back.data());
        EXPECT_TRUE(std::isfinite(back[3])) << back[3];
        EXPECT_EQ(std::signbit(back[3]), std::signbit(x));
      }
      std::vector<float> bad = c.refused;
      bad.push_back(std::numeric_limits<float>::quiet_NaN());
      bad.push_back(-std::numeric_limits<float>::infinity());
      for (float x : bad) {
        SCOPED_TRACE(std::string(c.name) + " " + part + " refuses " + std::to_string(x));
        const std::vector<float> row = TokenWith(x);
        const int64_t held = store->n_tokens(1);
        const size_t bytes = store->Memory().payload_bytes();
        const Status check = store->CheckInput(row.data(), 1);
        const Status append = store->Append(row.data(), 1);
        EXPECT_EQ(append.code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(check.message(), append.message());
        EXPECT_NE(append.message().find(std::string(part) + " of layer 5"), std::string::npos)
            << append.message();
        const std::string expected = std::isfinite(x) ? c.range : "non-finite";
        EXPECT_NE(append.message().find(expected), std::string::npos) << append.message();
        EXPECT_EQ(store->n_tokens(0), held);
        EXPECT_EQ(store->n_tokens(1), held);
        EXPECT_EQ(store->Memory().payload_bytes(), bytes);
      }
    }
  }
}

}  // namespace
}  // namespace kvpack
