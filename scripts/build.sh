#!/usr/bin/env bash
# Configures and builds the release tree in build/release (the kvpack binary lands there).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build/release -j "$jobs"
