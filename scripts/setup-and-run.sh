#!/usr/bin/env bash
# Fresh machine to first output: installs dependencies, builds, and generates text with the
# bundled TinyStories model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/release/kvpack generate --model models/stories260K.gguf \
  --prompt "Once upon a time" --n-predict 120 --temp 0 "$@"
