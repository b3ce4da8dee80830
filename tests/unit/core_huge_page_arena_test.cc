#include "core/huge_page_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/aligned_buffer.h"

namespace kvpack {
namespace {

using Arena = HugePageArena;
constexpr size_t kUnit = Arena::kUnitBytes;
constexpr size_t kPage = Arena::kPageBytes;

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// The VmFlags line of the mapping that holds `p` ("" where none does).
std::string VmFlagsOf(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= Addr(p) && Addr(p) < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// How many of the 4 KiB pages of [p, p + n) are resident (mincore).
size_t ResidentPages(const void* p, size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec(n / page);
  if (::mincore(const_cast<void*>(p), n, vec.data()) != 0) return ~size_t{0};
  return static_cast<size_t>(std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; }));
}

TEST(HugePageArena, BuffersAreAlignedDisjointAndKeepTheirBytes) {
  Arena arena;
  const std::vector<size_t> sizes = {kUnit, 3 * kUnit + 5, 64 << 10, 1 << 20, 100, kPage};
  std::vector<uint8_t*> bufs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto* p = static_cast<uint8_t*>(arena.Allocate(sizes[i]));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(Addr(p) % kUnit, 0u);
    std::memset(p, static_cast<int>(i + 1), sizes[i]);
    bufs.push_back(p);
  }
  std::vector<std::pair<uintptr_t, size_t>> spans;  // (start, bytes), in address order
  for (size_t i = 0; i < bufs.size(); ++i) spans.emplace_back(Addr(bufs[i]), sizes[i]);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    EXPECT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first);
  }
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_TRUE(std::all_of(bufs[i], bufs[i] + sizes[i], [&](uint8_t v) { return v == i + 1; }))
        << "buffer " << i;
  }
  for (uint8_t* p : bufs) EXPECT_TRUE(arena.Free(p));
}

TEST(HugePageArena, StatsCountWholeUnitsAndEmptyChunksAreUnmapped) {
  Arena arena;
  void* a = arena.Allocate(kUnit + 1);  // 2 units
  void* b = arena.Allocate(5 * kUnit);
  Arena::Stats s = arena.GetStats();
  EXPECT_EQ(s.chunks, 1u);
  EXPECT_EQ(s.mapped_bytes, Arena::kChunkBytes);
  EXPECT_EQ(s.used_bytes, 7 * kUnit);
  ASSERT_TRUE(arena.Free(a));
  EXPECT_EQ(arena.GetStats().used_bytes, 5 * kUnit);
  ASSERT_TRUE(arena.Free(b));
  s = arena.GetStats();
  EXPECT_EQ(s.chunks, 0u);
  EXPECT_EQ(s.mapped_bytes, 0u);
  EXPECT_TRUE(arena.ChunkRanges().empty());
}

TEST(HugePageArena, ChunksArePageAlignedAndALargeRequestGetsItsOwn) {
  Arena arena;
  void* small = arena.Allocate(kUnit);
  void* large = arena.Allocate(Arena::kChunkBytes + 1);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  const auto ranges = arena.ChunkRanges();
  ASSERT_EQ(ranges.size(), 2u);
  for (const auto& [start, bytes] : ranges) {
    EXPECT_EQ(Addr(start) % kPage, 0u);
    EXPECT_EQ(bytes % kPage, 0u);
  }
  EXPECT_EQ(ranges[1].first, large);
  EXPECT_EQ(ranges[1].second, Arena::kChunkBytes + kPage);
  EXPECT_TRUE(arena.Free(large));
  EXPECT_EQ(arena.GetStats().chunks, 1u);
  EXPECT_TRUE(arena.Free(small));
}

TEST(HugePageArena, FreedUnitsAreReusedFirstFit) {
  Arena arena;
  void* a = arena.Allocate(4 * kUnit);
  void* b = arena.Allocate(4 * kUnit);
  void* c = arena.Allocate(4 * kUnit);
  EXPECT_EQ(Addr(b), Addr(a) + 4 * kUnit);
  ASSERT_TRUE(arena.Free(b));
  EXPECT_EQ(arena.Allocate(2 * kUnit), b);                      // the hole's start
  EXPECT_EQ(Addr(arena.Allocate(2 * kUnit)), Addr(b) + 2 * kUnit);  // its rest
  EXPECT_EQ(Addr(arena.Allocate(kUnit)), Addr(c) + 4 * kUnit);      // after the last buffer
}

TEST(HugePageArena, ImpossibleRequestsGetNothing) {
  Arena arena;
  EXPECT_EQ(arena.Allocate(0), nullptr);
  EXPECT_EQ(arena.Allocate(~size_t{0}), nullptr);  // would wrap around when rounded up
  EXPECT_EQ(arena.Allocate(~size_t{0} / 2), nullptr);
  EXPECT_EQ(arena.GetStats().chunks, 0u);
}

