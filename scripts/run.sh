#!/usr/bin/env bash
# Install dependencies, build, and run the main job on its built-in default.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash scripts/install_deps.sh --with-plots
BUILD="${VQ_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$(nproc)" --target veloxquant_cli
mkdir -p out
# the main job: fidelity of every default method against the full cache on stories260K
"$BUILD/bin/veloxquant" eval --json out/eval_default.json --plot out/eval_default.png "$@"
