// Loading, special-token partitioning and decoding. The two encoders live in
// tokenizer_spm.cc and tokenizer_bpe.cc.
//
// Reference: llama.cpp src/llama-vocab.cpp (llama_vocab::impl::load, tokenize,
// tokenizer_st_partition, token_to_piece, detokenize), MIT license.
#include "io/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "io/gguf.h"
#include "io/pretokenizer.h"
#include "io/utf8.h"

namespace kvpack {

namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTokenType = "tokenizer.ggml.token_type";

template <typename T>
Status ReadOptional(Result<T> result, T* out) {
  if (result.ok()) {
    *out = std::move(result).value();
    return Status::Ok();
  }
  if (result.status().code() == StatusCode::kNotFound) return Status::Ok();
  return result.status();
}

// Texts llama.cpp recognizes as end-of-generation markers (llama-vocab.cpp, load()).
bool IsEogText(const std::string& t) {
  static const char* const kTexts[] = {"<|eot_id|>",    "<|im_end|>",      "<|end|>",
                                       "<|return|>",    "<|call|>",        "<end_of_turn>",
                                       "<|endoftext|>", "<|eom_id|>",      "<EOT>",
                                       "_<EOT>",        "<|end_of_text|>", "<end_of_utterance>"};
  for (const char* k : kTexts) {
    if (t == k) return true;
  }
  return false;
}

// Texts llama.cpp auto-detects as EOT/EOM/FIM markers and forces to control type when the
// corresponding tokenizer.ggml.*_token_id key is absent. The last three groups also end
// generation (fim_pad, fim_rep, fim_sep).
struct MarkerGroup {
  const char* key;
  std::vector<const char*> texts;
  bool eog;
};

const std::vector<MarkerGroup>& MarkerGroups() {
  static const std::vector<MarkerGroup> kGroups = {
      {"tokenizer.ggml.eot_token_id",
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>",
        "<\xEF\xBD\x9C"
        "end\xE2\x96\x81of\xE2\x96\x81"
        "sentence\xEF\xBD\x9C>",
        "<end_of_utterance>"},
       true},
      {"tokenizer.ggml.eom_token_id", {"<|eom_id|>"}, true},
      {"tokenizer.ggml.fim_pre_token_id",
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "begin\xEF\xBD\x9C>",
        "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>"},
       false},
      {"tokenizer.ggml.fim_suf_token_id",
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "hole\xEF\xBD\x9C>",
        "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>"},
       false},
      {"tokenizer.ggml.fim_mid_token_id",
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "end\xEF\xBD\x9C>",
        "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>"},
       false},
      {"tokenizer.ggml.fim_pad_token_id", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}, true},
      {"tokenizer.ggml.fim_rep_token_id",
       {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
       true},
      {"tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"}, true},
  };
  return kGroups;
}

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

bool IsCSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// "<0xAB>" -> 0xAB; -1 when `text` is not in that form.
int ParseByteToken(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  Status status = tokenizer->Load(gguf);
  if (!status.ok()) return status.WithContext("tokenizer of " + gguf.path());
  return tokenizer;
}

