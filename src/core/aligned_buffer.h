// Owning, 64-byte aligned, uninitialised-on-growth buffer of trivially copyable elements.
#ifndef KVPACK_CORE_ALIGNED_BUFFER_H_
#define KVPACK_CORE_ALIGNED_BUFFER_H_

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

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
  ~AlignedBuffer() { std::free(data_); }

  // Grows or shrinks to n elements, keeping the first min(n, size()) elements.
  void Resize(size_t n) {
    if (n > capacity_) {
      size_t cap = capacity_ ? capacity_ : 16;
      while (cap < n) cap *= 2;
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
      const size_t bytes = (cap * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
      fresh = static_cast<T*>(std::aligned_alloc(kAlignment, bytes));
      if (!fresh) throw std::bad_alloc();
      if (size_) std::memcpy(fresh, data_, std::min(size_, cap) * sizeof(T));
    }
    std::free(data_);
    data_ = fresh;
    capacity_ = cap;
    if (size_ > cap) size_ = cap;
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
