#!/usr/bin/env bash
# Sparse attention decode (issue 10, src/ops/sparse_attention/): the parity tests against the CPU reference (fp32
# and tensor-core kernels, split-KV path with the fast combine, long key lists), the batch-invariant step tests
# (their attention runs the same tensor-core kernel with fixed 128-key splits), dsinfer_attention_bench (CSA / HCA
# at batch 1, 64, 256: us, GB/s, % of 4.8 TB/s) and the sparse_attention line of `dsinfer bench` on V4-Flash shapes
# (the runner's split counts and workspace). Gets OUT and BIN (tools/gpu_checks/README.md); exits non-zero when a
# test or bench fails. ~2 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
rc=0
fail() { echo "attn check FAILED: $1"; rc=1; }

echo "== GPU tests (GpuSparseAttention*, GpuBatchInvariantSteps*)"
timeout 240 "$BIN/dsinfer_gpu_tests" --gtest_filter='GpuSparseAttention*:GpuBatchInvariantSteps*' 2>&1 \
  | tee "$OUT/attn_gpu_tests.log" | grep -E "^\[ +(FAILED|PASSED|OK) +\]|Failure" | tail -30
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "GPU tests"

echo "== dsinfer_attention_bench"
bench="$BIN/dsinfer_attention_bench"
[ -x "$bench" ] || bench=.gpu_carry/dsinfer_attention_bench
timeout 120 "$bench" 2>&1 | tee "$OUT/attn_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "dsinfer_attention_bench"

echo "== dsinfer bench (V4-Flash shapes, 4 layers): sparse_attention per op"
timeout 150 "$BIN/dsinfer" bench --model configs/deepseek-v4-flash --load-format dummy --layers 4 --batch 1,64,256 \
  --context 4096 --prefill 4096 --iters 3 > "$OUT/attn_dsinfer_bench.log" 2>&1 || fail "dsinfer bench"
grep -E "^== |^(sparse_attention|total ops|step|step \(graph\)) " "$OUT/attn_dsinfer_bench.log"
exit $rc
