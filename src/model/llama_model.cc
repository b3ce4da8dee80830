#include "model/llama_model.h"

namespace kvpack {

Result<std::shared_ptr<const LlamaModel>> LlamaModel::Load(const std::string& path) {
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  return FromFile(std::move(file));
}

Result<std::shared_ptr<const LlamaModel>> LlamaModel::FromFile(std::unique_ptr<GgufFile> file) {
  auto model = std::shared_ptr<LlamaModel>(new LlamaModel());
  KVPACK_ASSIGN_OR_RETURN(model->config_, ReadLlamaConfig(*file));
  KVPACK_ASSIGN_OR_RETURN(model->weights_, BindLlamaWeights(*file, model->config_));
  if (model->config_.n_vocab == 0) model->config_.n_vocab = model->weights_.token_embd.n_out;
  model->file_ = std::move(file);
  return std::shared_ptr<const LlamaModel>(std::move(model));
}

}  // namespace kvpack
