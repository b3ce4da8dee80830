#include "tools/kvpack/cmd_perplexity_stream.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "eval/streaming_perplexity.h"
#include "tools/kvpack/commands.h"

namespace kvpack::cli {
namespace {

std::vector<std::string> SplitSpecs(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(';', begin), list.size());
    std::string item = list.substr(begin, end - begin);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
    begin = end + 1;
  }
  return out;
}

struct Row {
  std::string spec;
  StreamingResult r;
};

}  // namespace

int RunPerplexityStream(const PerplexityStreamArgs& a) {
  Result<TextModel> model = TextModel::Load(a.model);
  if (!model.ok()) return ReportError(model.status());
  Result<std::string> text = ReadTextFile(a.file, a.max_bytes);
  if (!text.ok()) return ReportError(text.status());
  const std::vector<int32_t> tokens = model->tokenizer->Encode(*text, /*add_special=*/true);
  std::fprintf(stderr, "%zu tokens; %lld streams of %lld tokens, one token per step\n",
               tokens.size(), static_cast<long long>(a.n_streams),
               static_cast<long long>(a.n_tokens));
  StreamingOptions so;
  so.n_tokens = a.n_tokens;
  so.n_streams = a.n_streams;
  so.report_every = a.report_every;
  std::vector<float> reference_logits;

  std::vector<std::string> specs = {a.reference};
  for (const std::string& s : SplitSpecs(a.kv)) {
    if (s != a.reference) specs.push_back(s);
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < specs.size(); ++i) {
    SessionOptions o;
    o.kv_spec = specs[i];
    o.n_ctx = a.n_tokens;  // original positions reach n_tokens - 1
    o.n_batch = 1;
    o.n_threads = a.threads;
    Result<std::unique_ptr<Session>> session = Session::Create(model->llama, o);
    if (!session.ok()) return ReportError(session.status().WithContext(specs[i]));
    StreamingOptions run = so;
    if (i == 0) {
      run.record_logits = &reference_logits;
    } else {
      run.reference_logits = &reference_logits;
    }
    const bool quiet = a.quiet;
    const std::string label = specs[i];
    Result<StreamingResult> r = RunStreamingPerplexity(
        **session, tokens, model->tokenizer->bos(), run, [&](int64_t done, int64_t total) {
          if (quiet || (done % 64 != 0 && done != total)) return;
          std::fprintf(stderr, "\r%-50s %lld/%lld", label.c_str(), static_cast<long long>(done),
                       static_cast<long long>(total));
          if (done == total) std::fputc('\n', stderr);
        });
    if (!r.ok()) return ReportError(r.status().WithContext(specs[i]));
    std::printf("%s: PPL = %.4f +/- %.4f", (*session)->cache().spec().ToString().c_str(),
                r->total.ppl, r->total.ppl_stderr);
    if (r->has_kld) {
      std::printf(", KLD = %.5f, same top-1 = %.4f", r->kld.mean, r->kld.same_top1);
    }
    std::printf(", budget %lld, KV %s (peak %s)\n", static_cast<long long>(r->budget),
                FormatBytes(static_cast<double>(r->curve.back().kv_bytes)).c_str(),
                FormatBytes(static_cast<double>(r->peak_kv_bytes)).c_str());
    std::fflush(stdout);
    rows.push_back({specs[i], std::move(*r)});
  }

  std::printf(
      "\n| KV spec | budget (tokens) | PPL | mean KLD vs %s | same top-1 | KV bytes (end) |\n",
      a.reference.c_str());
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    std::printf("| `%s` | %s | %.3f | %s | %s | %zu |\n", row.spec.c_str(),
                row.r.budget ? std::to_string(row.r.budget).c_str() : "all", row.r.total.ppl,
                row.r.has_kld ? std::to_string(row.r.kld.mean).c_str() : "-",
                row.r.has_kld ? std::to_string(row.r.kld.same_top1).c_str() : "-",
                row.r.curve.back().kv_bytes);
  }
  std::printf("\nPPL of the tokens in each interval (tokens seen):\n\n| KV spec |");
  for (const StreamingPoint& p : rows[0].r.curve)
    std::printf(" %lld |", static_cast<long long>(p.n_seen));
  std::printf("\n|---|");
  for (size_t i = 0; i < rows[0].r.curve.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const Row& row : rows) {
    std::printf("| `%s` |", row.spec.c_str());
    for (const StreamingPoint& p : row.r.curve) std::printf(" %.3f |", p.ppl_interval);
    std::printf("\n");
  }
  return 0;
}

}  // namespace kvpack::cli
