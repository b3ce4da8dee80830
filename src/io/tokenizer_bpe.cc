// Byte-level BPE ("gpt2") encoding: regex pre-tokenization, GPT-2's byte-to-unicode
// mapping, then merges of adjacent symbols by rank in tokenizer.ggml.merges. Same algorithm
// and tie-breaking as llama.cpp's llm_tokenizer_bpe_session (src/llama-vocab.cpp).
#include <algorithm>
#include <queue>
#include <string>
#include <vector>

#include "io/pretokenizer.h"
#include "io/tokenizer.h"
#include "io/utf8.h"

namespace kvpack {

namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the mapped word
  size_t n;       // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  std::string text;
};

// Lowest rank on top; among equal ranks the leftmost pair.
struct BigramGreater {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

int32_t Tokenizer::BpeRank(const std::string& left, const std::string& right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left);
  key.push_back('\0');
  key.append(right);
  auto it = bpe_ranks_.find(key);
  return it == bpe_ranks_.end() ? -1 : it->second;
}

void Tokenizer::EncodeBpe(std::string_view raw, std::vector<int32_t>* out) const {
  // llama.cpp decodes the text to code points with U+FFFD for malformed bytes before
  // splitting; sanitizing first gives the same pieces and keeps PCRE2 on valid UTF-8.
  const std::string text = utf8::Sanitize(raw);
  const std::vector<std::string> words = pre_->Split(text);

  std::vector<Symbol> symbols;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  std::string left_text, right_text;
  for (const std::string& word : words) {
    std::string mapped;
    mapped.reserve(word.size() * 2);
    for (const char c : word)
      utf8::Append(utf8::Gpt2ByteToCodepoint(static_cast<uint8_t>(c)), &mapped);
    if (mapped.empty()) continue;

    if (ignore_merges_) {
      auto it = token_to_id_.find(mapped);
      if (it != token_to_id_.end()) {
        out->push_back(it->second);
        continue;
      }
    }

    symbols.clear();
    for (size_t offset = 0; offset < mapped.size();) {
      const size_t len =
          std::min(utf8::SeqLen(static_cast<uint8_t>(mapped[offset])), mapped.size() - offset);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back(
          Symbol{index - 1, offset + len == mapped.size() ? -1 : index + 1, offset, len});
      offset += len;
    }

    queue = {};
    auto try_add = [&](int left, int right) {
      if (left == -1 || right == -1) return;
      left_text.assign(mapped, symbols[left].offset, symbols[left].n);
      right_text.assign(mapped, symbols[right].offset, symbols[right].n);
      const int32_t rank = BpeRank(left_text, right_text);
      if (rank < 0) return;
      queue.push(Bigram{left, right, rank, left_text + right_text});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[bigram.left];
      Symbol& right = symbols[bigram.right];
      if (left.n == 0 || right.n == 0) continue;
      // Stale entry: the pair's text changed since it was queued.
      if (left.n + right.n != bigram.text.size() ||
          mapped.compare(left.offset, left.n + right.n, bigram.text) != 0) {
        continue;
      }
      left.n += right.n;
      right.n = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = bigram.left;
      try_add(left.prev, bigram.left);
      try_add(bigram.left, left.next);
    }

    for (int i = 0; i != -1; i = symbols[i].next) {
      const Symbol& s = symbols[i];
      if (s.n == 0) continue;
      const std::string piece = mapped.substr(s.offset, s.n);
      auto it = token_to_id_.find(piece);
      if (it != token_to_id_.end()) {
        out->push_back(it->second);
        continue;
      }
      // Not in the vocabulary: llama.cpp emits the tokens of the piece's single bytes that
      // exist and drops the rest.
      for (const char c : piece) {
        auto byte_it = token_to_id_.find(std::string(1, c));
        if (byte_it != token_to_id_.end()) out->push_back(byte_it->second);
      }
    }
  }
}

}  // namespace kvpack
