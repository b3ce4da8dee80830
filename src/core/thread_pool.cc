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

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
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

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunk = (n + n_threads_ - 1) / n_threads_;
  chunk = (chunk + grain - 1) / grain * grain;
  if (n_threads_ == 1 || chunk >= n) {
    fn(0, n, 0);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunk = chunk;
  job.n_chunks = static_cast<uint32_t>((n + chunk - 1) / chunk);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job.generation = static_cast<uint32_t>(generation_.load(std::memory_order_relaxed) + 1);
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    ticket_.store(static_cast<uint64_t>(job.generation) << 32, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  RunChunks(job, 0);
  const uint32_t n_chunks = job.n_chunks;
  if (done_.load(std::memory_order_acquire) == n_chunks) return;
  // Only chunks that another thread claimed (and is running) remain: spin briefly, then
  // yield, so that a preempted worker gets the core back. The wait is reported to a step
  // breakdown (core/step_breakdown.h) when one is timing a part on this thread.
  const bool timed = StepPartActive();
  const auto wait_start = timed ? std::chrono::steady_clock::now()
                                : std::chrono::steady_clock::time_point{};
  for (int spins = 0; done_.load(std::memory_order_acquire) != n_chunks; ++spins) {
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

void ThreadPool::RunChunks(const Job& job, int thread_index) {
  const uint64_t tag = static_cast<uint64_t>(job.generation) << 32;
  for (;;) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    uint32_t c;
    do {
      c = static_cast<uint32_t>(t);
      if ((t & ~0xffffffffull) != tag || c >= job.n_chunks) return;
    } while (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel));
    const int64_t begin = static_cast<int64_t>(c) * job.chunk;
    (*job.fn)(begin, std::min(job.n, begin + job.chunk), thread_index);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
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
    RunChunks(job, index);
  }
}

}  // namespace kvpack
