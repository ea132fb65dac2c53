#!/usr/bin/env bash
# Every tracked C/C++ source must be formatted by clang-format 14 with the repository's
# .clang-format: `clang-format --dry-run -Werror` fails on the first file that is not.
# Fix with: git ls-files '*.cpp' '*.hpp' '*.h' '*.c' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
CF=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1; then CF="$c"; break; fi
done
if [[ -z "$CF" ]]; then
  echo "check_format: clang-format not found (Debian: clang-format)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c')
"$CF" --dry-run -Werror "${files[@]}"
echo "format: ${#files[@]} files clean ($("$CF" --version | head -1))"
