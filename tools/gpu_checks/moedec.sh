#!/usr/bin/env bash
# MoE decode fast path (issue 10, ops/moe/moe_fast.cu + moe_cuda.cpp): one-launch permutation, gate/up kernel on
# fp32 x, shared expert on a side stream. GPU parity (MoeGpu.FastPath* and RealFlashShapes vs the CPU
# reference; MoeFastGpu.* = the launch variants keep the bits, graph capture of the side stream) and the MoE bench
# at T = 1, 8, 64, 256 (us, floor at 4.8 TB/s, % of it). Gets OUT and BIN (tools/gpu_checks/README.md); exits
# non-zero when a test or the bench fails. ~1.5 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
rc=0
fail() { echo "moedec check FAILED: $1"; rc=1; }

echo "== MoE GPU tests (MoeGpu.FastPath*, MoeGpu.RealFlashShapes, MoeGpu.SmallAllFormats, MoeFastGpu.*)"
timeout 300 "$BIN/dsinfer_gpu_tests" \
  --gtest_filter='MoeGpu.FastPath*:MoeGpu.RealFlashShapes:MoeGpu.SmallAllFormats:MoeGpu.ArgumentErrors:MoeFastGpu.*' \
  2>&1 | tee "$OUT/moedec_gpu_tests.log" | tail -14
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "MoE GPU tests"

echo "== dsinfer_moe_bench 1 8 64 256"
timeout 240 "$BIN/dsinfer_moe_bench" 1 8 64 256 > "$OUT/moedec_bench.log" 2>&1 || fail "dsinfer_moe_bench"
cat "$OUT/moedec_bench.log"
exit $rc
