// A small fork-join thread pool (Highway 1.0.3 ships none).
//
// Design goals: ParallelFor over a range split into fixed contiguous chunks (one per thread),
// so that the same thread count always splits work the same way (deterministic results);
// the calling thread takes part; low latency for the ~200 fork-joins of one decode step:
// workers spin briefly on an atomic generation counter before sleeping on a condition
// variable. Chunks are claimed, not assigned: when a worker has not been scheduled yet (more
// runnable threads than cores, e.g. a build running beside us) the caller runs its chunk
// instead of waiting a whole scheduler quantum for it. Which thread runs a chunk may vary;
// the chunk boundaries never do.
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
  // thread_index < n_threads() identifies the executing thread (for per-thread scratch); a
  // thread may run several chunks one after the other.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  struct Job {
    const std::function<void(int64_t, int64_t, int)>* fn = nullptr;
    int64_t n = 0;
    int64_t chunk = 0;
    uint32_t n_chunks = 0;
    uint32_t generation = 0;
  };
  // Runs chunks of `job` until none of its generation is left to claim.
  void RunChunks(const Job& job, int thread_index);

  Job job_;  // the current job, written under mu_ before generation_ moves
  std::atomic<uint64_t> generation_{0};
  // (generation << 32) | next unclaimed chunk: a claim is valid only for its own generation,
  // so a late worker can never run a newer job's chunk with an older job's function.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint32_t> done_{0};  // chunks of the current job finished
  std::atomic<bool> stop_{false};
};

}  // namespace kvpack

#endif  // KVPACK_CORE_THREAD_POOL_H_
