#!/usr/bin/env bash
# Install VeloxQuant's build and test dependencies from Debian 12's packages.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config g++ clang clang-format libclang-rt-14-dev
      libeigen3-dev nlohmann-json3-dev libcli11-dev libzstd-dev libxxhash-dev libpcre2-dev libsentencepiece-dev
      libicu-dev
      libgtest-dev libgmock-dev libbenchmark-dev pybind11-dev python3-dev python3-numpy python3-pytest)
if [[ "${1:-}" == "--with-plots" ]]; then PKGS+=(python3-matplotlib); fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; }
fi
