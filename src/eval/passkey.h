// Passkey retrieval (docs/evaluation.md; Mohtashami & Jaggi, "Landmark Attention", 2023, as
// used by KIVI and Locret): a random 5-digit key hidden at a chosen depth of repetitive
// filler text; the model must complete "The pass key is" with it. Accuracy per (prompt
// length, depth) shows whether an eviction policy kept the one line that matters.
//
// Prompt (KIVI's passkey_examples.jsonl uses the same text): an instruction line, filler
// lines "The grass is green. ... There and back again.", the line "The pass key is K.
// Remember it. K is the pass key." after round(depth * n_filler) filler lines, then the
// question "What is the pass key? The pass key is". The answer is greedy; it is correct
// when the first five digits it contains are the key.
//
// Small models retrieve nothing, so the harness also reports what eviction did to the key
// itself: the share of (layer, KV head) caches that still hold every token of the key line's
// first key right after the prompt (positions=original only; compact positions renumber
// tokens, so it is not measured there).
#ifndef KVPACK_EVAL_PASSKEY_H_
#define KVPACK_EVAL_PASSKEY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/session.h"
#include "io/tokenizer.h"

namespace kvpack {

struct PasskeyPrompt {
  std::string text;
  std::string key;       // 5 digits
  double depth = 0.0;    // where the key line sits, 0 (start) .. 1 (end of the filler)
  int64_t n_tokens = 0;  // prompt tokens, BOS included
  // Token positions [key_begin, key_end) of the key's first occurrence (approximate at the
  // boundaries: found by tokenizing the prompt's prefixes).
  int64_t key_begin = 0, key_end = 0;
};

// A prompt of about n_tokens tokens (never more) with the key from `seed` at `depth`.
Result<PasskeyPrompt> MakePasskeyPrompt(const Tokenizer& tokenizer, int64_t n_tokens, double depth,
                                        uint64_t seed);

// KIVI's passkey_examples.jsonl (keys "input", "target", "passkey_position"); the question
// is appended to each input, which ends with filler.
Result<std::vector<PasskeyPrompt>> LoadPasskeyFile(const Tokenizer& tokenizer,
                                                   const std::string& path);

// The first five digits of `answer` (ignoring anything else) equal `key`.
bool PasskeyMatches(const std::string& answer, const std::string& key);

struct PasskeyAnswer {
  std::string text;
  double key_retained = -1.0;  // share of (layer, head) holding the key after the prompt; -1: n/a
};

// Prefills the prompt (announced to the session's policy with n_answer planned tokens),
// then decodes n_answer tokens greedily.
Result<PasskeyAnswer> AnswerPasskey(Session& session, const Tokenizer& tokenizer,
                                    const PasskeyPrompt& prompt, int64_t n_answer);

struct PasskeyOptions {
  std::vector<int64_t> lengths = {256, 512, 1024};
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int trials = 5;  // keys per (length, depth)
  uint64_t seed = 1;
  int64_t n_answer = 8;
};

struct PasskeyCell {
  int64_t length = 0;  // requested length (file prompts: their own length)
  double depth = 0.0;
  int n_correct = 0;
  int n_trials = 0;
  double key_retained = -1.0;  // mean over trials (-1: not measured)
  std::string last_answer;     // for reports
};

// Synthesised prompts: one cell per (length, depth), `trials` keys each; a length beyond
// the session's context minus the answer is shortened to fit.
Result<std::vector<PasskeyCell>> RunPasskey(
    Session& session, const Tokenizer& tokenizer, const PasskeyOptions& options,
    const std::function<void(const PasskeyCell&)>& on_cell = nullptr);

// Given prompts (e.g. from the file): one cell per prompt.
Result<std::vector<PasskeyCell>> RunPasskeyPrompts(Session& session, const Tokenizer& tokenizer,
                                                   const std::vector<PasskeyPrompt>& prompts,
                                                   int64_t n_answer);

}  // namespace kvpack

#endif  // KVPACK_EVAL_PASSKEY_H_
