#include <cstdio>
#include <memory>
#include <sstream>

#include "eval/kv_stat.h"
#include "engine/session.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {

Runner RegisterKvstat(CLI::App& app) {
  struct Args {
    std::string model, file, prompt, kv = "q8_0;q4_0;kivi:bits=4;kivi:bits=2";
    int64_t n_tokens = 256, n_batch = 0, n_queries = 32;
    bool per_head = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "kvstat", "relative error of K, V and the attention output per layer and KV head, and "
                "bits per value, for a list of KV specs on real activations of a prompt");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  auto* file = cmd->add_option("-f,--file", args->file, "prompt text file");
  cmd->add_option("-p,--prompt", args->prompt, "prompt text")->excludes(file);
  cmd->add_option("-n,--tokens", args->n_tokens, "use the first N prompt tokens")
      ->capture_default_str();
  cmd->add_option("--kv", args->kv, "KV specs, separated by ';'")->capture_default_str();
  cmd->add_option("-b,--batch", args->n_batch, "append chunk (0: the whole prompt at once)")
      ->capture_default_str();
  cmd->add_option("--queries", args->n_queries,
                  "attention output measured at the last N prompt positions")
      ->capture_default_str();
  cmd->add_flag("--per-head", args->per_head, "one row per KV head (default: per layer)");

  return [args]() -> int {
    Result<TextModel> model = TextModel::Load(args->model);
    if (!model.ok()) return ReportError(model.status());
    std::string text = args->prompt;
    if (!args->file.empty()) {
      Result<std::string> t = ReadTextFile(args->file, 1 << 20);
      if (!t.ok()) return ReportError(t.status());
      text = *t;
    }
    if (text.empty()) return ReportError(InvalidArgument("give a prompt with -p or -f"));
    if (args->n_tokens < 1 || args->n_queries < 1 || args->n_batch < 0) {
      return ReportError(InvalidArgument("--tokens and --queries must be >= 1, --batch >= 0"));
    }
    std::vector<int32_t> tokens = model->tokenizer->Encode(text, /*add_special=*/true);
    if (static_cast<int64_t>(tokens.size()) > args->n_tokens) tokens.resize(args->n_tokens);
    std::vector<std::string> specs;
    std::stringstream ss(args->kv);
    for (std::string s; std::getline(ss, s, ';');) {
      if (!s.empty()) specs.push_back(s);
    }
    if (specs.empty()) return ReportError(InvalidArgument("--kv names no spec"));
    std::fprintf(stderr, "capturing Q/K/V of %zu tokens with the reference forward pass...\n",
                 tokens.size());
    Result<CapturedQkv> qkv = CaptureQkv(*model->llama, tokens);
    if (!qkv.ok()) return ReportError(qkv.status());
    KvStatOptions o{.n_batch = args->n_batch, .n_queries = args->n_queries};
    std::vector<KvStat> stats;
    for (const std::string& spec : specs) {
      Result<KvStat> st = MeasureKvStat(*qkv, spec, o);
      if (!st.ok()) return ReportError(st.status());
      stats.push_back(std::move(*st));
    }
    std::printf("relative Frobenius error ||X - X^|| / ||X|| on %lld tokens (attention: last %lld "
                "positions)\n\n",
                static_cast<long long>(qkv->n_tokens),
                static_cast<long long>(std::min(args->n_queries, qkv->n_tokens)));
    std::printf("| kv | K bits/value | V bits/value | K error | V error | attention error |\n"
                "|---|---|---|---|---|---|\n");
    for (const KvStat& s : stats) {
      std::printf("| %s | %.3f | %.3f | %.5f | %.5f | %.5f |\n", s.spec.c_str(),
                  s.keys.bits_per_value(), s.values.bits_per_value(), s.total.keys,
                  s.total.values, s.total.attention);
    }
    for (const KvStat& s : stats) {
      std::printf("\n%s\n\n| layer |%s K error | V error | attention error |\n|---|%s---|---|---|\n",
                  s.spec.c_str(), args->per_head ? " head |" : "", args->per_head ? "---|" : "");
      for (size_t l = 0; l < s.layers.size(); ++l) {
        if (!args->per_head) {
          const HeadError& e = s.layers[l];
          std::printf("| %zu | %.5f | %.5f | %.5f |\n", l, e.keys, e.values, e.attention);
          continue;
        }
        for (size_t h = 0; h < s.heads[l].size(); ++h) {
          const HeadError& e = s.heads[l][h];
          std::printf("| %zu | %zu | %.5f | %.5f | %.5f |\n", l, h, e.keys, e.values, e.attention);
        }
      }
    }
    return 0;
  };
}

}  // namespace kvpack::cli
