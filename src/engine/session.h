// A Session: one sequence's mutable state (KV cache, scratch, threads) over a shared,
// immutable model (whisper.cpp's context/state split).
#ifndef KVPACK_ENGINE_SESSION_H_
#define KVPACK_ENGINE_SESSION_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/tokenizer.h"
#include "kv/kv_cache.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"

namespace kvpack {

// A model ready for text: weights plus the tokenizer from the same GGUF file.
struct TextModel {
  std::shared_ptr<const LlamaModel> llama;
  std::shared_ptr<const Tokenizer> tokenizer;

  static Result<TextModel> Load(const std::string& path);
};

struct SessionOptions {
  int64_t n_ctx = 0;            // 0: the model's training context
  int n_threads = 1;
  int64_t n_batch = 256;        // prefill chunk length
  std::string kv_spec = "f16";  // see kv/spec.h
};

class Session {
 public:
  static Result<std::unique_ptr<Session>> Create(std::shared_ptr<const LlamaModel> model,
                                                 const SessionOptions& options);

  // Announces the sequence to the cache's eviction policy before its first token: the
  // prompt length (fraction budgets resolve against it, or against plan.budget_base) and
  // the planned generation length (Keyformer's temperature schedule). Without it, the
  // first Eval after Reset is taken as the whole prompt with no planned generation.
  Status BeginSequence(const SequencePlan& plan);

  // Runs tokens through the model in chunks of n_batch at the next positions.
  //   logits: [n_vocab] (last token) or [tokens.size(), n_vocab] (every token).
  // A request that would exceed n_ctx is refused before anything runs (OutOfRange). With a
  // positions=compact policy the positions restart below the cache's budget, so a stream
  // may be longer than n_ctx as long as budget + n_batch fits; with positions=original
  // positions keep growing and n_ctx bounds the stream.
  Status Eval(std::span<const int32_t> tokens, LogitsFor which, float* logits);

  // Forgets the sequence (empty cache, position 0).
  Status Reset();

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return options_.n_ctx; }
  int64_t n_vocab() const { return model_->weights().output.n_out; }
  const LlamaModel& model() const { return *model_; }
  const KvCache& cache() const { return *cache_; }
  ThreadPool& pool() { return pool_; }

 private:
  Session(std::shared_ptr<const LlamaModel> model, const SessionOptions& options,
          std::unique_ptr<KvCache> cache);
  // OutOfRange unless every chunk of an n-token request gets positions below n_ctx.
  Status CheckPositions(int64_t n) const;

  std::shared_ptr<const LlamaModel> model_;
  SessionOptions options_;
  std::unique_ptr<KvCache> cache_;
  ThreadPool pool_;
  ForwardScratch scratch_;
  int64_t n_past_ = 0;
  bool broken_ = false;  // a forward pass failed midway; Reset() before further use
};

}  // namespace kvpack

#endif  // KVPACK_ENGINE_SESSION_H_
