#include <gtest/gtest.h>

#include "kv/codec_registry.h"
#include "kv/spec.h"

namespace kvpack {
namespace {

TEST(KvSpecTest, ParsesSingleCodecWithParams) {
  Result<KvSpec> s = ParseKvSpec("kivi:bits=2,group=32,residual=128");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_FALSE(s->policy.has_value());
  EXPECT_EQ(s->keys.name, "kivi");
  ASSERT_EQ(s->keys.params.size(), 3u);
  EXPECT_EQ(*s->keys.Find("group"), "32");
  EXPECT_EQ(s->values.ToString(), "kivi:bits=2,group=32,residual=128");
  EXPECT_EQ(s->ToString(), "kivi:bits=2,group=32,residual=128");
}

TEST(KvSpecTest, ParsesSeparateKeysAndValuesAndPolicy) {
  Result<KvSpec> s = ParseKvSpec("keyformer:budget=0.5 + k=kivi:bits=2 v=kivi:bits=4");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_TRUE(s->policy.has_value());
  EXPECT_EQ(s->policy->name, "keyformer");
  EXPECT_EQ(*s->keys.Find("bits"), "2");
  EXPECT_EQ(*s->values.Find("bits"), "4");
  EXPECT_EQ(s->ToString(), "keyformer:budget=0.5 + k=kivi:bits=2 v=kivi:bits=4");
}

TEST(KvSpecTest, RejectsMalformedSpecsNamingThePart) {
  struct Case {
    const char* spec;
    const char* mentions;
  };
  for (const Case& c : {Case{"", "empty"}, Case{"kivi:", "no parameters"},
                        Case{"kivi:bits", "key=value"}, Case{"kivi:bits=2,", "trailing"},
                        Case{"kivi:bits=2,bits=4", "twice"}, Case{"k=f16", "v="},
                        Case{"a + b + c", "more than one"}, Case{"f16 f32", "space"},
                        Case{"ki$vi", "bad character"}}) {
    Result<KvSpec> s = ParseKvSpec(c.spec);
    ASSERT_FALSE(s.ok()) << c.spec;
    EXPECT_NE(s.status().message().find(c.mentions), std::string::npos)
        << c.spec << " -> " << s.status().message();
  }
}

TEST(KvSpecTest, RegistryRejectsUnknownCodecListingValidOnes) {
  Result<MethodSpec> m = ParseMethodSpec("nope:bits=3");
  ASSERT_TRUE(m.ok());
  Result<std::unique_ptr<ComponentStore>> s = CreateStore(*m, {0, 2, 8, KvComponent::kKey});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("unknown KV codec 'nope'"), std::string::npos);
  EXPECT_NE(s.status().message().find("f16"), std::string::npos);
  Result<MethodSpec> bad_param = ParseMethodSpec("f16:bits=3");
  ASSERT_TRUE(bad_param.ok());
  s = CreateStore(*bad_param, {0, 2, 8, KvComponent::kKey});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("unknown parameter 'bits'"), std::string::npos);
}

TEST(KvSpecTest, TypedParamsReportBadValues) {
  Result<MethodSpec> m = ParseMethodSpec("x:bits=two,ratio=0.5");
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(ParamAsInt(*m, "bits", 4).ok());
  EXPECT_EQ(*ParamAsDouble(*m, "ratio", 1.0), 0.5);
  EXPECT_EQ(*ParamAsInt(*m, "group", 32), 32);
}

}  // namespace
}  // namespace kvpack
