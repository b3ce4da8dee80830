// Small UTF-8 helpers shared by the tokenizers and the streaming decoder.
//
// Design goals: byte-exact agreement with llama.cpp's lenient decoder where tokenization
// depends on it (unicode.cpp: a malformed byte becomes U+FFFD and decoding resumes at the
// next byte), and never reading past the end of the input.
// Non-goals: normalization, validation beyond what the tokenizers need.
#ifndef KVPACK_IO_UTF8_H_
#define KVPACK_IO_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvpack::utf8 {

// Length of the sequence announced by `lead` judged by its high nibble alone (1 for ASCII,
// continuation bytes and anything malformed). Callers clamp it to the bytes left.
inline size_t SeqLen(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Appends the UTF-8 encoding of `cp` (must be <= 0x10FFFF) to `out`.
void Append(uint32_t cp, std::string* out);

// Returns `text` as well-formed UTF-8: every byte that does not start a complete sequence
// becomes U+FFFD (llama.cpp's rule). Overlong forms are re-encoded in their shortest form as
// llama.cpp does; surrogates and values above U+10FFFF (which llama.cpp cannot re-encode)
// become U+FFFD too, so the result is always valid for PCRE2's UTF mode.
std::string Sanitize(std::string_view text);

// Number of bytes at the end of `bytes` that form the start of a well-formed multi-byte
// sequence still waiting for its continuation bytes (0..3). The streaming decoder holds
// these back.
size_t IncompleteTailLength(std::string_view bytes);

// GPT-2's reversible byte <-> code point table (openai/gpt-2 encoder.py, bytes_to_unicode):
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in byte order.
uint32_t Gpt2ByteToCodepoint(uint8_t byte);
// Inverse of the table above; -1 for code points outside it.
int Gpt2CodepointToByte(uint32_t cp);

}  // namespace kvpack::utf8

#endif  // KVPACK_IO_UTF8_H_
