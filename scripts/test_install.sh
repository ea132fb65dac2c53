#!/usr/bin/env bash
# Install VeloxQuant into a temporary prefix, then build and run the two example projects that
# find it with find_package(veloxquant): examples/consumer (C++) and examples/c_api (C). Also runs
# the installed CLI once.
#
#   scripts/test_install.sh [BUILD_DIR]     (default: build; configured and built if needed)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
jobs="${VQ_JOBS:-2}"
work="$(mktemp -d "${TMPDIR:-/tmp}/vq-install-XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVQ_BUILD_BENCH=OFF \
    -DVQ_BUILD_PYTHON=OFF
fi
cmake --build "$build" -j "$jobs" --target veloxquant veloxquant_cli
cmake --install "$build" --prefix "$prefix" >/dev/null

echo "== installed files"
(cd "$prefix" && find . -type f | sort | grep -v '/include/' ; echo "  + $(find include -type f | wc -l) headers")

for example in consumer c_api; do
  echo "== examples/$example"
  cmake -S "$root/examples/$example" -B "$work/build-$example" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/build-$example" -j "$jobs" >/dev/null
done
"$work/build-consumer/consumer"
"$work/build-c_api/c_api_example"

echo "== installed CLI"
"$prefix/bin/veloxquant" --version
"$prefix/bin/veloxquant" methods > "$work/methods.txt"  # no pipe into head: pipefail + SIGPIPE
head -3 "$work/methods.txt"
echo "install test passed"
