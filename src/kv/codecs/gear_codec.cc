#include "kv/codecs/gear_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/half.h"
#include "kv/codec_registry.h"
#include "kv/codecs/quant_common.h"
#include "kv/lowrank.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

constexpr int kMaxIters = 64;

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Result<int64_t> IntInRange(const MethodSpec& spec, const char* key, int64_t fallback,
                           int64_t lo, int64_t hi) {
  KVPACK_ASSIGN_OR_RETURN(int64_t v, ParamAsInt(spec, key, fallback));
  if (v < lo || v > hi) {
    return InvalidArgument("'" + spec.name + "': " + key + "=" + std::to_string(v) +
                           " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "]");
  }
  return v;
}

// The backbone codec of one component, as a registered spec.
MethodSpec BackboneSpec(const GearConfig& c, KvComponent component) {
  MethodSpec s;
  const bool kcvt = c.backbone == "kcvt" || (c.backbone == "kivi" && component == KvComponent::kKey);
  s.name = kcvt ? "kcvt" : "flexgen";
  s.params.push_back({"bits", std::to_string(c.bits)});
  if (kcvt) {
    s.params.push_back({"buffer", "1"});  // every Append is compressed as one block at once
  } else {
    s.params.push_back({"group", std::to_string(c.group)});
  }
  return s;
}

// Seed of the power iteration of one head's block: a fixed function of where it is.
uint64_t BlockSeed(const StoreShape& shape, int head, uint64_t block) {
  return 0x4745415200000000ull ^ (static_cast<uint64_t>(shape.layer) << 40) ^
         (static_cast<uint64_t>(shape.component == KvComponent::kKey ? 1 : 2) << 36) ^
         (static_cast<uint64_t>(head) << 24) ^ block;
}

}  // namespace

std::string GearConfig::ToSpec() const {
  std::string s = std::string(sparse ? "gear" : "gear-l") + ":bits=" + std::to_string(bits) +
                  ",backbone=" + backbone;
  if (backbone != "kcvt") s += ",group=" + std::to_string(group);
  if (sparse) s += ",sparsity=" + FormatNumber(sparsity);
  s += ",rank_prefill=" + std::to_string(rank_prefill) +
       ",rank_decode=" + std::to_string(rank_decode) + ",iters=" + std::to_string(iters) +
       ",buffer=" + std::to_string(buffer);
  return s;
}

Result<GearConfig> ParseGearConfig(const MethodSpec& spec) {
  GearConfig c;
  c.sparse = spec.name != "gear-l";
  std::vector<std::string> names = {"bits", "backbone", "group", "rank_prefill",
                                    "rank_decode", "iters", "buffer"};
  if (c.sparse) names.push_back("sparsity");
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, names));
  KVPACK_ASSIGN_OR_RETURN(int64_t bits, ParamChoice(spec, "bits", 2, {2, 4, 8}));
  c.bits = static_cast<int>(bits);
  KVPACK_ASSIGN_OR_RETURN(c.backbone, ParamAsString(spec, "backbone", bits == 2 ? "kivi" : "kcvt"));
  if (c.backbone != "kivi" && c.backbone != "kcvt" && c.backbone != "flexgen") {
    return InvalidArgument("'" + spec.name + "': backbone=" + c.backbone +
                           " is not supported; valid: kivi, kcvt, flexgen");
  }
  if (c.backbone == "kcvt" && spec.Find("group")) {
    return InvalidArgument("'" + spec.name +
                           "': group applies to the kivi and flexgen backbones only (kcvt "
                           "groups whole blocks / whole token rows)");
  }
  KVPACK_ASSIGN_OR_RETURN(int64_t group, ParamChoice(spec, "group", 64, {}));
  c.group = static_cast<int>(std::min<int64_t>(group, std::numeric_limits<int>::max()));
  if (c.sparse) {
    KVPACK_ASSIGN_OR_RETURN(c.sparsity, ParamAsDouble(spec, "sparsity", 0.02));
    if (!(c.sparsity >= 0.0 && c.sparsity <= 0.5)) {
      return InvalidArgument("'" + spec.name + "': sparsity=" + FormatNumber(c.sparsity) +
                             " must be in [0, 0.5]");
    }
  } else {
    c.sparsity = 0.0;
  }
  const int64_t max_rank = LowRankBlocks::kMaxRank;
  KVPACK_ASSIGN_OR_RETURN(int64_t rp, IntInRange(spec, "rank_prefill", 4, 0, max_rank));
  KVPACK_ASSIGN_OR_RETURN(int64_t rg, IntInRange(spec, "rank_decode", 2, 0, max_rank));
  KVPACK_ASSIGN_OR_RETURN(int64_t iters, IntInRange(spec, "iters", 3, 1, kMaxIters));
  KVPACK_ASSIGN_OR_RETURN(int64_t buffer,
                          IntInRange(spec, "buffer", c.backbone == "kivi" ? 64 : 20, 1,
                                     std::numeric_limits<int>::max()));
  c.rank_prefill = static_cast<int>(rp);
  c.rank_decode = static_cast<int>(rg);
  c.iters = static_cast<int>(iters);
  c.buffer = static_cast<int>(buffer);
  return c;
}

