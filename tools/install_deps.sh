#!/usr/bin/env bash
# Installs the build dependencies (Debian bookworm / Ubuntu 24.04 packages). Idempotent; quiet when all present.
# clang and its runtime libraries (libFuzzer, sanitizers) build the fuzz targets (tools/fuzz.sh).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
updated=0
install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ $updated = 1 ] || { $SUDO apt-get update -qq; updated=1; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}
install cmake g++ make pkg-config nlohmann-json3-dev libpcre2-dev libfmt-dev libgtest-dev python3 ccache clang
# libFuzzer ships in the runtime package of clang's own major version (libclang-rt-14-dev on bookworm).
clang_major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
[ -n "$clang_major" ] && install "libclang-rt-$clang_major-dev"
exit 0
