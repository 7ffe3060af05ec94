#!/usr/bin/env bash
# The README's test command: install build deps, build everything and run every CPU test with ctest. When nvcc
# is present (as on the development and CI machines) the 'cuda' preset is used, which also compiles the CUDA
# backend and the GPU tests; GPU tests skip themselves without a device.
#   tools/test.sh          the default build and test suite (above)
#   tools/test.sh asan     the CPU suite built with ASan + UBSan (preset cpu-asan); any report fails the run
#   tools/test.sh fuzz     a short run of every libFuzzer target (tools/fuzz.sh, FUZZ_SECONDS each, default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
# ccache hits across checkouts in other folders (CI clones afresh): paths under the repo are hashed relative to
# it, and -g builds (asan, fuzz) do not hash the build directory.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
mode=${1:-default}
jobs=$(nproc)
case "$mode" in
  default)
    preset=cpu
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
      preset=cuda
      export PATH="/usr/local/cuda/bin:$PATH"
    fi
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$jobs"
    ctest --preset "$preset" -j "$jobs"
    # Structured outputs: 50 JSON schemas + regex / choice / grammar cases through `dsinfer generate` on the
    # shipped model, every output validated with jsonschema (skipped when the module is missing).
    if python3 -c "import jsonschema" >/dev/null 2>&1; then
      python3 tests/python/structured_outputs_test.py --binary "build/$preset/dsinfer"
    else
      echo "test.sh: python3 has no jsonschema module; skipping tests/python/structured_outputs_test.py" >&2
    fi
    ;;
  asan)
    # UBSan findings abort (halt_on_error) so that they fail the test that triggered them.
    # Leak checking is off in CI (tools/fuzz.sh and a local `ASAN_OPTIONS=detect_leaks=1 tools/test.sh asan` keep
    # it): third-party thread pools (xgrammar) and detached server threads alive at exit are reported as leaks.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
    cmake --preset cpu-asan >/dev/null
    cmake --build --preset cpu-asan -j "$jobs" --target dsinfer dsinfer_unit_tests
    # The long end-to-end speculative-decoding (engine runs, offline replays) and 200-client server tests run in the
    # default stage only: under ASan they would take most of CI's time budget, and the code paths they cover run in
    # the shorter tests too.
    ctest --preset cpu-asan -j "$jobs" -E '^(SpecEngine|ServerLoad)\.|^SpecOffline\..*EngineMatches'
    ;;
  fuzz)
    bash tools/fuzz.sh "${FUZZ_SECONDS:-20}"
    ;;
  *)
    echo "usage: tools/test.sh [default|asan|fuzz]" >&2
    exit 2
    ;;
esac
