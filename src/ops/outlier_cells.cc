// The layout and the twins of ops/outlier_cells.h, and the dispatch to the AVX-512 kernels
// (ops/outlier_cells_avx512.cc).
#include "ops/outlier_cells.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "ops/outlier_cells_avx512.h"

namespace kvpack {
namespace {

// One parsed cell: the lanes' counts in rank order, their ranks and the first entry.
struct Cell {
  int n_rounds = 0;  // the largest count
  std::array<int, kOutlierCellLanes> count{};    // by rank
  std::array<int, kOutlierCellLanes> rank{};     // by lane
  std::array<int, kOutlierCellLanes> lane_at{};  // by rank: inverse of rank
  const uint32_t* entries = nullptr;
  // Lanes in round k: a prefix of the ranking.
  int RoundSize(int k) const {
    int a = 0;
    while (a < kOutlierCellLanes && count[a] > k) ++a;
    return a;
  }
};

Cell ParseCell(OutlierLanes lanes, int d, const uint32_t* words) {
  Cell cell;
  const int count_bytes = OutlierCountBytes(lanes, d);
  const auto* bytes = reinterpret_cast<const uint8_t*>(words);
  for (int l = 0; l < kOutlierCellLanes; ++l) {
    cell.count[l] = count_bytes == 1 ? bytes[l] : bytes[2 * l] | bytes[2 * l + 1] << 8;
  }
  const uint8_t* rank = bytes + kOutlierCellLanes * count_bytes;
  for (int o = 0; o < kOutlierCellLanes; ++o) {
    cell.rank[o] = rank[o];
    cell.lane_at[rank[o]] = o;
  }
  cell.n_rounds = cell.count[0];
  cell.entries = words + OutlierCellHeaderWords(lanes, d);
  return cell;
}

// Appends one cell: lane o's entry words in order in lane_words[o].
void EmitCell(OutlierLanes lanes, int d,
              const std::array<std::vector<uint32_t>, kOutlierCellLanes>& lane_words,
              std::vector<uint32_t>& stream) {
  std::array<int, kOutlierCellLanes> order;
  for (int o = 0; o < kOutlierCellLanes; ++o) order[o] = o;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return lane_words[a].size() > lane_words[b].size();
  });
  const int count_bytes = OutlierCountBytes(lanes, d);
  std::vector<uint8_t> header;
  for (int l = 0; l < kOutlierCellLanes; ++l) {
    const size_t count = lane_words[order[l]].size();
    KVPACK_CHECK(count < (size_t{1} << (8 * count_bytes)));
    header.push_back(static_cast<uint8_t>(count));
    if (count_bytes == 2) header.push_back(static_cast<uint8_t>(count >> 8));
  }
  std::array<uint8_t, kOutlierCellLanes> rank;
  for (int l = 0; l < kOutlierCellLanes; ++l) rank[order[l]] = static_cast<uint8_t>(l);
  header.insert(header.end(), rank.begin(), rank.end());
  const size_t at = stream.size();
  stream.resize(at + header.size() / 4);
  std::memcpy(&stream[at], header.data(), header.size());
  const size_t n_rounds = lane_words[order[0]].size();
  for (size_t k = 0; k < n_rounds; ++k) {
    for (int l = 0; l < kOutlierCellLanes && lane_words[order[l]].size() > k; ++l) {
      stream.push_back(lane_words[order[l]][k]);
    }
  }
}

uint32_t EntryWord(uint16_t value, int64_t other) {
  return value | static_cast<uint32_t>(other) << 16;
}

// x[0..n) rounded to bf16 (the factor every product takes, outlier_cells.h).
std::vector<float> RoundedToBf16(const float* x, size_t n) {
  std::vector<float> y(n);
  for (size_t k = 0; k < n; ++k) y[k] = Bf16ToFp32(Fp32ToBf16(x[k]));
  return y;
}

}  // namespace

