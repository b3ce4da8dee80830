#include "kv/codecs/kivi_codec.h"

#include <algorithm>
#include <vector>

#include "kv/codecs/channel_blocks.h"
#include "kv/codecs/fp16_rows.h"
#include "kv/codecs/quant_common.h"
#include "kv/codecs/token_group_rows.h"

namespace kvpack {
namespace {

// One head: the quantized part (older tokens) followed by the fp16 residual (newest).
struct KiviHead {
  KiviHead(int d, int bits, int group)
      : keys(d, bits, QuantMethod::kMinMax),
        values(d, group, bits, QuantMethod::kMinMax),
        residual(d) {}
  ChannelBlocks keys;     // used by the key store
  TokenGroupRows values;  // used by the value store
  Fp16Rows residual;
};

class KiviStore final : public ComponentStore {
 public:
  KiviStore(const StoreShape& shape, int bits, int group, int residual)
      : shape_(shape), bits_(bits), group_(group), residual_(residual) {
    for (int h = 0; h < shape.n_kv_heads; ++h) heads_.emplace_back(shape.head_dim, bits, group);
  }

  std::string spec() const override {
    return "kivi:bits=" + std::to_string(bits_) + ",group=" + std::to_string(group_) +
           ",residual=" + std::to_string(residual_);
  }

  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    return CheckQuantRows(rows, n_tokens, shape_);
  }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
    row_.resize(d);
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      KiviHead& H = heads_[h];
      for (int64_t t = 0; t < n_tokens; ++t) {
        H.residual.Append(rows + t * row_len + h * d);
        if (is_key()) {
          if (H.residual.n_rows() < residual_) continue;
          // Flush the whole buffer: R / G token groups per channel.
          std::vector<float> block(static_cast<size_t>(residual_) * d);
          for (int64_t r = 0; r < residual_; ++r) H.residual.Row(r, &block[r * d]);
          for (int64_t g0 = 0; g0 < residual_; g0 += group_) {
            H.keys.AppendBlock(&block[g0 * d], std::min<int64_t>(group_, residual_ - g0), d);
          }
          H.residual.Clear();
        } else if (H.residual.n_rows() > residual_) {
          // The window holds R + 1: the oldest value is quantized and leaves it.
          H.residual.Row(0, row_.data());
          H.values.AppendRow(row_.data());
          H.residual.PopFront(1);
        }
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return n_quantized(head) + heads_[head].residual.n_rows();
  }

  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const KiviHead& H = heads_[head];
    const int64_t nq = n_quantized(head), n = t1 - t0, split = std::clamp(nq, t0, t1);
    if (is_key()) {
      H.keys.Scores(t0, split, q, n_q, scores, n, 0);
    } else {
      H.values.Scores(t0, nullptr, split - t0, 0, shape_.head_dim, q, n_q, scores, n, 0);
    }
    H.residual.Scores(split - nq, t1 - nq, q, n_q, scores, n, split - t0);
  }

  void Prefetch(int head, int64_t t0, int64_t t1) const override {
    const KiviHead& H = heads_[head];
    const int64_t nq = n_quantized(head), split = std::clamp(nq, t0, t1);
    if (split > t0 && is_key()) H.keys.PrefetchRange(t0, split);
    if (split > t0 && !is_key()) H.values.PrefetchSelected(t0, nullptr, split - t0, 0);
    H.residual.PrefetchRows(split - nq, t1 - nq);
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const KiviHead& H = heads_[head];
    const int64_t nq = n_quantized(head), n = t1 - t0, split = std::clamp(nq, t0, t1);
    if (is_key()) {
      H.keys.Accumulate(t0, split, p, n_q, n, 0, out);
    } else {
      H.values.Accumulate(t0, nullptr, split - t0, 0, shape_.head_dim, p, n_q, n, 0, out);
    }
    H.residual.Accumulate(split - nq, t1 - nq, p, n_q, n, split - t0, out);
  }

  // Keys: one (scale, min) per channel and group of G tokens; values: per G channels.
  double ReadCost(int head, int64_t t) const override {
    return QuantizedThenFp16Cost(t, n_quantized(head), bits_, group_);
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const KiviHead& H = heads_[head];
    const int d = shape_.head_dim;
    const int64_t nq = n_quantized(head), split = std::clamp(nq, t0, t1);
    if (is_key()) {
      H.keys.Decode(t0, split, out);
    } else {
      H.values.Decode(t0, split, 0, d, out);
    }
    for (int64_t t = split; t < t1; ++t) H.residual.Row(t - nq, out + (t - t0) * d);
  }

  // Quantized key groups that lose some tokens keep their (scale, min): survivors decode
  // exactly as before (ChannelBlocks::Keep). The residual keeps its rule on what is left.
  Status Retain(int head, std::span<const int64_t> keep) override {
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
    KiviHead& H = heads_[head];
    const int64_t nq = n_quantized(head);
    const size_t split =
        std::lower_bound(keep.begin(), keep.end(), nq) - keep.begin();
    std::vector<int64_t> res(keep.begin() + split, keep.end());
    for (int64_t& r : res) r -= nq;
    if (is_key()) {
      H.keys.Keep(keep.first(split));
    } else {
      H.values.Keep(keep.first(split));
    }
    H.residual.Keep(res);
    return Status::Ok();
  }

  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      const KiviHead& H = heads_[h];
      if (is_key()) {
        H.keys.AddMemory(m);
      } else {
        H.values.AddMemory(m);
      }
      m.residual_bytes += H.residual.bytes();
      m.reserved_bytes += H.residual.reserved_bytes();
      m.n_values += n_tokens(h) * shape_.head_dim;
    }
    return m;
  }

 private:
  bool is_key() const { return shape_.component == KvComponent::kKey; }
  int64_t n_quantized(int head) const {
    return is_key() ? heads_[head].keys.n_rows() : heads_[head].values.n_rows();
  }

  StoreShape shape_;
  int bits_, group_, residual_;
  std::vector<KiviHead> heads_;
  // Append's scratch for the value leaving the window, [d], kept between calls (a decode
  // step appends one token to every layer; allocating it per call cost a heap round trip per
  // store and step). A key flush's block, [residual, d], once every R tokens, is allocated
  // when it happens rather than held by every layer.
  std::vector<float> row_;
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeKiviStore(const MethodSpec& spec,
                                                      const StoreShape& shape) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {"bits", "group", "residual"}));
  KVPACK_ASSIGN_OR_RETURN(int64_t bits, ParamChoice(spec, "bits", 2, {2, 4, 8}));
  KVPACK_ASSIGN_OR_RETURN(int64_t group, ParamChoice(spec, "group", 32, {}));
  KVPACK_ASSIGN_OR_RETURN(int64_t residual, ParamChoice(spec, "residual", 128, {}));
  if (residual % group != 0) {
    return InvalidArgument("'kivi': residual=" + std::to_string(residual) +
                           " must be a multiple of group=" + std::to_string(group));
  }
  return std::unique_ptr<ComponentStore>(new KiviStore(
      shape, static_cast<int>(bits), static_cast<int>(group), static_cast<int>(residual)));
}

}  // namespace kvpack
