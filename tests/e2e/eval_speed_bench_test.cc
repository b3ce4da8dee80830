// The speed bench's decode breakdown on stories260K: off by default (zeros), and when on
// every point's parts are non-negative, inside the step they belong to (the waits inside
// their parts), the step is the reported median rate's, the weight products, attention and
// appends all took time, and one thread never waits for a worker.
#include "eval/speed_bench.h"

#include <gtest/gtest.h>

#include "model/llama_model.h"

namespace kvpack {
namespace {

const std::string kModel = std::string(KVPACK_SOURCE_DIR) + "/models/stories260K.gguf";

SpeedOptions SmallOptions() {
  SpeedOptions o;
  o.depths = {0, 64};
  o.threads = {1, 2};
  o.kv_specs = {"f16", "kivi:bits=2"};
  o.n_prefill = 4;
  o.n_decode = 4;
  o.n_batch = 32;
  o.repeats = 3;
  return o;
}

TEST(SpeedBenchBreakdownTest, OffByDefault) {
  auto model = LlamaModel::Load(kModel);
  ASSERT_TRUE(model.ok());
  SpeedOptions o = SmallOptions();
  o.depths = {16};
  auto points = MeasureSpeed(*model, o);
  ASSERT_TRUE(points.ok()) << points.status().message();
  for (const SpeedPoint& p : *points) {
    EXPECT_GT(p.decode_tok_s, 0.0);
    EXPECT_EQ(p.breakdown.step_s, 0.0);
    EXPECT_EQ(p.breakdown.products_s + p.breakdown.attention_s + p.breakdown.append_s, 0.0);
  }
}

TEST(SpeedBenchBreakdownTest, PartsLieInsideTheirStep) {
  auto model = LlamaModel::Load(kModel);
  ASSERT_TRUE(model.ok());
  SpeedOptions o = SmallOptions();
  o.breakdown = true;
  auto points = MeasureSpeed(*model, o);
  ASSERT_TRUE(points.ok()) << points.status().message();
  ASSERT_EQ(points->size(), 8u);
  for (const SpeedPoint& p : *points) {
    const DecodeBreakdown& b = p.breakdown;
    SCOPED_TRACE(p.kv_spec + " depth " + std::to_string(p.depth) + " threads " +
                 std::to_string(p.n_threads));
    // An odd number of repeats: the breakdown's repeat is the median one.
    EXPECT_DOUBLE_EQ(b.step_s, 1.0 / p.decode_tok_s);
    EXPECT_GT(b.products_s, 0.0);
    EXPECT_GT(b.attention_s, 0.0);  // the new token attends to itself even at depth 0
    EXPECT_GT(b.append_s, 0.0);
    EXPECT_LE(b.products_s + b.attention_s + b.append_s, b.step_s);
    EXPECT_GE(b.products_wait_s, 0.0);
    EXPECT_GE(b.attention_wait_s, 0.0);
    EXPECT_LE(b.products_wait_s, b.products_s);
    EXPECT_LE(b.attention_wait_s, b.attention_s);
    if (p.n_threads == 1) {
      EXPECT_EQ(b.products_wait_s, 0.0);
      EXPECT_EQ(b.attention_wait_s, 0.0);
    }
  }
}

}  // namespace
}  // namespace kvpack
