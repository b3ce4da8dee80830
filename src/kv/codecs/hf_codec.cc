#include "kv/codecs/hf_codec.h"

#include <algorithm>
#include <vector>

#include "kv/codecs/channel_blocks.h"
#include "kv/codecs/fp16_rows.h"
#include "kv/codecs/quant_common.h"
#include "kv/codecs/token_group_rows.h"

namespace kvpack {
namespace {

struct HfConfig {
  int nbits = 4, group = 64, residual = 128, axis_key = 0, axis_value = 0;
  bool hqq = false, mode_hf = false;
};

struct HfHead {
  HfHead(int d, int group, int bits, QuantMethod m)
      : tokens(d, group, bits, m), channels(d, bits, m), residual(d) {}
  TokenGroupRows tokens;   // axis 0
  ChannelBlocks channels;  // per-channel axis
  Fp16Rows residual;
};

class HfStore final : public ComponentStore {
 public:
  HfStore(const StoreShape& shape, const HfConfig& cfg)
      : shape_(shape),
        cfg_(cfg),
        per_token_((shape.component == KvComponent::kKey ? cfg.axis_key : cfg.axis_value) == 0) {
    const QuantMethod m = cfg.hqq ? QuantMethod::kHqq : QuantMethod::kMinMax;
    for (int h = 0; h < shape.n_kv_heads; ++h) {
      heads_.emplace_back(shape.head_dim, cfg.group, cfg.nbits, m);
    }
  }