// ---------------------------------------------------------------------------------------

Result<std::unique_ptr<GearStore>> GearStore::Create(const GearConfig& config,
                                                     const StoreShape& shape) {
  if (shape.head_dim > 65535) {
    return InvalidArgument("'gear': head_dim " + std::to_string(shape.head_dim) +
                           " does not fit the 16-bit channel index of the outlier entries");
  }
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<ComponentStore> backbone,
                          CreateStore(BackboneSpec(config, shape.component), shape));
  return std::unique_ptr<GearStore>(new GearStore(config, shape, std::move(backbone)));
}

GearStore::GearStore(const GearConfig& config, const StoreShape& shape,
                     std::unique_ptr<ComponentStore> backbone)
    : config_(config),
      shape_(shape),
      backbone_(std::move(backbone)),
      buffer_(shape.n_kv_heads * shape.head_dim) {
  constexpr int64_t kWholeBlock = std::numeric_limits<int64_t>::max();
  const bool key = is_key();
  const int64_t channel_run = std::min(config.group, shape.head_dim);
  if (config.backbone == "kivi") {
    groups_ = key ? BackboneGroups{BackboneGroups::Kind::kTokenRunsPerChannel, config.group}
                  : BackboneGroups{BackboneGroups::Kind::kChannelRunsPerToken, channel_run};
    feed_run_ = key ? config.group : kWholeBlock;
  } else if (config.backbone == "kcvt") {
    groups_ = key ? BackboneGroups{BackboneGroups::Kind::kTokenRunsPerChannel, kWholeBlock}
                  : BackboneGroups{BackboneGroups::Kind::kWholeTokenRow, 0};
    feed_run_ = kWholeBlock;
  } else {
    groups_ = {BackboneGroups::Kind::kChannelRunsPerToken, channel_run};
    feed_run_ = kWholeBlock;
  }
  for (int h = 0; h < shape.n_kv_heads; ++h) {
    lowrank_.emplace_back(shape.head_dim);
    // Keys are scored (a lane per row), values accumulated (a lane per channel).
    sparse_.emplace_back(shape.head_dim, key ? OutlierLanes::kRows : OutlierLanes::kChannels);
  }
}

int64_t GearStore::n_buffered(int head) const {
  return buffer_maps_.empty() ? buffer_.n_rows()
                              : static_cast<int64_t>(buffer_maps_[head].size());
}

Status GearStore::Append(const float* rows, int64_t n_tokens) {
  const int64_t row_len = static_cast<int64_t>(shape_.n_kv_heads) * shape_.head_dim;
  // Everything is checked before anything changes: a rejected Append leaves the store as is.
  KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
  if (n_tokens <= 0) return Status::Ok();
  if (!prompt_done_) {
    prompt_done_ = true;
    std::vector<float> block(static_cast<size_t>(n_tokens * row_len));
    for (size_t i = 0; i < block.size(); ++i) block[i] = Fp16ToFp32(Fp32ToFp16(rows[i]));
    CompressBlock(block.data(), n_tokens, config_.rank_prefill);
    return Status::Ok();
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t id = buffer_.n_rows();
    buffer_.Append(rows + t * row_len);
    for (auto& m : buffer_maps_) m.push_back(id);
    if (buffer_.n_rows() == config_.buffer) FlushBuffer();
  }
  return Status::Ok();
}

