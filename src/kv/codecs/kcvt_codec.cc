#include "kv/codecs/kcvt_codec.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "kv/codecs/channel_blocks.h"
#include "kv/codecs/fp16_rows.h"
#include "kv/codecs/quant_common.h"
#include "kv/codecs/token_group_rows.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

std::string KcvtSpec(int bits, int buffer) {
  return "kcvt:bits=" + std::to_string(bits) + ",buffer=" + std::to_string(buffer);
}

// Keys: per head, per-channel blocks + fp16 buffer.
class KcvtKeyStore final : public ComponentStore {
 public:
  KcvtKeyStore(const StoreShape& shape, int bits, int buffer)
      : shape_(shape), bits_(bits), buffer_(buffer) {
    for (int h = 0; h < shape.n_kv_heads; ++h) {
      blocks_.emplace_back(shape.head_dim, bits, QuantMethod::kMinMax);
      buf_.emplace_back(shape.head_dim);
    }
  }
  std::string spec() const override { return KcvtSpec(bits_, buffer_); }

  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    return CheckQuantRows(rows, n_tokens, shape_);
  }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
    std::vector<float> block;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      for (int64_t t = 0; t < n_tokens; ++t) buf_[h].Append(rows + t * row_len + h * d);
      const int64_t nb = buf_[h].n_rows();
      if (nb < buffer_) continue;
      block.resize(nb * d);
      for (int64_t r = 0; r < nb; ++r) buf_[h].Row(r, &block[r * d]);
      blocks_[h].AppendBlock(block.data(), nb, d);
      buf_[h].Clear();
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return blocks_[head].n_rows() + buf_[head].n_rows();
  }

  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const int64_t nq = blocks_[head].n_rows(), n = t1 - t0, split = std::clamp(nq, t0, t1);
    blocks_[head].Scores(t0, split, q, n_q, scores, n, 0);
    buf_[head].Scores(split - nq, t1 - nq, q, n_q, scores, n, split - t0);
  }

  void Prefetch(int head, int64_t t0, int64_t t1) const override {
    const int64_t nq = blocks_[head].n_rows(), split = std::clamp(nq, t0, t1);
    if (split > t0) blocks_[head].PrefetchRange(t0, split);
    buf_[head].PrefetchRows(split - nq, t1 - nq);
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const int64_t nq = blocks_[head].n_rows(), n = t1 - t0, split = std::clamp(nq, t0, t1);
    blocks_[head].Accumulate(t0, split, p, n_q, n, 0, out);
    buf_[head].Accumulate(split - nq, t1 - nq, p, n_q, n, split - t0, out);
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const int d = shape_.head_dim;
    const int64_t nq = blocks_[head].n_rows(), split = std::clamp(nq, t0, t1);
    blocks_[head].Decode(t0, split, out);
    for (int64_t t = split; t < t1; ++t) buf_[head].Row(t - nq, out + (t - t0) * d);
  }

  // A block that loses tokens keeps its per-channel (scale, min): survivors decode exactly.
  Status Retain(int head, std::span<const int64_t> keep) override {
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
    const int64_t nq = blocks_[head].n_rows();
    const size_t split = std::lower_bound(keep.begin(), keep.end(), nq) - keep.begin();
    std::vector<int64_t> res(keep.begin() + split, keep.end());
    for (int64_t& r : res) r -= nq;
    blocks_[head].Keep(keep.first(split));
    buf_[head].Keep(res);
    return Status::Ok();
  }

  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      blocks_[h].AddMemory(m);
      m.residual_bytes += buf_[h].bytes();
      m.reserved_bytes += buf_[h].reserved_bytes();
      m.n_values += n_tokens(h) * shape_.head_dim;
    }
    return m;
  }

 private:
  StoreShape shape_;
  int bits_, buffer_;
  std::vector<ChannelBlocks> blocks_;  // per head
  std::vector<Fp16Rows> buf_;          // per head: the fp16 buffer (newest tokens)
};

