#!/usr/bin/env bash
# DeepSeek-V4.1 on the fast path (issue 26, the speed must-show): V4-Flash and V4.1-Flash shapes in the same call
# (dummy weights, 4 layers, 4K context; decode b1 / 64 / 256 with graphs, prefill 4,096; op times and floors at
# nominal ceilings), optionally V4.1 with a second (base) binary for a before/after table, then check-reference
# --backend cuda on the tiny-v41 fixtures (exact kernels: hf-noqat at 1e-5, hf at 0.2) and the V4.1 GPU tests.
# Env: OUT (log folder), BIN (build/cuda), BASE (folder of a base dsinfer, optional). Exits non-zero on a failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
BASE=${BASE:-}
mkdir -p "$OUT"
st=0
shape="--load-format dummy --layers 4 --batch 1,64,256 --context 4096 --prefill 4096 --iters 3 --ceilings nominal"
run_bench() {  # name, binary, model args...
  local name=$1 bin=$2
  shift 2
  timeout 90 "$bin" bench "$@" $shape > "$OUT/bench_$name.log" 2>&1
  local rc=$?
  echo "== bench $name: exit $rc"
  grep -E "^== |^STEP AS RUN|^SUM OF OPS" "$OUT/bench_$name.log"
  [ $rc -eq 0 ] || st=1
}
run_bench v4 $BIN/dsinfer --model configs/deepseek-v4-flash
[ -n "$BASE" ] && run_bench v41_base $BASE/dsinfer --model configs/deepseek-v4.1-flash --numerics hf
run_bench v41 $BIN/dsinfer --model configs/deepseek-v4.1-flash --numerics hf
# Decode with the FP8 widening moved to M >= 1,024 (DSINFER_CUBLASLT_MIN_M; V4.1 has no 128 x 128 FP8 weights, so
# nothing else moves): the per-op times of its projections on the default kernels, for the threshold.
timeout 60 env DSINFER_CUBLASLT_MIN_M=1024 $BIN/dsinfer bench --model configs/deepseek-v4.1-flash --numerics hf \
  --load-format dummy --layers 4 --batch 64,256 --context 4096 --iters 3 --ceilings nominal > "$OUT/bench_v41_minm1024.log" 2>&1
echo "== bench v41 with DSINFER_CUBLASLT_MIN_M=1024: exit $?"

echo "== check-reference --backend cuda, tiny-v41 fixtures"
for fx in tests/fixtures/tiny-v41-a tests/fixtures/tiny-v41-b; do
  [ -f "$fx/reference.safetensors" ] || continue
  timeout 60 $BIN/dsinfer check-reference --backend cuda --model "$fx" --numerics hf-noqat \
    --reference "$fx/reference_noqat.safetensors" --tolerance 1e-5 >> "$OUT/checkref.log" 2>&1
  rc=$?
  echo "$(basename "$fx") hf-noqat (1e-5): exit $rc"; [ $rc -eq 0 ] || st=1
  timeout 60 $BIN/dsinfer check-reference --backend cuda --model "$fx" --numerics hf --tolerance 0.2 >> "$OUT/checkref.log" 2>&1
  rc=$?
  echo "$(basename "$fx") hf (0.2): exit $rc"; [ $rc -eq 0 ] || st=1
done
echo "== V4.1 GPU tests"
timeout 150 $BIN/dsinfer_gpu_tests --gtest_brief=1 \
  --gtest_filter='GpuV41*:*EngineFamilies*v41*:SpecV41Gpu.*:GemmLtDenseGpu.*' > "$OUT/tests.log" 2>&1
rc=$?
grep -E "^\[  (PASSED|FAILED) |FAILED|csa2 index scores|widened FP8" "$OUT/tests.log" | head -30
[ $rc -eq 0 ] || { echo "GPU tests: exit $rc"; st=1; }

exit $st
