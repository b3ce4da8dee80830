// How much of a memory range the kernel maps with huge pages (Linux: /proc/self/smaps).
//
// A decode step streams every weight once, so the page size of the weights' mapping shows in
// its speed: on the Zen 5 host of docs/performance-history.md (session 26), a 1-thread decode
// at depth 0 ran 7.6% faster (median of four runs) with the model file's page-cache folios in
// 2 MiB pages than in 4 KiB ones. Which one a run gets depends on how the file entered the
// page cache, not on kvpack, so `kvpack bench` reports it next to its figures.
#ifndef KVPACK_CORE_HUGE_PAGES_H_
#define KVPACK_CORE_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace kvpack {

struct HugePageStats {
  size_t range_bytes = 0;  // bytes of the range inside some mapping
  size_t huge_bytes = 0;   // of those, bytes the mappings hold in PMD-sized pages
};

// The stats of [begin, end) from the text of /proc/PID/smaps: each mapping's huge-page bytes
// (AnonHugePages + FilePmdMapped + ShmemPmdMapped) count up to its overlap with the range.
HugePageStats HugePagesInSmaps(std::string_view smaps, uintptr_t begin, uintptr_t end);

// The same for this process's [p, p + n); nullopt where /proc/self/smaps cannot be read.
std::optional<HugePageStats> HugePagesOf(const void* p, size_t n);
// The sum over (start, bytes) ranges, from one reading of /proc/self/smaps.
std::optional<HugePageStats> HugePagesOf(const std::vector<std::pair<const void*, size_t>>& ranges);

}  // namespace kvpack

#endif  // KVPACK_CORE_HUGE_PAGES_H_