  std::string spec() const override {
    return "hf:nbits=" + std::to_string(cfg_.nbits) + ",q_group_size=" +
           std::to_string(cfg_.group) + ",residual_length=" + std::to_string(cfg_.residual) +
           ",axis_key=" + std::to_string(cfg_.axis_key) + ",axis_value=" +
           std::to_string(cfg_.axis_value) + ",backend=" + (cfg_.hqq ? "hqq" : "quanto") +
           ",mode=" + (cfg_.mode_hf ? "hf" : "append");
  }

  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    return CheckQuantRows(rows, n_tokens, shape_);
  }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
    if (n_tokens == 0) return Status::Ok();
    const bool prompt = cfg_.mode_hf && !prefilled_;
    prefilled_ = true;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      HfHead& H = heads_[h];
      for (int64_t t = 0; t < n_tokens; ++t) {
        H.residual.Append(rows + t * row_len + h * d);
        if (!cfg_.mode_hf && H.residual.n_rows() == cfg_.residual) FlushResidual(H);
      }
      if (prompt || (cfg_.mode_hf && H.residual.n_rows() >= cfg_.residual)) Requantize(H);
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return n_quantized(heads_[head]) + heads_[head].residual.n_rows();
  }

  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const HfHead& H = heads_[head];
    const int64_t nq = n_quantized(H), n = t1 - t0, split = std::clamp(nq, t0, t1);
    if (per_token_) {
      H.tokens.Scores(t0, nullptr, split - t0, 0, shape_.head_dim, q, n_q, scores, n, 0);
    } else {
      H.channels.Scores(t0, split, q, n_q, scores, n, 0);
    }
    H.residual.Scores(split - nq, t1 - nq, q, n_q, scores, n, split - t0);
  }

  void Prefetch(int head, int64_t t0, int64_t t1) const override {
    const HfHead& H = heads_[head];
    const int64_t nq = n_quantized(H), split = std::clamp(nq, t0, t1);
    if (split > t0 && per_token_) H.tokens.PrefetchSelected(t0, nullptr, split - t0, 0);
    if (split > t0 && !per_token_) H.channels.PrefetchRange(t0, split);
    H.residual.PrefetchRows(split - nq, t1 - nq);
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const HfHead& H = heads_[head];
    const int64_t nq = n_quantized(H), n = t1 - t0, split = std::clamp(nq, t0, t1);
    if (per_token_) {
      H.tokens.Accumulate(t0, nullptr, split - t0, 0, shape_.head_dim, p, n_q, n, 0, out);
    } else {
      H.channels.Accumulate(t0, split, p, n_q, n, 0, out);
    }
    H.residual.Accumulate(split - nq, t1 - nq, p, n_q, n, split - t0, out);
  }

  // One (scale, min) per G channels of a token, or per channel and G tokens (Quantize; a
  // shorter last block is counted as a whole one).
  double ReadCost(int head, int64_t t) const override {
    return QuantizedThenFp16Cost(t, n_quantized(heads_[head]), cfg_.nbits, cfg_.group);
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const HfHead& H = heads_[head];
    const int d = shape_.head_dim;
    const int64_t nq = n_quantized(H), split = std::clamp(nq, t0, t1);
    if (per_token_) {
      H.tokens.Decode(t0, split, 0, d, out);
    } else {
      H.channels.Decode(t0, split, out);
    }
    for (int64_t t = split; t < t1; ++t) H.residual.Row(t - nq, out + (t - t0) * d);
  }

  // Per-channel groups that lose tokens keep their (scale, min): survivors decode exactly.
  Status Retain(int head, std::span<const int64_t> keep) override {
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
    HfHead& H = heads_[head];
    const int64_t nq = n_quantized(H);
    const size_t split = std::lower_bound(keep.begin(), keep.end(), nq) - keep.begin();
    std::vector<int64_t> res(keep.begin() + split, keep.end());
    for (int64_t& r : res) r -= nq;
    if (per_token_) {
      H.tokens.Keep(keep.first(split));
    } else {
      H.channels.Keep(keep.first(split));
    }
    H.residual.Keep(res);
    return Status::Ok();
  }

  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      const HfHead& H = heads_[h];
      if (per_token_) {
        H.tokens.AddMemory(m);
      } else {
        H.channels.AddMemory(m);
      }
      m.residual_bytes += H.residual.bytes();
      m.reserved_bytes += H.residual.reserved_bytes();
      m.n_values += n_tokens(h) * shape_.head_dim;
    }
    return m;
  }

 private:
  int64_t n_quantized(const HfHead& H) const {
    return per_token_ ? H.tokens.n_rows() : H.channels.n_rows();
  }

  // Quantizes x [n, d] after the quantized part: per-token rows, or per-channel groups of
  // q_group_size tokens (the last one shorter).
  void Quantize(HfHead& H, const float* x, int64_t n) {
    const int d = shape_.head_dim;
    if (per_token_) {
      for (int64_t t = 0; t < n; ++t) H.tokens.AppendRow(x + t * d);
      return;
    }
    for (int64_t g0 = 0; g0 < n; g0 += cfg_.group) {
      H.channels.AppendBlock(x + g0 * d, std::min<int64_t>(cfg_.group, n - g0), d);
    }
  }

  std::vector<float> ResidualRows(const HfHead& H) const {
    const int d = shape_.head_dim;
    std::vector<float> x(H.residual.n_rows() * d);
    for (int64_t r = 0; r < H.residual.n_rows(); ++r) H.residual.Row(r, &x[r * d]);
    return x;
  }

  // mode=append: the full residual becomes quantized blocks; nothing else is touched.
  void FlushResidual(HfHead& H) {
    const std::vector<float> x = ResidualRows(H);
    Quantize(H, x.data(), H.residual.n_rows());
    H.residual.Clear();
  }

  // mode=hf: dequantize everything, append the residual, quantize it all again.
  void Requantize(HfHead& H) {
    const int d = shape_.head_dim;
    const int64_t nq = n_quantized(H), nr = H.residual.n_rows();
    std::vector<float> x((nq + nr) * d);
    if (per_token_) {
      H.tokens.Decode(0, nq, 0, d, x.data());
      H.tokens.Clear();
    } else {
      H.channels.Decode(0, nq, x.data());
      H.channels.Clear();
    }
    for (int64_t r = 0; r < nr; ++r) H.residual.Row(r, &x[(nq + r) * d]);
    H.residual.Clear();
    Quantize(H, x.data(), nq + nr);
  }

  StoreShape shape_;
  HfConfig cfg_;
  bool per_token_;
  bool prefilled_ = false;  // mode=hf: the first Append is the prompt
  std::vector<HfHead> heads_;
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeHfStore(const MethodSpec& spec,
                                                    const StoreShape& shape) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {"nbits", "q_group_size", "residual_length",
                                                "axis_key", "axis_value", "backend", "mode"}));
  HfConfig cfg;
  KVPACK_ASSIGN_OR_RETURN(std::string backend, ParamAsString(spec, "backend", "quanto"));
  KVPACK_ASSIGN_OR_RETURN(std::string mode, ParamAsString(spec, "mode", "append"));
  if (backend != "quanto" && backend != "hqq") {
    return InvalidArgument("'hf': backend=" + backend + " is not supported; valid: quanto, hqq");
  }
  if (mode != "append" && mode != "hf") {
    return InvalidArgument("'hf': mode=" + mode + " is not supported; valid: append, hf");
  }
  cfg.hqq = backend == "hqq";
  cfg.mode_hf = mode == "hf";
  const std::vector<int64_t> bits = cfg.hqq ? std::vector<int64_t>{1, 2, 3, 4, 8}
                                            : std::vector<int64_t>{2, 4};
  const std::vector<int64_t> axes = cfg.hqq ? std::vector<int64_t>{0, 1}
                                            : std::vector<int64_t>{0, -1};
  KVPACK_ASSIGN_OR_RETURN(int64_t nbits, ParamChoice(spec, "nbits", 4, bits));
  KVPACK_ASSIGN_OR_RETURN(int64_t group, ParamChoice(spec, "q_group_size", 64, {}));
  KVPACK_ASSIGN_OR_RETURN(int64_t residual, ParamChoice(spec, "residual_length", 128, {}));
  KVPACK_ASSIGN_OR_RETURN(int64_t axis_key, ParamChoice(spec, "axis_key", 0, axes));
  KVPACK_ASSIGN_OR_RETURN(int64_t axis_value, ParamChoice(spec, "axis_value", 0, axes));
  cfg.nbits = static_cast<int>(nbits);
  cfg.group = static_cast<int>(group);
  cfg.residual = static_cast<int>(residual);
  cfg.axis_key = static_cast<int>(axis_key);
  cfg.axis_value = static_cast<int>(axis_value);
  const int axis = shape.component == KvComponent::kKey ? cfg.axis_key : cfg.axis_value;
  if (axis != 0 && !cfg.mode_hf && residual % group != 0) {
    return InvalidArgument("'hf': per-channel groups in mode=append need residual_length=" +
                           std::to_string(residual) + " to be a multiple of q_group_size=" +
                           std::to_string(group));
  }
  return std::unique_ptr<ComponentStore>(new HfStore(shape, cfg));
}

}  // namespace kvpack
