#include "kv/codecs/flexgen_codec.h"

#include <algorithm>
#include <vector>

#include "kv/codecs/quant_common.h"
#include "kv/codecs/token_group_rows.h"

namespace kvpack {
namespace {

class FlexGenStore final : public ComponentStore {
 public:
  FlexGenStore(const StoreShape& shape, int bits, int group)
      : shape_(shape), bits_(bits), group_(std::min(group, shape.head_dim)) {
    for (int h = 0; h < shape.n_kv_heads; ++h) {
      heads_.emplace_back(shape.head_dim, group_, bits, QuantMethod::kMinMax);
    }
  }

  std::string spec() const override {
    return "flexgen:bits=" + std::to_string(bits_) + ",group=" + std::to_string(group_);
  }

  Status CheckInput(const float* rows, int64_t n_tokens) const override {
    return CheckQuantRows(rows, n_tokens, shape_);
  }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckInput(rows, n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int h = 0; h < shape_.n_kv_heads; ++h) heads_[h].AppendRow(rows + t * row_len + h * d);
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override { return heads_[head].n_rows(); }

  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    heads_[head].Scores(t0, nullptr, t1 - t0, 0, shape_.head_dim, q, n_q, scores, t1 - t0, 0);
  }

  void Prefetch(int head, int64_t t0, int64_t t1) const override {
    heads_[head].PrefetchSelected(t0, nullptr, t1 - t0, 0);
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    heads_[head].Accumulate(t0, nullptr, t1 - t0, 0, shape_.head_dim, p, n_q, t1 - t0, 0, out);
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    heads_[head].Decode(t0, t1, 0, shape_.head_dim, out);
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
    heads_[head].Keep(keep);
    return Status::Ok();
  }

  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const auto& h : heads_) {
      h.AddMemory(m);
      m.n_values += h.n_rows() * shape_.head_dim;
    }
    return m;
  }

 private:
  StoreShape shape_;
  int bits_, group_;
  std::vector<TokenGroupRows> heads_;  // per head: packed rows [n_tokens, head_dim]
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeFlexGenStore(const MethodSpec& spec,
                                                         const StoreShape& shape) {
  KVPACK_RETURN_IF_ERROR(CheckParamNames(spec, {"bits", "group"}));
  KVPACK_ASSIGN_OR_RETURN(int64_t bits, ParamChoice(spec, "bits", 4, {2, 4, 8}));
  KVPACK_ASSIGN_OR_RETURN(int64_t group, ParamChoice(spec, "group", 64, {}));
  return std::unique_ptr<ComponentStore>(
      new FlexGenStore(shape, static_cast<int>(bits), static_cast<int>(group)));
}

}  // namespace kvpack
