#include "kv/component_store.h"

namespace kvpack {

MemoryUsage& MemoryUsage::operator+=(const MemoryUsage& o) {
  code_bytes += o.code_bytes;
  scale_bytes += o.scale_bytes;
  zero_bytes += o.zero_bytes;
  residual_bytes += o.residual_bytes;
  sparse_bytes += o.sparse_bytes;
  factor_bytes += o.factor_bytes;
  other_bytes += o.other_bytes;
  reserved_bytes += o.reserved_bytes;
  n_values += o.n_values;
  return *this;
}

Status CheckRetainIndices(std::span<const int64_t> keep, int64_t n_tokens) {
  int64_t prev = -1;
  for (int64_t idx : keep) {
    if (idx <= prev || idx >= n_tokens) {
      return InvalidArgument("token indices to retain must ascend strictly within [0, " +
                             std::to_string(n_tokens) + ")");
    }
    prev = idx;
  }
  return Status::Ok();
}

}  // namespace kvpack
