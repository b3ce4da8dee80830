// Shared pieces of the quantization codecs (METHODS.md 0 and 1.2-1.6): the uniform
// asymmetric quantizer Q_b with fp16 scale/min (plus HQQ's half-quadratic zero-point
// refinement), LSB-first bit packing for 1..8 bits, the input check, and the algebra of a
// tile of rows with per-(row, group) parameters. The codecs compose three storage containers
// built on them:
//   - TokenGroupRows (kv/codecs/token_group_rows.h): per-token groups along channels
//     (FlexGen, KIVI values, HF axis 0, KCVT values), one packed code row per token plus
//     (scale, min) per group;
//   - ChannelBlocks (kv/codecs/channel_blocks.h): per-channel groups along tokens
//     (KIVI/KCVT/HF-axis-1 keys), packed code rows plus one (scale, min) per channel per
//     block of tokens;
//   - Fp16Rows (kv/codecs/fp16_rows.h): the full-precision residual (stored as fp16, the
//     precision the papers' caches use; the compression ratio is measured against an fp16
//     cache, METHODS.md 0).
//
// Design goals: the containers hold the real packed form; Scores/Accumulate read it directly,
// one tile of at most 64 rows at a time: the packed codes are unpacked to one byte per code
// (ops/code_unpack.h) and consumed in the algebraic form of the format. Keys with 2- or
// 4-bit codes are scored with an int8 query (per-channel scales folded into the query
// first), exact int32 code dots, then alpha, scales and q.min in one vector pass; when one
// group covers the whole row (KIVI-style per-channel blocks, per-token groups as wide as the
// head) one call scores the packed rows directly (ops/packed_scores.h), otherwise the dots
// come from the unpacked tile (ops/code_dot_i8.h); 8-bit codes take an int16 query where the
// single-pass kernels run, the float kernels of ops/code_dot.h elsewhere. Values fold the
// per-(row, group) scale into the probability once per tile (int16 weights:
// ops/code_dot_i16.h, which reads whole packed rows without unpacking them; float weights,
// AxpyCodeRowsWeighted, on CPUs without the kernel; whole 2-bit rows take int8 weights,
// ops/value_dot_i8.h) and add p.min per group. The float form of the cache never exists
// beyond one tile per thread; the bytes read are the compressed ones.
// Non-goals: thread safety of mutation; bit-exactness with the Python libraries (the
// quantizer follows METHODS.md 0 exactly, HQQ follows the published update rules).
#ifndef KVPACK_KV_CODECS_QUANT_COMMON_H_
#define KVPACK_KV_CODECS_QUANT_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kv/component_store.h"
#include "kv/spec.h"
#include "kvpack/status.h"

