#!/usr/bin/env bash
# Hardening stages of CI (docs/reliability.md):
#   1. a separate build with AddressSanitizer + UndefinedBehaviorSanitizer (-DVQ_SANITIZE=ON, -O1),
#      which also builds the libFuzzer targets when clang is available (-DVQ_BUILD_FUZZ=ON);
#   2. the whole GoogleTest suite (vq_tests) under the sanitizers, leaks included;
#   3. every fuzz corpus replayed through its target (vq_replay_*, sanitized);
#   4. every libFuzzer target run for a bounded time (VQ_FUZZ_SECONDS, default 20 s each) on a
#      scratch copy of its corpus; the executions per target are printed.
# Usage: scripts/ci_hardening.sh [BUILD_DIR]   (default build-hardening)
# Environment: VQ_FUZZ_SECONDS (0 skips stage 4), VQ_JOBS, VQ_HARDENING_FILTER (gtest filter).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-build-hardening}"
JOBS="${VQ_JOBS:-$(nproc)}"
FUZZ_SECONDS="${VQ_FUZZ_SECONDS:-20}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

CXX_BIN=""
for c in clang++-14 clang++; do
  if command -v "$c" > /dev/null; then CXX_BIN="$c"; break; fi
done
FUZZ=OFF
GEN=()
if [[ -n "$CXX_BIN" ]]; then
  CC_BIN="${CXX_BIN/clang++/clang}"
  GEN=(-DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN")
  FUZZ=ON
else
  echo "ci_hardening: clang not found; sanitizers with the default compiler, no libFuzzer runs"
fi

echo "== hardening 1/4: configure + build ($BUILD, ASan + UBSan, -O1, fuzz=$FUZZ)"
t0=$SECONDS
cmake -S . -B "$BUILD" -G Ninja "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DVQ_SANITIZE=ON -DVQ_BUILD_FUZZ="$FUZZ" -DVQ_BUILD_BENCH=OFF -DVQ_BUILD_PYTHON=OFF \
  $(command -v ccache >/dev/null 2>&1 && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache) > /dev/null
# Only what the stages below run: the test binary, the CLI it drives, the replay drivers and the
# libFuzzer targets (no C example, install consumers or benchmarks).
targets=(vq_tests veloxquant_cli)
for corpus in fuzz/corpus/*/; do
  name="$(basename "$corpus")"
  targets+=("vq_replay_$name")
  [[ "$FUZZ" == ON ]] && targets+=("vq_fuzz_$name")
done
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
echo "   built in $((SECONDS - t0)) s"

echo "== hardening 2/4: vq_tests under ASan + UBSan"
t0=$SECONDS
"$BUILD/bin/vq_tests" --gtest_brief=1 ${VQ_HARDENING_FILTER:+--gtest_filter="$VQ_HARDENING_FILTER"}
echo "   vq_tests clean under sanitizers in $((SECONDS - t0)) s"

echo "== hardening 3/4: corpus replay"
for corpus in fuzz/corpus/*/; do
  name="$(basename "$corpus")"
  "$BUILD/bin/vq_replay_$name" "$corpus"
done

if [[ "$FUZZ" != ON || "$FUZZ_SECONDS" == 0 ]]; then
  echo "== hardening 4/4: skipped (fuzz=$FUZZ, VQ_FUZZ_SECONDS=$FUZZ_SECONDS)"
  exit 0
fi
echo "== hardening 4/4: libFuzzer, ${FUZZ_SECONDS} s per target"
WORK="$BUILD/fuzz-work"
rm -rf "$WORK"
mkdir -p "$WORK/artifacts"
summary=()
status=0
for corpus in fuzz/corpus/*/; do
  name="$(basename "$corpus")"
  bin="$BUILD/bin/vq_fuzz_$name"
  mkdir -p "$WORK/$name"
  log="$WORK/$name.log"
  # New inputs go to the scratch directory (first argument); the committed corpus is read only.
  if "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
      -print_final_stats=1 -artifact_prefix="$WORK/artifacts/$name-" "$WORK/$name" "$corpus" > "$log" 2>&1; then
    execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
    summary+=("$(printf '%-12s %10s execs  cov %6s  ok' "$name" "$execs" "$cov")")
  else
    status=1
    summary+=("$(printf '%-12s FAILED, see %s' "$name" "$log")")
    tail -40 "$log"
  fi
done
printf '   %s\n' "${summary[@]}"
if [[ $status != 0 ]]; then
  echo "ci_hardening: a fuzz target failed; crashing inputs are in $WORK/artifacts"
  exit 1
fi
echo "hardening stages passed"
