#!/usr/bin/env bash
# The V4 CUDA runner's state in DeepSeek's storage format (issue 31; the default with `official` numerics): the
# runner-level tests (FP8 state against the fp32 simulation path; batch invariance with FP8 state) and V4-Flash
# decode (dummy weights, 4 layers, `official` numerics) with the FP8 state and with --state-format fp32. Gets OUT and
# BIN from tools/gpu_run.sh; about 40 s. bench/NOTES.md (issue 31, session 12) has the last result.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/cuda}
O=${OUT:-/tmp/dsinfer_gpu_out}/fp8state
mkdir -p "$O"
rc=0
timeout 240 $BIN/dsinfer_gpu_tests \
  --gtest_filter='GpuFp8State*:GpuBatchInvariantSteps.FlashShapesFp8*' > "$O/tests.log" 2>&1 || rc=1
grep -E "^\[  (FAILED|PASSED) |fp8 state\]" "$O/tests.log"
args=(--model configs/deepseek-v4-flash --load-format dummy --layers 4 --batch 1,64,256 --context 4096
      --numerics official --iters 3 --prefill 0)
for f in auto fp32; do
  timeout 120 $BIN/dsinfer bench --backend cuda "${args[@]}" --state-format $f > "$O/bench_$f.log" 2>&1 || rc=1
  echo "== --state-format $f"
  grep -E "^bench:|^== |STEP AS RUN|SUM OF OPS|sparse_attention|indexer_topk|ring_write" "$O/bench_$f.log"
done
exit $rc