Status Tokenizer::Load(const GgufFile& gguf) {
  auto model = gguf.GetString(kKeyModel);
  if (!model.ok()) return model.status();
  model_name_ = model.value();
  if (model_name_ == "llama") {
    kind_ = Kind::kSpm;
    bos_ = 1;
    eos_ = 2;
    unk_ = 0;
    add_bos_ = true;
    add_space_prefix_ = true;
  } else if (model_name_ == "gpt2") {
    kind_ = Kind::kBpe;
    bos_ = 11;
    eos_ = 11;
  } else {
    return InvalidArgument("unsupported tokenizer model " + std::string(kKeyModel) + "='" +
                           model_name_ + "' (supported: llama, gpt2)");
  }
  KVPACK_RETURN_IF_ERROR(ReadOptional(gguf.GetString(kKeyPre), &pre_name_));

  if (kind_ == Kind::kBpe) {
    // SPM vocabularies ignore `pre` (llama.cpp does too).
    auto pre = PreTokenizer::Create(pre_name_);
    if (!pre.ok()) return pre.status();
    pre_ = std::move(pre).value();
    ignore_merges_ = pre_->traits().ignore_merges;
    add_bos_ = pre_->traits().add_bos;
  }
  KVPACK_RETURN_IF_ERROR(
      ReadOptional(gguf.GetBool("tokenizer.ggml.add_space_prefix"), &add_space_prefix_));

  // Vocabulary.
  auto texts = gguf.GetStringArray(kKeyTokens);
  if (!texts.ok()) return texts.status();
  std::vector<std::string>& words = texts.value();
  if (words.empty()) return InvalidArgument(std::string(kKeyTokens) + " is empty");
  if (words.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument(std::string(kKeyTokens) + " has too many entries");
  }
  std::vector<float> scores;
  KVPACK_RETURN_IF_ERROR(ReadOptional(gguf.GetFloatArray(kKeyScores), &scores));
  if (!scores.empty() && scores.size() != words.size()) {
    return InvalidArgument(std::string(kKeyScores) + " has " + std::to_string(scores.size()) +
                           " entries for " + std::to_string(words.size()) + " tokens");
  }
  std::vector<int64_t> types;
  KVPACK_RETURN_IF_ERROR(ReadOptional(gguf.GetIntArray(kKeyTokenType), &types));
  if (!types.empty() && types.size() != words.size()) {
    return InvalidArgument(std::string(kKeyTokenType) + " has " + std::to_string(types.size()) +
                           " entries for " + std::to_string(words.size()) + " tokens");
  }
  tokens_.resize(words.size());
  token_to_id_.reserve(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    TokenData& t = tokens_[i];
    t.text = std::move(words[i]);
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    t.score = scores.empty() ? 0.0f : scores[i];
    if (!types.empty()) {
      const int64_t ty = types[i];
      t.type = (ty >= 1 && ty <= 6) ? static_cast<TokenType>(ty) : TokenType::kUndefined;
    }
    token_to_id_[t.text] = static_cast<int32_t>(i);  // a later duplicate wins, as llama.cpp
  }

  if (kind_ == Kind::kBpe) KVPACK_RETURN_IF_ERROR(LoadMerges(gguf));

  // Special ids: out-of-range values keep the default (llama.cpp warns and does the same).
  const int64_t n = static_cast<int64_t>(tokens_.size());
  struct IdKey {
    const char* key;
    int32_t* id;
  };
  for (const IdKey& k :
       {IdKey{"tokenizer.ggml.bos_token_id", &bos_}, IdKey{"tokenizer.ggml.eos_token_id", &eos_},
        IdKey{"tokenizer.ggml.unknown_token_id", &unk_},
        IdKey{"tokenizer.ggml.padding_token_id", &pad_}}) {
    int64_t value = -1;
    KVPACK_RETURN_IF_ERROR(ReadOptional(gguf.GetInt(k.key), &value));
    if (value >= 0 && value < n) *k.id = static_cast<int32_t>(value);
    if (*k.id >= n) *k.id = -1;  // a default that does not exist in a tiny vocabulary
  }
  KVPACK_RETURN_IF_ERROR(ReadOptional(gguf.GetBool("tokenizer.ggml.add_bos_token"), &add_bos_));
  KVPACK_RETURN_IF_ERROR(ReadOptional(gguf.GetBool("tokenizer.ggml.add_eos_token"), &add_eos_));

  ApplyTextOverrides(gguf);

  for (int32_t id = 0; id < static_cast<int32_t>(tokens_.size()); ++id) {
    if (IsSpecialType(tokens_[id].type)) special_tokens_.push_back(id);
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return tokens_[a].text.size() > tokens_[b].text.size();
  });
  return Status::Ok();
}

