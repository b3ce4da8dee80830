// The outlier cells (ops/outlier_cells.h): the layout gives back exactly the entries it was
// given, and the AVX-512 products equal their scalar twins bit for bit (both follow the
// header's arithmetic rule: one fused multiply-add per entry in entry order, then one add)
// on every SIMD target, head size (the query table in 1, 2 or 4 register pairs, and past
// the fast path's 128), query count (passes of up to 4 rows) and row range (slices cut at
// either end), with heavy rows (an entry in every channel), empty cells and fp16 values.
#include "ops/outlier_cells.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include "core/half.h"

namespace kvpack {
namespace {

struct Stream {
  std::vector<uint32_t> cell_begin, words;
};

// Random entries of n_rows rows: most rows have a few, some none, row 5 every channel.
std::vector<OutlierEntry> RandomEntries(int64_t n_rows, int d, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 4.0f);
  std::vector<OutlierEntry> entries;
  for (int64_t r = 0; r < n_rows; ++r) {
    const bool heavy = r == 5;
    if (!heavy && rng() % 4 == 0) continue;
    for (int c = static_cast<int>(rng() % 4); c < d; c += heavy ? 1 : 1 + static_cast<int>(rng() % 12)) {
      entries.push_back({r, c, Fp32ToFp16(g(rng))});
    }
  }
  return entries;
}

Stream Encode(OutlierLanes lanes, int d, int64_t n_rows, const std::vector<OutlierEntry>& entries) {
  Stream s;
  const int64_t rows = OutlierSliceRows(lanes);
  size_t i = 0;
  for (int64_t slice = 0; slice * rows < n_rows; ++slice) {
    size_t j = i;
    while (j < entries.size() && entries[j].row < (slice + 1) * rows) ++j;
    EncodeOutlierSlice(lanes, d, slice, std::span(entries).subspan(i, j - i), s.cell_begin, s.words);
    i = j;
  }
  s.cell_begin.push_back(static_cast<uint32_t>(s.words.size()));
  s.words.resize(s.words.size() + kOutlierStreamSlackWords, 0);
  return s;
}

TEST(OutlierCells, DecodeGivesBackTheEntries) {
  std::mt19937 rng(5);
  for (OutlierLanes lanes : {OutlierLanes::kRows, OutlierLanes::kChannels}) {
    for (int d : {1, 8, 17, 64, 300}) {
      const int64_t n_rows = 150;
      const auto entries = RandomEntries(n_rows, d, rng);
      const Stream s = Encode(lanes, d, n_rows, entries);
      const size_t n_cells = s.cell_begin.size() - 1;
      EXPECT_EQ(n_cells, static_cast<size_t>((n_rows + OutlierSliceRows(lanes) - 1) /
                                             OutlierSliceRows(lanes) * OutlierCellsPerSlice(lanes, d)));
      std::vector<OutlierEntry> back;
      DecodeOutlierCells(lanes, d, s.words.data(), s.cell_begin.data(), 0, n_cells, back);
      ASSERT_EQ(back.size(), entries.size()) << d;
      EXPECT_EQ(CountOutlierEntries(lanes, d, s.words.data(), s.cell_begin.data(), 0, n_cells), entries.size());
      for (size_t k = 0; k < back.size(); ++k) {
        ASSERT_EQ(back[k].row, entries[k].row) << k;
        ASSERT_EQ(back[k].channel, entries[k].channel) << k;
        ASSERT_EQ(back[k].value, entries[k].value) << k;
      }
    }
  }
}

TEST(OutlierCells, ProductsEqualTheTwinsOnEveryTarget) {
  int fast_scores = 0, fast_accumulate = 0;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int d : {8, 24, 32, 33, 64, 100, 128, 129, 200, 300}) {
      fast_scores += HasFastOutlierScores(d);
      fast_accumulate += HasFastOutlierAccumulate(d);
      const int64_t n_rows = 333;
      const auto entries = RandomEntries(n_rows, d, rng);
      const Stream keys = Encode(OutlierLanes::kRows, d, n_rows, entries);
      const Stream values = Encode(OutlierLanes::kChannels, d, n_rows, entries);
      for (int n_q : {1, 2, 3, 4, 5, 9}) {
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, n_rows}, {0, 128}, {3, 70},
                              {16, 32}, {64, 192}, {129, 130}, {200, n_rows}}) {
          const int64_t n = r1 - r0, ld = n + 2;
          std::vector<float> q(n_q * d), p(n_q * ld);
          for (float& x : q) x = g(rng);
          for (float& x : p) x = g(rng);
          std::vector<float> fast(n_q * ld), ref(n_q * ld);
          for (float& x : fast) x = g(rng);
          ref = fast;
          const std::vector<float> scores_before = fast;
          OutlierScores(keys.words.data(), keys.cell_begin.data(), r0, r1, d, q.data(), n_q,
                        fast.data(), ld);
          OutlierScoresRef(keys.words.data(), keys.cell_begin.data(), r0, r1, d, q.data(), n_q,
                           ref.data(), ld);
          ASSERT_EQ(fast, ref) << hwy::TargetName(target) << " scores d " << d << " n_q " << n_q
                               << " rows [" << r0 << ", " << r1 << ")";
          std::vector<float> out(n_q * d), out_ref;
          for (float& x : out) x = g(rng);
          out_ref = out;
          const std::vector<float> before = out;
          OutlierAccumulate(values.words.data(), values.cell_begin.data(), r0, r1, d, p.data(),
                            n_q, ld, out.data());
          OutlierAccumulateRef(values.words.data(), values.cell_begin.data(), r0, r1, d,
                               p.data(), n_q, ld, out_ref.data());
          ASSERT_EQ(out, out_ref) << hwy::TargetName(target) << " accumulate d " << d << " n_q "
                                  << n_q << " rows [" << r0 << ", " << r1 << ")";
          // Not vacuous: the range holds entries, which moved the outputs.
          if (r0 <= 5 && 5 < r1) {
            ASSERT_NE(out, before);
            ASSERT_NE(fast, scores_before);
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (fast_scores == 0 || fast_accumulate == 0) {
    GTEST_SKIP() << "no AVX-512: only the twins ran";
  }
}

// Each product takes the query or weight rounded to bf16 as Fp32ToBf16 does: ties to even
// both ways, a NaN with its payload only in the low bits stays a NaN (not an infinity), the
// largest floats round to infinity, subnormals and signed zeros. One entry of value 1 per
// row and channel (row r, channel r) makes every output that rounded factor alone (0 + x).
TEST(OutlierCells, FactorsAreRoundedToBf16) {
  const uint32_t specials[] = {
      0x3f808000u,  // 1 + 2^-8: a tie, even below -> 1
      0x3f818000u,  // a tie, odd below -> up
      0x3f80ffffu, 0xbf808001u, 0x7f800001u,  // NaN, payload in the low bits only
      0xffc00000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,  // largest float -> inf
      0x00000001u, 0x807fffffu, 0x80000000u, 0x00000000u, 0x3eaaaaabu, 0xc2f6e979u};
  constexpr int d = 64;
  std::vector<OutlierEntry> entries;
  for (int r = 0; r < d; ++r) entries.push_back({r, r, Fp32ToFp16(1.0f)});
  const Stream keys = Encode(OutlierLanes::kRows, d, d, entries);
  const Stream values = Encode(OutlierLanes::kChannels, d, d, entries);
  std::vector<float> x(d);
  std::mt19937 rng(3);
  for (int c = 0; c < d; ++c) {
    x[c] = c < static_cast<int>(std::size(specials)) ? Fp32FromBits(specials[c])
                                                      : std::normal_distribution<float>()(rng);
  }
  int fast = 0;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fast += HasFastOutlierScores(d) && HasFastOutlierAccumulate(d);
    std::vector<float> scores(d, 0.0f), out(d, 0.0f);
    OutlierScores(keys.words.data(), keys.cell_begin.data(), 0, d, d, x.data(), 1, scores.data(), d);
    OutlierAccumulate(values.words.data(), values.cell_begin.data(), 0, d, d, x.data(), 1, d, out.data());
    for (int c = 0; c < d; ++c) {
      const float want = 0.0f + Bf16ToFp32(Fp32ToBf16(x[c]));
      for (float got : {scores[c], out[c]}) {
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << hwy::TargetName(target) << " " << c;
        } else {
          ASSERT_EQ(BitsFromFp32(got), BitsFromFp32(want)) << hwy::TargetName(target) << " " << c;
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(Bf16ToFp32(Fp32ToBf16(x[0])), 1.0f);
  EXPECT_EQ(BitsFromFp32(Bf16ToFp32(Fp32ToBf16(x[1]))), 0x3f820000u);
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(x[4]))));
  EXPECT_TRUE(std::isinf(Bf16ToFp32(Fp32ToBf16(x[8]))));
  if (fast == 0) GTEST_SKIP() << "no AVX-512: only the twins ran";
}

}  // namespace
}  // namespace kvpack
