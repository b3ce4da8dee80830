// An allocator that puts large buffers (the KV caches' stores) in 2 MiB pages.
//
// A decode step at long depth reads the whole KV cache once, and with 4 KiB pages every
// 4 KiB of it needs its own TLB entry. On the Zen 5 host of docs/performance-history.md
// (session 26) the `f16` cache decoded 12-20% faster at depth 8192 once glibc's heap asked
// for huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), while KIVI-2, whose cache is a
// seventh of the size, did not change; with this arena (session 27, three alternating runs
// against KVPACK_HUGE_PAGES=0) `f16` ran 7% faster and KIVI-2 the same. Kernels whose transparent-huge-page mode is
// `madvise` (that host's, Ubuntu's) give 2 MiB pages only to ranges that ask with
// madvise(MADV_HUGEPAGE), and one store's buffer (1 MiB for a head of `f16` keys at 8192
// tokens) cannot hold a 2 MiB page by itself. So the arena carves many buffers out of
// 2 MiB-aligned chunks that ask for huge pages:
// - a chunk is kChunkBytes of address space (a larger request gets a chunk of its own),
//   mapped lazily: a page costs memory once something is written to it;
// - a buffer takes whole units of kUnitBytes, found first-fit in the chunk's bitmap;
// - every buffer of kArenaMinBytes (4 KiB) or more lives here, not only the large ones: at
//   depth 512 a head's codes, parameters and residual rows are 2 to 32 KiB, and with the
//   threshold at 64 KiB (and 16 KiB units) only `f16`'s stores lived in huge pages; with
//   4 KiB, attention over 30 layers from memory took 8-20% less time for q8_0, q4_0 and
//   KIVI-4 and the same for `f16` (session 30, kv_codec_bench ...Cold/<spec>/512/30);
// - a 2 MiB page that no buffer uses any more is given back (MADV_DONTNEED) and an empty
//   chunk is unmapped, so a cache that shrinks (eviction) or goes away frees its memory.
#ifndef KVPACK_CORE_HUGE_PAGE_ARENA_H_
#define KVPACK_CORE_HUGE_PAGE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace kvpack {

class HugePageArena {
 public:
  static constexpr size_t kPageBytes = size_t{2} << 20;   // x86-64 and arm64 (4 KiB base) PMD
  static constexpr size_t kUnitBytes = size_t{4} << 10;  // allocation granule
  static constexpr size_t kChunkBytes = size_t{32} << 20;
  static constexpr size_t kUnitsPerPage = kPageBytes / kUnitBytes;

  HugePageArena() = default;
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;
  ~HugePageArena();  // unmaps every chunk, freed or not

  // At least `bytes`, aligned to kUnitBytes; nullptr for 0 bytes, for more than 2^48, and
  // where the system refuses memory.
  void* Allocate(size_t bytes);
  // Gives back a buffer from Allocate and returns true; false (nothing done) where `p` does
  // not lie in this arena. A pointer inside the arena that is not a live buffer is a bug.
  bool Free(void* p);

  struct Stats {
    size_t chunks = 0;
    size_t mapped_bytes = 0;  // address space of all chunks
    size_t used_bytes = 0;    // units held by live buffers
  };
  Stats GetStats() const;
  // Every chunk as (start, bytes), for HugePagesOf (core/huge_pages.h).
  std::vector<std::pair<const void*, size_t>> ChunkRanges() const;

 private:
  struct Chunk {
    uint8_t* base = nullptr;
    size_t n_units = 0;
    size_t used_units = 0;
    std::vector<uint64_t> used;         // one bit per unit
    std::vector<uint32_t> run;          // at a buffer's first unit: its length in units
    std::vector<uint32_t> page_units;   // units in use per 2 MiB page
  };
  static bool MapChunk(size_t bytes, Chunk& chunk);
  static bool FindRun(const Chunk& chunk, size_t n, size_t& first);
  static void MarkRun(Chunk& chunk, size_t first, size_t n, bool in_use);

  mutable std::mutex mu_;
  std::vector<Chunk> chunks_;
};

// AlignedBuffer's memory (core/aligned_buffer.h). Requests of kArenaMinBytes or more come
// from the process's arena while it is on; smaller ones, and any the arena cannot serve,
// from aligned_alloc. The arena is off under AddressSanitizer (so that it sees every
// buffer's bounds), where the environment sets KVPACK_HUGE_PAGES=0 (to measure without it),
// and where the system has no madvise(MADV_HUGEPAGE).
inline constexpr size_t kArenaMinBytes = size_t{4} << 10;
void* AllocateBufferBytes(size_t bytes, size_t alignment);
void FreeBufferBytes(void* p, size_t bytes);
// The process's arena, or nullptr while it is off.
HugePageArena* BufferArena();

}  // namespace kvpack

#endif  // KVPACK_CORE_HUGE_PAGE_ARENA_H_
