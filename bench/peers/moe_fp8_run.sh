#!/usr/bin/env bash
# Run ON the GPU machine (issue 30): the FP8 grouped MoE parity tests, the fidelity gate with dsinfer_fp8 (a dsinfer
# whose moe_plan sends MoePath::Fast to the FP8 kernels for every T, built by hand: see bench/NOTES.md "Issue 30"),
# dsinfer_moe_bench grouped (T = 512 .. 8,192) and DeepGEMM's grouped FP8 GEMMs at the same T, in one call.
# DIR holds bins.tar.xz (dsinfer_gpu_tests, dsinfer_moe_bench, dsinfer_fp8, stripped), site.tar.xz (the DeepGEMM
# wheels of .dev29, unzipped) and dg_cache.tar.xz. Env: FILTER (gtest; keep the 40-s MoeGpu Flash tests out unless
# needed, and T_TESTS above their sum), PEERS=0, GATE=0, NCU=1 (ncu sections of the two FP8 kernels at T = 4,096: the
# next step is finding their shared bound), MOE_T, T_* time limits. Logs under $OUT.
set -uo pipefail
D=${1:?usage: moe_fp8_run.sh DIR}
OUT=${OUT:-/tmp/out30}
mkdir -p "$OUT" /tmp/b30
tar xJf $D/bins.tar.xz -C /tmp/b30
B=/tmp/b30
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
grep_tests() { grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|fp8 moe|Expected|Which is|error" "$1" | head -40; }
echo "== parity tests"; date
timeout ${T_TESTS:-150} $B/dsinfer_gpu_tests --gtest_filter="${FILTER:-MoeGroupedFp8Gpu*:MoeGroupedGpu*}" \
  > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep_tests "$OUT/tests.log"
if [ "${GATE:-1}" = 1 ] && [ -x $B/dsinfer_fp8 ]; then
  echo "== fidelity (fast path with the FP8 MoE forced for every T vs exact)"; date
  timeout ${T_FID:-120} $B/dsinfer_fp8 check-reference --backend cuda --fidelity --model models/dsv4-small \
    > "$OUT/fidelity.log" 2>&1
  echo "fidelity exit $?"; tail -6 "$OUT/fidelity.log"
fi
echo "== moe bench grouped"; date
timeout ${T_BENCH:-120} $B/dsinfer_moe_bench grouped > "$OUT/bench.log" 2>&1; echo "bench exit $?"; cat "$OUT/bench.log"
if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  echo "== ncu, FP8 grouped kernels (first launches of each)"; date
  timeout ${T_NCU:-150} ncu --clock-control none --kernel-name regex:moe_grouped_fp8 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    $B/dsinfer_moe_bench grouped > "$OUT/ncu.log" 2>&1
  echo "ncu exit $?"; grep -E "Throughput|Duration|Stall|L2|DRAM|Hit Rate" "$OUT/ncu.log" | head -40
fi
if [ "${PEERS:-1}" = 1 ]; then
  echo "== DeepGEMM grouped"; date
  mkdir -p /tmp/site && tar xJf $D/site.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site
  export DG_JIT_CACHE_DIR=/tmp/dg_cache DSINFER_PEER_MOE_T=${MOE_T:-512,1024,2048,4096,8192}
  [ -f $D/dg_cache.tar.xz ] && tar xJf $D/dg_cache.tar.xz -C /tmp
  timeout ${T_PEERS:-150} python3 "$(dirname "$0")/run_peers.py" peers --only peers_deepgemm_grouped \
    --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1
  echo "peers exit $?"; tail -5 "$OUT/peers.log"
  python3 -c "import json; d = json.load(open('$OUT/peers.json'))
print(json.dumps({k: d[k] for k in ('peers', 'notes', 'failed')}, indent=1))"
  [ -d /tmp/dg_cache ] && tar cJf "$OUT/dg_cache.tar.xz" -C /tmp dg_cache
fi
date
cd "$OUT" && tar cJf logs.tar.xz *.log *.json 2>/dev/null; ls -la "$OUT"
