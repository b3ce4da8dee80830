// Tokenizer built from GGUF metadata (tokenizer.ggml.*), matching llama.cpp's llama-vocab.cpp.
//
// Design goals:
//  - Token ids identical to llama.cpp for `llama` (SentencePiece-style BPE over scores, with
//    byte fallback) and `gpt2` (byte-level BPE over ranked merges, regex pre-tokenizer chosen
//    by tokenizer.ggml.pre) vocabularies; llama.cpp's test vectors are the acceptance test.
//  - Never crash on user input: malformed metadata is a Status from FromGguf; any text
//    (including invalid UTF-8) encodes; any id decodes (invalid ids decode to nothing).
//  - Immutable after loading, so one Tokenizer is shared by every session and thread.
// Non-goals: WordPiece/Unigram/RWKV vocabularies, chat templates, llama.cpp's
//  `clean_spaces` decode post-processing (it is lossy; Decode here is byte-exact).
//
// Special tokens. Control (token_type 3) and unknown (2) tokens are matched in the text only
// when `parse_special` is true. User-defined tokens (4) are always matched as whole tokens,
// as llama.cpp and HF tokenizers do (they are "added tokens"; llama-vocab.cpp,
// tokenizer_st_partition). Tokens that llama.cpp recognizes by text as end-of-generation or
// fill-in-the-middle markers (<|eot_id|>, <|im_end|>, <|end|>, <fim_prefix>, ...) are treated
// as control tokens, again as llama.cpp does.
#ifndef KVPACK_IO_TOKENIZER_H_
#define KVPACK_IO_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvpack/status.h"

namespace kvpack {

class GgufFile;
class PreTokenizer;

// GGUF tokenizer.ggml.token_type values (llama.h, llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  enum class Kind { kSpm, kBpe };

  // Reads tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, bos_token_id,
  // eos_token_id, unknown_token_id, padding_token_id, add_bos_token, add_eos_token,
  // add_space_prefix}. An unknown model or pre-tokenizer is InvalidArgument naming it; a
  // missing `pre` for a gpt2 model selects llama.cpp's "default" regexes. Special ids outside
  // the vocabulary are ignored (the model's default, or none, is kept), as in llama.cpp.
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`. With `add_special`, BOS is prepended when add_bos() (and EOS
  // appended when add_eos()). With `parse_special`, control tokens written in the text
  // ("<s>", "<|im_end|>") become their ids; otherwise they are tokenized as plain text.
  std::vector<int32_t> Encode(std::string_view text, bool add_special,
                              bool parse_special = false) const;

  // The bytes token `id` stands for: SPM's U+2581 becomes a space and <0xXX> byte tokens
  // their byte; gpt2's byte-to-unicode mapping is undone. Control, user-defined and unknown
  // tokens give their text ("</s>"); unused/undefined tokens and invalid ids give "".
  std::string TokenPiece(int32_t id) const;

  // Concatenated pieces of `ids`, byte-exact, except that control and unknown tokens (BOS,
  // EOS, ...) and invalid ids render as nothing, and, for SPM vocabularies with
  // add_space_prefix, the space that Encode prefixed is removed from the first piece (after a
  // leading BOS). So Decode(Encode(s, add_special)) == s wherever tokenization is lossless.
  // Unlike llama.cpp, the space is removed after a leading BOS as well, and no
  // `clean_spaces` post-processing is applied.
  std::string Decode(const std::vector<int32_t>& ids) const;

  Kind kind() const { return kind_; }
  const std::string& model_name() const { return model_name_; }  // "llama" or "gpt2"
  const std::string& pre_name() const { return pre_name_; }      // "" when absent
  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }  // -1 when the vocabulary has none
  int32_t eos() const { return eos_; }
  int32_t unk() const { return unk_; }
  int32_t pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  // End of generation: EOS, EOT/EOM and the end markers llama.cpp recognizes by text.
  bool IsEog(int32_t id) const { return eog_ids_.count(id) != 0; }
  // Type after llama.cpp's overrides (see the header comment); kUndefined for invalid ids.
  TokenType token_type(int32_t id) const;
  // The vocabulary entry as stored in the GGUF file ("" for invalid ids).
  const std::string& TokenText(int32_t id) const;
  // Id of the vocabulary entry spelled exactly `text`, or -1.
  int32_t TextToToken(std::string_view text) const;

 private:
  friend class StreamingDecoder;

  struct TokenData {
    std::string text;
    float score = 0.0f;
    TokenType type = TokenType::kNormal;
    bool lstrip = false;  // whitespace before the token is dropped when it is matched
    bool rstrip = false;  // whitespace after it is dropped (llama.cpp's phi-3 rule)
  };
  struct Fragment {  // a run of raw text, or one special token
    int32_t token = -1;
    size_t offset = 0;
    size_t length = 0;
  };

  Tokenizer() = default;
  Status Load(const GgufFile& gguf);
  Status LoadMerges(const GgufFile& gguf);
  void ApplyTextOverrides(const GgufFile& gguf);

  std::vector<Fragment> PartitionSpecial(std::string_view text, bool parse_special) const;
  void EncodeSpm(std::string_view text, std::vector<int32_t>* out) const;  // tokenizer_spm.cc
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;  // tokenizer_bpe.cc
  int32_t ByteToTokenSpm(uint8_t byte) const;
  int32_t BpeRank(const std::string& left, const std::string& right) const;
  // Piece as Decode renders it ("" for control/unknown tokens and invalid ids).
  std::string DecodePiece(int32_t id) const;
  // Decode's leading-space rule, one token at a time: `index` is the token's position in
  // the sequence, `strip_space` carries the state between calls.
  std::string DecodeStep(int32_t id, size_t index, bool* strip_space) const;

  Kind kind_ = Kind::kSpm;
  std::string model_name_;
  std::string pre_name_;
  std::vector<TokenData> tokens_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<std::string, int32_t> bpe_ranks_;  // key: left + '\0' + right
  std::unique_ptr<PreTokenizer> pre_;                   // gpt2 only
  bool ignore_merges_ = false;
  std::vector<int32_t> special_tokens_;  // control/user-defined/unknown, longest text first
  std::unordered_set<int32_t> eog_ids_;
  int32_t bos_ = -1;
  int32_t eos_ = -1;
  int32_t unk_ = -1;
  int32_t pad_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
};

// Turns a stream of generated tokens into text without ever splitting a UTF-8 character:
// bytes of an incomplete multi-byte sequence are held back until the token that completes
// it arrives. The concatenation of every Push() and the final Flush() equals
// Tokenizer::Decode of the same ids. The tokenizer must outlive the decoder.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) { Reset(); }

  // Text that became complete with `id` (possibly empty).
  std::string Push(int32_t id);
  // Whatever is still held back (a truncated character at the end of the stream).
  std::string Flush();
  // Starts a new sequence (the leading-space rule applies again).
  void Reset();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
  size_t index_ = 0;
  bool strip_space_ = false;
};

}  // namespace kvpack

#endif  // KVPACK_IO_TOKENIZER_H_
