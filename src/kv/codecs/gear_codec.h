// GEAR and GEAR-L (METHODS.md 1.7; Kang et al., "GEAR: An Efficient KV Cache Compression
// Recipe for Near-Lossless Generative Inference of LLM", 2024, Algorithms 1 and 2):
// quantization backbone + per-head low-rank approximation of its error (+ exact outliers).
//
// For each block X [n, n_kv_heads, head_dim] of one layer's keys (or values):
//   1. S: outliers (gear only; gear_outliers.h: per (head, channel) over the block for keys,
//      per token over all heads for values, fraction `sparsity`, top and bottom halves);
//   2. D^ = Q_b(X with each outlier clamped into its group's kept range, so that outliers
//      never set a group's min/max) by the backbone;
//   3. L_h = A_h B_h^T ~ R_h = X_h - D^_h (zero at outliers), per KV head, by seeded power
//      iteration with QR (lowrank.h), A_h [n, r], B_h [head_dim, r] stored in fp16;
//   4. at each outlier S holds X - D^ - L in fp16, so X^ = D^ + L + S gives the outlier back
//      (to the fp16 rounding of that difference) wherever the backbone put it.
// gear-l is the same without step 1 and 4.
//
// Blocks and streaming (Algorithm 1): the first Append with tokens (the prompt, any length)
// is compressed at once as one block with rank `rank_prefill`. Later tokens collect in an
// fp16 buffer shared by the heads; when it holds `buffer` (n_b) tokens they are compressed as
// one block with rank `rank_decode` and the buffer is emptied. Compressed blocks are never
// touched again (no re-compression). Appending after the prompt one token at a time or in
// chunks gives the same stored form. Attention reads buffered tokens in full precision.
// A chunked prefill (n_batch < prompt) makes only its first chunk the prompt block; the rest
// is compressed in n_b-token blocks with rank_decode.
// Every block is compressed from its fp16-rounded values (the cache GEAR measures against).
//
// Backbone: a store of a registered quantization codec, created through the registry and fed
// whole blocks; GEAR only decides how a block is fed so that each block is quantized on its
// own and stored in final form at once (checked after every block):
//   backbone=kivi:    keys: `kcvt:buffer=1` fed `group` tokens at a time = KIVI's per-channel
//                     groups of G consecutive tokens (a block of n tokens has ceil(n/G)
//                     groups, the last one shorter; KIVI's own codec cannot be used: its
//                     residual rules keep up to R tokens in fp16 and would quantize them
//                     later, after L had been fitted to the backbone's error);
//                     values: `flexgen:group=G` = KIVI's per-token groups of G channels;
//   backbone=kcvt:    `kcvt:buffer=1` fed the whole block (per-channel keys over the block,
//                     per-token values across all heads);
//   backbone=flexgen: `flexgen:group=G` (per-token groups of G channels).
// Levels are 2^b - 1 (the shared quantizer of METHODS.md 0; not GEAR code's b*b - 1).
//
// Fused attention never builds X^: q.K^T = q.D^ (the backbone's fused kernel) + (q.B_h).A_h^T
// + q.S; p.V = p.D^ + (p.A_h).B_h^T + p.S (gear_parts.h). The four parts can be timed on
// their own (ScoresOf / AccumulateOf; bench/gear_breakdown_bench.cc).
//
// Eviction (Retain): a compressed token that is evicted loses its row of A_h, its entries of
// S and its backbone codes (the backbone's own Retain: group parameters stay while a group
// has survivors); B_h stays while its block has a survivor, so the survivors decode exactly
// as before. A buffered token evicted from every head is freed at once; one evicted from some
// heads only stays in the shared buffer (each head keeps a list of its rows) until the block
// is compressed, and is then dropped from those heads' compressed block.
// per_head_retain() is the backbone's (false for KCVT values, whose groups span heads).
//
// Spec `gear:bits=2|4|8,backbone=kivi|kcvt|flexgen,group=64,sparsity=0.02,rank_prefill=4,
// rank_decode=2,iters=3,buffer=n_b` and `gear-l:` the same without sparsity. Defaults:
// backbone kivi for 2 bits, kcvt otherwise; group 64 (kivi, flexgen only); n_b 64 with kivi,
// 20 otherwise; sparsity in [0, 0.5]; ranks in [0, 64] (clamped to the block's n and
// head_dim); iters in [1, 64].
#ifndef KVPACK_KV_CODECS_GEAR_CODEC_H_
#define KVPACK_KV_CODECS_GEAR_CODEC_H_

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kv/codecs/fp16_rows.h"
#include "kv/codecs/gear_outliers.h"
#include "kv/codecs/gear_parts.h"
#include "kv/codecs/quant_common.h"
#include "kv/component_store.h"
#include "kv/spec.h"

namespace kvpack {

struct GearConfig {
  bool sparse = true;              // gear (true) or gear-l (false)
  int bits = 2;
  std::string backbone = "kivi";   // kivi | kcvt | flexgen
  int group = 64;                  // kivi and flexgen backbones
  double sparsity = 0.02;          // gear only
  int rank_prefill = 4;
  int rank_decode = 2;
  int iters = 3;
  int buffer = 64;                 // n_b

