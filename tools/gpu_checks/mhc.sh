#!/usr/bin/env bash
# mHC kernels (issue 10): the GpuMhc* parity / determinism / invariance tests (hc_pre, hc_post, hc_head against the
# CPU reference), then dsinfer_mhc_bench (per-call time at T = 1, 64, 256, 4096 on V4-Flash shapes, with the floor,
# the two hc_pre kernels alone, the batch-invariant split and the old per-call figures). Gets OUT and BIN
# (tools/gpu_checks/README.md); exits non-zero when a test or the bench fails. ~1 minute.
set -uo pipefail
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
rc=0
fail() { echo "mhc check FAILED: $1"; rc=1; }

echo "== GpuMhc* GPU tests"
timeout 180 "$BIN/dsinfer_gpu_tests" --gtest_filter='GpuMhc*' 2>&1 | tee "$OUT/mhc_gpu_tests.log" | tail -12
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "GpuMhc tests"

echo "== dsinfer_mhc_bench"
bench="$BIN/dsinfer_mhc_bench"
[ -x "$bench" ] || bench=.gpu_carry/dsinfer_mhc_bench
timeout 120 "$bench" 2>&1 | tee "$OUT/mhc_bench.log" || fail "dsinfer_mhc_bench"
exit $rc