Status Tokenizer::LoadMerges(const GgufFile& gguf) {
  auto merges = gguf.GetStringArray("tokenizer.ggml.merges");
  if (!merges.ok()) {
    return merges.status().WithContext("gpt2 tokenizer needs tokenizer.ggml.merges");
  }
  bpe_ranks_.reserve(merges.value().size());
  int32_t rank = 0;
  for (const std::string& m : merges.value()) {
    // "left right"; the separator is the first space after the first byte (so a merge of a
    // literal space token is still parsed), as llama.cpp does.
    const size_t pos = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (pos != std::string::npos) {
      std::string key = m.substr(0, pos);
      key.push_back('\0');
      key.append(m, pos + 1);
      bpe_ranks_.try_emplace(std::move(key), rank);  // the first occurrence wins
    }
    ++rank;
  }
  return Status::Ok();
}

void Tokenizer::ApplyTextOverrides(const GgufFile& gguf) {
  const int64_t n = static_cast<int64_t>(tokens_.size());
  for (const MarkerGroup& group : MarkerGroups()) {
    int64_t id = -1;
    auto r = gguf.GetInt(group.key);
    if (r.ok() && r.value() >= 0 && r.value() < n) id = r.value();
    if (id >= 0) {
      if (group.eog) eog_ids_.insert(static_cast<int32_t>(id));
      continue;
    }
    for (const char* text : group.texts) {
      auto it = token_to_id_.find(text);
      if (it == token_to_id_.end()) continue;
      tokens_[it->second].type = TokenType::kControl;
      if (group.eog) eog_ids_.insert(it->second);
    }
  }
  bool has_return = false, has_call = false;
  int32_t end_id = -1;
  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
    TokenData& t = tokens_[id];
    if (IsEogText(t.text)) {
      eog_ids_.insert(id);
      t.type = TokenType::kControl;
      has_return |= t.text == "<|return|>";
      has_call |= t.text == "<|call|>";
      if (t.text == "<|end|>") end_id = id;
    }
    // llama.cpp renders these gpt-oss markers always.
    if (t.text == "<|channel|>" || t.text == "<|message|>" || t.text == "<|start|>" ||
        t.text == "<|constrain|>") {
      t.type = TokenType::kUserDefined;
    }
  }
  if (eos_ >= 0) eog_ids_.insert(eos_);
  // o200k_harmony: "<|end|>" ends a message, not the generation.
  if (has_return && has_call && end_id >= 0) {
    eog_ids_.erase(end_id);
    tokens_[end_id].type = TokenType::kUserDefined;
  }

  // llama.cpp's per-model rule for Phi-3: whitespace after special tokens is dropped.
  std::string name;
  if (gguf.GetString("general.name").ok()) name = gguf.GetString("general.name").value();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (TokenData& t : tokens_) {
      if (IsSpecialType(t.type)) t.rstrip = true;
    }
    for (const char* text : {"</s>"}) {
      auto it = token_to_id_.find(text);
      if (it != token_to_id_.end()) tokens_[it->second].rstrip = true;
    }
    for (const char* text : {"<unk>", "<s>", "<|endoftext|>"}) {
      auto it = token_to_id_.find(text);
      if (it != token_to_id_.end()) tokens_[it->second].rstrip = false;
    }
  }
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  return tokens_[id].type;
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= n_vocab()) return kEmpty;
  return tokens_[id].text;
}

int32_t Tokenizer::TextToToken(std::string_view text) const {
  auto it = token_to_id_.find(std::string(text));
  return it == token_to_id_.end() ? -1 : it->second;
}

