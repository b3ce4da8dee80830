#include "engine/generate.h"

#include <chrono>

namespace kvpack {
namespace {
double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Result<GenerateStats> Generate(Session& session, const Tokenizer& tokenizer,
                               const std::vector<int32_t>& prompt, const GenerateOptions& options,
                               const std::function<void(const std::string&)>& on_text) {
  KVPACK_RETURN_IF_ERROR(ValidateSamplerOptions(options.sampler));
  if (prompt.empty()) return InvalidArgument("the prompt has no tokens");
  if (options.n_predict < 0) return InvalidArgument("n_predict must be >= 0");
  // With positions=compact a policy keeps positions below its budget, so the stream may run
  // past n_ctx; Session::Eval still refuses any chunk that would not fit.
  const bool compact = session.cache().position_mode() == PositionMode::kCompact;
  if (!compact &&
      static_cast<int64_t>(prompt.size()) + options.n_predict > session.n_ctx() - session.n_past()) {
    return OutOfRange("prompt (" + std::to_string(prompt.size()) + " tokens) plus " +
                      std::to_string(options.n_predict) + " new tokens exceed the context of " +
                      std::to_string(session.n_ctx()));
  }
  GenerateStats stats;
  stats.n_prompt = static_cast<int64_t>(prompt.size());
  std::vector<float> logits(session.n_vocab());
  Sampler sampler(options.sampler);
  for (int32_t t : prompt) sampler.Accept(t);
  StreamingDecoder decoder(tokenizer);
  for (int32_t t : prompt) decoder.Push(t);  // prime the leading-space rule

  // An eviction policy learns the prompt length and the planned generation length
  // (Keyformer's temperature schedule) before the first token.
  if (session.n_past() == 0 && session.cache().policy() != nullptr) {
    KVPACK_RETURN_IF_ERROR(session.BeginSequence(
        {.n_prompt = static_cast<int64_t>(prompt.size()), .n_generate = options.n_predict}));
  }
  auto t0 = std::chrono::steady_clock::now();
  KVPACK_RETURN_IF_ERROR(session.Eval(prompt, LogitsFor::kLastToken, logits.data()));
  stats.prefill_seconds = SecondsSince(t0);

  t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < options.n_predict; ++i) {
    const int32_t next = sampler.Sample(logits.data(), session.n_vocab());
    sampler.Accept(next);
    stats.tokens.push_back(next);
    ++stats.n_generated;
    if (options.stop_at_eog && tokenizer.IsEog(next)) break;
    if (on_text) on_text(decoder.Push(next));
    if (i + 1 == options.n_predict) break;
    KVPACK_RETURN_IF_ERROR(session.Eval({&next, 1}, LogitsFor::kLastToken, logits.data()));
  }
  if (on_text) on_text(decoder.Flush());
  stats.decode_seconds = SecondsSince(t0);
  return stats;
}

}  // namespace kvpack
