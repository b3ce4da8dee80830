// GEAR's outlier filter S = Filter_s(X) (METHODS.md 1.7 step 1; Kang et al. 2024, eq. 4) and
// the way outliers are kept out of the backbone quantizer's min/max.
//
// Filter: keys, per (KV head, channel) over the block's tokens; values, per token over its
// n_kv_heads * head_dim entries. In each such set of m entries the top and the bottom
// OutliersPerSide(s, m) = min(round(s/2 * m), (m - 1) / 2) entries are outliers (so a set
// never loses all its entries; a set smaller than 1 / s may have none). Ties are broken by
// position, so the selection is deterministic.
//
// Exclusion from min/max: the backbone's groups (BackboneGroups) are known; inside each
// group every outlier is clamped into the range of the group's kept entries before
// quantization, which leaves the group's min and max those of its kept entries (a group made
// only of outliers becomes constant 0, range 0). Zeroing the outliers (the paper's X - S)
// would widen a group whose values all have one sign. What the backbone then reconstructs at
// an outlier position is corrected by S (gear_codec.h); clamping, rather than any other
// in-range value, keeps that correction, and so its fp16 rounding, smallest.
#ifndef KVPACK_KV_CODECS_GEAR_OUTLIERS_H_
#define KVPACK_KV_CODECS_GEAR_OUTLIERS_H_

#include <cstdint>

#include "kv/component_store.h"

namespace kvpack {

int64_t OutliersPerSide(double sparsity, int64_t m);

// x: [n, n_heads, head_dim]; mask: [n, n_heads, head_dim], set to 1 at outliers, 0 elsewhere.
void SelectOutliers(const float* x, int64_t n, int n_heads, int head_dim, KvComponent component,
                    double sparsity, uint8_t* mask);

// The groups of a backbone quantizer over a block [n, n_heads, head_dim].
struct BackboneGroups {
  enum class Kind {
    kTokenRunsPerChannel,  // per (head, channel): runs of `run` consecutive tokens
    kChannelRunsPerToken,  // per token: runs of `run` consecutive channels within a head
    kWholeTokenRow,        // per token: all n_heads * head_dim entries (KCVT values)
  };
  Kind kind = Kind::kChannelRunsPerToken;
  int64_t run = 1;  // tokens or channels per group (the last one of a block/head may be shorter)
};

// y = x with, in every backbone group, each masked entry clamped into [min, max] of the
// group's unmasked entries (0 when the whole group is masked). x, mask, y: [n, n_heads,
// head_dim].
void SubstituteOutliers(const float* x, const uint8_t* mask, int64_t n, int n_heads,
                        int head_dim, const BackboneGroups& groups, float* y);

}  // namespace kvpack

#endif  // KVPACK_KV_CODECS_GEAR_OUTLIERS_H_
