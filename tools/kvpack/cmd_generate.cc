#include <cstdio>
#include <memory>

#include "engine/generate.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {

Runner RegisterGenerate(CLI::App& app) {
  struct Args {
    std::string model, prompt, prompt_file, kv = "f16";
    int64_t n_predict = 128, n_ctx = 0, n_batch = 256;
    int threads = 1;
    SamplerOptions sampler;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt, streaming it");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  auto* p = cmd->add_option("-p,--prompt", args->prompt, "prompt text");
  cmd->add_option("-f,--prompt-file", args->prompt_file, "read the prompt from a file")->excludes(p);
  cmd->add_option("-n,--n-predict", args->n_predict, "tokens to generate")->capture_default_str();
  cmd->add_option("-c,--ctx", args->n_ctx, "context length (0: the model's)")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "threads")->capture_default_str();
  cmd->add_option("-b,--batch", args->n_batch, "prefill chunk length")->capture_default_str();
  cmd->add_option("--kv", args->kv, "KV cache spec, e.g. f16, f32")->capture_default_str();
  cmd->add_option("--temp", args->sampler.temperature, "temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", args->sampler.top_k, "top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", args->sampler.top_p, "top-p (1: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", args->sampler.repeat_penalty, "repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", args->sampler.repeat_last_n, "tokens the penalty looks at")
      ->capture_default_str();
  cmd->add_option("-s,--seed", args->sampler.seed, "sampling seed")->capture_default_str();

  return [args]() -> int {
    Result<TextModel> model = TextModel::Load(args->model);
    if (!model.ok()) return ReportError(model.status());
    std::string prompt = args->prompt;
    if (!args->prompt_file.empty()) {
      Result<std::string> text = ReadTextFile(args->prompt_file);
      if (!text.ok()) return ReportError(text.status());
      prompt = *text;
    }
    SessionOptions so;
    so.n_ctx = args->n_ctx;
    so.n_threads = args->threads;
    so.n_batch = args->n_batch;
    so.kv_spec = args->kv;
    Result<std::unique_ptr<Session>> session = Session::Create(model->llama, so);
    if (!session.ok()) return ReportError(session.status());
    const std::vector<int32_t> tokens = model->tokenizer->Encode(prompt, /*add_special=*/true);
    GenerateOptions go;
    go.n_predict = args->n_predict;
    go.sampler = args->sampler;
    std::fputs(prompt.c_str(), stdout);
    Result<GenerateStats> stats =
        Generate(**session, *model->tokenizer, tokens, go, [](const std::string& piece) {
          std::fputs(piece.c_str(), stdout);
          std::fflush(stdout);
        });
    std::fputc('\n', stdout);
    if (!stats.ok()) return ReportError(stats.status());
    const MemoryUsage mem = (*session)->cache().Memory();
    const int64_t n_decode_evals = std::max<int64_t>(0, stats->n_generated - 1);
    std::fprintf(stderr,
                 "\nprefill: %lld tokens in %.3f s (%.1f tok/s)\n"
                 "decode:  %lld tokens in %.3f s (%.1f tok/s)\n"
                 "kv cache [%s]: %s for %lld tokens (%.2f bits/value)\n",
                 static_cast<long long>(stats->n_prompt), stats->prefill_seconds,
                 stats->n_prompt / std::max(stats->prefill_seconds, 1e-9),
                 static_cast<long long>(n_decode_evals), stats->decode_seconds,
                 n_decode_evals / std::max(stats->decode_seconds, 1e-9),
                 (*session)->cache().spec().ToString().c_str(),
                 FormatBytes(static_cast<double>(mem.payload_bytes())).c_str(),
                 static_cast<long long>((*session)->n_past()), mem.bits_per_value());
    return 0;
  };
}

}  // namespace kvpack::cli
