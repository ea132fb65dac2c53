#!/usr/bin/env bash
# Long libFuzzer runs (not part of CI; CI runs 20 s per target in scripts/ci_hardening.sh).
# Builds every fuzz target with clang (libFuzzer; ASan + UBSan unless VQ_FUZZ_SANITIZE=OFF), then
# runs each one on a scratch copy of its committed corpus until it has executed VQ_FUZZ_RUNS
# inputs or VQ_FUZZ_SECONDS have passed, whichever comes first, VQ_FUZZ_PARALLEL targets at a
# time. Prints one line per target (executions, seconds, coverage, new corpus entries) and keeps
# the logs, the grown corpora and any crashing inputs under BUILD_DIR/fuzz-long/.
#
#   scripts/fuzz_long.sh [BUILD_DIR]        (default build-fuzz)
#   VQ_FUZZ_RUNS=1000000 VQ_FUZZ_SECONDS=3600 VQ_FUZZ_PARALLEL=2 VQ_FUZZ_TARGETS="vqkv npy"
#
# Exit status 1 when a target crashed, leaked, timed out on an input or hit the memory limit.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-build-fuzz}"
RUNS="${VQ_FUZZ_RUNS:-1000000}"
SECONDS_MAX="${VQ_FUZZ_SECONDS:-3600}"
PARALLEL="${VQ_FUZZ_PARALLEL:-$(nproc)}"
SANITIZE="${VQ_FUZZ_SANITIZE:-ON}"
JOBS="${VQ_JOBS:-$(nproc)}"
# targets that go through a temporary file run several times faster with it in memory
if [[ -z "${TMPDIR:-}" && -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi

CXX_BIN=""
for c in clang++-14 clang++; do
  if command -v "$c" > /dev/null; then CXX_BIN="$c"; break; fi
done
if [[ -z "$CXX_BIN" ]]; then
  echo "fuzz_long: clang++ not found (libFuzzer needs clang; Debian: clang)" >&2
  exit 1
fi
CC_BIN="${CXX_BIN/clang++/clang}"

names=()
if [[ -n "${VQ_FUZZ_TARGETS:-}" ]]; then
  read -r -a names <<< "$VQ_FUZZ_TARGETS"
else
  for corpus in fuzz/corpus/*/; do names+=("$(basename "$corpus")"); done
fi
for n in "${names[@]}"; do
  [[ -d "fuzz/corpus/$n" ]] || { echo "fuzz_long: no corpus fuzz/corpus/$n" >&2; exit 1; }
done

echo "== build ($BUILD, clang, sanitize=$SANITIZE)"
t0=$SECONDS
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DVQ_SANITIZE="$SANITIZE" -DVQ_BUILD_FUZZ=ON \
  -DVQ_BUILD_TESTS=OFF -DVQ_BUILD_BENCH=OFF -DVQ_BUILD_PYTHON=OFF > /dev/null
targets=()
for n in "${names[@]}"; do targets+=("vq_fuzz_$n"); done
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
echo "   built in $((SECONDS - t0)) s"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
WORK="$BUILD/fuzz-long"
mkdir -p "$WORK/artifacts"

run_one() {
  local name="$1" log="$WORK/$1.log" start=$SECONDS
  mkdir -p "$WORK/$name"
  local before
  before="$(find "$WORK/$name" -type f | wc -l)"
  if "$BUILD/bin/vq_fuzz_$name" -runs="$RUNS" -max_total_time="$SECONDS_MAX" -timeout=10 \
      -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
      -artifact_prefix="$WORK/artifacts/$name-" "$WORK/$name" "fuzz/corpus/$name" > "$log" 2>&1; then
    local execs cov after
    execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
    after="$(find "$WORK/$name" -type f | wc -l)"
    printf '%-12s %10s execs %6d s  cov %6s  new corpus %5d  ok\n' "$name" "$execs" \
      "$((SECONDS - start))" "$cov" "$((after - before))" > "$WORK/$name.summary"
  else
    printf '%-12s FAILED after %d s, see %s\n' "$name" "$((SECONDS - start))" "$log" \
      > "$WORK/$name.summary"
  fi
}

echo "== run: up to $RUNS executions or $SECONDS_MAX s per target, $PARALLEL at a time"
active=0
for n in "${names[@]}"; do
  run_one "$n" &
  active=$((active + 1))
  if [[ $active -ge $PARALLEL ]]; then
    wait -n || true
    active=$((active - 1))
  fi
done
wait || true

status=0
for n in "${names[@]}"; do
  cat "$WORK/$n.summary"
  grep -q FAILED "$WORK/$n.summary" && status=1
done
if [[ $status != 0 ]]; then
  echo "fuzz_long: a target failed; crashing inputs are in $WORK/artifacts" >&2
fi
exit $status
