#include "kv/component_store.h"

#include <algorithm>
#include <cmath>

#include "ops/vec.h"

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

Status CheckStoreInput(const float* x, int64_t n, const StoreShape& shape, float limit,
                       const char* range) {
  // One vector pass (NaN and +-inf fail the comparison); the message's search only when
  // something failed.
  if (!AnyAbsAbove(x, static_cast<size_t>(std::max<int64_t>(n, 0)), limit)) return Status::Ok();
  const std::string where = std::string(shape.component == KvComponent::kKey ? "keys" : "values") +
                            " of layer " + std::to_string(shape.layer);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return InvalidArgument("non-finite value in the " + where);
    if (std::fabs(x[i]) > limit) {
      return InvalidArgument("value " + std::to_string(x[i]) + " in the " + where + " exceeds " +
                             range);
    }
  }
  return Status::Ok();
}

}  // namespace kvpack
