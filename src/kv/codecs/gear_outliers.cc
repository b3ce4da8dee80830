#include "kv/codecs/gear_outliers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kvpack {
namespace {

// SetExtremes keeps up to this many per side; beyond, MarkExtremesBySelection.
constexpr int64_t kMaxInsertionK = 16;

// An entry of a set and its position in the block; ordered by (value, position), a total
// order, so the marked set is unique.
struct Entry {
  float v;
  int64_t p;
  bool operator<(const Entry& o) const { return v < o.v || (v == o.v && p < o.p); }
};

// The k smallest and the k largest entries offered to one set, by (value, position), for
// entries offered in increasing position (so a newcomer is larger than every entry of equal
// value already kept). Both lists stay sorted ascending; a newcomer is compared with one
// boundary entry and only rarely moves others (a random order renews the boundary about
// k ln(m / k) times in m offers; a sorted one at every offer, hence kMaxInsertionK), so a set
// costs one pass and no copy of its entries. The lists live in the caller's storage
// (2 k entries per set), so the sets of a block share one allocation.
class SetExtremes {
 public:
  SetExtremes(int64_t k, Entry* storage) : k_(k), lo_(storage), hi_(storage + k) {}
  void Clear() { n_lo_ = n_hi_ = 0; }

  void Offer(float v, int64_t p) {
    if (n_lo_ < k_ || v < lo_[k_ - 1].v) {  // into the k smallest; the largest leaves
      int64_t i = n_lo_ < k_ ? n_lo_++ : k_ - 1;
      for (; i > 0 && lo_[i - 1].v > v; --i) lo_[i] = lo_[i - 1];
      lo_[i] = {v, p};
    }
    if (n_hi_ < k_) {  // filling: insert in order
      int64_t i = n_hi_++;
      for (; i > 0 && hi_[i - 1].v > v; --i) hi_[i] = hi_[i - 1];
      hi_[i] = {v, p};
    } else if (v >= hi_[0].v) {  // into the k largest; the smallest leaves
      int64_t i = 0;
      for (; i + 1 < k_ && hi_[i + 1].v <= v; ++i) hi_[i] = hi_[i + 1];
      hi_[i] = {v, p};
    }
  }

  void Mark(uint8_t* mask) const {
    for (int64_t i = 0; i < n_lo_; ++i) mask[lo_[i].p] = 1;
    for (int64_t i = 0; i < n_hi_; ++i) mask[hi_[i].p] = 1;
  }

 private:
  int64_t k_, n_lo_ = 0, n_hi_ = 0;
  Entry* lo_;  // [k] ascending: the k smallest
  Entry* hi_;  // [k] ascending: the k largest
};

// Marks the k smallest and k largest of the m entries x[first + j * stride] (j < m) by
// nth_element: for k above kMaxInsertionK, where SetExtremes' insertions (up to k moves per
// offer on sorted input) would cost more. The entries are first copied next to their
// positions (a key column is strided across the block; selecting through the indices
// missed the cache at every comparison).
void MarkExtremesBySelection(const float* x, int64_t first, int64_t stride, int64_t m,
                             int64_t k, uint8_t* mask) {
  thread_local std::vector<Entry> e;
  e.resize(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) e[j] = {x[first + j * stride], first + j * stride};
  std::nth_element(e.begin(), e.begin() + k, e.end());       // [0, k): the k smallest
  std::nth_element(e.begin() + k, e.end() - k, e.end());     // [m - k, m): the k largest
  for (int64_t j = 0; j < k; ++j) mask[e[j].p] = 1;
  for (auto it = e.end() - k; it != e.end(); ++it) mask[it->p] = 1;
}

// Clamps the masked entries among x[first + j * stride], j < m (one backbone group), into
// the range of the group's unmasked entries, in y.
void FillGroup(const float* x, const uint8_t* mask, int64_t first, int64_t stride, int64_t m,
               float* y) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  bool any_masked = false;
  for (int64_t j = 0, p = first; j < m; ++j, p += stride) {
    if (mask[p]) {
      any_masked = true;
    } else {
      lo = std::min(lo, x[p]);
      hi = std::max(hi, x[p]);
    }
  }
  if (!any_masked) return;
  const bool none_kept = lo > hi;
  for (int64_t j = 0, p = first; j < m; ++j, p += stride) {
    if (mask[p]) y[p] = none_kept ? 0.0f : std::clamp(x[p], lo, hi);
  }
}

}  // namespace