// Values: shared rows of n_kv_heads * head_dim values, one group per token. Row ids
// [0, n_quantized) are quantized rows, [n_quantized, +n_buffered) buffered fp16 rows;
// flushing moves buffered rows to the end of the quantized ones, so ids never change.
class KcvtValueStore final : public ComponentStore {
 public:
  KcvtValueStore(const StoreShape& shape, int bits, int buffer)
      : shape_(shape),
        bits_(bits),
        buffer_(buffer),
        row_len_(shape.n_kv_heads * shape.head_dim),
        rows_(row_len_, row_len_, bits, QuantMethod::kMinMax,
              shape.head_dim * bits % 8 == 0 ? shape.head_dim : 0),
        buf_(row_len_) {}
  std::string spec() const override { return KcvtSpec(bits_, buffer_); }
  bool per_head_retain() const override { return false; }

  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    return CheckQuantRows(rows, n_tokens, shape_);
  }

  Status Append(const float* rows, int64_t n_tokens) override {
    KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
    const int64_t first = total_rows();
    for (int64_t t = 0; t < n_tokens; ++t) buf_.Append(rows + t * row_len_);
    for (auto& m : maps_) {
      for (int64_t t = 0; t < n_tokens; ++t) m.push_back(first + t);
    }
    if (buf_.n_rows() >= buffer_) {
      std::vector<float> row(row_len_);
      for (int64_t r = 0; r < buf_.n_rows(); ++r) {
        buf_.Row(r, row.data());
        rows_.AppendRow(row.data());
      }
      buf_.Clear();
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return maps_.empty() ? total_rows() : static_cast<int64_t>(maps_[head].size());
  }

  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const int d = shape_.head_dim;
    const int64_t n = t1 - t0;
    Tile tile = Split(head, t0, t1);
    rows_.Scores(t0, tile.ids, tile.n_quant, head * d, d, q, n_q, scores, n, 0);
    for (int64_t k = tile.n_quant; k < n; ++k) {
      const uint16_t* row = buf_.Row(Id(head, t0 + k) - rows_.n_rows()) + head * d;
      for (int i = 0; i < n_q; ++i) scores[i * n + k] = DotF16F32(row, q + i * d, d);
    }
  }

  // The start of the head's plane and of the buffer rows, one call ahead (kv/attention.cc).
  void Prefetch(int head, int64_t t0, int64_t t1) const override {
    const Tile tile = Split(head, t0, t1);
    rows_.PrefetchSelected(t0, tile.ids, tile.n_quant, head * shape_.head_dim);
    if (tile.ids == nullptr && tile.n_quant < t1 - t0) {
      buf_.PrefetchRows(t0 + tile.n_quant - rows_.n_rows(), t1 - rows_.n_rows());
    }
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const int d = shape_.head_dim;
    const int64_t n = t1 - t0;
    Tile tile = Split(head, t0, t1);
    rows_.Accumulate(t0, tile.ids, tile.n_quant, head * d, d, p, n_q, n, 0, out);
    for (int64_t k = tile.n_quant; k < n; ++k) {
      const uint16_t* row = buf_.Row(Id(head, t0 + k) - rows_.n_rows()) + head * d;
      for (int i = 0; i < n_q; ++i) {
        if (p[i * n + k] != 0.0f) AxpyF16(p[i * n + k], row, out + i * d, d);
      }
    }
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const int d = shape_.head_dim;
    std::vector<float> row(row_len_);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t id = Id(head, t);
      if (id < rows_.n_rows()) {
        rows_.Decode(id, id + 1, head * d, d, out + (t - t0) * d);
      } else {
        buf_.Row(id - rows_.n_rows(), row.data());
        std::copy(row.begin() + head * d, row.begin() + (head + 1) * d, out + (t - t0) * d);
      }
    }
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
    if (maps_.empty()) {
      maps_.assign(shape_.n_kv_heads, std::vector<int64_t>(total_rows()));
      for (auto& m : maps_) std::iota(m.begin(), m.end(), 0);
    }
    std::vector<int64_t> kept;
    kept.reserve(keep.size());
    for (int64_t k : keep) kept.push_back(maps_[head][k]);
    maps_[head].swap(kept);
    // Free rows no head uses; renumber.
    const int64_t total = total_rows(), nq = rows_.n_rows();
    std::vector<char> used(total, 0);
    for (const auto& m : maps_) {
      for (int64_t id : m) used[id] = 1;
    }
    std::vector<int64_t> new_id(total, -1), keep_q, keep_b;
    int64_t next = 0;
    for (int64_t id = 0; id < total; ++id) {
      if (!used[id]) continue;
      new_id[id] = next++;
      (id < nq ? keep_q : keep_b).push_back(id < nq ? id : id - nq);
    }
    rows_.Keep(keep_q);
    buf_.Keep(keep_b);
    bool identity = true;
    for (auto& m : maps_) {
      for (int64_t& id : m) id = new_id[id];
      identity = identity && static_cast<int64_t>(m.size()) == next;
    }
    if (identity) maps_.clear();  // every head holds every remaining row, in order
    return Status::Ok();
  }

  // codes + (scale, min) per token row (shared by the heads), fp16 buffer rows, and the
  // per-head row lists while heads hold different tokens.
  MemoryUsage Memory() const override {
    MemoryUsage m;
    rows_.AddMemory(m);
    m.residual_bytes += buf_.bytes();
    m.reserved_bytes += buf_.reserved_bytes();
    for (const auto& map : maps_) m.other_bytes += map.size() * sizeof(int64_t);
    for (int h = 0; h < shape_.n_kv_heads; ++h) m.n_values += n_tokens(h) * shape_.head_dim;
    return m;
  }

 private:
  struct Tile {
    const int64_t* ids;  // null: rows t0.. (identity)
    int64_t n_quant;     // leading tokens of the tile that are quantized rows
  };
  int64_t total_rows() const { return rows_.n_rows() + buf_.n_rows(); }
  int64_t Id(int head, int64_t t) const { return maps_.empty() ? t : maps_[head][t]; }
  Tile Split(int head, int64_t t0, int64_t t1) const {
    const int64_t nq = rows_.n_rows();
    if (maps_.empty()) return {nullptr, std::clamp(nq, t0, t1) - t0};
    const auto& m = maps_[head];
    const int64_t k = std::lower_bound(m.begin() + t0, m.begin() + t1, nq) - (m.begin() + t0);
    return {m.data() + t0, k};
  }

  StoreShape shape_;
  int bits_, buffer_;
  int row_len_;
  // Quantized rows [n, n_kv_heads * head_dim], one group each, stored a plane per head.
  TokenGroupRows rows_;
  Fp16Rows buf_;         // buffered rows [n_b', n_kv_heads * head_dim]
  std::vector<std::vector<int64_t>> maps_;  // [n_kv_heads][n_tokens(h)] row ids, or empty
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeKcvtStore(const MethodSpec& spec,
                                                      const StoreShape& shape) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {"bits", "buffer"}));
  KVPACK_ASSIGN_OR_RETURN(int64_t bits, ParamChoice(spec, "bits", 4, {2, 4, 8}));
  KVPACK_ASSIGN_OR_RETURN(int64_t buffer, ParamChoice(spec, "buffer", 20, {}));
  if (shape.component == KvComponent::kKey) {
    return std::unique_ptr<ComponentStore>(
        new KcvtKeyStore(shape, static_cast<int>(bits), static_cast<int>(buffer)));
  }
  return std::unique_ptr<ComponentStore>(
      new KcvtValueStore(shape, static_cast<int>(bits), static_cast<int>(buffer)));
}

}  // namespace kvpack
