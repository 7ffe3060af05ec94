#!/usr/bin/env bash
# The README's test command: install build deps, configure the CPU preset (plus CUDA compile when nvcc is
# present), build everything and run every CPU test with ctest. GPU tests skip themselves without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs=$(nproc)
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$jobs"
ctest --preset cpu -j "$jobs"
