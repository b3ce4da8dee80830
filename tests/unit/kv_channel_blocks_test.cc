// ChannelBlocks' block lookups (kv/codecs/channel_blocks.h): arithmetic while every block but
// the last has one size, a search over the block table otherwise. Whatever the layout, a
// range's decode and scores must be those of the blocks it covers; the oracle is each block
// quantized alone (a container of one block, whose lookups are trivial).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kv/codecs/channel_blocks.h"

namespace kvpack {
namespace {

constexpr int kD = 64;

struct Built {
  ChannelBlocks all{kD, 2, QuantMethod::kMinMax};
  std::vector<float> want;  // [rows, kD]: each block decoded by a container of its own
};

// x: [rows, kD]; blocks appended with the given sizes.
Built Build(const std::vector<float>& x, const std::vector<int64_t>& sizes) {
  Built b;
  int64_t r = 0;
  for (int64_t n : sizes) {
    b.all.AppendBlock(&x[r * kD], n, kD);
    ChannelBlocks alone(kD, 2, QuantMethod::kMinMax);
    alone.AppendBlock(&x[r * kD], n, kD);
    std::vector<float> dec(n * kD);
    alone.Decode(0, n, dec.data());
    b.want.insert(b.want.end(), dec.begin(), dec.end());
    r += n;
  }
  return b;
}

// Every sub-range [r0, r1) of a few: Decode equals the oracle's rows, and Scores equals
// Scores over the whole cache at those rows (a row's score depends only on its block).
void ExpectRangesMatch(const ChannelBlocks& c, const std::vector<float>& want, std::mt19937& rng,
                       const char* layout) {
  const int64_t n = c.n_rows();
  std::vector<float> q(3 * kD);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : q) v = u(rng);
  std::vector<float> all_scores(3 * n);
  c.Scores(0, n, q.data(), 3, all_scores.data(), n, 0);
  for (int trial = 0; trial < 40; ++trial) {
    int64_t r0 = static_cast<int64_t>(rng() % n), r1 = static_cast<int64_t>(rng() % n) + 1;
    if (r0 >= r1) std::swap(r0, r1);
    if (r0 == r1) continue;
    std::vector<float> dec((r1 - r0) * kD);
    c.Decode(r0, r1, dec.data());
    for (int64_t r = r0; r < r1; ++r) {
      for (int ch = 0; ch < kD; ++ch) {
        ASSERT_EQ(dec[(r - r0) * kD + ch], want[r * kD + ch])
            << layout << " decode of [" << r0 << ", " << r1 << ") at row " << r;
      }
    }
    std::vector<float> scores(3 * (r1 - r0));
    c.Scores(r0, r1, q.data(), 3, scores.data(), r1 - r0, 0);
    for (int i = 0; i < 3; ++i) {
      for (int64_t r = r0; r < r1; ++r) {
        ASSERT_EQ(scores[i * (r1 - r0) + (r - r0)], all_scores[i * n + r])
            << layout << " scores of [" << r0 << ", " << r1 << ") at row " << r;
      }
    }
  }
}

TEST(ChannelBlocks, RangesMatchTheirBlocksInEveryLayout) {
  std::mt19937 rng(31);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(400 * kD);
  for (auto& v : x) v = g(rng);
  const std::vector<std::vector<int64_t>> layouts = {
      {32, 32, 32, 32},      // uniform
      {32, 32, 32, 7},       // uniform but the last
      {100, 32, 32, 32},     // a prompt block, then the buffer's (KCVT, GEAR)
      {5, 32},               // a short first block, then a longer last one
      {32, 7, 32, 32, 20}};  // irregular
  for (const auto& sizes : layouts) {
    const Built b = Build(x, sizes);
    std::string name;
    for (int64_t s : sizes) name += std::to_string(s) + " ";
    ExpectRangesMatch(b.all, b.want, rng, name.c_str());
  }
}

// Eviction inside blocks makes them uneven; evicting whole blocks can make them even again.
TEST(ChannelBlocks, RangesMatchTheirBlocksAfterKeep) {
  std::mt19937 rng(32);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(128 * kD);
  for (auto& v : x) v = g(rng);
  for (int mode = 0; mode < 2; ++mode) {
    Built b = Build(x, {32, 32, 32, 32});
    std::vector<int64_t> keep;
    for (int64_t r = 0; r < 128; ++r) {
      // mode 0: every third row (uneven blocks); mode 1: blocks 0 and 2 whole
      const bool kept = mode == 0 ? r % 3 == 0 : (r / 32) % 2 == 0;
      if (kept) keep.push_back(r);
    }
    b.all.Keep(keep);
    std::vector<float> want;
    for (int64_t r : keep) want.insert(want.end(), &b.want[r * kD], &b.want[(r + 1) * kD]);
    ASSERT_EQ(b.all.n_rows(), static_cast<int64_t>(keep.size()));
    ExpectRangesMatch(b.all, want, rng, mode == 0 ? "every third row" : "whole blocks");
  }
}

}  // namespace
}  // namespace kvpack
