#!/usr/bin/env bash
# Builds the libFuzzer targets (preset fuzz: clang, ASan + UBSan) and runs each for SECONDS on its corpus, one
# at a time, at nice 19 (the machine is shared).
#   tools/fuzz.sh [SECONDS (default 60)] [TARGET ...]     targets: tests/fuzz/*.cpp except fuzz_util.h
# The committed seed corpus tests/fuzz/corpus/<target>/ is read only; inputs found are kept in
# build/fuzz/corpus/<target>/ and crashes in build/fuzz/artifacts/<target>/ (reproduce: build/fuzz/fuzz_<target>
# FILE). To fold new coverage into the committed corpus, minimized:
#   build/fuzz/fuzz_<target> -merge=1 tests/fuzz/corpus/<target> build/fuzz/corpus/<target>
# Exit status: non-zero when a target crashed (or did not build). Prints executions and coverage per target.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
cmake --preset fuzz >/dev/null
nice -n 19 cmake --build --preset fuzz -j "${FUZZ_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}" >/dev/null
failed=0
for t in "${targets[@]}"; do
  work=build/fuzz/corpus/$t art=build/fuzz/artifacts/$t log=build/fuzz/$t.log
  mkdir -p "$work" "$art"
  dict=(); [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  rc=0
  nice -n 19 "build/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="${FUZZ_MAX_LEN:-8192}" \
    -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed=1
    echo "fuzz_$t: FAILED (exit $rc) after ${execs:-?} executions; see $log:"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -8
  else
    echo "fuzz_$t: ok, ${execs:-?} executions in ${secs}s, ${cov:-cov ?}, corpus $(ls "$work" | wc -l) new + $(ls "tests/fuzz/corpus/$t" | wc -l) seeds"
  fi
done
exit $failed