namespace kvpack {

// How (scale, min) of a group are chosen.
enum class QuantMethod {
  kMinMax,  // METHODS.md 0: mn = min, scale = (max - min) / (2^b - 1)
  kHqq,     // min-max start, then HQQ's proximal refinement of the zero point (hf backend=hqq)
};

// fp16 bit patterns of one group's parameters; x^ = code * scale + min.
struct GroupParams {
  uint16_t scale = 0;
  uint16_t min = 0;
};

// Largest magnitude the quantized codecs accept: scale and min are stored in fp16.
constexpr float kMaxQuantInput = kStoreSafeInputMax;

// InvalidArgument ("non-finite value in the keys of layer 3") when any of x[0..n) is NaN/Inf,
// or (when `fp16_range`) larger in magnitude than kMaxQuantInput.
Status CheckQuantInput(const float* x, int64_t n, const StoreShape& shape, bool fp16_range);

// CheckQuantInput with the fp16 range over n_tokens rows of every head (rows: [n_tokens,
// n_kv_heads, head_dim]): the quantized stores' Append gate and CheckInput.
inline Status CheckQuantRows(const float* rows, int64_t n_tokens, const StoreShape& shape) {
  return CheckQuantInput(rows, n_tokens * shape.n_kv_heads * shape.head_dim, shape, true);
}

// The coder of a group with the given min and min-max scale (METHODS.md 0): its stored fp16
// parameters, and the min and inverse scale its codes are computed against, the fp16-rounded
// ones (inv 0 when the stored scale is 0: every code 0). Codes: QuantizeCode
// (ops/group_quantize.h).
struct GroupCoder {
  GroupParams params;
  float min = 0.0f, inv = 0.0f;
};
GroupCoder GroupCoderOf(float lo, float scale);

// Q_b over x[i * stride], i < n: writes codes[i * code_stride] (unpacked, one per byte) and
// returns the fp16 parameters. Codes are computed against the fp16-rounded scale and min, so
// decoding the stored form gives |x - x^| <= scale/2 + the fp16 rounding of scale and min.
// A group whose range is 0 (or whose scale rounds to 0 in fp16) stores scale = 0, codes 0.
GroupParams QuantizeGroup(const float* x, int64_t n, int64_t stride, int bits,
                          QuantMethod method, uint8_t* codes, int64_t code_stride);

// Bytes of n packed b-bit codes.
inline int64_t PackedBytes(int64_t n, int bits) { return (n * bits + 7) / 8; }
// LSB-first bit stream: code i occupies bits [i*b, (i+1)*b) of dst (dst zeroed first).
void PackCodes(const uint8_t* codes, int64_t n, int bits, uint8_t* dst);
// Reading codes back: ops/code_unpack.h (UnpackCodesU8).

// Rows are read tile by tile (kTileRows rows of codes unpacked into thread-local buffers that
// stay in L1/L2) and handed to the kernels of ops/code_dot.h or ops/vec.h: attention reads
// the compressed bytes once and never holds more than one tile per thread.
constexpr int64_t kTileRowsMax = 64;  // rows per tile
struct CodeTileScratch {
  int64_t width = 0;                // row width the buffers below are sized for
  std::vector<float> values;        // [kTileRows, width] decoded tile
  std::vector<uint8_t> tile_codes;  // [kTileRows, width] unpacked codes
  std::vector<float> scale, min;    // [width] per-channel parameters of a block
  std::vector<float> qs, qm, acc, psum;  // per-query work arrays of the algebraic forms
  std::vector<float> row_scale;     // [kTileRows, n_groups]
  std::vector<float> params;        // [kTileRows, n_groups, 2] fp16 params as floats
  std::vector<float> msum;          // [n_q, n_groups]
  std::vector<int8_t> q8;           // [n_q, width] int8 query of the integer key path
  std::vector<int16_t> q16;         // [n_q, width] int16 query of 8-bit keys
  std::vector<float> alpha;         // [n_q] its scales
  std::vector<int32_t> dots;        // [n_q, n_groups, kTileRows] integer code dots
  std::vector<float> weights;       // [n_q, n_groups, kTileRows] probability x row scale
  std::vector<float> gscale, gmin;  // [n_groups, kTileRows] a tile's parameters by group
  std::vector<float> ones = std::vector<float>(kTileRowsMax, 1.0f);  // grows; all ones
};
// The calling thread's scratch, sized for rows of at least `width` values.
CodeTileScratch& TileScratch(int64_t width);

// ---------------------------------------------------------------------------------------
// The algebra of a tile of rows with per-(row, group) parameters, shared by TokenGroupRows
// and the ggml blocks (a 32-channel block is a group with scale d and min -8d for q4_0):
//   q . row = sum_g s_g * alpha * (q8 . code)_g + m_g * sum_{c in g} q_c     (keys),
//   sum_k p_k row_k = sum_k (p_k s_{k,g}) code_k + sum_k p_k m_{k,g}          (values).
// The caller unpacks a tile's codes (one byte each, [m, n]) and puts its parameters in
// t.gscale / t.gmin ([groups of the window, kTileRowsMax], by group).

// The int8 query of n_q rows q [n_q, n] (window aligned to the groups): t.q8, t.alpha and
// t.qm [n_q, groups] (sum of q over each group).
void PrepareGroupedQueryI8(const float* q, int n_q, int n, int group, CodeTileScratch& t);
// The same with the int16 query of 8-bit codes (QuantizeI16): t.q16, t.alpha, t.qm.
void PrepareGroupedQueryI16(const float* q, int n_q, int n, int group, CodeTileScratch& t);
// scores[i * ld + k] = q_i . row k for the m <= kTileRowsMax rows of a tile; codes <= 127.
void ScoreGroupedTileI8(const uint8_t* codes, int64_t m, int n, int group, int n_q,
                        CodeTileScratch& t, float* scores, int64_t ld);
// out[i, :] += the code part of sum_k p[i * ld + k] row_k over the tile; the min part goes
// to t.msum [n_q, groups of the window] (zeroed by the caller before its first tile). The
// window is channels [first, first + n). The int16-weight kernel (ops/code_dot_i16.h) where
// the CPU has it, float weights elsewhere.
void AccumulateGroupedTile(const uint8_t* codes, int64_t m, int n, int first, int group,
                           const float* p, int n_q, int64_t ld, CodeTileScratch& t, float* out);
// AccumulateGroupedTile with the codes read from packed rows (rows + k * row_bytes, window
// [first, first + n)) by the int16 kernel; only where HasPackedInt16ValueKernel says so.
void AccumulatePackedTile(const uint8_t* rows, int64_t row_bytes, int64_t m, int n, int first,
                          int group, int bits, const float* p, int n_q, int64_t ld,
                          CodeTileScratch& t, float* out);
// After the last tile: out[i, c] += t.msum[i, group of c].
void AddGroupedMinSums(int n_q, int n, int first, int group, const CodeTileScratch& t,
                       float* out);

// Keys of 2- and 4-bit codecs are scored in the integer domain (ops/code_dot_i8.h): the
// query, with the per-channel scales folded in where the format has them, is quantized to
// int8 per (query row, key block). An int8 query would add an error as large as 8-bit codes'
// own: those take an int16 query (QuantizeI16, 258 times finer) where the vector kernels of
// ops/packed_scores.h run (per-channel blocks: HasVectorChannelBlockScores, AVX512-VNNI at
// head size 64 or AVX2 since session 39; per-token rows: HasFastTokenRowScoresI16), and the
// float kernels elsewhere. (Until session 31 they took the float kernels everywhere, at 2.7
// times f16's key time in cache.)
inline bool UseIntegerKeys(int bits) { return bits <= 4; }
// Values of every width take int16 weights (ops/code_dot_i16.h, where the CPU has the
// kernel, float weights elsewhere): 2^-16 of a tile's largest weight per unit of code, far
// below the codes' own error, 8-bit codes' included (the bound in that header). Until session
// 31 the 8-bit codes kept float weights over unpacked tiles, at twice f16's time per row.

// ComponentStore::ReadCost of a head whose first n_quantized tokens are codes of `bits` with
// one fp16 (scale, min) pair per `group` values and whose later tokens are fp16 rows: tokens
// [0, t) in fp16 rows, a quantized token costing bits / 16 + 2 / group of one.
double QuantizedThenFp16Cost(int64_t t, int64_t n_quantized, int bits, int group);

// Parameter helpers for the registry and codecs: integer `key` of `spec` must be one of
// `allowed` (or, with an empty list, >= 1).
Result<int64_t> ParamChoice(const MethodSpec& spec, const std::string& key, int64_t fallback,
                            const std::vector<int64_t>& allowed);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_QUANT_COMMON_H_
