#!/usr/bin/env bash
# The README's test command: install build deps, build everything and run every CPU test with ctest. When nvcc
# is present (as on the development and CI machines) the 'cuda' preset is used, which also compiles the CUDA
# backend and the GPU tests; GPU tests skip themselves without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
preset=cpu
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  preset=cuda
  export PATH="/usr/local/cuda/bin:$PATH"
fi
jobs=$(nproc)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset" -j "$jobs"
# Structured outputs: 50 JSON schemas + regex / choice / grammar cases through `dsinfer generate` on the shipped
# model, every output validated with jsonschema (skipped when the module is missing).
if python3 -c "import jsonschema" >/dev/null 2>&1; then
  python3 tests/python/structured_outputs_test.py --binary "build/$preset/dsinfer"
else
  echo "test.sh: python3 has no jsonschema module; skipping tests/python/structured_outputs_test.py" >&2
fi
