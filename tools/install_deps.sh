#!/usr/bin/env bash
# Installs the build dependencies (Debian bookworm / Ubuntu 24.04 packages). Idempotent; quiet when all present.
set -euo pipefail
pkgs=(cmake g++ make pkg-config nlohmann-json3-dev libpcre2-dev libfmt-dev libgtest-dev python3 ccache
      libboost-dev)  # Boost.Beast / Asio (header-only): the HTTP server of `dsinfer serve`
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