TEST(HugePageArena, ForeignPointersAreNotFreed) {
  Arena arena;
  void* mine = arena.Allocate(kUnit);
  void* theirs = std::malloc(kUnit);
  int on_stack = 0;
  EXPECT_FALSE(arena.Free(theirs));
  EXPECT_FALSE(arena.Free(&on_stack));
  EXPECT_EQ(arena.GetStats().used_bytes, kUnit);
  std::free(theirs);
  EXPECT_TRUE(arena.Free(mine));
}

TEST(HugePageArena, RandomAllocationsMatchAReferenceModel) {
  // Random sizes and frees against a map of live buffers: no two live buffers overlap, each
  // keeps its fill byte, and the used bytes are the live buffers' rounded sizes.
  Arena arena;
  std::mt19937 rng(7);
  std::map<uintptr_t, std::pair<size_t, uint8_t>> live;  // start -> (bytes, fill)
  size_t used = 0;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t bytes = 1 + rng() % (rng() % 8 == 0 ? 3 * kPage : 8 * kUnit);
      auto* p = static_cast<uint8_t*>(arena.Allocate(bytes));
      ASSERT_NE(p, nullptr);
      const auto fill = static_cast<uint8_t>(step);
      std::memset(p, fill, bytes);
      auto next = live.lower_bound(Addr(p));
      if (next != live.end()) {
        ASSERT_LE(Addr(p) + bytes, next->first);
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second.first, Addr(p));
      }
      live[Addr(p)] = {bytes, fill};
      used += (bytes + kUnit - 1) / kUnit * kUnit;
    } else {
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
      auto* p = reinterpret_cast<uint8_t*>(it->first);
      const auto [bytes, fill] = it->second;
      ASSERT_TRUE(std::all_of(p, p + bytes, [&](uint8_t v) { return v == fill; }));
      ASSERT_TRUE(arena.Free(p));
      used -= (bytes + kUnit - 1) / kUnit * kUnit;
      live.erase(it);
    }
    ASSERT_EQ(arena.GetStats().used_bytes, used);
  }
  for (const auto& [start, info] : live) ASSERT_TRUE(arena.Free(reinterpret_cast<void*>(start)));
  EXPECT_EQ(arena.GetStats().chunks, 0u);
}

TEST(HugePageArena, APageNoBufferUsesIsGivenBack) {
  Arena arena;
  void* keep = arena.Allocate(kUnit);  // keeps the chunk mapped
  auto* page = static_cast<uint8_t*>(arena.Allocate(2 * kPage - kUnit));
  ASSERT_EQ(Addr(page), Addr(keep) + kUnit);
  uint8_t* second = page + kPage - kUnit;  // the chunk's second 2 MiB page, wholly this buffer's
  std::memset(page, 1, 2 * kPage - kUnit);
  ASSERT_EQ(ResidentPages(second, kPage), kPage / static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
  ASSERT_TRUE(arena.Free(page));
  EXPECT_EQ(ResidentPages(second, kPage), 0u);
  EXPECT_GT(ResidentPages(keep, kUnit), 0u);  // the first page still holds `keep`
  EXPECT_TRUE(arena.Free(keep));
}

TEST(HugePageArena, ChunksAskForHugePages) {
  // The advice is in the mapping's flags ("hg") wherever the kernel has transparent huge
  // pages; whether it grants them depends on its mode and free memory, so that is not tested.
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "kernel without transparent huge pages";
  }
  Arena arena;
  void* p = arena.Allocate(kUnit);
  const std::string flags = VmFlagsOf(p);
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  EXPECT_TRUE(arena.Free(p));
}

TEST(BufferArena, LargeAlignedBuffersLiveInItAndSmallOnesDoNot) {
  HugePageArena* arena = BufferArena();
  if (!arena) GTEST_SKIP() << "arena off (sanitizer build or KVPACK_HUGE_PAGES=0)";
  auto inside = [&](const void* p) {
    for (const auto& [start, bytes] : arena->ChunkRanges()) {
      if (Addr(start) <= Addr(p) && Addr(p) < Addr(start) + bytes) return true;
    }
    return false;
  };
  AlignedBuffer<uint16_t> large(kArenaMinBytes / 2),  // kArenaMinBytes bytes
      small(kArenaMinBytes / 4);  // half of that
  EXPECT_TRUE(inside(large.data()));
  EXPECT_FALSE(inside(small.data()));
  large.Resize(kArenaMinBytes);  // grows to twice the capacity, still in the arena
  EXPECT_TRUE(inside(large.data()));
  large.Resize(100);
  large.ShrinkToFit();  // below the threshold: back to aligned_alloc
  EXPECT_FALSE(inside(large.data()));
  EXPECT_EQ(Addr(large.data()) % AlignedBuffer<uint16_t>::kAlignment, 0u);
}

}  // namespace
}  // namespace kvpack
