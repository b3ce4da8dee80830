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

TEST(ThreadPoolTest, ChunksAreDeterministic) {
  ThreadPool pool(2);
  std::vector<int> owner_a(100), owner_b(100);
  pool.ParallelFor(100, 8, [&](int64_t b, int64_t e, int t) {
    for (int64_t i = b; i < e; ++i) owner_a[i] = t;
  });
  pool.ParallelFor(100, 8, [&](int64_t b, int64_t e, int t) {
    for (int64_t i = b; i < e; ++i) owner_b[i] = t;
  });
  EXPECT_EQ(owner_a, owner_b);
}

}  // namespace
}  // namespace kvpack
