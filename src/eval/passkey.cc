#include "eval/passkey.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

namespace kvpack {
namespace {

constexpr const char* kHeader =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "it. I will quiz you about the important information there.\n";
constexpr const char* kFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";
constexpr const char* kQuestion = "What is the pass key? The pass key is";

std::string KeyLine(const std::string& key) {
  return "The pass key is " + key + ". Remember it. " + key + " is the pass key.\n";
}

std::string Build(int64_t n_filler, int64_t at, const std::string& key) {
  std::string text = kHeader;
  for (int64_t i = 0; i <= n_filler; ++i) {
    if (i == at) text += KeyLine(key);
    if (i < n_filler) text += kFiller;
  }
  return text + kQuestion;
}

int64_t CountTokens(const Tokenizer& tok, const std::string& text) {
  return static_cast<int64_t>(tok.Encode(text, /*add_special=*/true).size());
}

// Token range of the first "The pass key is <key>" key digits in p.text.
void LocateKey(const Tokenizer& tok, PasskeyPrompt& p) {
  const std::string lead = "The pass key is ";
  const size_t at = p.text.find(lead + p.key);
  if (at == std::string::npos) return;
  const size_t digits = at + lead.size();
  p.key_begin = CountTokens(tok, p.text.substr(0, digits));
  p.key_end = CountTokens(tok, p.text.substr(0, digits + p.key.size()));
  // A space merged into the first digit's token puts it one earlier.
  if (p.key_begin > 0 && p.key_begin == p.key_end) --p.key_begin;
}

// Share of (layer, KV head) caches holding every position in [begin, end).
double KeyRetained(const KvCache& cache, int64_t begin, int64_t end) {
  const KvCacheShape& s = cache.shape();
  int held = 0;
  for (int l = 0; l < s.n_layers; ++l) {
    for (int h = 0; h < s.n_kv_heads; ++h) {
      const std::vector<int32_t>& pos = cache.positions(l, h);
      bool all = true;
      for (int64_t t = begin; t < end && all; ++t) {
        all = std::binary_search(pos.begin(), pos.end(), static_cast<int32_t>(t));
      }
      held += all ? 1 : 0;
    }
  }
  return static_cast<double>(held) / (s.n_layers * s.n_kv_heads);
}

}  // namespace

Result<PasskeyPrompt> MakePasskeyPrompt(const Tokenizer& tokenizer, int64_t n_tokens, double depth,
                                        uint64_t seed) {
  if (!(depth >= 0.0 && depth <= 1.0)) return InvalidArgument("passkey depth must be in [0, 1]");
  std::mt19937_64 rng(seed);
  PasskeyPrompt p;
  p.key = std::to_string(std::uniform_int_distribution<int>(10000, 99999)(rng));
  p.depth = depth;
  // Estimate the filler count from the parts, then shrink until the whole fits.
  const int64_t fixed = CountTokens(tokenizer, Build(0, 0, p.key));
  const int64_t per_line = std::max<int64_t>(1, CountTokens(tokenizer, kFiller) - 1);
  int64_t n_filler = std::max<int64_t>(0, (n_tokens - fixed) / per_line + 1);
  for (;; --n_filler) {
    const int64_t at = static_cast<int64_t>(std::llround(depth * static_cast<double>(n_filler)));
    p.text = Build(n_filler, at, p.key);
    p.n_tokens = CountTokens(tokenizer, p.text);
    if (p.n_tokens <= n_tokens) {
      LocateKey(tokenizer, p);
      break;
    }
    if (n_filler == 0) {
      return InvalidArgument("a passkey prompt needs at least " + std::to_string(p.n_tokens) +
                             " tokens; " + std::to_string(n_tokens) + " is too short");
    }
  }
  return p;
}

Result<std::vector<PasskeyPrompt>> LoadPasskeyFile(const Tokenizer& tokenizer,
                                                   const std::string& path) {
  std::ifstream in(path);
  if (!in) return IoError("cannot open '" + path + "'");
  std::vector<PasskeyPrompt> prompts;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("input") || !j.contains("target") ||
        !j["input"].is_string()) {
      return DataLoss(path + ":" + std::to_string(line_no) +
                      ": expected a JSON object with \"input\" and \"target\"");
    }
    PasskeyPrompt p;
    const std::string input = j["input"].get<std::string>();
    p.key = j["target"].is_string() ? j["target"].get<std::string>()
                                    : std::to_string(j["target"].get<int64_t>());
    const size_t at = input.find("The pass key is " + p.key);
    if (at == std::string::npos) {
      return DataLoss(path + ":" + std::to_string(line_no) + ": the key " + p.key +
                      " is not in the input");
    }
    p.depth = static_cast<double>(at) / static_cast<double>(input.size());
    p.text = input + "\n" + kQuestion;
    p.n_tokens = CountTokens(tokenizer, p.text);
    LocateKey(tokenizer, p);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

bool PasskeyMatches(const std::string& answer, const std::string& key) {
  std::string digits;
  for (char c : answer) {
    if (c >= '0' && c <= '9') digits += c;
    if (digits.size() == 5) break;
  }
  return digits == key;
}

Result<PasskeyAnswer> AnswerPasskey(Session& session, const Tokenizer& tokenizer,
                                    const PasskeyPrompt& prompt, int64_t n_answer) {
  const std::vector<int32_t> tokens = tokenizer.Encode(prompt.text, /*add_special=*/true);
  KVPACK_RETURN_IF_ERROR(session.Reset());
  KVPACK_RETURN_IF_ERROR(session.BeginSequence(
      {.n_prompt = static_cast<int64_t>(tokens.size()), .n_generate = n_answer}));
  std::vector<float> logits(session.n_vocab());
  KVPACK_RETURN_IF_ERROR(session.Eval(tokens, LogitsFor::kLastToken, logits.data()));
  PasskeyAnswer out;
  if (session.cache().position_mode() == PositionMode::kOriginal && prompt.key_end > 0) {
    out.key_retained = KeyRetained(session.cache(), prompt.key_begin, prompt.key_end);
  }
  std::vector<int32_t> answer;
  for (int64_t i = 0; i < n_answer; ++i) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tokenizer.IsEog(next)) break;
    answer.push_back(next);
    if (i + 1 == n_answer) break;
    KVPACK_RETURN_IF_ERROR(session.Eval({&next, 1}, LogitsFor::kLastToken, logits.data()));
  }
  out.text = tokenizer.Decode(answer);
  return out;
}