void GearStore::CompressBlock(const float* x, int64_t n, int rank) {
  const int n_heads = shape_.n_kv_heads, d = shape_.head_dim;
  const int64_t row_len = static_cast<int64_t>(n_heads) * d;
  const bool sparse = config_.sparse && config_.sparsity > 0.0;

  // 1-2. Outliers, and the backbone's input with them kept out of every group's min/max.
  std::vector<uint8_t> mask;
  std::vector<float> fed;
  const float* feed = x;
  if (sparse) {
    mask.resize(static_cast<size_t>(n * row_len));
    SelectOutliers(x, n, n_heads, d, shape_.component, config_.sparsity, mask.data());
    fed.resize(mask.size());
    SubstituteOutliers(x, mask.data(), n, n_heads, d, groups_, fed.data());
    feed = fed.data();
  }
  // Whether this block's outlier sets are large enough to hold any (keys: n tokens per
  // channel; values: a token's n_heads * d entries): a fact of the configuration.
  const bool may_hold_outliers =
      sparse && OutliersPerSide(config_.sparsity, is_key() ? n : row_len) > 0;
  std::vector<int64_t> first(n_heads);
  for (int h = 0; h < n_heads; ++h) first[h] = backbone_->n_tokens(h);
  for (int64_t t0 = 0; t0 < n; t0 += feed_run_) {
    const int64_t m = std::min(feed_run_, n - t0);
    const Status st = backbone_->Append(feed + t0 * row_len, m);
    KVPACK_CHECK(st.ok());  // the input was checked (finite, within the fp16 range)
  }
  KVPACK_CHECK(backbone_->Memory().residual_bytes == 0);  // stored in final form at once

  // 3-4. Per head: low rank of the backbone's error, then the outliers' corrections.
  std::vector<float> dhat(static_cast<size_t>(n * d)), resid(dhat.size());
  std::vector<uint16_t> a16, b16;
  for (int h = 0; h < n_heads; ++h) {
    KVPACK_CHECK(backbone_->n_tokens(h) == first[h] + n && lowrank_[h].n_rows() == first[h]);
    backbone_->Decode(h, first[h], first[h] + n, dhat.data());
    for (int64_t t = 0; t < n; ++t) {
      for (int c = 0; c < d; ++c) {
        const int64_t i = t * row_len + h * d + c;
        resid[t * d + c] = sparse && mask[i] ? 0.0f : x[i] - dhat[t * d + c];
      }
    }
    const LowRankFactors f = PowerIterationLowRank(resid.data(), n, d, d, rank, config_.iters,
                                                   BlockSeed(shape_, h, n_blocks_made_));
    const int r = f.rank;
    // Balanced fp16 factors, stored transposed: column k of A (unit norm) times
    // sqrt(sigma_k), of B (norm sigma_k) divided by it; the product is unchanged and neither
    // side leaves fp16's range.
    a16.assign(static_cast<size_t>(r) * n, 0);
    b16.assign(static_cast<size_t>(r) * d, 0);
    for (int k = 0; k < r; ++k) {
      double sigma = 0.0;
      for (int c = 0; c < d; ++c) sigma += f.b[c * r + k] * f.b[c * r + k];
      sigma = std::sqrt(sigma);
      if (!(sigma > 0.0)) continue;  // a zero direction: A and B columns stay 0
      const double s = std::sqrt(sigma);
      for (int64_t t = 0; t < n; ++t) {
        a16[k * n + t] = Fp32ToFp16(static_cast<float>(f.a[t * r + k] * s));
      }
      for (int c = 0; c < d; ++c) {
        b16[k * d + c] = Fp32ToFp16(static_cast<float>(f.b[c * r + k] / s));
      }
    }
    lowrank_[h].AppendBlock(a16.data(), b16.data(), n, r);
    if (!sparse) continue;
    std::vector<float> low(static_cast<size_t>(n * d), 0.0f);
    lowrank_[h].AddDecode(first[h], first[h] + n, low.data());  // L as attention will see it
    for (int64_t t = 0; t < n; ++t) {
      for (int c = 0; c < d; ++c) {
        const int64_t i = t * row_len + h * d + c;
        if (!mask[i]) continue;
        const float corr = x[i] - dhat[t * d + c] - low[t * d + c];
        // Saturated: only inputs near fp16's limit on both sides of a group get there.
        sparse_[h].Append(first[h] + t, c, Fp32ToFp16(std::clamp(corr, -65504.0f, 65504.0f)));
      }
    }
    sparse_[h].ExtendRows(first[h] + n, may_hold_outliers);
  }
  ++n_blocks_made_;
}

