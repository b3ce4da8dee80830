#include "kv/codecs/block_planes.h"

#include <cstring>

namespace kvpack {

int64_t BlockPlanes::Grow(int64_t n) {
  const int64_t old = n_tokens();
  codes_.Resize((old + n) * row_bytes_);
  scales_.Resize((old + n) * n_blocks_);
  return old;
}

Status BlockPlanes::Retain(std::span<const int64_t> keep) {
  KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens()));
  int64_t w = 0;
  for (int64_t idx : keep) {
    if (idx != w) {
      std::memmove(codes(w), codes(idx), row_bytes_);
      std::memmove(scales(w), scales(idx), n_blocks_ * sizeof(uint16_t));
    }
    ++w;
  }
  codes_.Resize(w * row_bytes_);
  scales_.Resize(w * n_blocks_);
  codes_.ShrinkToFit();
  scales_.ShrinkToFit();
  return Status::Ok();
}

void BlockPlanes::AddMemory(MemoryUsage& m) const {
  m.code_bytes += codes_.size();
  m.scale_bytes += scales_.size() * sizeof(uint16_t);
  m.reserved_bytes += codes_.capacity_bytes() - codes_.size() +
                      (scales_.capacity() - scales_.size()) * sizeof(uint16_t);
  m.n_values += static_cast<int64_t>(scales_.size()) * 32;
}

}  // namespace kvpack
