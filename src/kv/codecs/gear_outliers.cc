#include "kv/codecs/gear_outliers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kvpack {
namespace {

// Marks the k smallest and k largest of the m entries x[pos[j]] (j < m), ties by position
// (a total order, so the marked set is unique). The entries are first copied next to their
// positions (a key column is strided across the block; selecting through the indices missed
// the cache at every comparison); k = 1, the common case (2% of a 64-token block), is one
// pass.
void MarkExtremes(const float* x, std::vector<int64_t>& pos, int64_t k, uint8_t* mask) {
  if (k == 0) return;
  struct Entry {
    float v;
    int64_t p;
    bool operator<(const Entry& o) const { return v < o.v || (v == o.v && p < o.p); }
  };
  thread_local std::vector<Entry> e;
  e.resize(pos.size());
  for (size_t j = 0; j < pos.size(); ++j) e[j] = {x[pos[j]], pos[j]};
  if (k == 1) {
    size_t lo = 0, hi = 0;
    for (size_t j = 1; j < e.size(); ++j) {
      if (e[j] < e[lo]) lo = j;
      if (e[hi] < e[j]) hi = j;
    }
    mask[e[lo].p] = 1;
    mask[e[hi].p] = 1;  // distinct from lo: m >= 2k + 1 entries
    return;
  }
  std::nth_element(e.begin(), e.begin() + k, e.end());       // [0, k): the k smallest
  std::nth_element(e.begin() + k, e.end() - k, e.end());     // [m - k, m): the k largest
  for (int64_t j = 0; j < k; ++j) mask[e[j].p] = 1;
  for (auto it = e.end() - k; it != e.end(); ++it) mask[it->p] = 1;
}

// Clamps the masked entries among x[pos[j]], j < m (one backbone group), into the range of
// the group's unmasked entries, in y.
void FillGroup(const float* x, const uint8_t* mask, const int64_t* pos, int64_t m, float* y) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  bool any_masked = false;
  for (int64_t j = 0; j < m; ++j) {
    if (mask[pos[j]]) {
      any_masked = true;
    } else {
      lo = std::min(lo, x[pos[j]]);
      hi = std::max(hi, x[pos[j]]);
    }
  }
  if (!any_masked) return;
  const bool none_kept = lo > hi;
  for (int64_t j = 0; j < m; ++j) {
    if (mask[pos[j]]) y[pos[j]] = none_kept ? 0.0f : std::clamp(x[pos[j]], lo, hi);
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
  std::vector<int64_t> pos;
  if (component == KvComponent::kKey) {
    const int64_t k = OutliersPerSide(sparsity, n);
    if (k == 0) return;
    pos.resize(n);
    for (int64_t col = 0; col < row_len; ++col) {  // (head, channel)
      for (int64_t t = 0; t < n; ++t) pos[t] = t * row_len + col;
      MarkExtremes(x, pos, k, mask);
    }
  } else {
    const int64_t k = OutliersPerSide(sparsity, row_len);
    if (k == 0) return;
    pos.resize(row_len);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < row_len; ++j) pos[j] = t * row_len + j;
      MarkExtremes(x, pos, k, mask);
    }
  }
}

void SubstituteOutliers(const float* x, const uint8_t* mask, int64_t n, int n_heads,
                        int head_dim, const BackboneGroups& groups, float* y) {
  const int64_t row_len = static_cast<int64_t>(n_heads) * head_dim;
  std::memcpy(y, x, static_cast<size_t>(n * row_len) * sizeof(float));
  std::vector<int64_t> pos;
  switch (groups.kind) {
    case BackboneGroups::Kind::kTokenRunsPerChannel:
      for (int64_t col = 0; col < row_len; ++col) {
        for (int64_t t0 = 0; t0 < n; t0 += groups.run) {
          const int64_t m = std::min(groups.run, n - t0);
          pos.resize(m);
          for (int64_t j = 0; j < m; ++j) pos[j] = (t0 + j) * row_len + col;
          FillGroup(x, mask, pos.data(), m, y);
        }
      }
      break;
    case BackboneGroups::Kind::kChannelRunsPerToken:
      for (int64_t t = 0; t < n; ++t) {
        for (int h = 0; h < n_heads; ++h) {
          for (int64_t c0 = 0; c0 < head_dim; c0 += groups.run) {
            const int64_t m = std::min<int64_t>(groups.run, head_dim - c0);
            pos.resize(m);
            for (int64_t j = 0; j < m; ++j) pos[j] = t * row_len + h * head_dim + c0 + j;
            FillGroup(x, mask, pos.data(), m, y);
          }
        }
      }
      break;
    case BackboneGroups::Kind::kWholeTokenRow:
      pos.resize(row_len);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < row_len; ++j) pos[j] = t * row_len + j;
        FillGroup(x, mask, pos.data(), row_len, y);
      }
      break;
  }
}

}  // namespace kvpack
