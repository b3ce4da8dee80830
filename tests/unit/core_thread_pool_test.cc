#include <atomic>
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

// Chunk boundaries (not which thread runs a chunk) decide results; they must not vary.
TEST(ThreadPoolTest, ChunkBoundariesAreDeterministic) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 100; ++rep) {
    std::vector<int> start(100, 0);
    pool.ParallelFor(100, 8, [&](int64_t b, int64_t, int) { start[b] = 1; });
    std::vector<int> expected(100, 0);
    expected[0] = expected[56] = 1;  // chunk = ceil(100 / 2) rounded up to 8 = 56
    ASSERT_EQ(start, expected);
  }
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
