// Spec strings: one string names a whole KV-cache configuration (docs/design.md).
//
//   spec      := [policy " + "] codecs
//   codecs    := method | "k=" method " v=" method
//   method    := name [":" key "=" value ("," key "=" value)*]
// Examples: "f16", "kivi:bits=2,group=32,residual=128", "k=kivi:bits=2 v=kivi:bits=4",
//           "keyformer:budget=0.5 + kivi:bits=4".
// This file only parses; registries (codec_registry.h, policies) give names their meaning
// and reject unknown names or parameters with the list of valid ones.
#ifndef KVPACK_KV_SPEC_H_
#define KVPACK_KV_SPEC_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvpack/status.h"

namespace kvpack {

struct MethodSpec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;  // in the order written

  // Canonical text: name[:k=v,...] in the order written.
  std::string ToString() const;
  const std::string* Find(std::string_view key) const;
};

struct KvSpec {
  std::optional<MethodSpec> policy;
  MethodSpec keys;
  MethodSpec values;

  std::string ToString() const;
};

Result<MethodSpec> ParseMethodSpec(std::string_view text);
Result<KvSpec> ParseKvSpec(std::string_view text);

// Typed parameter readers used by registries; errors name the method and the key.
Result<double> ParamAsDouble(const MethodSpec& spec, std::string_view key, double fallback);
Result<int64_t> ParamAsInt(const MethodSpec& spec, std::string_view key, int64_t fallback);
Result<std::string> ParamAsString(const MethodSpec& spec, std::string_view key,
                                  std::string fallback);
// InvalidArgument naming the first key of `spec` not in `allowed`, listing the allowed ones.
Status CheckParamNames(const MethodSpec& spec, const std::vector<std::string>& allowed);

}  // namespace kvpack

#endif  // KVPACK_KV_SPEC_H_
