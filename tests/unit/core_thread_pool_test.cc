#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_pool.h"

namespace kvpack {
namespace {

TEST(ThreadPoolTest, CoversTheRangeExactlyOnceManyTimes) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000}) {
      for (int rep = 0; rep < 200; ++rep) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, 4, [&](int64_t b, int64_t e, int t) {
          ASSERT_LT(t, threads);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << i;
      }
    }
  }
}

// Block boundaries (not which thread runs a block) decide results; they must not vary.
TEST(ThreadPoolTest, BlockBoundariesAreDeterministic) {
  ThreadPool pool(2);
  // 1000 elements in grains of 8: 125 grains, shares of 62 and 63 grains (t * 125 / 2), each
  // cut into 8 blocks that start at share grain + b * grains / 8.
  std::vector<int> expected(1000, 0);
  for (int g : {0, 7, 15, 23, 31, 38, 46, 54, 62, 69, 77, 85, 93, 101, 109, 117}) {
    expected[g * 8] = 1;
  }
  for (int rep = 0; rep < 100; ++rep) {
    std::vector<int> start(1000, 0);
    pool.ParallelFor(1000, 8, [&](int64_t b, int64_t, int) { start[b] = 1; });
    ASSERT_EQ(start, expected);
  }
  // A share of fewer grains than blocks per share: one block per grain.
  std::vector<int> start(100, 0), small(100, 0);
  pool.ParallelFor(100, 8, [&](int64_t b, int64_t, int) { start[b] = 1; });
  for (int g = 0; g < 13; ++g) small[g * 8] = 1;
  EXPECT_EQ(start, small);
}

// A thread that is done with its own share takes over the blocks of one that is held up:
// the caller's blocks take 1 ms each (time for the worker to wake and claim a block), the
// worker sleeps 100 ms in the first block it claims (a wide margin over the caller's 8 ms,
// even on a loaded machine), and the caller runs the rest of the worker's share instead of
// waiting.
TEST(ThreadPoolTest, AFreeThreadTakesOverAHeldUpShare) {
  ThreadPool pool(2);
  std::vector<int> runner(16, -1);
  pool.ParallelFor(1600, 100, [&](int64_t b, int64_t, int t) {
    runner[b / 100] = t;
    std::this_thread::sleep_for(std::chrono::milliseconds(t == 1 ? 100 : 1));
  });
  for (int b = 0; b < 8; ++b) EXPECT_EQ(runner[b], 0) << b;  // the caller's own share
  int taken_over = 0;
  for (int b = 8; b < 16; ++b) taken_over += runner[b] == 0;
  EXPECT_GE(taken_over, 7);  // the worker runs at most the one block it sleeps in
}

// A thread index is never used by two chunks at once: per-thread scratch stays private.
TEST(ThreadPoolTest, ThreadIndexIsExclusiveWhileAChunkRuns) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> busy(3);
  std::atomic<int> clashes{0};
  for (int rep = 0; rep < 200; ++rep) {
    pool.ParallelFor(3000, 1, [&](int64_t, int64_t, int t) {
      if (busy[t].fetch_add(1) != 0) clashes.fetch_add(1);
      busy[t].fetch_sub(1);
    });
  }
  EXPECT_EQ(clashes.load(), 0);
}

}  // namespace
}  // namespace kvpack
