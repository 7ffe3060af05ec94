#!/usr/bin/env bash
# Run ON the GPU machine (issue 30, session 13: the CUTLASS grouped FP8 MoE GEMM), in one device call: the GPU parity
# tests (MoeCutlassFp8Gpu.*, and MoeGroupedFp8Gpu.SmallRagged as the old path's regression), dsinfer_moe_cutlass_bench
# at T = 512 / 4,096 / 16,384 (old FP8 path, CUTLASS path, exact path on FP8 experts, the CUTLASS GEMMs alone,
# cuBLASLt block-scaled dense, the FP8 peak of this machine), then DeepGEMM's grouped FP8 GEMMs at the same T
# (run_peers.py, sgl-deep-gemm 0.1.5.post1 + apache-tvm-ffi 0.1.11 unzipped into DIR/site.tar.xz).
# DIR holds bins.tar.xz (the stripped dsinfer_gpu_tests and dsinfer_moe_cutlass_bench, one xz stream) and
# site.tar.xz. Logs under $OUT (summary.log first).
# Usage: bash bench/peers/moe_cutlass_run.sh DIR
set -uo pipefail
D=${1:?usage: moe_cutlass_run.sh DIR}
OUT=${OUT:-/tmp/out_cutlass}
mkdir -p "$OUT" /tmp/bc
S="$OUT/summary.log"
exec > >(tee -a "$S") 2>&1
# the test binary's compiled-in source paths (fixtures) resolve through this link
mkdir -p /work && ln -sfn "$PWD" /work/wt-s13-moe-cutlass
tar xJf "$D/bins.tar.xz" -C /tmp/bc
B=/tmp/bc
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv,noheader
echo "== parity"; date
timeout "${T_TESTS:-80}" "$B/dsinfer_gpu_tests" \
  --gtest_filter="${FILTER:-MoeCutlassFp8Gpu.*:MoeGroupedFp8Gpu.SmallRagged}" > "$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "^\[ *(OK|FAILED|PASSED) |Failure|cutlass moe|fp8 moe|Expected|Which is|error" "$OUT/tests.log" | head -40
echo "== bench"; date
timeout "${T_BENCH:-90}" "$B/dsinfer_moe_cutlass_bench" ${BENCH_T:-512 4096 16384} > "$OUT/bench.log" 2>&1
echo "bench exit $?"
cat "$OUT/bench.log"
echo "== DeepGEMM grouped"; date
mkdir -p /tmp/site && tar xJf "$D/site.tar.xz" -C /tmp/site && export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1 DG_JIT_CACHE_DIR=/tmp/dg_cache DSINFER_PEER_MOE_T=${MOE_T:-512,4096,16384}
timeout "${T_PEERS:-100}" python3 bench/peers/run_peers.py peers --only peers_deepgemm_grouped --out "$OUT/peers.json" \
  > "$OUT/peers.log" 2>&1
echo "peers exit $?"
tail -5 "$OUT/peers.log"
[ -f "$OUT/peers.json" ] && python3 -c "import json; d = json.load(open('$OUT/peers.json'))
print(json.dumps({k: d.get(k) for k in ('peers', 'notes', 'failed', 'unavailable')}, indent=1))"
date
