#!/usr/bin/env bash
# Install dependencies, build with warnings as errors, and run every test.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash scripts/install_deps.sh
echo "== clang-format --dry-run -Werror"
bash scripts/check_format.sh
BUILD="${VQ_BUILD_DIR:-build-test}"
JOBS="${VQ_JOBS:-$(nproc)}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVQ_WERROR=ON
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
if [[ -x scripts/test_extras.sh ]]; then bash scripts/test_extras.sh "$BUILD"; fi
echo "all tests passed"
