// Software prefetch of the streams the attention kernels read from a KV cache.
//
// A decode step reads every layer's cache once, after the weights have passed through the CPU
// caches, so each codec call's arrays come from memory. The streaming kernels ask for the
// line kPrefetchAheadBytes past the one they read (the hardware prefetchers alone left a
// 30-layer cache several percent slower per token than a one-layer one; kv_codec_bench). That
// leaves a call's first kPrefetchAheadBytes of every stream to demand misses, and at depth 512
// a head's codes, parameters or residual rows are 1 to 16 KiB each: the misses then
// serialised with the arithmetic, and a 4-bit cache read from memory took the time of its
// bytes plus that of its arithmetic. PrefetchStreamStart (PrefetchCodeStreamStart for a
// quantized codec's streams) asks for the start of each stream when a call begins, so that
// the in-loop prefetches take over where it stops
// (docs/performance-history.md, session 24: 7-20% less attention time from memory at 512;
// asking for all of a head's data at once kept only about a third of the gain).
#ifndef KVPACK_OPS_PREFETCH_H_
#define KVPACK_OPS_PREFETCH_H_

#include <algorithm>
#include <cstddef>

namespace kvpack {

// How far ahead of their read position the streaming kernels ask for lines.
constexpr size_t kPrefetchAheadBytes = 4096;

// Asks for the lines of the first min(bytes, kPrefetchAheadBytes) bytes at p (no effect on
// results; p may be anywhere, prefetches never fault) with __builtin_prefetch's kLocality
// (3: prefetcht0, into L1; 2: prefetcht1, into L2).
template <int kLocality>
inline void PrefetchStart(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  const size_t n = std::min(bytes, kPrefetchAheadBytes);
  for (size_t off = 0; off < n; off += 64) __builtin_prefetch(c + off, 0, kLocality);
}

// Into L1: the full-precision rows (f32, f16, bf16, KIVI's residual) and GEAR's parts.
inline void PrefetchStreamStart(const void* p, size_t bytes) { PrefetchStart<3>(p, bytes); }

// The quantized codecs' packed codes and parameters are asked for into L2 only (prefetcht1:
// locality 2): by the kernels' in-loop prefetches (PrefetchCodeLine) and at a call's start
// (PrefetchCodeStreamStart). On session 34's Zen 4 host the same prefetches into L1 left
// those caches waiting on memory: kv_codec_bench ScoresAccumulateCold/<spec>/<depth>/30
// (medians of three runs of each build) took 2-32% less time with the L2 hint for every
// quantized codec of issue 3 at 512 and 8192 tokens but two that were level (KIVI-4, KCVT-8
// at 8192), e.g. FlexGen-8 at 8192 9366 -> 6381 us, KIVI-8 at 512 868 -> 709 us. The
// full-precision kernels (ops/vec.cc) measured the other way (f16 at 8192 with the L2 hint
// in them too: keys 4248 -> 5316 us, values 4136 -> 4851 us), so they keep prefetcht0
// (docs/performance-history.md, session 34).
inline void PrefetchCodeLine(const void* p) { __builtin_prefetch(p, 0, 2); }

inline void PrefetchCodeStreamStart(const void* p, size_t bytes) { PrefetchStart<2>(p, bytes); }

}  // namespace kvpack

#endif  // KVPACK_OPS_PREFETCH_H_
