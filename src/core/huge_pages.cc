#include "core/huge_pages.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace kvpack {
namespace {

// "7f87a0000000-7f87a8800000 r--p ..." -> the two addresses; false for any other line.
bool ParseMappingHeader(std::string_view line, uintptr_t& lo, uintptr_t& hi) {
  const size_t dash = line.find('-');
  const size_t space = line.find(' ');
  if (dash == std::string_view::npos || space == std::string_view::npos || dash > space) {
    return false;
  }
  const char* s = line.data();
  auto a = std::from_chars(s, s + dash, lo, 16);
  auto b = std::from_chars(s + dash + 1, s + space, hi, 16);
  return a.ec == std::errc() && a.ptr == s + dash && b.ec == std::errc() && b.ptr == s + space &&
         lo <= hi;
}

// "FilePmdMapped:   139264 kB" with key "FilePmdMapped:" -> 139264 * 1024; 0 otherwise.
size_t FieldBytes(std::string_view line, std::string_view key) {
  if (line.substr(0, key.size()) != key) return 0;
  std::string_view rest = line.substr(key.size());
  const size_t first = rest.find_first_not_of(' ');
  if (first == std::string_view::npos) return 0;
  rest = rest.substr(first);
  size_t kb = 0;
  auto r = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
  return r.ec == std::errc() ? kb * 1024 : 0;
}

}  // namespace

HugePageStats HugePagesInSmaps(std::string_view smaps, uintptr_t begin, uintptr_t end) {
  HugePageStats stats;
  size_t overlap = 0;  // of the mapping being read
  size_t huge = 0;
  auto finish = [&] {
    stats.range_bytes += overlap;
    stats.huge_bytes += std::min(huge, overlap);
  };
  while (!smaps.empty()) {
    const size_t nl = smaps.find('\n');
    const std::string_view line = smaps.substr(0, nl);
    smaps = nl == std::string_view::npos ? std::string_view() : smaps.substr(nl + 1);
    uintptr_t lo = 0, hi = 0;
    if (ParseMappingHeader(line, lo, hi)) {
      finish();
      const uintptr_t a = std::max(lo, begin), b = std::min(hi, end);
      overlap = a < b ? b - a : 0;
      huge = 0;
      continue;
    }
    if (overlap == 0) continue;
    huge += FieldBytes(line, "AnonHugePages:") + FieldBytes(line, "FilePmdMapped:") +
            FieldBytes(line, "ShmemPmdMapped:");
  }
  finish();
  return stats;
}

std::optional<HugePageStats> HugePagesOf(const void* p, size_t n) {
  return HugePagesOf({{p, n}});
}

std::optional<HugePageStats> HugePagesOf(const std::vector<std::pair<const void*, size_t>>& ranges) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  HugePageStats sum;
  for (const auto& [p, n] : ranges) {
    const auto begin = reinterpret_cast<uintptr_t>(p);
    const HugePageStats s = HugePagesInSmaps(text, begin, begin + n);
    sum.range_bytes += s.range_bytes;
    sum.huge_bytes += s.huge_bytes;
  }
  return sum;
}

}  // namespace kvpack