std::vector<Tokenizer::Fragment> Tokenizer::PartitionSpecial(std::string_view text,
                                                             bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(Fragment{-1, 0, text.size()});
  for (const int32_t id : special_tokens_) {
    const TokenData& special = tokens_[id];
    if (!parse_special && special.type != TokenType::kUserDefined) continue;
    const std::string& needle = special.text;
    std::vector<Fragment> next;
    next.reserve(fragments.size());
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset;
      size_t length = f.length;
      while (length > 0) {
        const size_t match = text.substr(0, base + length).find(needle, base);
        if (match == std::string_view::npos) break;
        size_t left_length = match - base;
        if (special.lstrip) {
          while (left_length > 0 && IsCSpace(text[base + left_length - 1])) --left_length;
        }
        if (left_length > 0) next.push_back(Fragment{-1, base, left_length});
        next.push_back(Fragment{id, 0, 0});
        size_t right = match + needle.size();
        size_t right_length = base + length - right;
        if (special.rstrip) {
          while (right_length > 0 && IsCSpace(text[right])) {
            ++right;
            --right_length;
          }
        }
        base = right;
        length = right_length;
      }
      if (length > 0) next.push_back(Fragment{-1, base, length});
    }
    fragments = std::move(next);
  }
  return fragments;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  const std::vector<Fragment> fragments = PartitionSpecial(text, parse_special);
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  // SPM prefixes a space to the text at the start and after every special token
  // (llama-vocab.cpp, tokenize(), "is_prev_special").
  bool prev_special = true;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.offset, f.length);
    if (kind_ == Kind::kSpm) {
      if (add_space_prefix_ && prev_special) {
        std::string prefixed;
        prefixed.reserve(raw.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(raw);
        EncodeSpm(prefixed, &out);
      } else {
        EncodeSpm(raw, &out);
      }
    } else {
      EncodeBpe(raw, &out);
    }
    prev_special = false;
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string Tokenizer::TokenPiece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  const TokenData& t = tokens_[id];
  switch (t.type) {
    case TokenType::kControl:
    case TokenType::kUserDefined:
    case TokenType::kUnknown:
      return t.text;
    case TokenType::kNormal:
      break;
    case TokenType::kByte:
      if (kind_ == Kind::kSpm) {
        const int byte = ParseByteToken(t.text);
        if (byte >= 0) return std::string(1, static_cast<char>(byte));
        return t.text;
      }
      break;  // byte-level BPE spells bytes as ordinary mapped text
    case TokenType::kUnused:
    case TokenType::kUndefined:
      return {};
  }
  std::string piece;
  piece.reserve(t.text.size());
  if (kind_ == Kind::kSpm) {
    // U+2581 (E2 96 81) -> ' '.
    for (size_t i = 0; i < t.text.size();) {
      if (t.text.compare(i, 3, "\xE2\x96\x81") == 0) {
        piece.push_back(' ');
        i += 3;
      } else {
        piece.push_back(t.text[i++]);
      }
    }
    return piece;
  }
  // Undo GPT-2's byte-to-unicode mapping. Code points outside the table (which a well-formed
  // vocabulary never contains) are kept as UTF-8 rather than dropped.
  const std::string& s = t.text;
  for (size_t i = 0; i < s.size();) {
    const uint8_t b0 = static_cast<uint8_t>(s[i]);
    const size_t len = std::min(utf8::SeqLen(b0), s.size() - i);
    uint32_t cp = b0;
    if (len == 2) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3Fu);
    }
    const int byte = (len <= 2) ? utf8::Gpt2CodepointToByte(cp) : -1;
    if (byte >= 0) {
      piece.push_back(static_cast<char>(byte));
    } else {
      piece.append(s, i, len);
    }
    i += len;
  }
  return piece;
}

std::string Tokenizer::DecodePiece(int32_t id) const {
  const TokenType type = token_type(id);
  if (type == TokenType::kControl || type == TokenType::kUnknown) return {};
  return TokenPiece(id);
}

std::string Tokenizer::DecodeStep(int32_t id, size_t index, bool* strip_space) const {
  if (index == 0 && id == bos_ && bos_ >= 0) return {};  // the space rule skips a leading BOS
  std::string piece = DecodePiece(id);
  if (*strip_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  *strip_space = false;
  return piece;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  bool strip_space = kind_ == Kind::kSpm && add_space_prefix_;
  for (size_t i = 0; i < ids.size(); ++i) text += DecodeStep(ids[i], i, &strip_space);
  return text;
}

void StreamingDecoder::Reset() {
  pending_.clear();
  index_ = 0;
  strip_space_ = tokenizer_->kind() == Tokenizer::Kind::kSpm && tokenizer_->add_space_prefix();
}

std::string StreamingDecoder::Push(int32_t id) {
  pending_ += tokenizer_->DecodeStep(id, index_++, &strip_space_);
  const size_t hold = utf8::IncompleteTailLength(pending_);
  std::string ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamingDecoder::Flush() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace kvpack
