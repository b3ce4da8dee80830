// The step breakdown's marks: nothing is recorded outside a scope, a part's timer adds at
// least its lifetime, nested timers count once, waits go to the part being timed, and the
// thread pool reports the calling thread's wait for a slower worker.
#include "core/step_breakdown.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "core/thread_pool.h"

namespace kvpack {
namespace {

using std::chrono::milliseconds;

double Seconds(milliseconds ms) { return std::chrono::duration<double>(ms).count(); }

TEST(StepBreakdownTest, NothingIsRecordedWithoutAScope) {
  EXPECT_FALSE(StepPartActive());
  {
    const StepPartTimer timer(StepPart::kAttention);
    EXPECT_FALSE(StepPartActive());
    AddPoolWait(1.0);  // ignored: no breakdown
  }
  // An inactive scope (the bench's default) inside an active one turns the marks off.
  StepBreakdown b;
  {
    const StepBreakdownScope on(&b);
    const StepBreakdownScope off(nullptr);
    const StepPartTimer timer(StepPart::kProducts);
    EXPECT_FALSE(StepPartActive());
    AddPoolWait(1.0);
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(b.PartsSeconds(), 0.0);
  EXPECT_EQ(b.WaitSeconds(StepPart::kProducts), 0.0);
}

TEST(StepBreakdownTest, APartAddsAtLeastItsLifetime) {
  StepBreakdown b;
  {
    const StepBreakdownScope scope(&b);
    const StepPartTimer timer(StepPart::kAppend);
    EXPECT_TRUE(StepPartActive());
    std::this_thread::sleep_for(milliseconds(3));
  }
  EXPECT_GE(b.Seconds(StepPart::kAppend), Seconds(milliseconds(3)));
  EXPECT_LT(b.Seconds(StepPart::kAppend), 10.0);
  EXPECT_EQ(b.Seconds(StepPart::kProducts), 0.0);
  EXPECT_EQ(b.Seconds(StepPart::kAttention), 0.0);
  EXPECT_EQ(b.PartsSeconds(), b.Seconds(StepPart::kAppend));
  EXPECT_FALSE(StepPartActive());  // the scope and the timer have ended
}

TEST(StepBreakdownTest, AnInnerTimerIsCountedByTheOuterOneOnly) {
  StepBreakdown b;
  {
    const StepBreakdownScope scope(&b);
    const StepPartTimer outer(StepPart::kAttention);
    {
      const StepPartTimer inner(StepPart::kProducts);
      std::this_thread::sleep_for(milliseconds(2));
      AddPoolWait(0.25);  // goes to the part being timed: the outer one
    }
    EXPECT_TRUE(StepPartActive());
  }
  EXPECT_GE(b.Seconds(StepPart::kAttention), Seconds(milliseconds(2)));
  EXPECT_EQ(b.Seconds(StepPart::kProducts), 0.0);
  EXPECT_EQ(b.WaitSeconds(StepPart::kAttention), 0.25);
  EXPECT_EQ(b.WaitSeconds(StepPart::kProducts), 0.0);
}

TEST(StepBreakdownTest, ScopesNestAndRestore) {
  StepBreakdown outer_b, inner_b;
  {
    const StepBreakdownScope outer(&outer_b);
    {
      const StepBreakdownScope inner(&inner_b);
      const StepPartTimer timer(StepPart::kProducts);
      AddPoolWait(0.5);
    }
    const StepPartTimer timer(StepPart::kProducts);
    AddPoolWait(0.125);
  }
  EXPECT_EQ(inner_b.WaitSeconds(StepPart::kProducts), 0.5);
  EXPECT_EQ(outer_b.WaitSeconds(StepPart::kProducts), 0.125);
}

// The calling thread's chunk ends as soon as the worker's has begun; the worker's sleeps, so
// the calling thread waits for about that long, and the pool reports it to the part.
TEST(StepBreakdownTest, ThePoolReportsTheCallingThreadsWait) {
  ThreadPool pool(2);
  StepBreakdown b;
  {
    const StepBreakdownScope scope(&b);
    const StepPartTimer timer(StepPart::kProducts);
    std::atomic<bool> worker_started{false};
    pool.ParallelFor(2, 1, [&](int64_t, int64_t, int thread) {
      if (thread == 0) {
        while (!worker_started.load()) std::this_thread::yield();
        return;
      }
      worker_started.store(true);
      std::this_thread::sleep_for(milliseconds(20));
    });
  }
  const double wait = b.WaitSeconds(StepPart::kProducts);
  EXPECT_GE(wait, Seconds(milliseconds(10)));
  EXPECT_LE(wait, b.Seconds(StepPart::kProducts));
  // Without a part being timed the pool reports nothing.
  StepBreakdown none;
  {
    const StepBreakdownScope scope(&none);
    pool.ParallelFor(2, 1, [&](int64_t, int64_t, int thread) {
      if (thread != 0) std::this_thread::sleep_for(milliseconds(5));
    });
  }
  EXPECT_EQ(none.WaitSeconds(StepPart::kProducts), 0.0);
}

}  // namespace
}  // namespace kvpack
