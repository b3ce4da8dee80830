#include "kv/eviction_policy_positions.h"

#include "kv/codec_registry.h"

namespace kvpack {

Status CheckCompactPositionsCodec(const MethodSpec& keys, const std::string& policy_name) {
  if (keys.name == "f32" || keys.name == "f16" || keys.name == "bf16") return Status::Ok();
  return InvalidArgument(
      "'" + policy_name +
      "' with positions=compact re-rotates the surviving keys after every "
      "eviction (K-shift); with the quantized key codec '" +
      keys.name +
      "' that would decode and re-quantize the cache each time, compounding error, so the "
      "combination is refused: use positions=original, or a plain key codec (f32, f16, bf16; "
      "values may still use any codec, e.g. 'k=f16 v=" +
      keys.name + "')");
}

bool PositionsAreCompact(const std::vector<std::vector<int32_t>>& old_pos) {
  for (const auto& p : old_pos) {
    for (size_t t = 0; t < p.size(); ++t) {
      if (p[t] != static_cast<int32_t>(t)) return false;
    }
  }
  return true;
}

Result<std::unique_ptr<ComponentStore>> RotateKeysToCompactPositions(
    const ComponentStore& keys, const MethodSpec& spec, const StoreShape& shape,
    const std::vector<std::vector<int32_t>>& old_pos, const RopeParams& rope) {
  const int n_kv = shape.n_kv_heads, d = shape.head_dim;
  const int64_t n = keys.n_tokens(0);
  for (int h = 0; h < n_kv; ++h) {
    if (keys.n_tokens(h) != n || static_cast<int64_t>(old_pos[h].size()) != n) {
      return Internal("positions=compact needs every KV head of layer " +
                      std::to_string(shape.layer) + " to hold the same number of tokens");
    }
  }
  std::vector<float> rows(static_cast<size_t>(n) * n_kv * d), head(static_cast<size_t>(n) * d);
  for (int h = 0; h < n_kv; ++h) {
    keys.Decode(h, 0, n, head.data());
    for (int64_t t = 0; t < n; ++t) {
      float* dst = &rows[(t * n_kv + h) * d];
      std::copy(&head[t * d], &head[t * d] + d, dst);
      // R(t) = R(t - old) R(old): rotating the stored key by the shift moves it to t.
      const int64_t shift = t - old_pos[h][t];
      if (shift != 0) ApplyRope(dst, 1, d, shift, rope);
    }
  }
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<ComponentStore> store, CreateStore(spec, shape));
  KVPACK_RETURN_IF_ERROR(store->Append(rows.data(), n));
  return store;
}

}  // namespace kvpack
