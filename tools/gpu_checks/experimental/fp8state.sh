#!/usr/bin/env bash
# The V4 CUDA runner's state in DeepSeek's storage format (issue 31): the runner-level tests (FP8 state against the
# fp32 simulation path; batch invariance with FP8 state) and V4-Flash decode + prefill (dummy weights, 4 layers,
# `official` numerics) with fp32 state and with DSINFER_FP8_STATE=1. Gets OUT and BIN from tools/gpu_run.sh; about
# 1 minute. bench/NOTES.md (issue 31, second session) has the last result. In experimental/: FP8 state is opt-in
# and its runner-level test has not passed on a GPU yet (the full GPU test suite runs it).
set -uo pipefail
cd "$(dirname "$0")/../../.."
BIN=${BIN:-build/cuda}
O=${OUT:-/tmp/dsinfer_gpu_out}/fp8state
mkdir -p "$O"
rc=0
timeout 240 $BIN/dsinfer_gpu_tests \
  --gtest_filter='GpuFp8State*:GpuBatchInvariantSteps.FlashShapesFp8*' > "$O/tests.log" 2>&1 || rc=1
grep -E "^\[  (FAILED|PASSED) |fp8 state\]" "$O/tests.log"
args=(--model configs/deepseek-v4-flash --load-format dummy --layers 4 --batch 1,64,256 --context 4096
      --numerics official --iters 3)
timeout 120 $BIN/dsinfer bench --backend cuda "${args[@]}" > "$O/bench_fp32.log" 2>&1 || rc=1
DSINFER_FP8_STATE=1 timeout 120 $BIN/dsinfer bench --backend cuda "${args[@]}" > "$O/bench_fp8.log" 2>&1 || rc=1
for f in bench_fp32 bench_fp8; do
  echo "== $f"
  grep -E "^== |STEP AS RUN|SUM OF OPS|sparse_attention|indexer_topk|ring_write" "$O/$f.log"
done
exit $rc
