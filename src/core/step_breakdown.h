// Where a forward pass's time goes on the calling thread (`kvpack bench --breakdown`): the
// forward pass marks its parts (weight products, attention, the cache's appends and eviction)
// with StepPartTimer, and ThreadPool::ParallelFor reports the calling thread's waits for its
// workers inside them (AddPoolWait). Everything is a no-op, one thread-local pointer test per
// mark, unless a StepBreakdownScope is active on the thread: a benchmark activates one around
// the steps it times. The rest of a step (norms, RoPE, activations' quantization, sampling's
// logits copy) is the step's time less its parts.
// Non-goals: the workers' own time (their chunks run inside the calling thread's parts),
// nested parts (an inner timer's time is counted by the outer one only).
#ifndef KVPACK_CORE_STEP_BREAKDOWN_H_
#define KVPACK_CORE_STEP_BREAKDOWN_H_

#include <chrono>

namespace kvpack {

enum class StepPart { kProducts, kAttention, kAppend };
inline constexpr int kStepParts = 3;

struct StepBreakdown {
  double seconds[kStepParts] = {};       // wall time of each part on the calling thread
  double wait_seconds[kStepParts] = {};  // of which waiting for the pool's workers
  double Seconds(StepPart p) const { return seconds[static_cast<int>(p)]; }
  double WaitSeconds(StepPart p) const { return wait_seconds[static_cast<int>(p)]; }
  double PartsSeconds() const;  // the sum of the parts
};

// Makes `b` the calling thread's active breakdown for the scope's lifetime (the previous one,
// if any, is restored after).
class StepBreakdownScope {
 public:
  explicit StepBreakdownScope(StepBreakdown* b);
  ~StepBreakdownScope();
  StepBreakdownScope(const StepBreakdownScope&) = delete;
  StepBreakdownScope& operator=(const StepBreakdownScope&) = delete;

 private:
  StepBreakdown* previous_;
};

// Adds its lifetime to part `p` of the thread's active breakdown, if there is one and no
// other part is being timed on the thread. The breakdown must outlive the timer.
class StepPartTimer {
 public:
  explicit StepPartTimer(StepPart p);
  ~StepPartTimer();
  StepPartTimer(const StepPartTimer&) = delete;
  StepPartTimer& operator=(const StepPartTimer&) = delete;

 private:
  StepBreakdown* target_ = nullptr;
  int part_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// Whether the calling thread is inside a timed part (ThreadPool times its waits only then).
bool StepPartActive();
// Adds `seconds` of waiting for workers to the part being timed on the calling thread.
void AddPoolWait(double seconds);

}  // namespace kvpack

#endif  // KVPACK_CORE_STEP_BREAKDOWN_H_
