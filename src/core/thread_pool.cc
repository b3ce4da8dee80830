#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

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
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  fn(0, std::min(n, chunk), 0);
  // Spin briefly, then yield: with more runnable threads than cores a pure spin would burn
  // the quantum the preempted worker needs.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
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
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n, chunk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      if (stop_.load()) return;
      seen = generation_.load();
      job = job_;
      n = job_n_;
      chunk = job_chunk_;
    }
    const int64_t begin = index * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*job)(begin, end, index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace kvpack
