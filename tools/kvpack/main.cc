// kvpack: one CLI with subcommands (generate, perplexity, info, make-model).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "tools/kvpack/commands.h"

namespace kvpack::cli {

int ReportError(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

Result<std::string> ReadTextFile(const std::string& path, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (max_bytes > 0 && static_cast<int64_t>(text.size()) > max_bytes) text.resize(max_bytes);
  return text;
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace kvpack::cli

int main(int argc, char** argv) {
  CLI::App app{"kvpack: LLM inference with a compressible KV cache"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, kvpack::cli::Runner>> commands;
  auto add = [&](kvpack::cli::Runner (*reg)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    kvpack::cli::Runner run = reg(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  };
  add(kvpack::cli::RegisterGenerate);
  add(kvpack::cli::RegisterPerplexity);
  add(kvpack::cli::RegisterInfo);
  add(kvpack::cli::RegisterMakeModel);
  add(kvpack::cli::RegisterBench);
  add(kvpack::cli::RegisterPasskey);
  add(kvpack::cli::RegisterKvstat);
  CLI11_PARSE(app, argc, argv);
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return 1;
}
