#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/step_breakdown.h"

namespace kvpack {
namespace {

// How long an idle worker spins before it sleeps: long enough to bridge the gaps between
// the fork-joins of one forward pass, short enough not to burn a core between requests.
constexpr auto kSpinTime = std::chrono::microseconds(200);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), claims_(static_cast<size_t>(n_threads_)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::Job::BlocksOf(int t) const {
  return static_cast<int>(std::min<int64_t>(kBlocksPerShare, ShareGrain(t + 1) - ShareGrain(t)));
}

int64_t ThreadPool::Job::BlockStart(int t, int b) const {
  const int64_t g0 = ShareGrain(t), g = ShareGrain(t + 1) - g0;
  return std::min(n, (g0 + b * g / BlocksOf(t)) * grain);
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  if (n_threads_ == 1 || n_grains == 1) {
    fn(0, n, 0);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  job.grain = grain;
  job.n_grains = n_grains;
  job.n_shares = n_threads_;
  uint32_t n_blocks = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job.generation = static_cast<uint32_t>(generation_.load(std::memory_order_relaxed) + 1);
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    for (int t = 0; t < n_threads_; ++t) {
      const uint64_t blocks = static_cast<uint64_t>(job.BlocksOf(t));
      n_blocks += static_cast<uint32_t>(blocks);
      claims_[t].word.store(static_cast<uint64_t>(job.generation) << 32 | blocks,
                            std::memory_order_relaxed);
    }
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  const uint32_t ran = RunBlocks(job, 0);
  if (done_.fetch_add(ran, std::memory_order_acq_rel) + ran == n_blocks) return;
  // Only blocks that another thread claimed (and is running) remain: spin briefly, then
  // yield, so that a preempted worker gets the core back. The wait is reported to a step
  // breakdown (core/step_breakdown.h) when one is timing a part on this thread.
  const bool timed = StepPartActive();
  const auto wait_start = timed ? std::chrono::steady_clock::now()
                                : std::chrono::steady_clock::time_point{};
  for (int spins = 0; done_.load(std::memory_order_acquire) != n_blocks; ++spins) {
    if (spins < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  if (timed) {
    AddPoolWait(std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start)
                    .count());
  }
}

// A claim is a compare-and-swap on the share's word, valid only while the word carries the
// job's generation and front < back: the front block (the owner's next) or the back one.
bool ThreadPool::Claim(const Job& job, int share, bool from_back, int* block) {
  std::atomic<uint64_t>& word = claims_[share].word;
  uint64_t w = word.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t front = (w >> 16) & 0xffff, back = w & 0xffff;
    if ((w >> 32) != job.generation || front >= back) return false;
    const uint64_t claimed = from_back ? w - 1 : w + (uint64_t{1} << 16);
    if (word.compare_exchange_weak(w, claimed, std::memory_order_acq_rel)) {
      *block = static_cast<int>(from_back ? back - 1 : front);
      return true;
    }
  }
}

uint32_t ThreadPool::RunBlocks(const Job& job, int thread_index) {
  uint32_t ran = 0;
  int b;
  const auto run = [&](int share) {
    (*job.fn)(job.BlockStart(share, b), job.BlockStart(share, b + 1), thread_index);
    ++ran;
  };
  while (Claim(job, thread_index, false, &b)) run(thread_index);
  for (int k = 1; k < job.n_shares; ++k) {
    const int share = (thread_index + k) % job.n_shares;
    while (Claim(job, share, true, &b)) run(share);
  }
  return ran;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin first, then sleep until a new generation (or stop) arrives.
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load() &&
           std::chrono::steady_clock::now() < spin_until) {
      CpuRelax();
    }
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      if (stop_.load()) return;
      seen = generation_.load();
      job = job_;
    }
    const uint32_t ran = RunBlocks(job, index);
    if (ran) done_.fetch_add(ran, std::memory_order_acq_rel);
  }
}

}  // namespace kvpack
