#!/usr/bin/env bash
# cuBLASLt FP8 block-scaled GEMM engine (issue 11, ops/gemm/gemm_lt_cuda.h): its GPU tests, the GEMM bench side by
# side (ours / raw cuBLASLt / "lt-runner" = the engine incl. activation quantization), `dsinfer bench` on V4-Flash
# shapes with the engine on and off (DSINFER_CUBLASLT=0), and the fast path's fidelity against the exact path.
# Gets OUT and BIN (tools/gpu_checks/README.md); exits non-zero when a test, bench or check fails. ~2-3 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
rc=0
fail() { echo "lt check FAILED: $1"; rc=1; }

echo "== GemmLtGpu tests"
timeout 90 "$BIN/dsinfer_gpu_tests" --gtest_filter='*GemmLtGpu*' 2>&1 | tee "$OUT/lt_gpu_tests.log" | tail -12
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "GemmLtGpu tests"

echo "== dsinfer_gemm_bench (lt-runner column = the runner's engine)"
bench="$BIN/dsinfer_gemm_bench"
[ -x "$bench" ] || bench=.gpu_carry/dsinfer_gemm_bench
timeout 120 "$bench" > "$OUT/lt_gemm_bench.log" 2>&1 || fail "dsinfer_gemm_bench"
grep -E "^(device|wq_a|wq_b|wo_b|wkv|shared|idx wq_b) |lt-runner:" "$OUT/lt_gemm_bench.log" | grep -E "FP8|device|lt-runner:" \
  | sed -E 's/ +/ /g' | cut -c1-230

for lt in 1 0; do
  echo "== dsinfer bench, DSINFER_CUBLASLT=$lt"
  DSINFER_CUBLASLT=$lt timeout 120 "$BIN/dsinfer" bench --model configs/deepseek-v4-flash --load-format dummy \
    --layers 4 --batch 1,64,256 --context 4096 --prefill 4096 --iters 3 > "$OUT/lt_bench_cublaslt$lt.log" 2>&1 \
    || fail "dsinfer bench DSINFER_CUBLASLT=$lt"
  grep -E "^== |^(wq_a|wq_b|wkv|wo_b|indexer_q|total ops|step) " "$OUT/lt_bench_cublaslt$lt.log"
done

echo "== fidelity: fast path (cuBLASLt FP8 GEMMs at M >= DSINFER_CUBLASLT_MIN_M) vs exact path, shipped model"
timeout 150 "$BIN/dsinfer" check-reference --backend cuda --fidelity --model models/dsv4-small 2>&1 \
  | tee "$OUT/lt_fidelity.log" | tail -5
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "fidelity (top-1 >= 99.5 %, mean KL <= 1e-3)"
exit $rc
