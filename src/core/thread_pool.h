// A small fork-join thread pool (Highway 1.0.3 ships none).
//
// Design goals: ParallelFor over a range cut into fixed contiguous blocks, the same for the
// same (n, grain, thread count), so that results are deterministic; the calling thread takes
// part; low latency for the ~150 fork-joins of one decode step: workers spin briefly on an
// atomic generation counter before sleeping on a condition variable.
// Every thread owns an equal contiguous run of blocks (a share) and claims its blocks from
// the front, in order, so that it streams its share as one piece; a thread whose share is
// done claims the blocks of other shares from their backs. Two halves of one decode product
// differ by about a tenth from call to call (memory latency, a worker that starts late; the
// caller used to wait for the slower half, docs/performance-history.md, session 50); with
// kBlocksPerShare blocks per share the faster thread takes over the slower one's last blocks.
// A worker that has not been scheduled yet (more runnable threads than cores) is covered the
// same way. Which thread runs a block may vary; the block boundaries never do.
// Non-goals: general work stealing, nested parallelism, task graphs.
#ifndef KVPACK_CORE_THREAD_POOL_H_
#define KVPACK_CORE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace kvpack {

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // A share of at least this many grains is cut into this many blocks (fewer grains: one
  // block per grain).
  static constexpr int kBlocksPerShare = 8;

  // Calls fn(begin, end, thread_index) on disjoint contiguous blocks covering [0, n), whose
  // boundaries are multiples of `grain` (Job::BlockStart below). Blocks until all are done.
  // thread_index < n_threads() identifies the executing thread (for per-thread scratch); a
  // thread may run several blocks one after the other, never two at once.
  void ParallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn);

 private:
  // Where the blocks of a job start: share t covers grains [t * g / T, (t + 1) * g / T) of
  // the g = ceil(n / grain) grains, cut into min(kBlocksPerShare, its grains) blocks of
  // near-equal grains; block b of share t is [BlockStart(t, b), BlockStart(t, b + 1)).
  struct Job {
    const FunctionRef<void(int64_t, int64_t, int)>* fn = nullptr;
    int64_t n = 0;
    int64_t grain = 0;
    int64_t n_grains = 0;
    uint32_t generation = 0;
    int n_shares = 0;
    int64_t ShareGrain(int t) const { return t * n_grains / n_shares; }
    int BlocksOf(int t) const;
    int64_t BlockStart(int t, int b) const;  // an element index, <= n
  };
  // A share's unclaimed blocks [front, back), tagged with the job's generation so that a late
  // worker can never claim a newer job's block with an older job's function:
  // (generation << 32) | (front << 16) | back. One cache line each.
  struct alignas(64) ShareClaims {
    std::atomic<uint64_t> word{0};
  };

  void WorkerLoop(int index);
  // Runs blocks of `job` (its own share's from the front, then others' from the back) until
  // none of its generation is left to claim; returns how many it ran.
  uint32_t RunBlocks(const Job& job, int thread_index);
  // Claims share `share`'s front block (its owner's next) or its back one into *block.
  bool Claim(const Job& job, int share, bool from_back, int* block);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  Job job_;  // the current job, written under mu_ before generation_ moves
  std::atomic<uint64_t> generation_{0};
  std::vector<ShareClaims> claims_;  // [n_threads]
  std::atomic<uint32_t> done_{0};    // blocks of the current job finished
  std::atomic<bool> stop_{false};
};

}  // namespace kvpack

#endif  // KVPACK_CORE_THREAD_POOL_H_