  std::string ToSpec() const;      // canonical spec string
};

// Reads a `gear` or `gear-l` spec (spec.name decides), validating every parameter.
Result<GearConfig> ParseGearConfig(const MethodSpec& spec);

// The parts of the fused attention kernels (the paper's Figure 3a breakdown).
enum class GearPart {
  kQuantized,  // backbone codes of compressed tokens (Scores writes, Accumulate adds)
  kLowRank,    // (q.B).A^T / (p.A).B^T (adds)
  kSparse,     // outlier entries (adds)
  kBuffer,     // fp16 streaming buffer (Scores writes, Accumulate adds)
};

class GearStore final : public ComponentStore {
 public:
  static Result<std::unique_ptr<GearStore>> Create(const GearConfig& config,
                                                   const StoreShape& shape);

  std::string spec() const override { return config_.ToSpec(); }
  Status Append(const float* rows, int64_t n_tokens) override;
  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    return CheckQuantRows(rows, n_tokens, shape_);
  }
  int64_t n_tokens(int head) const override { return n_compressed(head) + n_buffered(head); }
  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override;
  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override;
  // The backbone's compressed tokens and the corrections (the buffer rows are gathered per
  // call, so they are not asked for).
  void Prefetch(int head, int64_t t0, int64_t t1) const override {
    const int64_t split = std::clamp(n_compressed(head), t0, t1);
    if (split > t0) backbone_->Prefetch(head, t0, split);
    PrefetchCorrections(head, t0, t1);
  }
  void Decode(int head, int64_t t0, int64_t t1, float* out) const override;
  Status Retain(int head, std::span<const int64_t> keep) override;
  bool per_head_retain() const override { return backbone_->per_head_retain(); }
  MemoryUsage Memory() const override;

  // One part of Scores / Accumulate over tokens [t0, t1) (same arguments).
  void ScoresOf(GearPart part, int head, const float* q, int n_q, int64_t t0, int64_t t1,
                float* scores) const;
  void AccumulateOf(GearPart part, int head, const float* p, int n_q, int64_t t0, int64_t t1,
                    float* out) const;

  const GearConfig& config() const { return config_; }
  int64_t n_compressed(int head) const { return backbone_->n_tokens(head); }
  int64_t n_buffered(int head) const;
  int64_t n_blocks(int head) const { return lowrank_[head].n_blocks(); }
  int64_t n_outliers(int head) const { return sparse_[head].n_entries(); }
  // The outliers of compressed tokens [t0, t1) (row = token), sorted by (row, channel);
  // none for gear-l.
  std::vector<OutlierEntry> OutliersOf(int head, int64_t t0, int64_t t1) const {
    return sparse_[head].EntriesOf(t0, std::min(t1, n_compressed(head)));
  }
  // The outlier layout's bytes besides the entries (part of Memory().other_bytes).
  size_t outlier_index_bytes(int head) const { return sparse_[head].index_bytes(); }

 private:
  GearStore(const GearConfig& config, const StoreShape& shape,
            std::unique_ptr<ComponentStore> backbone);

  bool is_key() const { return shape_.component == KvComponent::kKey; }
  // x: [n, n_kv_heads, head_dim], fp16-exact. Compresses it as one block of every head.
  void CompressBlock(const float* x, int64_t n, int rank);
  // Asks for the start of the low-rank factors and outlier cells that tokens [t0, t1) read,
  // so that they arrive while the backbone computes (ops/prefetch.h).
  void PrefetchCorrections(int head, int64_t t0, int64_t t1) const {
    const int64_t split = std::clamp(n_compressed(head), t0, t1);
    lowrank_[head].PrefetchStart(t0, split);
    sparse_[head].PrefetchStart(t0, split);
  }
  // Compresses the buffer (n_b rows) and drops the rows some heads had evicted.
  void FlushBuffer();
  // Retain on the compressed tokens of one head (indices < n_compressed(head)).
  void RetainCompressed(int head, std::span<const int64_t> keep);
  // Frees buffer rows that no head uses; renumbers the heads' row lists.
  void CompactBuffer();
  // The head's buffered rows [k0, k1) as one [k1 - k0, head_dim] fp16 block (thread-local).
  const uint16_t* BufferRowsOf(int head, int64_t k0, int64_t k1) const;
  int64_t BufferRow(int head, int64_t k) const {
    return buffer_maps_.empty() ? k : buffer_maps_[head][k];
  }

  GearConfig config_;
  StoreShape shape_;
  std::unique_ptr<ComponentStore> backbone_;  // compressed tokens' D^ [n_compressed(h), d]
  BackboneGroups groups_;                     // the backbone's quantization groups
  int64_t feed_run_;                          // tokens per backbone Append within a block
  std::vector<LowRankBlocks> lowrank_;        // per head: A_h, B_h of each block
  std::vector<SparseOutliers> sparse_;        // per head: S entries (gear only)
  Fp16Rows buffer_;                           // [n_buffer_rows, n_kv_heads * head_dim] fp16
  std::vector<std::vector<int64_t>> buffer_maps_;  // [n_kv_heads][n_buffered(h)] rows, or
                                                   // empty: every head holds every row
  bool prompt_done_ = false;
  uint64_t n_blocks_made_ = 0;  // seeds the power iteration of each block
};

// Registry entry points (codec_registry.cc).
Result<std::unique_ptr<ComponentStore>> MakeGearStore(const MethodSpec& spec,
                                                      const StoreShape& shape);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_GEAR_CODEC_H_
