#!/usr/bin/env bash
# A/B of kv_codec_bench binaries on a noisy host: runs each binary in turn, ROUNDS times, each
# run with 3 repetitions, and prints per benchmark and binary the best (smallest) time of all
# its repetitions. Alternating the binaries puts a drift of the host's speed on both; the best
# of many is the least disturbed by other tenants (on the session-36/37 Zen 3 the medians of
# the same binary moved by up to 30% between runs).
#
# Usage: scripts/kernel-ab.sh "SPEC;SPEC" 'BENCHMARK_FILTER' ROUNDS BINARY...
#   e.g. cp build/release/bench/kv_codec_bench /tmp/kcb-new (and an older build to
#   /tmp/kcb-old), then
#   scripts/kernel-ab.sh "kivi:bits=4;flexgen:bits=4" '^Accumulate/.*/512/1$' 4 \
#     /tmp/kcb-old /tmp/kcb-new
set -euo pipefail

if [[ $# -lt 4 ]]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
specs=$1
filter=$2
rounds=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for bin in "$@"; do
    # One line per repetition: the name, the time and its unit (aggregates left out).
    KV_CODEC_BENCH_SPECS="$specs" "$bin" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      2>/dev/null | awk -v b="$bin" '/^(Scores|Accumulate|AppendToken)/ &&
        $1 !~ /_(mean|median|stddev|cv)$/ { print $1, b, $2, $3 }' >> "$out"
  done
done
awk '{ k = $1 " " $2; if (!(k in best) || $3 + 0 < best[k] + 0) { best[k] = $3; unit[k] = $4 } }
     END { for (k in best) print k, best[k], unit[k] }' "$out" | sort
