#!/usr/bin/env bash
# The test command: installs dependencies, builds from scratch and runs
#   1. the unit, conformance and end-to-end tests (release build),
#   2. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
#   3. the GGUF reader fuzz target for a bounded time (libFuzzer, clang).
# Set KVPACK_QUICK=1 to run step 1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=${JOBS:-$(nproc)}
fuzz_seconds=${KVPACK_FUZZ_SECONDS:-60}

echo "== release build and tests"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$jobs"
ctest --test-dir build/release --output-on-failure -j "$jobs"

[ "${KVPACK_QUICK:-0}" = 1 ] && exit 0

echo "== ASan + UBSan build and unit tests"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVPACK_SANITIZE=ON \
  -DKVPACK_SIMD_STATIC_ONLY=ON -DKVPACK_BUILD_BENCH=OFF >/dev/null
cmake --build build/asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$jobs" -E "Slow|E2e"

echo "== fuzzing the GGUF reader for ${fuzz_seconds}s"
# The library is instrumented too (fuzzer-no-link) so that coverage guides the fuzzer into it.
CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVPACK_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
  -DKVPACK_SIMD_STATIC_ONLY=ON -DKVPACK_BUILD_TESTS=OFF -DKVPACK_BUILD_BENCH=OFF >/dev/null
cmake --build build/fuzz -j "$jobs" --target fuzz_gguf
rm -rf build/fuzz/corpus && mkdir -p build/fuzz/corpus
cp tests/fuzz/seeds/* build/fuzz/corpus/ 2>/dev/null || true
./build/fuzz/tests/fuzz/fuzz_gguf build/fuzz/corpus -max_total_time="$fuzz_seconds" \
  -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 15
echo "fuzz: no crash in ${fuzz_seconds}s"
