// Registry of KV codecs by spec name. Adding a codec = one file + one line in
// codec_registry.cc; the conformance tests iterate over `RegisteredCodecs()`.
#ifndef KVPACK_KV_CODEC_REGISTRY_H_
#define KVPACK_KV_CODEC_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/component_store.h"
#include "kv/spec.h"

namespace kvpack {

struct CodecInfo {
  std::string name;
  std::string summary;
  std::vector<std::string> params;  // accepted parameter names
  // Creates a store for one layer and component; validates the spec's parameters.
  std::function<Result<std::unique_ptr<ComponentStore>>(const MethodSpec&, const StoreShape&)>
      create;
};

const std::vector<CodecInfo>& RegisteredCodecs();

// Looks the name up and creates the store; an unknown name lists the valid ones.
Result<std::unique_ptr<ComponentStore>> CreateStore(const MethodSpec& spec,
                                                    const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODEC_REGISTRY_H_
