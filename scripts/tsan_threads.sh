#!/usr/bin/env bash
# ThreadSanitizer over the tests of everything that runs on the thread pool: the pool itself, the
# engine (weight products, attention), the caches' per-head work, the block codecs and the eval
# windows. Not part of CI (the sanitized library alone takes ~10 minutes on 2 cores); run it after
# changing threaded code. Usage: bash scripts/tsan_threads.sh [BUILD_DIR]   (default build-tsan)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-tsan}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" -DVQ_BUILD_BENCH=OFF -DVQ_BUILD_PYTHON=OFF \
  -DVQ_LAYER_CHECK=OFF \
  $(command -v ccache >/dev/null 2>&1 && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) > /dev/null
cmake --build "$BUILD" --target veloxquant
TESTS=(tests/core/thread_pool_test.cpp tests/eviction/eviction_threads_test.cpp
       tests/transform/block_codec_threads_test.cpp tests/model/eval_threads_test.cpp
       tests/model/engine_threads_test.cpp)
"${CXX:-g++}" -std=c++20 -O1 -g1 -fsanitize=thread -march=native -DEIGEN_DONT_PARALLELIZE \
  -Iinclude -Isrc -Itests -Itests/model -I/usr/include/eigen3 "${TESTS[@]}" \
  -o "$BUILD/tsan_threads" "$BUILD/lib/libveloxquant.a" \
  -lgtest -lgtest_main -lzstd -lxxhash -lsentencepiece -lpcre2-8 -lpthread
# halt_on_error: the first race fails the run with its report
TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}" "$BUILD/tsan_threads"
echo "tsan_threads: no data race reported"
