// MatMulShared (ops/matmul.h): several matrices of one input in one pass give each matrix
// exactly what MatMul gives it, for decode (1 token) and prefill (tiles shared by 5 tokens),
// with 1 to 3 threads, so that chunks start and end inside matrices and across their edges;
// matrices of other types than q8_0 take MatMul per matrix; and each result is within the
// scalar oracle's (MatMulRef's) rounding of it.
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/ggml_quants.h"

namespace kvpack {
namespace {

struct OwnedMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

OwnedMatrix RandomMatrix(GgmlType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> values(n_out * n_in);
  for (float& v : values) v = u(rng);
  OwnedMatrix m;
  m.w.type = type;
  m.w.n_in = n_in;
  m.w.n_out = n_out;
  if (type == GgmlType::kQ8_0) {
    m.w.row_bytes = n_in / 32 * sizeof(BlockQ8_0);
    m.bytes.resize(n_out * m.w.row_bytes);
    for (int64_t o = 0; o < n_out; ++o) {
      QuantizeRowQ8_0(&values[o * n_in], &m.bytes[o * m.w.row_bytes], n_in);
    }
  } else {
    m.w.row_bytes = n_in * sizeof(float);
    m.bytes.resize(n_out * m.w.row_bytes);
    std::memcpy(m.bytes.data(), values.data(), m.bytes.size());
  }
  m.w.data = m.bytes.data();
  return m;
}

// Runs MatMulShared over the matrices and checks each output against MatMul's, bit for bit.
void ExpectSharedEqualsSeparate(const std::vector<OwnedMatrix>& ms, int64_t n_tok,
                                int n_threads, std::mt19937& rng) {
  const int64_t n_in = ms[0].w.n_in;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> x(n_tok * n_in);
  for (float& v : x) v = u(rng);
  ThreadPool pool(n_threads);
  std::vector<const WeightMatrix*> ws;
  std::vector<std::vector<float>> shared, separate;
  for (const OwnedMatrix& m : ms) {
    ws.push_back(&m.w);
    shared.emplace_back(n_tok * m.w.n_out, -1.0f);
    separate.emplace_back(n_tok * m.w.n_out, -2.0f);
  }
  std::vector<float*> ys;
  for (auto& y : shared) ys.push_back(y.data());
  MatMulShared(ws, x.data(), n_tok, ys, &pool);
  for (size_t i = 0; i < ms.size(); ++i) {
    MatMul(ms[i].w, x.data(), n_tok, separate[i].data(), &pool);
    ASSERT_EQ(0, std::memcmp(shared[i].data(), separate[i].data(),
                             shared[i].size() * sizeof(float)))
        << "matrix " << i << ", " << n_tok << " token(s), " << n_threads << " thread(s)";
    // And near the oracle: the q8_0 oracle quantizes x as the kernels do and sums in
    // double, so the two differ by the kernels' float rounding only (well under 1e-4 of
    // the sum of |terms|, which is below n_in * 2 * max|w| here).
    std::vector<float> ref(n_tok * ms[i].w.n_out);
    MatMulRef(ms[i].w, x.data(), n_tok, ref.data());
    for (size_t j = 0; j < ref.size(); ++j) {
      ASSERT_NEAR(shared[i][j], ref[j], 1e-4 * 2.0 * static_cast<double>(n_in)) << j;
    }
  }
}

TEST(MatMulSharedTest, Q8_0GroupEqualsOneCallPerMatrix) {
  std::mt19937 rng(11);
  // A layer's Q, K and V shapes (small), and sizes that are not multiples of the 8- and
  // 16-row grains, so that chunk edges fall inside matrices.
  const std::vector<std::vector<int64_t>> groups = {{48, 16, 16}, {13, 7, 29}, {1, 40}, {33}};
  for (const auto& rows : groups) {
    std::vector<OwnedMatrix> ms;
    for (int64_t n_out : rows) ms.push_back(RandomMatrix(GgmlType::kQ8_0, n_out, 96, rng));
    for (int64_t n_tok : {1, 5}) {
      for (int n_threads : {1, 2, 3}) ExpectSharedEqualsSeparate(ms, n_tok, n_threads, rng);
    }
  }
}

TEST(MatMulSharedTest, OtherTypesTakeMatMulPerMatrix) {
  std::mt19937 rng(12);
  std::vector<OwnedMatrix> ms;
  ms.push_back(RandomMatrix(GgmlType::kQ8_0, 24, 64, rng));
  ms.push_back(RandomMatrix(GgmlType::kF32, 17, 64, rng));
  for (int64_t n_tok : {1, 3}) ExpectSharedEqualsSeparate(ms, n_tok, 2, rng);
}

}  // namespace
}  // namespace kvpack
