// kvstat on real activations of stories260K: exact specs give exactly zero error, f16's
// error equals the fp16 round trip computed here independently, lossy specs order by bits,
// policies are refused, and the captured K/V agree with the optimized forward's f32 cache.
#include "eval/kv_stat.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/half.h"
#include "engine/session.h"

namespace kvpack {
namespace {

const std::string kDir = KVPACK_SOURCE_DIR;

class KvStatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<TextModel> m = TextModel::Load(kDir + "/models/stories260K.gguf");
    ASSERT_TRUE(m.ok());
    model_ = new TextModel(*m);
    std::ifstream in(kDir + "/data/tinystories/tinystories_val_head.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    tokens_ = new std::vector<int32_t>(model_->tokenizer->Encode(ss.str().substr(0, 1500), true));
    tokens_->resize(std::min<size_t>(tokens_->size(), 160));
    Result<CapturedQkv> q = CaptureQkv(*model_->llama, *tokens_);
    ASSERT_TRUE(q.ok());
    qkv_ = new CapturedQkv(std::move(*q));
  }
  static void TearDownTestSuite() {
    delete qkv_;
    delete tokens_;
    delete model_;
  }
  static TextModel* model_;
  static std::vector<int32_t>* tokens_;
  static CapturedQkv* qkv_;
};
TextModel* KvStatTest::model_ = nullptr;
std::vector<int32_t>* KvStatTest::tokens_ = nullptr;
CapturedQkv* KvStatTest::qkv_ = nullptr;

TEST_F(KvStatTest, ExactSpecHasZeroError) {
  Result<KvStat> s = MeasureKvStat(*qkv_, "f32", {});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->total.keys, 0.0);
  EXPECT_EQ(s->total.values, 0.0);
  EXPECT_EQ(s->total.attention, 0.0);
  EXPECT_DOUBLE_EQ(s->keys.bits_per_value(), 32.0);
}

TEST_F(KvStatTest, F16ErrorIsTheFp16RoundTrip) {
  Result<KvStat> s = MeasureKvStat(*qkv_, "f16", {});
  ASSERT_TRUE(s.ok());
  for (int l = 0; l < qkv_->n_layers(); ++l) {
    double diff = 0.0, ref = 0.0;
    for (float x : qkv_->k[l]) {
      const double r = Fp16ToFp32(Fp32ToFp16(x));
      diff += (x - r) * (x - r);
      ref += static_cast<double>(x) * x;
    }
    EXPECT_NEAR(s->layers[l].keys, std::sqrt(diff / ref), 1e-9 * std::sqrt(diff / ref) + 1e-15);
    // fp16 keeps 11 significant bits: a relative error of at most 2^-11 per value.
    EXPECT_LE(s->layers[l].keys, std::ldexp(1.0, -11));
    EXPECT_GT(s->layers[l].keys, 0.0);
  }
}

TEST_F(KvStatTest, ErrorsFallWithBitsAndBitsPerValueAreReported) {
  double prev_k = 1e9, prev_v = 1e9, prev_a = 1e9;
  for (int bits : {2, 4, 8}) {
    const std::string spec = "flexgen:bits=" + std::to_string(bits) + ",group=8";
    Result<KvStat> s = MeasureKvStat(*qkv_, spec, {.n_batch = 0, .n_queries = 16});
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_LT(s->total.keys, prev_k) << spec;
    EXPECT_LT(s->total.values, prev_v) << spec;
    EXPECT_LT(s->total.attention, prev_a) << spec;
    EXPECT_GT(s->total.keys, 0.0);
    // b-bit codes plus an fp16 scale and min per 8 values.
    EXPECT_DOUBLE_EQ(s->keys.bits_per_value(), bits + 32.0 / 8.0);
    prev_k = s->total.keys;
    prev_v = s->total.values;
    prev_a = s->total.attention;
  }
}

TEST_F(KvStatTest, PolicySpecsAndBadSpecsAreRefused) {
  Result<KvStat> s = MeasureKvStat(*qkv_, "window:budget=32 + f16", {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("eviction policy"), std::string::npos);
  EXPECT_FALSE(MeasureKvStat(*qkv_, "nonsense:bits=3", {}).ok());
}

// The reference capture and the optimized forward agree on K/V (tolerance: float vs double
// accumulation over a few layers of a tiny model).
TEST_F(KvStatTest, CaptureAgreesWithTheOptimizedForward) {
  SessionOptions so;
  so.n_ctx = 512;
  so.kv_spec = "f32";
  auto session = Session::Create(model_->llama, so);
  ASSERT_TRUE(session.ok());
  std::vector<float> logits((*session)->n_vocab());
  ASSERT_TRUE((*session)->Eval(*tokens_, LogitsFor::kLastToken, logits.data()).ok());
  const int D = qkv_->head_dim, H = qkv_->n_kv_heads;
  const int64_t n = qkv_->n_tokens;
  std::vector<float> head(n * D);
  for (int l = 0; l < qkv_->n_layers(); ++l) {
    for (int g = 0; g < H; ++g) {
      (*session)->cache().keys(l).Decode(g, 0, n, head.data());
      for (int64_t t = 0; t < n; ++t) {
        for (int i = 0; i < D; ++i) {
          const float ref = qkv_->k[l][(t * H + g) * D + i];
          ASSERT_NEAR(head[t * D + i], ref, 1e-3f * (1.0f + std::fabs(ref))) << l << " " << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvpack
