#!/usr/bin/env bash
# Stages of the test command beyond ctest (called by scripts/test.sh with the build dir):
#   1. install into a temporary prefix and build/run the find_package consumers;
#   2. the hardening stages (scripts/ci_hardening.sh): a second build with ASan + UBSan, the whole
#      GoogleTest suite and every fuzz corpus under it, and each libFuzzer target for
#      VQ_FUZZ_SECONDS (default 20) seconds. VQ_HARDENING=0 skips them (a quick local run).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-build-test}"
echo "== install + find_package consumers"
bash scripts/test_install.sh "$BUILD"
if [[ "${VQ_HARDENING:-1}" != 0 ]]; then
  echo "== hardening (VQ_HARDENING=0 skips)"
  t0=$SECONDS
  VQ_FUZZ_SECONDS="${VQ_FUZZ_SECONDS:-20}" bash scripts/ci_hardening.sh build-hardening
  echo "   hardening stages took $((SECONDS - t0)) s"
fi
