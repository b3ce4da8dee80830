// Owning, 64-byte aligned, uninitialised-on-growth buffer of trivially copyable elements.
// Buffers of 4 KiB or more live in 2 MiB pages where the system allows it
// (core/huge_page_arena.h): the KV caches' stores are made of these.
#ifndef KVPACK_CORE_ALIGNED_BUFFER_H_
#define KVPACK_CORE_ALIGNED_BUFFER_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "core/huge_page_arena.h"

namespace kvpack {

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr size_t kAlignment = 64;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { Resize(n); }
  AlignedBuffer(const AlignedBuffer& other) { *this = other; }
  AlignedBuffer& operator=(const AlignedBuffer& other) {
    if (this != &other) {
      Resize(other.size_);
      if (size_) std::memcpy(data_, other.data_, size_ * sizeof(T));
    }
    return *this;
  }
  AlignedBuffer(AlignedBuffer&& other) noexcept { Swap(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    Swap(other);
    return *this;
  }
  ~AlignedBuffer() { FreeBufferBytes(data_, BytesFor(capacity_)); }

  // Below this a growing buffer doubles; from it on it grows by a quarter. In 2 MiB pages
  // the capacity a buffer reserves is resident memory as soon as a byte of its page is
  // written, so a cache of doubling stores could hold twice its tokens' bytes (an `f16`
  // cache just past 8192 tokens: 360 MiB for 180). Growing by a quarter keeps that below
  // 25%, for a copy of the buffer every quarter of its length: little beside a decode step,
  // which reads all of it at every token.
  static constexpr size_t kSlowGrowthBytes = size_t{1} << 20;

  // Grows or shrinks to n elements, keeping the first min(n, size()) elements.
  void Resize(size_t n) {
    if (n > capacity_) {
      size_t cap = capacity_ ? capacity_ : 16;
      while (cap < n) cap = cap * sizeof(T) < kSlowGrowthBytes ? cap * 2 : cap + cap / 4;
      Reallocate(cap);
    }
    size_ = n;
  }
  // Releases unused capacity (eviction uses this so freed tokens really free memory).
  void ShrinkToFit() {
    if (capacity_ != size_) Reallocate(size_);
  }
  void Clear() { size_ = 0; }
  void Zero() {
    if (size_) std::memset(data_, 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t capacity_bytes() const { return capacity_ * sizeof(T); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  void Reallocate(size_t cap) {
    T* fresh = nullptr;
    if (cap > 0) {
      fresh = static_cast<T*>(AllocateBufferBytes(BytesFor(cap), kAlignment));
      if (!fresh) throw std::bad_alloc();
      if (size_) std::memcpy(fresh, data_, std::min(size_, cap) * sizeof(T));
    }
    FreeBufferBytes(data_, BytesFor(capacity_));
    data_ = fresh;
    capacity_ = cap;
    if (size_ > cap) size_ = cap;
  }
  static size_t BytesFor(size_t cap) {
    return (cap * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
  }
  void Swap(AlignedBuffer& o) {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace kvpack

#endif  // KVPACK_CORE_ALIGNED_BUFFER_H_
