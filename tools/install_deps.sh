#!/usr/bin/env bash
# Installs the build dependencies (Debian bookworm / Ubuntu 24.04 packages). Idempotent; quiet when all present.
set -euo pipefail
# python3-pip: tools/fetch_xgrammar.sh fetches xgrammar's sdist with `pip download` (cmake/xgrammar.cmake).
# libicu-dev: Unicode normalisation for the DeepSeek-V4.1 Engram vocabulary.
# libboost-dev: Boost.Beast / Asio (header-only), the HTTP server of `dsinfer serve`.
pkgs=(cmake g++ make pkg-config nlohmann-json3-dev libpcre2-dev libicu-dev libfmt-dev libgtest-dev python3 python3-pip
      ccache libboost-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# jsonschema: tests/python/structured_outputs_test.py (tools/test.sh skips it when the import fails). For the
# python3 on PATH; Debian's system Python needs --break-system-packages for a pip install.
if ! python3 -c "import jsonschema" >/dev/null 2>&1; then
  python3 -m pip install --quiet jsonschema >/dev/null 2>&1 ||
    python3 -m pip install --quiet --break-system-packages jsonschema >/dev/null 2>&1 ||
    echo "install_deps: could not install jsonschema; the structured-output schema test will be skipped" >&2
fi
