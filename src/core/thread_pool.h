// A small fork-join thread pool (Highway 1.0.3 ships none).
//
// Design goals: ParallelFor over a range with static contiguous chunks, so that the same
// thread count always splits work the same way (deterministic results); the calling thread
// takes part; low latency for the ~200 fork-joins of one decode step: workers spin briefly
// on an atomic generation counter before sleeping on a condition variable.
// Non-goals: work stealing, nested parallelism, task graphs.
#ifndef KVPACK_CORE_THREAD_POOL_H_
#define KVPACK_CORE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvpack {

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) on disjoint contiguous chunks covering [0, n).
  // Chunks are rounded to `grain` elements (except the last). Blocks until all are done.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvpack

#endif  // KVPACK_CORE_THREAD_POOL_H_
