#include "ops/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "core/step_breakdown.h"
#include "ops/ggml_quants.h"
#include "ops/q8_0_dot.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

constexpr int64_t kRowTile = 16;  // weight rows dequantized together during prefill

// Rows [begin, end) of q8_0 matrix w against the quantized tokens: one token's rows in one
// kernel call (decode), or tiles of kRowTile rows that every token shares while they are
// cached (prefill).
void Q8_0Rows(const WeightMatrix& w, const Q8_0Activations& xq, int64_t n_tok, int64_t begin,
              int64_t end, float* y) {
  if (n_tok == 1) {
    DotQ8_0Q8_0Rows(w.data + begin * w.row_bytes, w.row_bytes, end - begin, xq, 0, y + begin);
    return;
  }
  for (int64_t o0 = begin; o0 < end; o0 += kRowTile) {
    const int64_t n_rows = std::min(kRowTile, end - o0);
    for (int64_t t = 0; t < n_tok; ++t) {
      DotQ8_0Q8_0Rows(w.data + o0 * w.row_bytes, w.row_bytes, n_rows, xq, t,
                      y + t * w.n_out + o0);
    }
  }
}

// q8_0 weights with ggml's numerics (ops/q8_0_dot.h): each token's activations quantized
// once for every matrix of the group, then integer block products over the matrices' rows
// laid end to end, which ParallelFor cuts into every thread's share of blocks.
void MatMulQ8_0(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tok,
                std::span<float* const> ys, ThreadPool* pool) {
  thread_local Q8_0Activations xq;  // the calling thread's; the workers only read it
  xq.Quantize(x, n_tok, ws[0]->n_in);
  const Q8_0Activations& xr = xq;
  int64_t n_rows = 0;
  for (const WeightMatrix* w : ws) n_rows += w->n_out;
  pool->ParallelFor(n_rows, n_tok == 1 ? 8 : kRowTile, [&](int64_t begin, int64_t end, int) {
    int64_t first = 0;  // the group's row index of matrix i's row 0
    for (size_t i = 0; i < ws.size() && first < end; first += ws[i]->n_out, ++i) {
      const int64_t b = std::max(begin, first), e = std::min(end, first + ws[i]->n_out);
      if (b < e) Q8_0Rows(*ws[i], xr, n_tok, b - first, e - first, ys[i]);
    }
  });
}

}  // namespace

void DequantizeWeightRow(const WeightMatrix& w, int64_t row, float* out) {
  const Status status = DequantizeRow(w.type, w.data + row * w.row_bytes, out, w.n_in);
  KVPACK_CHECK(status.ok());  // the loader admits only supported types
}

float DotWeightRow(const WeightMatrix& w, int64_t row, const float* x, float* scratch) {
  const uint8_t* r = w.data + row * w.row_bytes;
  switch (w.type) {
    case GgmlType::kF32:
      return DotF32(reinterpret_cast<const float*>(r), x, w.n_in);
    case GgmlType::kF16:
      return DotF16F32(reinterpret_cast<const uint16_t*>(r), x, w.n_in);
    case GgmlType::kBF16:
      return DotBF16F32(reinterpret_cast<const uint16_t*>(r), x, w.n_in);
    case GgmlType::kQ8_0:
      return DotQ8_0F32(r, x, w.n_in);
    default:
      DequantizeWeightRow(w, row, scratch);
      return DotF32(scratch, x, w.n_in);
  }
}

void MatMul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, ThreadPool* pool) {
  KVPACK_CHECK(pool != nullptr);
  const StepPartTimer timer(StepPart::kProducts);
  if (w.type == GgmlType::kQ8_0) {
    const WeightMatrix* const ws[] = {&w};
    float* const ys[] = {y};
    MatMulQ8_0(ws, x, n_tok, ys, pool);
    return;
  }
  if (n_tok == 1) {
    pool->ParallelFor(w.n_out, 8, [&](int64_t begin, int64_t end, int) {
      std::vector<float> scratch(w.n_in);
      for (int64_t o = begin; o < end; ++o) y[o] = DotWeightRow(w, o, x, scratch.data());
    });
    return;
  }
  pool->ParallelFor(w.n_out, kRowTile, [&](int64_t begin, int64_t end, int) {
    std::vector<float> tile(kRowTile * w.n_in);  // [kRowTile, n_in]
    for (int64_t o0 = begin; o0 < end; o0 += kRowTile) {
      const int64_t n_rows = std::min(kRowTile, end - o0);
      const float* rows;
      if (w.type == GgmlType::kF32) {
        rows = reinterpret_cast<const float*>(w.data + o0 * w.row_bytes);
      } else {
        for (int64_t r = 0; r < n_rows; ++r) DequantizeWeightRow(w, o0 + r, &tile[r * w.n_in]);
        rows = tile.data();
      }
      for (int64_t t = 0; t < n_tok; ++t) {
        const float* xt = x + t * w.n_in;
        float* yt = y + t * w.n_out + o0;
        for (int64_t r = 0; r < n_rows; ++r) yt[r] = DotF32(rows + r * w.n_in, xt, w.n_in);
      }
    }
  });
}

void MatMulShared(std::span<const WeightMatrix* const> ws, const float* x, int64_t n_tok,
                  std::span<float* const> ys, ThreadPool* pool) {
  KVPACK_CHECK(pool != nullptr && !ws.empty() && ws.size() == ys.size());
  bool all_q8_0 = true;
  for (const WeightMatrix* w : ws) {
    KVPACK_CHECK(w->n_in == ws[0]->n_in);
    all_q8_0 = all_q8_0 && w->type == GgmlType::kQ8_0;
  }
  if (!all_q8_0) {
    for (size_t i = 0; i < ws.size(); ++i) MatMul(*ws[i], x, n_tok, ys[i], pool);
    return;
  }
  const StepPartTimer timer(StepPart::kProducts);
  MatMulQ8_0(ws, x, n_tok, ys, pool);
}

void MatMulRef(const WeightMatrix& w, const float* x, int64_t n_tok, float* y) {
  if (w.type == GgmlType::kQ8_0) {
    // ggml's numerics: activations quantized to q8_0, exact block sums, then in double.
    const int64_t nb = w.n_in / 32;
    std::vector<BlockQ8_0> xq(nb);
    for (int64_t t = 0; t < n_tok; ++t) {
      QuantizeRowQ8_0(x + t * w.n_in, xq.data(), w.n_in);
      for (int64_t o = 0; o < w.n_out; ++o) {
        double sum = 0.0;
        for (int64_t b = 0; b < nb; ++b) {
          BlockQ8_0 wb;
          std::memcpy(&wb, w.data + o * w.row_bytes + b * sizeof(BlockQ8_0), sizeof(wb));
          int64_t sumi = 0;
          for (int j = 0; j < 32; ++j) sumi += wb.qs[j] * xq[b].qs[j];
          sum += static_cast<double>(sumi) * Fp16ToFp32(wb.d) * Fp16ToFp32(xq[b].d);
        }
        y[t * w.n_out + o] = static_cast<float>(sum);
      }
    }
    return;
  }
  std::vector<float> row(w.n_in);
  for (int64_t o = 0; o < w.n_out; ++o) {
    DequantizeWeightRow(w, o, row.data());
    for (int64_t t = 0; t < n_tok; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < w.n_in; ++i) sum += static_cast<double>(row[i]) * x[t * w.n_in + i];
      y[t * w.n_out + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace kvpack