void GearStore::FlushBuffer() {
  const int64_t n = buffer_.n_rows(), row_len = static_cast<int64_t>(shape_.n_kv_heads) * shape_.head_dim;
  std::vector<float> block(static_cast<size_t>(n * row_len));
  for (int64_t r = 0; r < n; ++r) buffer_.Row(r, &block[r * row_len]);
  std::vector<std::vector<int64_t>> maps = std::move(buffer_maps_);
  buffer_maps_.clear();
  buffer_.Clear();
  CompressBlock(block.data(), n, config_.rank_decode);
  for (size_t h = 0; h < maps.size(); ++h) {
    if (static_cast<int64_t>(maps[h].size()) == n) continue;  // the head holds every row
    const int64_t first = n_compressed(static_cast<int>(h)) - n;
    std::vector<int64_t> keep(first);
    for (int64_t i = 0; i < first; ++i) keep[i] = i;
    for (int64_t r : maps[h]) keep.push_back(first + r);
    RetainCompressed(static_cast<int>(h), keep);
  }
}

// ---------------------------------------------------------------------------------------
// Attention

const uint16_t* GearStore::BufferRowsOf(int head, int64_t k0, int64_t k1) const {
  // The buffer is shared by the heads ([rows, n_kv_heads * head_dim]): the head's rows are
  // gathered so that the tiled fp16 kernels read them as one block (a call per row and query
  // row cost more than the rows' arithmetic).
  thread_local std::vector<uint16_t> rows;
  const int d = shape_.head_dim;
  rows.resize(static_cast<size_t>(k1 - k0) * d);
  for (int64_t k = k0; k < k1; ++k) {
    std::memcpy(&rows[(k - k0) * d], buffer_.Row(BufferRow(head, k)) + head * d,
                d * sizeof(uint16_t));
  }
  return rows.data();
}

void GearStore::ScoresOf(GearPart part, int head, const float* q, int n_q, int64_t t0,
                         int64_t t1, float* scores) const {
  const int d = shape_.head_dim;
  const int64_t nc = n_compressed(head), n = t1 - t0, split = std::clamp(nc, t0, t1);
  switch (part) {
    case GearPart::kQuantized:
      if (split == t0) return;
      if (split == t1) {
        backbone_->Scores(head, q, n_q, t0, t1, scores);
      } else {
        const int64_t m = split - t0;
        std::vector<float> tmp(static_cast<size_t>(n_q) * m);
        backbone_->Scores(head, q, n_q, t0, split, tmp.data());
        for (int i = 0; i < n_q; ++i) std::copy_n(&tmp[i * m], m, scores + i * n);
      }
      return;
    case GearPart::kLowRank:
      lowrank_[head].AddScores(t0, split, q, n_q, scores, n);
      return;
    case GearPart::kSparse:
      sparse_[head].AddScores(t0, split, q, n_q, scores, n);
      return;
    case GearPart::kBuffer:
      if (t1 > split) {
        const uint16_t* rows = BufferRowsOf(head, split - nc, t1 - nc);
        DotRowsF16(rows, t1 - split, d, q, n_q, scores + (split - t0), n);
      }
      return;
  }
}

void GearStore::AccumulateOf(GearPart part, int head, const float* p, int n_q, int64_t t0,
                             int64_t t1, float* out) const {
  const int d = shape_.head_dim;
  const int64_t nc = n_compressed(head), n = t1 - t0, split = std::clamp(nc, t0, t1);
  switch (part) {
    case GearPart::kQuantized:
      if (split == t0) return;
      if (split == t1) {
        backbone_->Accumulate(head, p, n_q, t0, t1, out);
      } else {
        const int64_t m = split - t0;
        std::vector<float> tmp(static_cast<size_t>(n_q) * m);
        for (int i = 0; i < n_q; ++i) std::copy_n(p + i * n, m, &tmp[i * m]);
        backbone_->Accumulate(head, tmp.data(), n_q, t0, split, out);
      }
      return;
    case GearPart::kLowRank:
      lowrank_[head].AddAccumulate(t0, split, p, n_q, n, out);
      return;
    case GearPart::kSparse:
      sparse_[head].AddAccumulate(t0, split, p, n_q, n, out);
      return;
    case GearPart::kBuffer:
      if (t1 > split) {
        const uint16_t* rows = BufferRowsOf(head, split - nc, t1 - nc);
        AxpyRowsF16(p + (split - t0), n_q, n, rows, t1 - split, d, out);
      }
      return;
  }
}

void GearStore::Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
                       float* scores) const {
  PrefetchCorrections(head, t0, t1);
  for (GearPart part :
       {GearPart::kQuantized, GearPart::kBuffer, GearPart::kLowRank, GearPart::kSparse}) {
    ScoresOf(part, head, q, n_q, t0, t1, scores);
  }
}

