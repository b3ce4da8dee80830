// SentencePiece-style ("llama") encoding: greedy merges of adjacent symbols by the score of
// the merged token, with byte fallback. Same algorithm and tie-breaking as llama.cpp's
// llm_tokenizer_spm_session (src/llama-vocab.cpp; originally
// https://github.com/ggerganov/llama.cpp/commit/074bea2eb1f1349a0118239c4152914aecaa1be4).
#include <algorithm>
#include <queue>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "io/utf8.h"

namespace kvpack {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the escaped text
  size_t n;       // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

// Highest score first; among equal scores the leftmost pair (std::priority_queue keeps the
// "largest" element on top, so this is llama.cpp's comparator verbatim in meaning).
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

int32_t Tokenizer::ByteToTokenSpm(uint8_t byte) const {
  static const char kHex[] = "0123456789ABCDEF";
  const char name[7] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>', 0};
  auto it = token_to_id_.find(name);
  if (it != token_to_id_.end()) return it->second;
  it = token_to_id_.find(std::string(1, static_cast<char>(byte)));
  if (it != token_to_id_.end()) return it->second;
  return unk_;  // llama.cpp throws here; a vocabulary without byte tokens degrades to <unk>
}

void Tokenizer::EncodeSpm(std::string_view raw, std::vector<int32_t>* out) const {
  // Spaces become U+2581 (llama_escape_whitespace); other whitespace stays as is.
  std::string text;
  text.reserve(raw.size() + raw.size() / 4);
  for (const char c : raw) {
    if (c == ' ') {
      text += "\xE2\x96\x81";
    } else {
      text.push_back(c);
    }
  }
  if (text.empty()) return;

  // One symbol per UTF-8 character (by lead byte; malformed bytes are single symbols).
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len =
        std::min(utf8::SeqLen(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{index - 1, offset + len == text.size() ? -1 : index + 1, offset, len});
    offset += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  std::string scratch;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    scratch.assign(text, symbols[left].offset, symbols[left].n + symbols[right].n);
    auto it = token_to_id_.find(scratch);
    if (it == token_to_id_.end()) return;
    queue.push(Bigram{left, right, tokens_[it->second].score, scratch.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale entry: one side was merged away since it was queued.
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  // Every merged symbol is a token by construction; only unmerged characters can miss the
  // vocabulary, and they fall back to byte tokens. (llama.cpp's rev_merge re-segmentation
  // can never trigger for the same reason, so it is omitted.)
  for (int i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    scratch.assign(text, s.offset, s.n);
    auto it = token_to_id_.find(scratch);
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      continue;
    }
    for (size_t j = 0; j < s.n; ++j) {
      const int32_t id = ByteToTokenSpm(static_cast<uint8_t>(text[s.offset + j]));
      if (id >= 0) out->push_back(id);
    }
  }
}

}  // namespace kvpack
