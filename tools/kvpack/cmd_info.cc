#include <cstdio>
#include <map>
#include <memory>

#include "engine/session.h"
#include "ops/vec.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {

Runner RegisterInfo(CLI::App& app) {
  struct Args {
    std::string model;
    int64_t n_ctx = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("info", "hyper-parameters, tensor types and memory");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  cmd->add_option("-c,--ctx", args->n_ctx, "context for the KV memory estimate (0: model's)");

  return [args]() -> int {
    Result<TextModel> model = TextModel::Load(args->model);
    if (!model.ok()) return ReportError(model.status());
    const LlamaConfig& c = model->llama->config();
    const GgufFile& f = model->llama->file();
    std::printf("file:          %s (GGUF v%u, %s)\n", args->model.c_str(), f.version(),
                FormatBytes(static_cast<double>(f.file_size())).c_str());
    std::printf("name:          %s\narch:          %s\n", c.name.c_str(), c.arch.c_str());
    std::printf("vocab:         %lld (%s tokenizer%s%s)\n", static_cast<long long>(c.n_vocab),
                model->tokenizer->model_name().c_str(),
                model->tokenizer->pre_name().empty() ? "" : ", pre ",
                model->tokenizer->pre_name().c_str());
    std::printf("layers:        %d\nembedding:     %d\nheads:         %d (kv heads %d, head_dim %d)\n",
                c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim);
    std::printf("ffn:           %d\ncontext:       %d (trained)\n", c.n_ff, c.n_ctx_train);
    std::printf("rms eps:       %g\nrope:          base %g, %d dims, %s pairs%s\n", c.rms_eps,
                c.rope_freq_base, c.n_rot,
                c.rope_layout == RopeLayout::kAdjacent ? "adjacent" : "half-split",
                model->llama->weights().rope_freqs.data ? ", frequency factors" : "");
    std::printf("qkv bias:      %s\noutput:        %s\n", c.qkv_bias ? "yes" : "no",
                model->llama->weights().tied_output ? "tied to token_embd" : "separate");
    std::map<std::string, std::pair<int, size_t>> by_type;
    for (const GgufTensorInfo& t : f.tensors()) {
      auto& e = by_type[GgmlTypeName(t.type)];
      ++e.first;
      e.second += t.n_bytes;
    }
    std::printf("tensors:       %zu\n", f.tensors().size());
    for (const auto& [type, e] : by_type) {
      std::printf("  %-6s %4d tensors, %s\n", type.c_str(), e.first,
                  FormatBytes(static_cast<double>(e.second)).c_str());
    }
    const int64_t ctx = args->n_ctx > 0 ? args->n_ctx : c.n_ctx_train;
    const double kv_f16 = 2.0 * 2.0 * c.n_layers * c.kv_dim() * static_cast<double>(ctx);
    std::printf("weights read per decoded token: %s\n",
                FormatBytes(static_cast<double>(model->llama->weights().DecodeBytesPerToken(c))).c_str());
    std::printf("f16 KV cache at %lld tokens: %s (%s per token)\n", static_cast<long long>(ctx),
                FormatBytes(kv_f16).c_str(), FormatBytes(kv_f16 / ctx).c_str());
    std::printf("SIMD target:   %s\n", SimdTargetName());
    return 0;
  };
}

}  // namespace kvpack::cli