void GearStore::Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                           float* out) const {
  PrefetchCorrections(head, t0, t1);
  for (GearPart part :
       {GearPart::kQuantized, GearPart::kBuffer, GearPart::kLowRank, GearPart::kSparse}) {
    AccumulateOf(part, head, p, n_q, t0, t1, out);
  }
}

void GearStore::Decode(int head, int64_t t0, int64_t t1, float* out) const {
  const int d = shape_.head_dim;
  const int64_t nc = n_compressed(head), split = std::clamp(nc, t0, t1);
  if (split > t0) {
    backbone_->Decode(head, t0, split, out);
    lowrank_[head].AddDecode(t0, split, out);
    sparse_[head].AddDecode(t0, split, out);
  }
  for (int64_t t = split; t < t1; ++t) {
    const uint16_t* row = buffer_.Row(BufferRow(head, t - nc)) + head * d;
    for (int c = 0; c < d; ++c) out[(t - t0) * d + c] = Fp16ToFp32(row[c]);
  }
}

// ---------------------------------------------------------------------------------------
// Eviction and accounting

void GearStore::RetainCompressed(int head, std::span<const int64_t> keep) {
  const Status st = backbone_->Retain(head, keep);
  KVPACK_CHECK(st.ok());  // indices were checked against n_tokens(head)
  lowrank_[head].Keep(keep);
  sparse_[head].Keep(keep);
}

Status GearStore::Retain(int head, std::span<const int64_t> keep) {
  KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
  const int64_t nc = n_compressed(head);
  const size_t split = std::lower_bound(keep.begin(), keep.end(), nc) - keep.begin();
  RetainCompressed(head, keep.first(split));
  const int64_t n_kept_buffered = static_cast<int64_t>(keep.size() - split);
  if (n_kept_buffered == n_buffered(head)) return Status::Ok();  // the buffer is untouched
  if (buffer_maps_.empty()) {
    buffer_maps_.assign(shape_.n_kv_heads, std::vector<int64_t>(buffer_.n_rows()));
    for (auto& m : buffer_maps_) {
      for (int64_t r = 0; r < buffer_.n_rows(); ++r) m[r] = r;
    }
  }
  std::vector<int64_t> kept;
  kept.reserve(n_kept_buffered);
  for (size_t k = split; k < keep.size(); ++k) kept.push_back(buffer_maps_[head][keep[k] - nc]);
  buffer_maps_[head].swap(kept);
  CompactBuffer();
  return Status::Ok();
}

void GearStore::CompactBuffer() {
  const int64_t total = buffer_.n_rows();
  std::vector<char> used(total, 0);
  for (const auto& m : buffer_maps_) {
    for (int64_t r : m) used[r] = 1;
  }
  std::vector<int64_t> new_id(total, -1), keep_rows;
  for (int64_t r = 0; r < total; ++r) {
    if (!used[r]) continue;
    new_id[r] = static_cast<int64_t>(keep_rows.size());
    keep_rows.push_back(r);
  }
  const int64_t n_left = static_cast<int64_t>(keep_rows.size());
  if (n_left != total) buffer_.Keep(keep_rows);
  bool identity = true;
  for (auto& m : buffer_maps_) {
    for (int64_t& r : m) r = new_id[r];
    identity = identity && static_cast<int64_t>(m.size()) == n_left;
  }
  if (identity) buffer_maps_.clear();  // every head holds every remaining row, in order
}

MemoryUsage GearStore::Memory() const {
  MemoryUsage m = backbone_->Memory();
  m.n_values = 0;
  for (int h = 0; h < shape_.n_kv_heads; ++h) {
    lowrank_[h].AddMemory(m);
    sparse_[h].AddMemory(m);
    m.n_values += n_tokens(h) * shape_.head_dim;
  }
  m.residual_bytes += buffer_.bytes();
  m.reserved_bytes += buffer_.reserved_bytes();
  for (const auto& map : buffer_maps_) m.other_bytes += map.size() * sizeof(int64_t);
  return m;
}

Result<std::unique_ptr<ComponentStore>> MakeGearStore(const MethodSpec& spec,
                                                      const StoreShape& shape) {
  KVPACK_ASSIGN_OR_RETURN(GearConfig config, ParseGearConfig(spec));
  KVPACK_ASSIGN_OR_RETURN(std::unique_ptr<GearStore> store, GearStore::Create(config, shape));
  return std::unique_ptr<ComponentStore>(std::move(store));
}

}  // namespace kvpack