void EncodeOutlierSlice(OutlierLanes lanes, int d, int64_t slice,
                        std::span<const OutlierEntry> entries, std::vector<uint32_t>& cell_begin,
                        std::vector<uint32_t>& stream) {
  KVPACK_CHECK(d >= 1 && d <= 0xffff);
  const int64_t slice_rows = OutlierSliceRows(lanes), first = slice * slice_rows;
  const int n_cells = OutlierCellsPerSlice(lanes, d);
  for (int g = 0; g < n_cells; ++g) {
    std::array<std::vector<uint32_t>, kOutlierCellLanes> lane_words;
    for (const OutlierEntry& e : entries) {
      KVPACK_CHECK(e.row >= first && e.row < first + slice_rows && e.channel >= 0 && e.channel < d);
      if (lanes == OutlierLanes::kRows) {
        lane_words[e.row - first].push_back(EntryWord(e.value, e.channel));
      } else if (e.channel / kOutlierCellLanes == g) {
        // Entries sorted by (row, channel) reach each channel's lane sorted by row.
        lane_words[e.channel % kOutlierCellLanes].push_back(EntryWord(e.value, e.row - first));
      }
    }
    KVPACK_CHECK(stream.size() < 0xffffffffu);
    cell_begin.push_back(static_cast<uint32_t>(stream.size()));
    EmitCell(lanes, d, lane_words, stream);
  }
}

void DecodeOutlierCells(OutlierLanes lanes, int d, const uint32_t* stream,
                        const uint32_t* cell_begin, size_t c0, size_t c1,
                        std::vector<OutlierEntry>& out) {
  const size_t first_out = out.size();
  const int n_cells = OutlierCellsPerSlice(lanes, d);
  const int64_t slice_rows = OutlierSliceRows(lanes);
  for (size_t c = c0; c < c1; ++c) {
    const Cell cell = ParseCell(lanes, d, stream + cell_begin[c]);
    const int64_t first = static_cast<int64_t>(c / n_cells) * slice_rows;
    const int g = static_cast<int>(c % n_cells);
    const uint32_t* e = cell.entries;
    for (int k = 0; k < cell.n_rounds; ++k) {
      for (int l = 0; l < cell.RoundSize(k); ++l, ++e) {
        const int o = cell.lane_at[l];
        const int64_t other = *e >> 16;
        if (lanes == OutlierLanes::kRows) {
          out.push_back({first + o, static_cast<int>(other), static_cast<uint16_t>(*e)});
        } else {
          out.push_back({first + other, g * kOutlierCellLanes + o, static_cast<uint16_t>(*e)});
        }
      }
    }
  }
  std::sort(out.begin() + first_out, out.end(), [](const OutlierEntry& a, const OutlierEntry& b) {
    return a.row != b.row ? a.row < b.row : a.channel < b.channel;
  });
}

size_t CountOutlierEntries(OutlierLanes lanes, int d, const uint32_t* stream,
                           const uint32_t* cell_begin, size_t c0, size_t c1) {
  size_t n = 0;
  for (size_t c = c0; c < c1; ++c) {
    const Cell cell = ParseCell(lanes, d, stream + cell_begin[c]);
    for (int l = 0; l < kOutlierCellLanes; ++l) n += cell.count[l];
  }
  return n;
}

void OutlierScoresRef(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0, int64_t r1,
                      int d, const float* q, int n_q, float* scores, int64_t ld) {
  constexpr int64_t kSlice = OutlierSliceRows(OutlierLanes::kRows);
  std::vector<float> acc(static_cast<size_t>(n_q) * kOutlierCellLanes);
  const std::vector<float> q16 = RoundedToBf16(q, static_cast<size_t>(n_q) * d);
  for (int64_t s = r0 / kSlice; s * kSlice < r1; ++s) {
    const Cell cell = ParseCell(OutlierLanes::kRows, d, stream + cell_begin[s]);
    if (cell.n_rounds == 0) continue;
    std::fill(acc.begin(), acc.end(), 0.0f);
    const uint32_t* e = cell.entries;
    for (int k = 0; k < cell.n_rounds; ++k) {
      for (int l = 0; l < cell.RoundSize(k); ++l, ++e) {
        const float v = Fp16ToFp32(static_cast<uint16_t>(*e));
        const int c = static_cast<int>(*e >> 16);
        for (int i = 0; i < n_q; ++i) {
          float& a = acc[i * kOutlierCellLanes + l];
          a = std::fma(q16[i * d + c], v, a);
        }
      }
    }
    for (int o = 0; o < kOutlierCellLanes; ++o) {
      const int64_t r = s * kSlice + o;
      if (r < r0 || r >= r1) continue;
      for (int i = 0; i < n_q; ++i) scores[i * ld + (r - r0)] += acc[i * kOutlierCellLanes + cell.rank[o]];
    }
  }
}

