// Block geometry of ggml tensor types.
//
// Source of the numbers: ggml's ggml-common.h (the block_* structs and their static_asserts,
// QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = QK8_1 = 32, QK_K = 256, K_SCALE_SIZE = 12) and the
// GGML_TYPE_* ids of ggml.h, as described in
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md. Each block size below is
// derived from its struct's fields (ggml_half = 2 bytes):
//   q4_0: d + 16 nibble bytes                          = 2 + 16            = 18
//   q4_1: d, m + 16                                    = 4 + 16            = 20
//   q5_0: d + qh[4] + 16                               = 2 + 4 + 16        = 22
//   q5_1: d, m + qh[4] + 16                            = 4 + 4 + 16        = 24
//   q8_0: d + 32 int8                                  = 2 + 32            = 34
//   q8_1: d, s + 32 int8                               = 4 + 32            = 36
//   q2_K: scales[16] + qs[64] + d, dmin                = 16 + 64 + 4       = 84
//   q3_K: hmask[32] + qs[64] + scales[12] + d          = 32 + 64 + 12 + 2  = 110
//   q4_K: d, dmin + scales[12] + qs[128]               = 4 + 12 + 128      = 144
//   q5_K: d, dmin + scales[12] + qh[32] + qs[128]      = 4 + 12 + 32 + 128 = 176
//   q6_K: ql[128] + qh[64] + scales[16] + d            = 128 + 64 + 16 + 2 = 210
//   q8_K: float d + qs[256] + int16 bsums[16]          = 4 + 256 + 32      = 292
#include "core/ggml_type.h"

namespace kvpack {

GgmlTypeTraits GetGgmlTypeTraits(uint32_t type_id) {
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32: return {"f32", 1, 4, true};
    case GgmlType::kF16: return {"f16", 1, 2, true};
    case GgmlType::kQ4_0: return {"q4_0", 32, 18, true};
    case GgmlType::kQ4_1: return {"q4_1", 32, 20, false};
    case GgmlType::kQ5_0: return {"q5_0", 32, 22, false};
    case GgmlType::kQ5_1: return {"q5_1", 32, 24, false};
    case GgmlType::kQ8_0: return {"q8_0", 32, 34, true};
    case GgmlType::kQ8_1: return {"q8_1", 32, 36, false};
    case GgmlType::kQ2_K: return {"q2_K", 256, 84, false};
    case GgmlType::kQ3_K: return {"q3_K", 256, 110, false};
    case GgmlType::kQ4_K: return {"q4_K", 256, 144, true};
    case GgmlType::kQ5_K: return {"q5_K", 256, 176, false};
    case GgmlType::kQ6_K: return {"q6_K", 256, 210, true};
    case GgmlType::kQ8_K: return {"q8_K", 256, 292, false};
    case GgmlType::kI8: return {"i8", 1, 1, false};
    case GgmlType::kI16: return {"i16", 1, 2, false};
    case GgmlType::kI32: return {"i32", 1, 4, false};
    case GgmlType::kI64: return {"i64", 1, 8, false};
    case GgmlType::kF64: return {"f64", 1, 8, false};
    case GgmlType::kBF16: return {"bf16", 1, 2, true};
  }
  return {nullptr, 1, 0, false};
}

std::string GgmlTypeName(GgmlType type) {
  const GgmlTypeTraits t = GetGgmlTypeTraits(type);
  if (t.name != nullptr) return t.name;
  return "unknown(" + std::to_string(static_cast<uint32_t>(type)) + ")";
}

}  // namespace kvpack
