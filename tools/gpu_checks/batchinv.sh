#!/usr/bin/env bash
# Batch-invariant GPU inference (issue 14; issue 16's exact prefix caching on the GPU depends on it). Three checks,
# ~2-3 minutes of device time:
#  1. GpuBatchInvariant: 32 requests alone vs mixed with 200 others (graphs on, preemption forced) -> bit-identical
#     tokens and logprobs (tests/gpu/test_batch_invariant_gpu.cpp);
#  2. bench/prefix_bench.py, caching off vs exact with --batch-invariant: every output identical (exits 1 if not);
#  3. the cost: `dsinfer bench` on V4-Flash shapes (4 layers, dummy weights) with and without --batch-invariant
#     (reported, not asserted), step and graph-step rows side by side at the end.
# OUT (log folder) and BIN (build/cuda) come from tools/gpu_run.sh; exits non-zero when check 1 or 2 fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
st=0

echo "== batchinv: alone vs mixed, --batch-invariant, graphs, preemption (GpuBatchInvariant)"
timeout 150 "$BIN/dsinfer_gpu_tests" --gtest_filter='GpuBatchInvariant.*' 2>&1 | tee "$OUT/batchinv_test.log" | tail -12
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "batchinv: GpuBatchInvariant FAILED (exit $rc)"; st=1; }

echo "== batchinv: prefix_bench, caching off vs exact, --batch-invariant"
timeout 150 python3 bench/prefix_bench.py --dsinfer "$BIN/dsinfer" --model models/dsv4-small --backend cuda \
  --conversations 32 --turns 3 --modes off,exact --batch-invariant 2>&1 | tee "$OUT/batchinv_prefix.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "batchinv: exact prefix caching with --batch-invariant changed outputs (exit $rc)"; st=1; }

echo "== batchinv: cost of --batch-invariant (V4-Flash shapes, 4 layers, dummy weights)"
for mode in default invariant; do
  flag=()
  [ $mode = invariant ] && flag=(--batch-invariant)
  timeout 200 "$BIN/dsinfer" bench --model configs/deepseek-v4-flash --load-format dummy --layers 4 --batch 1,64 \
    --context 4096 --iters 3 "${flag[@]}" > "$OUT/batchinv_bench_$mode.log" 2>&1
  echo "bench $mode: exit $?"
done
for mode in default invariant; do
  echo "--- $mode"
  grep -E "^bench:|^== |^(step|step \(graph\)|total ops) " "$OUT/batchinv_bench_$mode.log"
done
exit $st
