#include <cstdio>
#include <memory>

#include "eval/perplexity.h"
#include "kv/spec.h"
#include "tools/kvpack/cmd_perplexity_stream.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {

Runner RegisterPerplexity(CLI::App& app) {
  struct Args {
    std::string model, file, kv = "f16";
    int64_t n_ctx = 512, max_bytes = 0, max_windows = 0, n_batch = 0;
    int threads = 1;
    bool quiet = false, kld = false, stream = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "perplexity of a text file, llama.cpp's llama-perplexity protocol");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", args->file, "text file")->required();
  cmd->add_option("-c,--ctx", args->n_ctx, "window length in tokens")->capture_default_str();
  cmd->add_option("--bytes", args->max_bytes, "use only the first N bytes of the file (0: all)")
      ->capture_default_str();
  cmd->add_option("--chunks", args->max_windows, "evaluate at most N windows (0: all)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "threads")->capture_default_str();
  cmd->add_option("-b,--batch", args->n_batch, "chunk length (0: whole window for an f32 cache, else 1 = decode semantics)")
      ->capture_default_str();
  cmd->add_option("--kv", args->kv, "KV cache spec")->capture_default_str();
  cmd->add_flag("--kld", args->kld,
                "also run an f32-cache reference in the same run and report KL divergence "
                "(mean, 99th percentile) and same-top-1 rate");
  cmd->add_flag("--stream", args->stream,
                "streaming perplexity (cmd_perplexity_stream.h): --chunks streams of -c tokens "
                "fed one at a time; --kv takes specs separated by ';', each shown next to an "
                "f32 full cache");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress bar");

  return [args]() -> int {
    if (args->stream) {
      return RunPerplexityStream({.model = args->model, .file = args->file, .kv = args->kv,
                                  .n_tokens = args->n_ctx,
                                  .n_streams = std::max<int64_t>(1, args->max_windows),
                                  .max_bytes = args->max_bytes, .threads = args->threads,
                                  .quiet = args->quiet});
    }
    Result<TextModel> model = TextModel::Load(args->model);
    if (!model.ok()) return ReportError(model.status());
    Result<std::string> text = ReadTextFile(args->file, args->max_bytes);
    if (!text.ok()) return ReportError(text.status());
    SessionOptions so;
    so.n_ctx = args->n_ctx;
    so.n_threads = args->threads;
    // Decode semantics (docs/evaluation.md): the logits at t must come from the cache as it
    // stands after t-1 appends, but a chunk attends to its own keys and values in full
    // precision before storing them. So only an exact (f32) cache may run whole windows;
    // every other codec (f16 included: its rounding is part of what is measured) defaults to
    // 1-token chunks.
    Result<KvSpec> spec = ParseKvSpec(args->kv);
    if (!spec.ok()) return ReportError(spec.status());
    const bool batchable =
        spec->keys.name == "f32" && spec->values.name == "f32" && !spec->policy;
    so.n_batch = args->n_batch > 0 ? args->n_batch : (batchable ? args->n_ctx : 1);
    so.kv_spec = args->kv;
    Result<std::unique_ptr<Session>> session = Session::Create(model->llama, so);
    if (!session.ok()) return ReportError(session.status());
    std::unique_ptr<Session> reference;
    if (args->kld) {
      SessionOptions ro = so;
      ro.kv_spec = "f32";
      ro.n_batch = args->n_ctx;  // plain cache: whole-window chunks give decode semantics
      Result<std::unique_ptr<Session>> r = Session::Create(model->llama, ro);
      if (!r.ok()) return ReportError(r.status());
      reference = std::move(*r);
    }
    const std::vector<int32_t> tokens = model->tokenizer->Encode(*text, /*add_special=*/true);
    std::fprintf(stderr, "%zu tokens, %lld windows of %lld\n", tokens.size(),
                 static_cast<long long>(tokens.size() / args->n_ctx),
                 static_cast<long long>(args->n_ctx));
    PerplexityOptions po;
    po.n_ctx = args->n_ctx;
    po.max_windows = args->max_windows;
    po.reference = reference.get();
    const bool quiet = args->quiet;
    Result<PerplexityResult> r = RunPerplexity(
        **session, tokens, model->tokenizer->bos(), po,
        [quiet](int64_t done, int64_t total, double ppl) {
          if (quiet) return;
          const int width = 40, filled = static_cast<int>(width * done / total);
          std::fprintf(stderr, "\r[%s%s] %lld/%lld windows, PPL %.4f",
                       std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
                       static_cast<long long>(done), static_cast<long long>(total), ppl);
          if (done == total) std::fputc('\n', stderr);
        });
    if (!r.ok()) return ReportError(r.status());
    const MemoryUsage mem = (*session)->cache().Memory();
    std::printf("PPL = %.4f +/- %.5f  (%lld windows of %lld, %lld tokens scored, kv %s)\n", r->ppl,
                r->ppl_stderr, static_cast<long long>(r->n_windows),
                static_cast<long long>(args->n_ctx), static_cast<long long>(r->n_scored),
                (*session)->cache().spec().ToString().c_str());
    std::printf("KV bits/value = %.3f (last window, %lld values)\n", mem.bits_per_value(),
                static_cast<long long>(mem.n_values));
    if (r->has_kld) {
      const KldSummary& k = r->kld;
      std::printf("KLD vs f32: mean = %.4e +/- %.2e, median = %.4e, p99 = %.4e, max = %.4e\n",
                  k.mean, k.mean_stderr, k.median, k.p99, k.max);
      std::printf("same top-1 = %.4f  (f32 reference PPL = %.4f)\n", k.same_top1,
                  r->reference_ppl);
    }
    return 0;
  };
}

}  // namespace kvpack::cli
