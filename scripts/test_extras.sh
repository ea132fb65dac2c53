#!/usr/bin/env bash
# Stages of the test command beyond ctest (called by scripts/test.sh with the build dir):
#   1. install into a temporary prefix and build/run the find_package consumers;
#   2. with VQ_HARDENING=1: the hardening stages (ASan+UBSan test suite, fuzz corpus replay,
#      bounded libFuzzer runs; scripts/ci_hardening.sh). Off by default until the stage has been
#      timed on the CI machine: a second, sanitized build of the whole tree takes ~30 min on 2 cores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-build-test}"
echo "== install + find_package consumers"
bash scripts/test_install.sh "$BUILD"
if [[ "${VQ_HARDENING:-0}" == 1 ]]; then
  VQ_FUZZ_SECONDS="${VQ_FUZZ_SECONDS:-15}" bash scripts/ci_hardening.sh build-hardening
fi
