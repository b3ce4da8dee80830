// `kvpack perplexity --stream`: streaming perplexity (eval/streaming_perplexity.h) of one
// or more KV specs, each next to a full-cache reference run over the same streams.
#ifndef KVPACK_TOOLS_KVPACK_CMD_PERPLEXITY_STREAM_H_
#define KVPACK_TOOLS_KVPACK_CMD_PERPLEXITY_STREAM_H_

#include <cstdint>
#include <string>

namespace kvpack::cli {

struct PerplexityStreamArgs {
  std::string model, file;
  std::string kv;                 // specs separated by ';'
  std::string reference = "f32";  // the full cache every spec is compared with
  int64_t n_tokens = 1024;        // tokens per stream (-c)
  int64_t n_streams = 1;          // consecutive streams (--chunks)
  int64_t max_bytes = 0;
  int64_t report_every = 128;
  int threads = 1;
  bool quiet = false;
};

// Prints a summary table and a PPL-vs-tokens table (markdown); returns the exit code.
int RunPerplexityStream(const PerplexityStreamArgs& args);

}  // namespace kvpack::cli

#endif  // KVPACK_TOOLS_KVPACK_CMD_PERPLEXITY_STREAM_H_