Result<std::vector<PasskeyCell>> RunPasskey(
    Session& session, const Tokenizer& tokenizer, const PasskeyOptions& options,
    const std::function<void(const PasskeyCell&)>& on_cell) {
  if (options.trials < 1) return InvalidArgument("passkey trials must be >= 1");
  std::vector<PasskeyCell> cells;
  for (int64_t length : options.lengths) {
    for (size_t di = 0; di < options.depths.size(); ++di) {
      PasskeyCell cell;
      cell.length = length;
      cell.depth = options.depths[di];
      for (int trial = 0; trial < options.trials; ++trial) {
        // The same keys for every cache spec: the seed depends on the cell and trial only.
        const uint64_t seed = options.seed * 1000003u + static_cast<uint64_t>(length) * 7919u +
                              di * 131u + static_cast<uint64_t>(trial);
        // The answer must fit the context too: a prompt is at most n_ctx - n_answer long.
        const int64_t fit = std::min(length, session.n_ctx() - options.n_answer);
        KVPACK_ASSIGN_OR_RETURN(PasskeyPrompt p,
                                MakePasskeyPrompt(tokenizer, fit, cell.depth, seed));
        KVPACK_ASSIGN_OR_RETURN(PasskeyAnswer a,
                                AnswerPasskey(session, tokenizer, p, options.n_answer));
        cell.last_answer = a.text;
        cell.n_correct += PasskeyMatches(a.text, p.key) ? 1 : 0;
        if (a.key_retained >= 0.0) {
          cell.key_retained =
              (cell.key_retained < 0.0 ? 0.0 : cell.key_retained) + a.key_retained / options.trials;
        }
        ++cell.n_trials;
      }
      if (on_cell) on_cell(cell);
      cells.push_back(std::move(cell));
    }
  }
  return cells;
}

Result<std::vector<PasskeyCell>> RunPasskeyPrompts(Session& session, const Tokenizer& tokenizer,
                                                   const std::vector<PasskeyPrompt>& prompts,
                                                   int64_t n_answer) {
  std::vector<PasskeyCell> cells;
  for (const PasskeyPrompt& p : prompts) {
    PasskeyCell cell;
    cell.length = p.n_tokens;
    cell.depth = p.depth;
    KVPACK_ASSIGN_OR_RETURN(PasskeyAnswer a, AnswerPasskey(session, tokenizer, p, n_answer));
    cell.last_answer = a.text;
    cell.key_retained = a.key_retained;
    cell.n_correct = PasskeyMatches(a.text, p.key) ? 1 : 0;
    cell.n_trials = 1;
    cells.push_back(std::move(cell));
  }
  return cells;
}

}  // namespace kvpack