int64_t OutliersPerSide(double sparsity, int64_t m) {
  if (m <= 0 || sparsity <= 0.0) return 0;
  return std::min<int64_t>(std::llround(sparsity / 2 * static_cast<double>(m)), (m - 1) / 2);
}

void SelectOutliers(const float* x, int64_t n, int n_heads, int head_dim, KvComponent component,
                    double sparsity, uint8_t* mask) {
  const int64_t row_len = static_cast<int64_t>(n_heads) * head_dim;
  std::memset(mask, 0, static_cast<size_t>(n * row_len));
  const bool keys = component == KvComponent::kKey;
  const int64_t k = OutliersPerSide(sparsity, keys ? n : row_len);
  if (k == 0) return;
  if (k > kMaxInsertionK) {
    for (int64_t set = 0; set < (keys ? row_len : n); ++set) {
      if (keys) {  // (head, channel) over the tokens
        MarkExtremesBySelection(x, set, row_len, n, k, mask);
      } else {  // a token's entries
        MarkExtremesBySelection(x, set * row_len, 1, row_len, k, mask);
      }
    }
    return;
  }
  if (keys) {
    // One set per (head, channel), all offered token by token: the block is read in order.
    std::vector<Entry> storage(static_cast<size_t>(row_len * 2 * k));
    std::vector<SetExtremes> sets;
    sets.reserve(static_cast<size_t>(row_len));
    for (int64_t col = 0; col < row_len; ++col) sets.emplace_back(k, &storage[col * 2 * k]);
    for (int64_t t = 0; t < n; ++t) {
      const float* row = x + t * row_len;
      for (int64_t col = 0; col < row_len; ++col) sets[col].Offer(row[col], t * row_len + col);
    }
    for (const SetExtremes& set : sets) set.Mark(mask);
  } else {
    std::vector<Entry> storage(static_cast<size_t>(2 * k));
    SetExtremes set(k, storage.data());
    for (int64_t t = 0; t < n; ++t) {
      set.Clear();
      for (int64_t j = 0; j < row_len; ++j) set.Offer(x[t * row_len + j], t * row_len + j);
      set.Mark(mask);
    }
  }
}

void SubstituteOutliers(const float* x, const uint8_t* mask, int64_t n, int n_heads,
                        int head_dim, const BackboneGroups& groups, float* y) {
  const int64_t row_len = static_cast<int64_t>(n_heads) * head_dim;
  std::memcpy(y, x, static_cast<size_t>(n * row_len) * sizeof(float));
  switch (groups.kind) {
    case BackboneGroups::Kind::kTokenRunsPerChannel:
      for (int64_t col = 0; col < row_len; ++col) {
        for (int64_t t0 = 0; t0 < n; t0 += groups.run) {
          FillGroup(x, mask, t0 * row_len + col, row_len, std::min(groups.run, n - t0), y);
        }
      }
      break;
    case BackboneGroups::Kind::kChannelRunsPerToken:
      for (int64_t t = 0; t < n; ++t) {
        for (int h = 0; h < n_heads; ++h) {
          for (int64_t c0 = 0; c0 < head_dim; c0 += groups.run) {
            FillGroup(x, mask, t * row_len + h * head_dim + c0, 1,
                      std::min<int64_t>(groups.run, head_dim - c0), y);
          }
        }
      }
      break;
    case BackboneGroups::Kind::kWholeTokenRow:
      for (int64_t t = 0; t < n; ++t) FillGroup(x, mask, t * row_len, 1, row_len, y);
      break;
  }
}

}  // namespace kvpack
