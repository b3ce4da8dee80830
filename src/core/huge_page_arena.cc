#include "core/huge_page_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"

#if defined(__SANITIZE_ADDRESS__)
#define KVPACK_ARENA_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVPACK_ARENA_UNDER_ASAN 1
#endif
#endif

namespace kvpack {
namespace {

size_t DivUp(size_t a, size_t b) { return (a + b - 1) / b; }

// Larger requests are refused (nullptr) before any rounding could overflow.
constexpr size_t kMaxBytes = size_t{1} << 48;

}  // namespace

HugePageArena::~HugePageArena() {
  for (Chunk& c : chunks_) ::munmap(c.base, c.n_units * kUnitBytes);
}

// A kPageBytes-aligned mapping of `bytes` (a multiple of kPageBytes): map a page more than
// asked, then unmap the unaligned head and the tail.
bool HugePageArena::MapChunk(size_t bytes, Chunk& chunk) {
  void* m = ::mmap(nullptr, bytes + kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (m == MAP_FAILED) return false;
  const uintptr_t start = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (start + kPageBytes - 1) / kPageBytes * kPageBytes;
  if (aligned > start) ::munmap(m, aligned - start);
  const uintptr_t tail = start + kPageBytes - aligned;  // mapped past aligned + bytes
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // advice only
#endif
  chunk.base = reinterpret_cast<uint8_t*>(aligned);
  chunk.n_units = bytes / kUnitBytes;
  chunk.used_units = 0;
  chunk.used.assign(DivUp(chunk.n_units, 64), 0);
  chunk.run.assign(chunk.n_units, 0);
  chunk.page_units.assign(bytes / kPageBytes, 0);
  return true;
}

// The first run of n free units (first fit); whole words of used units are skipped.
bool HugePageArena::FindRun(const Chunk& chunk, size_t n, size_t& first) {
  size_t run = 0;
  for (size_t u = 0; u < chunk.n_units;) {
    const uint64_t word = chunk.used[u / 64];
    if (u % 64 == 0 && word == ~uint64_t{0}) {
      run = 0;
      u += 64;
      continue;
    }
    if ((word >> (u % 64)) & 1) {
      run = 0;
    } else if (++run == n) {
      first = u + 1 - n;
      return true;
    }
    ++u;
  }
  return false;
}

void HugePageArena::MarkRun(Chunk& chunk, size_t first, size_t n, bool in_use) {
  for (size_t u = first; u < first + n; ++u) {
    const uint64_t bit = uint64_t{1} << (u % 64);
    chunk.used[u / 64] = in_use ? chunk.used[u / 64] | bit : chunk.used[u / 64] & ~bit;
    uint32_t& page = chunk.page_units[u / kUnitsPerPage];
    page = in_use ? page + 1 : page - 1;
  }
  chunk.used_units = in_use ? chunk.used_units + n : chunk.used_units - n;
  chunk.run[first] = in_use ? static_cast<uint32_t>(n) : 0;
}

void* HugePageArena::Allocate(size_t bytes) {
  if (bytes == 0 || bytes > kMaxBytes) return nullptr;
  const size_t n = DivUp(bytes, kUnitBytes);
  std::lock_guard<std::mutex> lock(mu_);
  size_t first = 0;
  for (Chunk& c : chunks_) {
    if (c.n_units - c.used_units >= n && FindRun(c, n, first)) {
      MarkRun(c, first, n, true);
      return c.base + first * kUnitBytes;
    }
  }
  Chunk fresh;
  if (!MapChunk(std::max(kChunkBytes, DivUp(bytes, kPageBytes) * kPageBytes), fresh)) return nullptr;
  MarkRun(fresh, 0, n, true);
  chunks_.push_back(std::move(fresh));
  return chunks_.back().base;
}

bool HugePageArena::Free(void* p) {
  const auto* q = static_cast<const uint8_t*>(p);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    Chunk& c = chunks_[i];
    if (q < c.base || q >= c.base + c.n_units * kUnitBytes) continue;
    const size_t offset = static_cast<size_t>(q - c.base);
    KVPACK_CHECK(offset % kUnitBytes == 0 && c.run[offset / kUnitBytes] > 0);
    const size_t first = offset / kUnitBytes, n = c.run[first];
    MarkRun(c, first, n, false);
    if (c.used_units == 0) {
      ::munmap(c.base, c.n_units * kUnitBytes);
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    }
    // Pages the buffer touched that no buffer uses now go back to the system.
    for (size_t page = first / kUnitsPerPage; page <= (first + n - 1) / kUnitsPerPage; ++page) {
      if (c.page_units[page] == 0) ::madvise(c.base + page * kPageBytes, kPageBytes, MADV_DONTNEED);
    }
    return true;
  }
  return false;
}

HugePageArena::Stats HugePageArena::GetStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.chunks = chunks_.size();
  for (const Chunk& c : chunks_) {
    s.mapped_bytes += c.n_units * kUnitBytes;
    s.used_bytes += c.used_units * kUnitBytes;
  }
  return s;
}

std::vector<std::pair<const void*, size_t>> HugePageArena::ChunkRanges() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<const void*, size_t>> ranges;
  for (const Chunk& c : chunks_) ranges.emplace_back(c.base, c.n_units * kUnitBytes);
  return ranges;
}

HugePageArena* BufferArena() {
#if defined(KVPACK_ARENA_UNDER_ASAN) || !defined(MADV_HUGEPAGE)
  return nullptr;
#else
  // Never destroyed: buffers in static objects may be freed after every destructor ran.
  static HugePageArena* const arena = [] {
    const char* env = std::getenv("KVPACK_HUGE_PAGES");
    return env && std::strcmp(env, "0") == 0 ? nullptr : new HugePageArena();
  }();
  return arena;
#endif
}

void* AllocateBufferBytes(size_t bytes, size_t alignment) {
  if (bytes >= kArenaMinBytes && alignment <= HugePageArena::kUnitBytes) {
    if (HugePageArena* arena = BufferArena()) {
      if (void* p = arena->Allocate(bytes)) return p;
    }
  }
  return std::aligned_alloc(alignment, DivUp(bytes, alignment) * alignment);
}

void FreeBufferBytes(void* p, size_t bytes) {
  if (!p) return;
  if (bytes >= kArenaMinBytes) {
    if (HugePageArena* arena = BufferArena(); arena && arena->Free(p)) return;
  }
  std::free(p);
}

}  // namespace kvpack
