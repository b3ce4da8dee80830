#include "model/llama_weights.h"

#include <string>

#include "ops/ggml_quants.h"

namespace kvpack {
namespace {

std::string ShapeText(const std::vector<int64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

class Binder {
 public:
  Binder(const GgufFile& f) : f_(f) {}

  Result<const GgufTensorInfo*> Find(const std::string& name, std::vector<int64_t> ne) {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) return NotFound(f_.path() + ": tensor '" + name + "' is missing");
    if (t->ne != ne) {
      return InvalidArgument(f_.path() + ": tensor '" + name + "' has shape " + ShapeText(t->ne) +
                             ", the hyper-parameters require " + ShapeText(ne));
    }
    if (!GetGgmlTypeTraits(t->type).supported) {
      return Unimplemented(f_.path() + ": tensor '" + name + "' has type " +
                           GgmlTypeName(t->type) +
                           ", which kvpack cannot compute with (supported: f32, f16, bf16, "
                           "q8_0, q4_0, q4_K, q6_K)");
    }
    return t;
  }

  Result<WeightMatrix> Matrix(const std::string& name, int64_t n_in, int64_t n_out) {
    KVPACK_ASSIGN_OR_RETURN(const GgufTensorInfo* t, Find(name, {n_in, n_out}));
    WeightMatrix w;
    w.type = t->type;
    w.data = t->data;
    w.n_in = n_in;
    w.n_out = n_out;
    w.row_bytes = GgmlRowBytes(t->type, n_in);
    return w;
  }

  Result<FloatVector> Vector(const std::string& name, int64_t n) {
    KVPACK_ASSIGN_OR_RETURN(const GgufTensorInfo* t, Find(name, {n}));
    FloatVector v;
    v.n = n;
    if (t->type == GgmlType::kF32) {
      v.data = reinterpret_cast<const float*>(t->data);
    } else {
      v.owned.resize(n);
      KVPACK_RETURN_IF_ERROR(DequantizeRow(t->type, t->data, v.owned.data(), n));
      v.data = v.owned.data();
    }
    return v;
  }

  Result<FloatVector> OptionalVector(const std::string& name, int64_t n) {
    if (!f_.FindTensor(name)) return FloatVector{};
    return Vector(name, n);
  }

 private:
  const GgufFile& f_;
};

}  // namespace

Result<LlamaWeights> BindLlamaWeights(const GgufFile& file, const LlamaConfig& c) {
  Binder b(file);
  LlamaWeights w;
  const GgufTensorInfo* embd = file.FindTensor("token_embd.weight");
  if (!embd) return NotFound(file.path() + ": tensor 'token_embd.weight' is missing");
  const int64_t n_vocab = embd->ne.size() == 2 ? embd->ne[1] : 0;
  if (c.n_vocab != 0 && c.n_vocab != n_vocab) {
    return InvalidArgument(file.path() + ": token_embd.weight has " + std::to_string(n_vocab) +
                           " rows but the vocabulary has " + std::to_string(c.n_vocab) + " tokens");
  }
  KVPACK_ASSIGN_OR_RETURN(w.token_embd, b.Matrix("token_embd.weight", c.n_embd, n_vocab));
  KVPACK_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", c.n_embd));
  if (file.FindTensor("output.weight")) {
    KVPACK_ASSIGN_OR_RETURN(w.output, b.Matrix("output.weight", c.n_embd, n_vocab));
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  KVPACK_ASSIGN_OR_RETURN(w.rope_freqs, b.OptionalVector("rope_freqs.weight", c.n_rot / 2));
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayerWeights& L = w.layers[l];
    KVPACK_ASSIGN_OR_RETURN(L.attn_norm, b.Vector(p + "attn_norm.weight", c.n_embd));
    KVPACK_ASSIGN_OR_RETURN(L.wq, b.Matrix(p + "attn_q.weight", c.n_embd, c.q_dim()));
    KVPACK_ASSIGN_OR_RETURN(L.wk, b.Matrix(p + "attn_k.weight", c.n_embd, c.kv_dim()));
    KVPACK_ASSIGN_OR_RETURN(L.wv, b.Matrix(p + "attn_v.weight", c.n_embd, c.kv_dim()));
    KVPACK_ASSIGN_OR_RETURN(L.wo, b.Matrix(p + "attn_output.weight", c.q_dim(), c.n_embd));
    if (c.qkv_bias) {
      KVPACK_ASSIGN_OR_RETURN(L.bq, b.Vector(p + "attn_q.bias", c.q_dim()));
      KVPACK_ASSIGN_OR_RETURN(L.bk, b.Vector(p + "attn_k.bias", c.kv_dim()));
      KVPACK_ASSIGN_OR_RETURN(L.bv, b.Vector(p + "attn_v.bias", c.kv_dim()));
    } else {
      KVPACK_ASSIGN_OR_RETURN(L.bq, b.OptionalVector(p + "attn_q.bias", c.q_dim()));
      KVPACK_ASSIGN_OR_RETURN(L.bk, b.OptionalVector(p + "attn_k.bias", c.kv_dim()));
      KVPACK_ASSIGN_OR_RETURN(L.bv, b.OptionalVector(p + "attn_v.bias", c.kv_dim()));
    }
    KVPACK_ASSIGN_OR_RETURN(L.ffn_norm, b.Vector(p + "ffn_norm.weight", c.n_embd));
    KVPACK_ASSIGN_OR_RETURN(L.w_gate, b.Matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff));
    KVPACK_ASSIGN_OR_RETURN(L.w_up, b.Matrix(p + "ffn_up.weight", c.n_embd, c.n_ff));
    KVPACK_ASSIGN_OR_RETURN(L.w_down, b.Matrix(p + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  return w;
}

namespace {

size_t MatrixBytes(const WeightMatrix& m) { return m.row_bytes * m.n_out; }

size_t LayerMatrixBytes(const std::vector<LlamaLayerWeights>& layers) {
  size_t bytes = 0;
  for (const LlamaLayerWeights& L : layers) {
    bytes += MatrixBytes(L.wq) + MatrixBytes(L.wk) + MatrixBytes(L.wv) + MatrixBytes(L.wo) +
             MatrixBytes(L.w_gate) + MatrixBytes(L.w_up) + MatrixBytes(L.w_down);
  }
  return bytes;
}

}  // namespace

size_t LlamaWeights::DecodeBytesPerToken(const LlamaConfig&) const {
  return MatrixBytes(output) + token_embd.row_bytes + LayerMatrixBytes(layers);
}

size_t LlamaWeights::TotalBytes() const {
  return MatrixBytes(token_embd) + (tied_output ? 0 : MatrixBytes(output)) +
         LayerMatrixBytes(layers);
}

}  // namespace kvpack
