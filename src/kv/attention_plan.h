// How one Attend call (kv/attention.h) divides its work among the pool's threads: work
// items (a KV head's query-row block over one segment of its cached tokens) grouped into
// shares, each share run by one thread, item after item.
//
// Design goals: the plan depends only on the heads' token counts (and the stores' layout, by
// their cost model), the chunk's rows and the thread count, never on which thread runs what,
// so one thread count always gives the same bits; a decode step's shares hold equal costs
// (equal tokens for stores that read every token alike) whether or not the KV heads divide
// among the threads. Non-goals: timing-driven balance (the shares are fixed, not
// stolen: docs/performance-history.md, sessions 45 and 48, tried and measured both).
#ifndef KVPACK_KV_ATTENTION_PLAN_H_
#define KVPACK_KV_ATTENTION_PLAN_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace kvpack {

// Query rows per work item.
constexpr int64_t kAttentionRowBlock = 16;
// Shortest token segment worth its own item when a prompt chunk's row blocks are split.
constexpr int64_t kAttentionMinSegment = 512;
// Shortest part of a head that a decode step's share boundary cuts off; a boundary closer
// than this to a head's start or end moves there. At 512 tokens SmolLM2's 3 KV heads on 2
// threads are cut into shares of equal cost (half a head is 264 tokens): the attention's
// wall time a layer fell 2.5 to 4 us for f16 and KIVI-2/4/8 against two whole heads and one
// (docs/performance-history.md, session 51; with session 49's pool, token-even pieces of 264
// had cost KIVI-8 more than the balance saved, so the minimum was 512 until then).
constexpr int64_t kAttentionMinPiece = 128;

struct AttentionWorkItem {
  int kv_head = 0;
  int64_t row0 = 0, row1 = 0;  // query rows of the chunk
  int64_t t0 = 0, t1 = 0;      // cached token segment of the head
  bool fresh = false;          // the head's last segment: also attends to the chunk's own K/V
};

struct AttentionPlan {
  // In the order (KV head, row block, segment) that the merge of segments walks.
  std::vector<AttentionWorkItem> items;
  // [n_shares + 1]: share s is items share_first[s] .. share_first[s + 1] - 1.
  std::vector<int64_t> share_first;
  // [n_kv]: the segments of each head in every row block.
  std::vector<int> n_segments;
};

// The cost of reading head g's tokens [0, t) (kv/attention.cc: the keys' plus the values'
// ComponentStore::ReadCost), non-decreasing in t, in any unit common to the heads.
using HeadReadCost = std::function<double(int g, int64_t t)>;

// n_cached[g]: the tokens cached for KV head g; n_rows >= 1 query rows; n_threads >= 1.
// A chunk of at most kAttentionRowBlock rows (a decode step) lays the heads' tokens end to
// end and cuts them into one share of equal cost per thread (equal tokens when `cost` is
// empty; boundaries moved to a head's edge within kAttentionMinPiece tokens); longer chunks
// make every (head, row block) an item and its own share, with segments of at least
// kAttentionMinSegment tokens when there are fewer such items than twice the threads. Every
// head gets at least one item, even with no tokens.
AttentionPlan PlanAttention(std::span<const int64_t> n_cached, int64_t n_rows, int n_threads,
                            const HeadReadCost& cost = {});
// The same into `plan`, whose vectors keep their capacity (Attend's plan of every call).
void PlanAttention(std::span<const int64_t> n_cached, int64_t n_rows, int n_threads,
                   const HeadReadCost& cost, AttentionPlan& plan);

}  // namespace kvpack

#endif  // KVPACK_KV_ATTENTION_PLAN_H_
