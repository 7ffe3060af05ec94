#!/usr/bin/env bash
# cuBLASLt GEMM engine (issues 10/11, ops/gemm/gemm_lt_cuda.h; default on since 2026-12-01): its GPU tests (FP8
# block-scaled + dense bf16 paths), the GEMM bench side by side (ours / raw cuBLASLt / "lt-runner" = the engine incl.
# activation quantization or bf16 rounding), `dsinfer bench` on V4-Flash shapes with the engine on and off
# (DSINFER_CUBLASLT=0), chunked long-context prefill (8K / 32K / 128K prompts, TTFT, tokens/s, peak memory) and the
# fast path's fidelity against the exact path. Gets OUT and BIN (tools/gpu_checks/README.md); exits non-zero when
# a test, bench or check fails. ~3 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
rc=0
fail() { echo "lt check FAILED: $1"; rc=1; }
FLASH="--model configs/deepseek-v4-flash --load-format dummy --layers 4"

echo "== GemmLt GPU tests (GemmLtGpu*, GemmLtDenseGpu*)"
timeout 120 "$BIN/dsinfer_gpu_tests" --gtest_filter='*GemmLt*' 2>&1 | tee "$OUT/lt_gpu_tests.log" | tail -14
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "GemmLt GPU tests"

echo "== dsinfer_gemm_bench (old | new | raw cuBLASLt | lt-runner = the runner's engine)"
bench="$BIN/dsinfer_gemm_bench"
[ -x "$bench" ] || bench=.gpu_carry/dsinfer_gemm_bench
timeout 180 "$bench" > "$OUT/lt_gemm_bench.log" 2>&1 || fail "dsinfer_gemm_bench"
grep -E "^(device|wq_a|wq_b|wo_b|wkv|shared|idx wq_b|csa cmp|lm_head) |lt-runner:" "$OUT/lt_gemm_bench.log" \
  | sed -E 's/ +/ /g' | cut -c1-240

for lt in 1 0; do
  echo "== dsinfer bench, DSINFER_CUBLASLT=$lt"
  DSINFER_CUBLASLT=$lt timeout 120 "$BIN/dsinfer" bench $FLASH --batch 1,64,256 --context 4096 --prefill 4096 \
    --iters 3 > "$OUT/lt_bench_cublaslt$lt.log" 2>&1 || fail "dsinfer bench DSINFER_CUBLASLT=$lt"
  grep -E "^== |^(wq_a|wq_b|wkv|wo_a|wo_b|indexer_q|lm_head|total ops|step|step \(graph\)) " "$OUT/lt_bench_cublaslt$lt.log"
done

echo "== long-context prefill in chunks of 8192 tokens (TTFT, tokens/s, peak device memory)"
for p in 8192 32768 131072; do
  timeout 150 "$BIN/dsinfer" bench $FLASH --batch 1 --context 16 --prefill $p --prefill-chunk 8192 --iters 1 \
    > "$OUT/lt_prefill_$p.log" 2>&1 || fail "chunked prefill of $p tokens"
  grep -E "^== prefill|^total ops|^per layer|^TTFT|^peak device" "$OUT/lt_prefill_$p.log"
done

echo "== fidelity: fast path (cuBLASLt at M >= thresholds) vs exact path, shipped model"
timeout 150 "$BIN/dsinfer" check-reference --backend cuda --fidelity --model models/dsv4-small 2>&1 \
  | tee "$OUT/lt_fidelity.log" | tail -5
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "fidelity (top-1 >= 99.5 %, mean KL <= 1e-3)"
exit $rc
