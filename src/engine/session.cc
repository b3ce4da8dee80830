#include "engine/session.h"

#include <algorithm>

#include "io/gguf.h"

namespace kvpack {

Result<TextModel> TextModel::Load(const std::string& path) {
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(*file);
  if (!tok.ok()) return tok.status().WithContext(path);
  TextModel m;
  m.tokenizer = std::move(tok).value();
  KVPACK_ASSIGN_OR_RETURN(m.llama, LlamaModel::FromFile(std::move(file)));
  return m;
}

Session::Session(std::shared_ptr<const LlamaModel> model, const SessionOptions& options,
                 std::unique_ptr<KvCache> cache)
    : model_(std::move(model)), options_(options), cache_(std::move(cache)),
      pool_(options.n_threads) {}

Result<std::unique_ptr<Session>> Session::Create(std::shared_ptr<const LlamaModel> model,
                                                 const SessionOptions& options) {
  SessionOptions o = options;
  if (o.n_ctx == 0) o.n_ctx = model->config().n_ctx_train;
  if (o.n_ctx < 1 || o.n_ctx > (int64_t{1} << 24)) {
    return InvalidArgument("context length " + std::to_string(o.n_ctx) + " is out of range");
  }
  if (o.n_threads < 1 || o.n_threads > 1024) {
    return InvalidArgument("thread count " + std::to_string(o.n_threads) + " is out of range");
  }
  if (o.n_batch < 1) return InvalidArgument("batch size must be >= 1");
  const LlamaConfig& c = model->config();
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                          KvCache::Create({c.n_layers, c.n_kv_heads, c.head_dim}, o.kv_spec));
  return std::unique_ptr<Session>(new Session(std::move(model), o, std::move(cache)));
}

Status Session::BeginSequence(const SequencePlan& plan) {
  if (broken_) return Internal("session state is inconsistent after an earlier error; Reset() it");
  if (n_past_ != 0) return InvalidArgument("BeginSequence must come before the first token");
  return cache_->BeginSequence(plan);
}

Status Session::CheckPositions(int64_t n) const {
  if (cache_->position_mode() == PositionMode::kOriginal) {
    if (n_past_ + n <= options_.n_ctx) return Status::Ok();
    std::string msg = "the sequence would need " + std::to_string(n_past_ + n) +
                      " positions but the context holds " + std::to_string(options_.n_ctx);
    if (cache_->policy()) {
      msg += " (the policy keeps original positions, which grow with the stream; "
             "positions=compact keeps them below the budget)";
    }
    return OutOfRange(msg);
  }
  // Compact: chunk positions start at the cache's length, which the policy brings back to
  // its budget after every chunk.
  const int64_t budget = cache_->policy()->token_budget();
  int64_t held = cache_->n_tokens(0, 0);
  for (int64_t left = n; left > 0;) {
    const int64_t chunk = std::min(options_.n_batch, left);
    if (held + chunk > options_.n_ctx) {
      return OutOfRange("positions=compact: a chunk would reach position " +
                        std::to_string(held + chunk - 1) + " (budget " + std::to_string(budget) +
                        " + chunk " + std::to_string(chunk) + ") but the context holds " +
                        std::to_string(options_.n_ctx));
    }
    held = std::min(held + chunk, budget);
    left -= chunk;
  }
  return Status::Ok();
}

Status Session::Eval(std::span<const int32_t> tokens, LogitsFor which, float* logits) {
  if (broken_) return Internal("session state is inconsistent after an earlier error; Reset() it");
  if (tokens.empty()) return InvalidArgument("nothing to evaluate");
  if (cache_->policy() && !cache_->sequence_begun()) {
    KVPACK_RETURN_IF_ERROR(
        cache_->BeginSequence({.n_prompt = static_cast<int64_t>(tokens.size())}));
  }
  KVPACK_RETURN_IF_ERROR(CheckPositions(static_cast<int64_t>(tokens.size())));
  const int64_t n_vocab = this->n_vocab();
  std::vector<int32_t> pos;
  for (size_t begin = 0; begin < tokens.size(); begin += options_.n_batch) {
    const int64_t n = std::min<int64_t>(options_.n_batch, tokens.size() - begin);
    const int64_t first = cache_->NextPosition(n_past_);
    pos.resize(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(first + i);
    // For kLastToken every chunk writes the same buffer; the last chunk's logits remain.
    float* out = which == LogitsFor::kEveryToken ? logits + begin * n_vocab : logits;
    Status s = LlamaForward(*model_, tokens.data() + begin, pos.data(), n, *cache_, which,
                            out, scratch_, &pool_);
    if (!s.ok()) {
      broken_ = true;
      return s;
    }
    n_past_ += n;
  }
  return Status::Ok();
}

Status Session::Reset() {
  n_past_ = 0;
  broken_ = false;
  return cache_->Clear();
}

}  // namespace kvpack
