#include "io/utf8.h"

namespace kvpack::utf8 {

namespace {

constexpr uint32_t kReplacement = 0xFFFD;

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

void Append(uint32_t cp, std::string* out) {
  if (cp <= 0x7F) {
    out->push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | ((cp >> 18) & 0x07)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = static_cast<uint8_t>(text[i]);
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    // Same decision tree as llama.cpp's unicode_cpt_from_utf8 (lenient about overlongs).
    size_t len = 0;
    uint32_t cp = 0;
    if ((b0 & 0x40) == 0) {
      len = 0;  // stray continuation byte
    } else if ((b0 & 0x20) == 0) {
      len = 2;
      cp = b0 & 0x1F;
    } else if ((b0 & 0x10) == 0) {
      len = 3;
      cp = b0 & 0x0F;
    } else if ((b0 & 0x08) == 0) {
      len = 4;
      cp = b0 & 0x07;
    }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      const uint8_t b = static_cast<uint8_t>(text[i + k]);
      if (!IsContinuation(b)) {
        ok = false;
      } else {
        cp = (cp << 6) | (b & 0x3F);
      }
    }
    if (!ok) {
      Append(kReplacement, &out);
      ++i;
      continue;
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacement;
    Append(cp, &out);
    i += len;
  }
  return out;
}

size_t IncompleteTailLength(std::string_view bytes) {
  const size_t n = bytes.size();
  // Walk back over at most three continuation bytes to the lead byte.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const uint8_t b = static_cast<uint8_t>(bytes[n - back]);
    if (IsContinuation(b)) continue;
    if (b < 0xC0 || b >= 0xF8) return 0;  // ASCII or malformed lead: nothing to wait for
    const size_t need = SeqLen(b);
    return back < need ? back : 0;
  }
  return 0;
}

namespace {

struct Gpt2Table {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[324];  // every code point in the table is < 256 + 68
  Gpt2Table() {
    for (auto& b : cp_to_byte) b = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Gpt2Table& Gpt2() {
  static const Gpt2Table table;
  return table;
}

}  // namespace

uint32_t Gpt2ByteToCodepoint(uint8_t byte) { return Gpt2().byte_to_cp[byte]; }

int Gpt2CodepointToByte(uint32_t cp) { return cp < 324 ? Gpt2().cp_to_byte[cp] : -1; }

}  // namespace kvpack::utf8
