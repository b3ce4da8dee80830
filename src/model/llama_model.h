// An immutable llama-family model: the mapped GGUF file, its hyper-parameters and typed
// weight views. Shared (read-only) by any number of sessions.
#ifndef KVPACK_MODEL_LLAMA_MODEL_H_
#define KVPACK_MODEL_LLAMA_MODEL_H_

#include <memory>
#include <string>

#include "io/gguf.h"
#include "model/llama_config.h"
#include "model/llama_weights.h"

namespace kvpack {

class LlamaModel {
 public:
  static Result<std::shared_ptr<const LlamaModel>> Load(const std::string& path);
  static Result<std::shared_ptr<const LlamaModel>> FromFile(std::unique_ptr<GgufFile> file);

  const GgufFile& file() const { return *file_; }
  const LlamaConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }

 private:
  std::unique_ptr<GgufFile> file_;
  LlamaConfig config_;
  LlamaWeights weights_;
};

}  // namespace kvpack

#endif  // KVPACK_MODEL_LLAMA_MODEL_H_
