#include "io/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

namespace kvpack {

namespace {

// Regex lists from llama.cpp's src/llama-vocab.cpp (llm_tokenizer_bpe constructor, one case
// per LLAMA_VOCAB_PRE_TYPE_*) and the name -> type table in llama_vocab::impl::load(), as of
// ggml-org/llama.cpp master 2025 (read via its mirror kainlan/llama.cpp-intel-optimizations).
//
// GPT-2 and LLaMA-3 patterns are not run through std::regex there but through hand-written
// matchers (src/unicode.cpp: unicode_regex_split_custom_gpt2 / _llama3). The GPT-2 matcher
// implements the pattern *plus* a trailing `|\s+` alternative (its header comment says so:
// a lone whitespace before a non-space character becomes its own piece), so kGpt2 carries it.

constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Family {
  const char* kind;
  std::vector<const char*> regexes;
  bool ignore_merges;
  bool add_bos;
};

const Family& DefaultFamily() {
  static const Family f{
      "default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false};
  return f;
}

const Family* FindFamily(std::string_view name) {
  static const Family kGpt2Family{"gpt2", {kGpt2}, false, false};
  static const Family kLlama3Family{"llama3", {kLlama3}, true, true};
  static const Family kDbrxFamily{"dbrx", {kLlama3}, false, false};
  static const Family kQwen2Family{"qwen2", {kQwen2}, false, false};
  static const Family kStarcoderFamily{"starcoder", {"\\p{N}", kGpt2}, false, false};
  static const Family kDeepseekCoderFamily{
      "deepseek-coder",
      {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
       // CJK unified ideographs, U+0800..U+4E00 and Hangul, as in llama.cpp.
       "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"},
      false,
      false};
  static const Family kFalconFamily{
      "falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}, false, false};

  static const std::pair<const char*, const Family*> kNames[] = {
      {"llama3", &kLlama3Family},
      {"llama-v3", &kLlama3Family},
      {"llama-bpe", &kLlama3Family},
      {"falcon3", &kLlama3Family},
      {"falcon-h1", &kLlama3Family},
      {"pixtral", &kLlama3Family},
      {"midm-2.0", &kLlama3Family},
      {"lfm2", &kLlama3Family},
      {"dbrx", &kDbrxFamily},
      {"smaug-bpe", &kDbrxFamily},
      {"deepseek-coder", &kDeepseekCoderFamily},
      {"falcon", &kFalconFamily},
      {"mpt", &kGpt2Family},
      {"olmo", &kGpt2Family},
      {"jais", &kGpt2Family},
      {"gpt-2", &kGpt2Family},
      {"gpt2", &kGpt2Family},
      {"phi-2", &kGpt2Family},
      {"gigachat", &kGpt2Family},
      {"exaone4", &kGpt2Family},
      {"mellum", &kGpt2Family},
      {"starcoder", &kStarcoderFamily},
      {"refact", &kStarcoderFamily},
      {"command-r", &kStarcoderFamily},
      {"smollm", &kStarcoderFamily},
      {"codeshell", &kStarcoderFamily},
      {"exaone", &kStarcoderFamily},
      {"minerva-7b", &kStarcoderFamily},
      {"qwen2", &kQwen2Family},
      {"deepseek-r1-qwen", &kQwen2Family},
      {"kormo", &kQwen2Family},
      {"stablelm2", &kQwen2Family},
      {"megrez", &kQwen2Family},
      {"hunyuan", &kQwen2Family},
      {"grok-2", &kQwen2Family},
      {"default", nullptr},
  };
  for (const auto& [n, family] : kNames) {
    if (name == n) return family != nullptr ? family : &DefaultFamily();
  }
  return nullptr;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

PreTokenizer::~PreTokenizer() = default;

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view name) {
  const Family* family = name.empty() ? &DefaultFamily() : FindFamily(name);
  if (family == nullptr) {
    return InvalidArgument("unsupported pre-tokenizer tokenizer.ggml.pre='" + std::string(name) +
                           "' (supported: default, gpt-2, llama-bpe/llama3, qwen2, smollm, "
                           "starcoder, deepseek-coder, falcon, dbrx and their llama.cpp "
                           "aliases)");
  }
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->traits_.kind = family->kind;
  pre->traits_.ignore_merges = family->ignore_merges;
  pre->traits_.add_bos = family->add_bos;
  for (const char* pattern : family->regexes) {
    auto regex = std::make_unique<Regex>();
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return Internal("pre-tokenizer '" + std::string(family->kind) + "': PCRE2 rejected '" +
                      pattern + "' at offset " + std::to_string(error_offset) + ": " +
                      reinterpret_cast<const char*>(message));
    }
    // JIT is an optimization only; without it (unsupported platform) matching still works.
    regex->jit = pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE) == 0;
    pre->regexes_.push_back(std::move(regex));
  }
  return pre;
}

std::vector<std::string> PreTokenizer::Split(std::string_view text) const {
  // Pieces as [begin, end) byte ranges of `text`.
  std::vector<std::pair<size_t, size_t>> pieces;
  if (!text.empty()) pieces.emplace_back(0, text.size());

  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  if (match == nullptr) return {std::string(text)};  // out of memory: one piece, still exact

  for (const auto& regex : regexes_) {
    std::vector<std::pair<size_t, size_t>> next;
    next.reserve(pieces.size() * 2);
    for (const auto& [begin, end] : pieces) {
      // The subject is the piece alone, so look-aheads and `$` stop at its end, as in
      // llama.cpp where each piece is matched on its own.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
      const size_t length = end - begin;
      size_t gap_start = 0;
      size_t pos = 0;
      while (pos < length) {
        int rc = pcre2_match(regex->code, subject, length, pos, PCRE2_NO_UTF_CHECK, match.get(),
                             nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && regex->jit) {
          // e.g. JIT stack exhausted on a very long run: retry with the interpreter.
          rc = pcre2_match(regex->code, subject, length, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                           match.get(), nullptr);
        }
        if (rc < 0) break;  // no match (or resource limit): the rest stays one gap piece
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
        const size_t m_begin = ov[0];
        const size_t m_end = ov[1];
        if (m_end <= m_begin) {
          // None of our patterns can match empty; guard anyway by stepping one character.
          pos = m_begin + 1;
          while (pos < length && (subject[pos] & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (m_begin > gap_start) next.emplace_back(begin + gap_start, begin + m_begin);
        next.emplace_back(begin + m_begin, begin + m_end);
        gap_start = pos = m_end;
      }
      if (gap_start < length) next.emplace_back(begin + gap_start, end);
    }
    pieces = std::move(next);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (const auto& [begin, end] : pieces) words.emplace_back(text.substr(begin, end - begin));
  return words;
}

}  // namespace kvpack
