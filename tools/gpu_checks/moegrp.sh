#!/usr/bin/env bash
# Grouped FP4 MoE GEMMs for prefill (issue 11, ops/moe/moe_grouped.cu): the parity tests (MoeGroupedGpu*, plus
# MoeGpu* whose fast-path cases must still pass), the grouped-vs-tiled bench table (T = 1024 / 4096 / 8192, ms and
# TFLOP/s) and `dsinfer bench` with a 4,096-token prefill on V4-Flash shapes (the moe row: was 83 ms for 4 layers).
# Gets OUT and BIN (tools/gpu_checks/README.md); exits non-zero when a test or bench fails. ~2-3 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
rc=0
fail() { echo "moegrp check FAILED: $1"; rc=1; }

echo "== MoE GPU tests (MoeGroupedGpu*, MoeGpu.Fast*)"
timeout 240 "$BIN/dsinfer_gpu_tests" --gtest_filter='MoeGroupedGpu*:MoeGpu.Fast*' 2>&1 | tee "$OUT/moegrp_tests.log" \
  | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |error|Failure" | head -30
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "MoE GPU tests"

echo "== dsinfer_moe_bench grouped (exact = tiled bf16, fast = decode <= 1024 / grouped above, grouped)"
bench="$BIN/dsinfer_moe_bench"
[ -x "$bench" ] || bench=.gpu_carry/dsinfer_moe_bench
timeout 240 "$bench" grouped > "$OUT/moegrp_bench.log" 2>&1 || fail "dsinfer_moe_bench grouped"
grep -E "^device|grouped prefill" "$OUT/moegrp_bench.log"

echo "== dsinfer bench, V4-Flash shapes, 4 layers, prefill 4096"
timeout 180 "$BIN/dsinfer" bench --model configs/deepseek-v4-flash --load-format dummy --layers 4 --batch 1 \
  --context 4096 --prefill 4096 --iters 3 > "$OUT/moegrp_dsinfer_bench.log" 2>&1 || fail "dsinfer bench prefill 4096"
grep -E "^== |^(moe|total ops|step|TTFT|prefill) " "$OUT/moegrp_dsinfer_bench.log"
exit $rc
