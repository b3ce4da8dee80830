#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace kvpack {
namespace {

// Two mappings as /proc/self/smaps prints them (fields abridged), 8 MiB and 4 MiB.
const char* kSmaps =
    "7f0000000000-7f0000800000 r--p 00000000 fe:01 1234    /models/a.gguf\n"
    "Size:               8192 kB\n"
    "Rss:                8192 kB\n"
    "AnonHugePages:         0 kB\n"
    "ShmemPmdMapped:        0 kB\n"
    "FilePmdMapped:      6144 kB\n"
    "VmFlags: rd mr mw me hg\n"
    "7f0000800000-7f0000c00000 rw-p 00000000 00:00 0\n"
    "Size:               4096 kB\n"
    "AnonHugePages:      2048 kB\n"
    "FilePmdMapped:         0 kB\n";

constexpr uintptr_t kBase = 0x7f0000000000;
constexpr size_t kMiB = size_t{1} << 20;

TEST(HugePagesInSmaps, WholeMappingsSumTheirHugePages) {
  const HugePageStats s = HugePagesInSmaps(kSmaps, kBase, kBase + 12 * kMiB);
  EXPECT_EQ(s.range_bytes, 12 * kMiB);
  EXPECT_EQ(s.huge_bytes, 8 * kMiB);  // 6 MiB file PMDs + 2 MiB anonymous
}

TEST(HugePagesInSmaps, OneMappingAlone) {
  const HugePageStats s = HugePagesInSmaps(kSmaps, kBase, kBase + 8 * kMiB);
  EXPECT_EQ(s.range_bytes, 8 * kMiB);
  EXPECT_EQ(s.huge_bytes, 6 * kMiB);
}

TEST(HugePagesInSmaps, PartialOverlapCapsTheMappingsHugeBytes) {
  // 1 MiB of the first mapping: at most 1 MiB of its 6 MiB of huge pages can be there.
  HugePageStats s = HugePagesInSmaps(kSmaps, kBase + 7 * kMiB, kBase + 8 * kMiB);
  EXPECT_EQ(s.range_bytes, kMiB);
  EXPECT_EQ(s.huge_bytes, kMiB);
  // A range reaching past every mapping counts only what is mapped.
  s = HugePagesInSmaps(kSmaps, kBase + 11 * kMiB, kBase + 20 * kMiB);
  EXPECT_EQ(s.range_bytes, kMiB);
  EXPECT_EQ(s.huge_bytes, kMiB);
}

TEST(HugePagesInSmaps, UnmappedOrMalformedTextCountsNothing) {
  EXPECT_EQ(HugePagesInSmaps(kSmaps, 0x1000, 0x2000).range_bytes, 0u);
  const HugePageStats junk = HugePagesInSmaps("FilePmdMapped: 4096 kB\nnot a header\nzz-yy x\n",
                                              0, ~uintptr_t{0});
  EXPECT_EQ(junk.range_bytes, 0u);
  EXPECT_EQ(junk.huge_bytes, 0u);
  EXPECT_EQ(HugePagesInSmaps("", 0, ~uintptr_t{0}).range_bytes, 0u);
}

TEST(HugePagesOf, ThisProcessesMappingIsFoundWithWhateverPagesItHas) {
  const size_t n = 4 * kMiB;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, n);
  const auto s = HugePagesOf(p, n);
  ASSERT_TRUE(s.has_value());  // Linux with /proc, as CI is
  EXPECT_EQ(s->range_bytes, n);
  EXPECT_LE(s->huge_bytes, n);  // huge pages or not is the kernel's choice
  munmap(p, n);
}

}  // namespace
}  // namespace kvpack
