// Text generation: prompt prefill, then a sampled decode loop that streams text.
#ifndef KVPACK_ENGINE_GENERATE_H_
#define KVPACK_ENGINE_GENERATE_H_

#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/session.h"

namespace kvpack {

struct GenerateOptions {
  int64_t n_predict = 128;
  bool stop_at_eog = true;
  SamplerOptions sampler;
};

struct GenerateStats {
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  std::vector<int32_t> tokens;  // generated ids
};

// Streams each complete piece of text through `on_text` as it is produced.
Result<GenerateStats> Generate(Session& session, const Tokenizer& tokenizer,
                               const std::vector<int32_t>& prompt, const GenerateOptions& options,
                               const std::function<void(const std::string&)>& on_text);

}  // namespace kvpack

#endif  // KVPACK_ENGINE_GENERATE_H_
