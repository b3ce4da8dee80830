// positions=compact (METHODS.md 0, 2.2): after an eviction the survivors of every head are
// renumbered 0..n-1 and their keys, stored already rotated, are re-rotated by the shift
// (new - old position): llama.cpp's K-shift. The key store is rebuilt from its decoded,
// re-rotated rows, so this is only offered for plain float key codecs (f32: exact up to
// float rounding of one rotation per shift; f16/bf16: one extra rounding to the storage
// type per shift, which accumulates over a token's lifetime in the cache). Quantized key
// codecs are refused: re-rotating would decode and re-quantize the whole cache at every
// eviction, compounding error (METHODS.md 1.6 forbids re-compressing); see
// CheckCompactPositionsCodec.
#ifndef KVPACK_KV_EVICTION_POLICY_POSITIONS_H_
#define KVPACK_KV_EVICTION_POLICY_POSITIONS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/component_store.h"
#include "kv/spec.h"
#include "ops/nn.h"

namespace kvpack {

// Ok for f32, f16, bf16 keys; otherwise InvalidArgument saying why.
Status CheckCompactPositionsCodec(const MethodSpec& keys, const std::string& policy_name);

// True when old_pos[h][t] == t for every head and token (nothing to shift).
bool PositionsAreCompact(const std::vector<std::vector<int32_t>>& old_pos);

// A new key store holding the same tokens, each head's token t rotated from old_pos[h][t]
// to position t. Every head must hold the same number of tokens.
//   old_pos: [n_kv_heads][n_tokens]
Result<std::unique_ptr<ComponentStore>> RotateKeysToCompactPositions(
    const ComponentStore& keys, const MethodSpec& spec, const StoreShape& shape,
    const std::vector<std::vector<int32_t>>& old_pos, const RopeParams& rope);

}  // namespace kvpack

#endif  // KVPACK_KV_EVICTION_POLICY_POSITIONS_H_
