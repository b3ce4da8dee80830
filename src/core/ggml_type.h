// ggml tensor element types as GGUF stores them, with their block geometry.
// Type ids and block layouts follow ggml's ggml-common.h / ggml.h (GGML_TYPE_* enum).
#ifndef KVPACK_CORE_GGML_TYPE_H_
#define KVPACK_CORE_GGML_TYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvpack {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;   // "f32", "q8_0", ...; nullptr for an unknown id
  int64_t block_size;  // elements per block (1 for plain types)
  size_t block_bytes;  // bytes per block
  bool supported;      // kvpack can dequantize / multiply it
};

// Traits of a type id; `name == nullptr` when the id is not a known ggml type.
GgmlTypeTraits GetGgmlTypeTraits(uint32_t type_id);
inline GgmlTypeTraits GetGgmlTypeTraits(GgmlType type) {
  return GetGgmlTypeTraits(static_cast<uint32_t>(type));
}
std::string GgmlTypeName(GgmlType type);

// Bytes of one row of n elements; n must be a multiple of the block size (checked by callers).
inline size_t GgmlRowBytes(GgmlType type, int64_t n) {
  const GgmlTypeTraits t = GetGgmlTypeTraits(type);
  return static_cast<size_t>(n / t.block_size) * t.block_bytes;
}

}  // namespace kvpack

#endif  // KVPACK_CORE_GGML_TYPE_H_
