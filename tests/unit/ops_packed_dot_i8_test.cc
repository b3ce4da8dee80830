// The packed-row integer key kernel (ops/packed_dot_i8.h) against its scalar twin, which
// reads every code bit by bit: the integers must agree exactly on every SIMD target, bit
// width, row width (the AVX-512 path handles 16-, 32- and 64-byte rows, 16 rows at a time;
// everything else unpacks), row count and number of query rows (the fast path takes the
// queries in passes of up to four).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <random>
#include <vector>

#include "ops/code_dot_i8.h"
#include "ops/packed_dot_i8.h"

namespace kvpack {
namespace {

TEST(PackedDotI8, EqualsTheTwinExactlyOnEveryTarget) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(3);
    for (int bits : {2, 4}) {
      for (size_t d : {8, 24, 32, 40, 64, 128, 256}) {
        for (size_t pad : {0, 3}) {
          const size_t row_bytes = (d * bits + 7) / 8 + pad;
          for (size_t n_rows : {1, 15, 16, 17, 33, 64}) {
            for (size_t n_q : {1, 2, 3, 4, 5, 9}) {
              std::vector<uint8_t> rows(n_rows * row_bytes);
              for (auto& b : rows) b = static_cast<uint8_t>(rng());
              std::vector<int8_t> q(n_q * d), qp(n_q * d);
              for (auto& x : q) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
              ArrangeQueryForPacked(q.data(), n_q, d, bits, qp.data());
              const size_t ld = n_rows + 5;
              std::vector<int32_t> a(n_q * ld, -7), b(a.size(), -7);
              DotPackedRowsI8(rows.data(), n_rows, row_bytes, d, bits, q.data(), qp.data(), n_q,
                              a.data(), ld);
              DotPackedRowsI8Ref(rows.data(), n_rows, row_bytes, d, bits, q.data(), n_q, b.data(),
                                 ld);
              ASSERT_EQ(a, b) << hwy::TargetName(target) << " bits " << bits << " d " << d
                              << " row_bytes " << row_bytes << " rows " << n_rows << " n_q "
                              << n_q;
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(PackedDotI8, QueryArrangementFollowsItsDefinitionOnEveryTarget) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(5);
    for (int bits : {2, 4}) {
      const size_t k = 8 / bits;
      for (size_t d : {8, 16, 24, 40, 64, 128}) {
        const size_t n_q = 3;
        std::vector<int8_t> q(n_q * d), qp(n_q * d, 0), want(n_q * d);
        for (auto& x : q) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        for (size_t i = 0; i < n_q; ++i) {
          for (size_t c = 0; c < d; ++c) {
            if (d % (4 * k) != 0) {
              want[i * d + c] = q[i * d + c];  // not arrangeable: copied
              continue;
            }
            const size_t s = c / (d / k), m = c % (d / k) / 4, j = c % 4;
            want[i * d + c] = q[i * d + 4 * k * m + k * j + s];
          }
        }
        ArrangeQueryForPacked(q.data(), n_q, d, bits, qp.data());
        ASSERT_EQ(qp, want) << hwy::TargetName(target) << " bits " << bits << " d " << d;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(PackedDotI8, TwinAgreesWithTheUnpackedKernelsTwin) {
  // The twin itself against DotCodeRowsI8Ref on codes written explicitly (not by the
  // packer under test): code c of a row sits at bits [c * bits, (c + 1) * bits).
  std::mt19937 rng(4);
  for (int bits : {2, 4}) {
    const size_t d = 64, n_rows = 20, n_q = 3, row_bytes = d * bits / 8;
    std::vector<uint8_t> codes(n_rows * d), rows(n_rows * row_bytes, 0);
    for (size_t t = 0; t < n_rows; ++t) {
      for (size_t c = 0; c < d; ++c) {
        const uint8_t v = static_cast<uint8_t>(rng() % (1u << bits));
        codes[t * d + c] = v;
        rows[t * row_bytes + c * bits / 8] |= static_cast<uint8_t>(v << (c * bits % 8));
      }
    }
    std::vector<int8_t> q(n_q * d);
    for (auto& x : q) x = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<int32_t> a(n_q * n_rows), b(a.size());
    DotPackedRowsI8Ref(rows.data(), n_rows, row_bytes, d, bits, q.data(), n_q, a.data(), n_rows);
    DotCodeRowsI8Ref(codes.data(), n_rows, d, d, d, q.data(), n_q, b.data(), n_rows);
    EXPECT_EQ(a, b) << "bits " << bits;
  }
}

}  // namespace
}  // namespace kvpack