void OutlierAccumulateRef(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                          int64_t r1, int d, const float* p, int n_q, int64_t ld, float* out) {
  if (r0 >= r1) return;
  constexpr int64_t kSlice = OutlierSliceRows(OutlierLanes::kChannels);
  const int n_cells = OutlierCellsPerSlice(OutlierLanes::kChannels, d);
  const int width = n_cells * kOutlierCellLanes;
  std::vector<float> channel_acc(static_cast<size_t>(n_q) * width, 0.0f);
  std::vector<float> acc(static_cast<size_t>(n_q) * kOutlierCellLanes);
  for (int64_t s = r0 / kSlice; s * kSlice < r1; ++s) {
    for (int g = 0; g < n_cells; ++g) {
      const Cell cell = ParseCell(OutlierLanes::kChannels, d, stream + cell_begin[s * n_cells + g]);
      if (cell.n_rounds == 0) continue;
      std::fill(acc.begin(), acc.end(), 0.0f);
      const uint32_t* e = cell.entries;
      for (int k = 0; k < cell.n_rounds; ++k) {
        for (int l = 0; l < cell.RoundSize(k); ++l, ++e) {
          const int64_t r = s * kSlice + (*e >> 16);
          if (r < r0 || r >= r1) continue;
          const float v = Fp16ToFp32(static_cast<uint16_t>(*e));
          for (int i = 0; i < n_q; ++i) {
            float& a = acc[i * kOutlierCellLanes + l];
            a = std::fma(Bf16ToFp32(Fp32ToBf16(p[i * ld + (r - r0)])), v, a);
          }
        }
      }
      for (int i = 0; i < n_q; ++i) {
        for (int o = 0; o < kOutlierCellLanes; ++o) {
          channel_acc[i * width + g * kOutlierCellLanes + o] += acc[i * kOutlierCellLanes + cell.rank[o]];
        }
      }
    }
  }
  for (int i = 0; i < n_q; ++i) {
    for (int c = 0; c < d; ++c) out[i * d + c] += channel_acc[i * width + c];
  }
}

bool HasFastOutlierScores(int d) {
  return d >= 1 && d <= kOutlierFastMaxScoreDim && OutlierKernelsAvailable();
}

bool HasFastOutlierAccumulate(int d) {
  return d >= 1 && d <= kOutlierFastMaxAccumulateDim && OutlierKernelsAvailable();
}

void OutlierScores(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0, int64_t r1,
                   int d, const float* q, int n_q, float* scores, int64_t ld) {
  if (r0 >= r1 || n_q <= 0) return;
  if (HasFastOutlierScores(d)) {
    OutlierScoresAvx512(stream, cell_begin, r0, r1, d, q, n_q, scores, ld);
  } else {
    OutlierScoresRef(stream, cell_begin, r0, r1, d, q, n_q, scores, ld);
  }
}

void OutlierAccumulate(const uint32_t* stream, const uint32_t* cell_begin, int64_t r0,
                       int64_t r1, int d, const float* p, int n_q, int64_t ld, float* out) {
  if (r0 >= r1 || n_q <= 0) return;
  if (HasFastOutlierAccumulate(d)) {
    OutlierAccumulateAvx512(stream, cell_begin, r0, r1, d, p, n_q, ld, out);
  } else {
    OutlierAccumulateRef(stream, cell_begin, r0, r1, d, p, n_q, ld, out);
  }
}

}  // namespace kvpack
