// `kvpack passkey`: passkey retrieval accuracy (eval/passkey.h) per prompt length and key
// depth, for a list of KV specs, always next to the full-cache baseline, so that a model
// too small to retrieve anything still shows a meaningful (zero) baseline row.
#include <cstdio>
#include <memory>
#include <sstream>
#include <vector>

#include "eval/passkey.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {
namespace {

template <typename T>
Result<std::vector<T>> ParseList(const std::string& text, const char* what) {
  std::vector<T> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::stringstream is(item);
    T v;
    if (!(is >> v)) return InvalidArgument(std::string("bad ") + what + " '" + item + "'");
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgument(std::string("empty ") + what + " list");
  return out;
}

std::vector<std::string> SplitSpecs(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ';')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

Runner RegisterPasskey(CLI::App& app) {
  struct Args {
    std::string model, file, baseline = "f16";
    std::string kv =
        "window:budget=0.5 + f16;sink:n=4,budget=0.5 + f16;h2o:budget=0.5 + f16;"
        "keyformer:budget=0.5 + f16";
    std::string lengths = "256,512,1024", depths = "0,0.25,0.5,0.75,1";
    int trials = 5, threads = 1;
    uint64_t seed = 1;
    int64_t n_ctx = 0, n_batch = 256, n_answer = 8;
    bool verbose = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "passkey", "passkey retrieval accuracy per length and depth, per KV spec vs the full cache");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  cmd->add_option("--kv", args->kv, "KV specs separated by ';'")->capture_default_str();
  cmd->add_option("--baseline", args->baseline, "full-cache spec shown first")
      ->capture_default_str();
  cmd->add_option("--lengths", args->lengths, "prompt lengths in tokens")->capture_default_str();
  cmd->add_option("--depths", args->depths, "key depths in [0, 1]")->capture_default_str();
  cmd->add_option("--trials", args->trials, "keys per length and depth")->capture_default_str();
  cmd->add_option("--seed", args->seed, "key seed")->capture_default_str();
  cmd->add_option("-f,--file", args->file,
                  "KIVI-style passkey_examples.jsonl instead of synthesised prompts");
  cmd->add_option("-c,--ctx", args->n_ctx, "session context (0: the model's)")
      ->capture_default_str();
  cmd->add_option("-b,--batch", args->n_batch, "prefill chunk length")->capture_default_str();
  cmd->add_option("--answer", args->n_answer, "tokens generated for the answer")
      ->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "threads")->capture_default_str();
  cmd->add_flag("-v,--verbose", args->verbose, "print each cell's last answer");

  return [args]() -> int {
    Result<TextModel> model = TextModel::Load(args->model);
    if (!model.ok()) return ReportError(model.status());
    PasskeyOptions po;
    Result<std::vector<int64_t>> lengths = ParseList<int64_t>(args->lengths, "length");
    if (!lengths.ok()) return ReportError(lengths.status());
    Result<std::vector<double>> depths = ParseList<double>(args->depths, "depth");
    if (!depths.ok()) return ReportError(depths.status());
    po.lengths = *lengths;
    po.depths = *depths;
    po.trials = args->trials;
    po.seed = args->seed;
    po.n_answer = args->n_answer;
    std::vector<PasskeyPrompt> file_prompts;
    if (!args->file.empty()) {
      Result<std::vector<PasskeyPrompt>> p = LoadPasskeyFile(*model->tokenizer, args->file);
      if (!p.ok()) return ReportError(p.status());
      file_prompts = std::move(*p);
    }
    std::vector<std::string> specs = {args->baseline};
    for (const std::string& s : SplitSpecs(args->kv)) {
      if (s != args->baseline) specs.push_back(s);
    }
    std::vector<std::vector<PasskeyCell>> results;
    for (const std::string& spec : specs) {
      SessionOptions so;
      so.kv_spec = spec;
      so.n_ctx = args->n_ctx;
      so.n_batch = args->n_batch;
      so.n_threads = args->threads;
      Result<std::unique_ptr<Session>> session = Session::Create(model->llama, so);
      if (!session.ok()) return ReportError(session.status().WithContext(spec));
      std::fprintf(stderr, "%s\n", spec.c_str());
      const bool verbose = args->verbose;
      auto on_cell = [&](const PasskeyCell& c) {
        if (verbose) {
          std::fprintf(stderr, "  length %lld depth %.2f: %d/%d, last answer '%s'\n",
                       static_cast<long long>(c.length), c.depth, c.n_correct, c.n_trials,
                       c.last_answer.c_str());
        }
      };
      Result<std::vector<PasskeyCell>> cells =
          file_prompts.empty()
              ? RunPasskey(**session, *model->tokenizer, po, on_cell)
              : RunPasskeyPrompts(**session, *model->tokenizer, file_prompts, po.n_answer);
      if (!cells.ok()) return ReportError(cells.status().WithContext(spec));
      if (!file_prompts.empty()) {
        for (const PasskeyCell& c : *cells) on_cell(c);
      }
      results.push_back(std::move(*cells));
    }
    // Accuracy, then the share of (layer, head) caches that kept the key after the prompt.
    for (int table = 0; table < 2; ++table) {
      std::printf(table == 0
                      ? "Accuracy (correct / trials):\n\n"
                      : "\nKey kept after the prompt (share of layer x KV head caches):\n\n");
      std::printf("| length | depth |");
      for (const std::string& s : specs) std::printf(" `%s` |", s.c_str());
      std::printf("\n|---:|---:|");
      for (size_t i = 0; i < specs.size(); ++i) std::printf("---:|");
      std::printf("\n");
      std::vector<double> sum(specs.size(), 0.0), count(specs.size(), 0.0);
      for (size_t c = 0; c < results[0].size(); ++c) {
        std::printf("| %lld | %.2f |", static_cast<long long>(results[0][c].length),
                    results[0][c].depth);
        for (size_t s = 0; s < specs.size(); ++s) {
          const PasskeyCell& cell = results[s][c];
          if (table == 0) {
            std::printf(" %d/%d |", cell.n_correct, cell.n_trials);
            sum[s] += cell.n_correct;
            count[s] += cell.n_trials;
          } else if (cell.key_retained < 0.0) {
            std::printf(" n/a |");
          } else {
            std::printf(" %.2f |", cell.key_retained);
            sum[s] += cell.key_retained;
            count[s] += 1.0;
          }
        }
        std::printf("\n");
      }
      std::printf("| all | |");
      for (size_t s = 0; s < specs.size(); ++s) {
        if (count[s] == 0.0) {
          std::printf(" n/a |");
        } else {
          std::printf(table == 0 ? " %.1f%% |" : " %.2f |",
                      (table == 0 ? 100.0 : 1.0) * sum[s] / count[s]);
        }
      }
      std::printf("\n");
    }
    return 0;
  };
}

}  // namespace kvpack::cli
