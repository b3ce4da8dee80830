// Subcommands of the `kvpack` CLI. Each Register* adds its CLI11 subcommand and returns a
// runner invoked when that subcommand was chosen; runners return the process exit code.
#ifndef KVPACK_TOOLS_KVPACK_COMMANDS_H_
#define KVPACK_TOOLS_KVPACK_COMMANDS_H_

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "kvpack/status.h"

namespace kvpack::cli {

using Runner = std::function<int()>;

Runner RegisterGenerate(CLI::App& app);
Runner RegisterPerplexity(CLI::App& app);
Runner RegisterInfo(CLI::App& app);
Runner RegisterMakeModel(CLI::App& app);
Runner RegisterBench(CLI::App& app);
Runner RegisterPasskey(CLI::App& app);
Runner RegisterKvstat(CLI::App& app);

// Prints "error: <message>" to stderr and returns exit code 1.
int ReportError(const Status& status);
// Reads a whole file (or its first max_bytes bytes when max_bytes > 0).
Result<std::string> ReadTextFile(const std::string& path, int64_t max_bytes = 0);
// "1.23 MiB"
std::string FormatBytes(double bytes);

}  // namespace kvpack::cli

#endif  // KVPACK_TOOLS_KVPACK_COMMANDS_H_
