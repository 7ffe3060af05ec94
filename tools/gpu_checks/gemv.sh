#!/usr/bin/env bash
# GEMV kernel for M <= 16 (issue 10, ops/gemm/gemm_gemv.cu, GemmPrecision::kBf16 at M <= kGemmGemvMaxM): its GPU
# parity tests plus the GEMM / streaming GEMM tests it shares paths with, the GEMM bench's M <= 16 rows (old | new =
# kBf16 with 'gemv' tag | stream alone | raw cuBLASLt | lt-runner, TB/s), `dsinfer bench` decode at batch 1 and 16
# on V4-Flash shapes and the fast path's fidelity against the exact path. Gets OUT and BIN (tools/gpu_checks/
# README.md); exits non-zero when a test, bench or check fails. ~2 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
rc=0
fail() { echo "gemv check FAILED: $1"; rc=1; }
FLASH="--model configs/deepseek-v4-flash --load-format dummy --layers 4"

echo "== GEMV / GEMM GPU tests (GemvGpu*, GemmGpu*, GemmStreamGpu*)"
timeout 150 "$BIN/dsinfer_gpu_tests" --gtest_filter='GemvGpu*:GemmGpu*:GemmStreamGpu*' 2>&1 \
  | tee "$OUT/gemv_gpu_tests.log" | tail -14
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "GEMV/GEMM GPU tests"

echo "== dsinfer_gemm_bench --gemv (M = 1, 2, 4, 6, 8, 16)"
bench="$BIN/dsinfer_gemm_bench"
[ -x "$bench" ] || bench=.gpu_carry/dsinfer_gemm_bench
timeout 150 "$bench" --gemv > "$OUT/gemv_gemm_bench.log" 2>&1 || fail "dsinfer_gemm_bench --gemv"
grep -E "^(device|wq_a|wq_b|wo_a|wo_b|wkv|shared|idx|csa cmp|hca cmp|lm_head) " "$OUT/gemv_gemm_bench.log" \
  | sed -E 's/ +/ /g' | cut -c1-220

echo "== dsinfer bench decode, batch 1 and 16, verify steps of 1 + 3 / 1 + 5 tokens per sequence (no prefill)"
timeout 120 "$BIN/dsinfer" bench $FLASH --batch 1,16 --context 4096 --prefill 0 --verify-tokens 3,5 --iters 3 \
  > "$OUT/gemv_bench.log" 2>&1 \
  || fail "dsinfer bench"
grep -E "^== |^(wq_a|wq_b|wkv|wo_a|wo_b|compressor_proj|indexer_q|lm_head|moe|total ops|step|step \(graph\)) " "$OUT/gemv_bench.log"

echo "== fidelity: fast path vs exact path, shipped model"
timeout 150 "$BIN/dsinfer" check-reference --backend cuda --fidelity --model models/dsv4-small 2>&1 \
  | tee "$OUT/gemv_fidelity.log" | tail -5
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "fidelity (top-1 >= 99.5 %, mean KL <= 1e-3)"
exit $rc
