#include <cstdio>
#include <memory>

#include "model/synthetic_model.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {

Runner RegisterMakeModel(CLI::App& app) {
  struct Args {
    std::string shape = "smollm2-135m", out, type = "q8_0", arch = "llama";
    uint64_t seed = 1;
    int vocab = 0, embd = 0, layers = 0, heads = 0, kv_heads = 0, ff = 0, ctx = 8192;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "write a seeded random-weight GGUF with the shapes of a real model");
  cmd->add_option("--shape", args->shape,
                  "smollm2-135m, qwen2.5-0.5b, llama-3.2-1b or custom")->capture_default_str();
  cmd->add_option("-o,--out", args->out, "output GGUF path")->required();
  cmd->add_option("--type", args->type, "weight type: f32, f16, q8_0")->capture_default_str();
  cmd->add_option("--seed", args->seed, "random seed")->capture_default_str();
  cmd->add_option("--arch", args->arch, "custom: llama or qwen2");
  cmd->add_option("--vocab", args->vocab, "custom: vocabulary size");
  cmd->add_option("--embd", args->embd, "custom: embedding size");
  cmd->add_option("--layers", args->layers, "custom: layers");
  cmd->add_option("--heads", args->heads, "custom: query heads");
  cmd->add_option("--kv-heads", args->kv_heads, "custom: KV heads");
  cmd->add_option("--ff", args->ff, "custom: feed-forward size");
  cmd->add_option("--ctx", args->ctx, "context length written to the file")->capture_default_str();

  return [args]() -> int {
    SyntheticShape shape;
    if (args->shape == "custom") {
      shape.name = "custom";
      shape.arch = args->arch;
      shape.n_vocab = args->vocab, shape.n_embd = args->embd, shape.n_layers = args->layers;
      shape.n_heads = args->heads, shape.n_kv_heads = args->kv_heads, shape.n_ff = args->ff;
      if (shape.arch != "llama" && shape.arch != "qwen2") {
        return ReportError(InvalidArgument("--arch must be llama or qwen2"));
      }
    } else {
      Result<SyntheticShape> named = NamedSyntheticShape(args->shape);
      if (!named.ok()) return ReportError(named.status());
      shape = *named;
    }
    shape.n_ctx = args->ctx;
    GgmlType type;
    if (args->type == "f32") type = GgmlType::kF32;
    else if (args->type == "f16") type = GgmlType::kF16;
    else if (args->type == "q8_0") type = GgmlType::kQ8_0;
    else return ReportError(InvalidArgument("--type must be f32, f16 or q8_0"));
    Status s = WriteSyntheticModel(shape, type, args->seed, args->out);
    if (!s.ok()) return ReportError(s);
    std::printf("wrote %s (%s shape, %s weights, seed %llu)\n", args->out.c_str(),
                shape.name.c_str(), args->type.c_str(), static_cast<unsigned long long>(args->seed));
    return 0;
  };
}

}  // namespace kvpack::cli
