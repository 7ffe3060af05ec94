#!/usr/bin/env bash
# Run ON the GPU machine (issue 30, session 12; as .dev06/go.sh): the FP8 grouped MoE with a loader warpgroup (raw
# FP4 by cp.async, A tiles + scales by TMA), an expander warpgroup and turn-taking consumers (v2), beside the kernels
# before it, in one call. DIR holds bins.tar.xz: v2/ (dsinfer_gpu_tests, dsinfer_moe_bench), dsinfer_fp8 (a dsinfer
# whose plan_moe sends MoePath::Fast to the FP8 kernels at every T, built by hand: bench/NOTES.md "Issue 30"), and
# the bench of each variant (v0: main's kernel; v1: 384 threads, A by TMA, turns; v2np: v2 without the turns;
# v2d1: v2 whose consumers skip wgmma + promotion; v2dx: v2 whose expander skips the expansion: timing only), plus
# site.tar.xz (the DeepGEMM wheels unzipped). Steps, each under a timeout: parity tests, the variants at T = 512 /
# 4,096 (one weight set, FP8 path alone, with the FP8-vs-bf16 output check), the fidelity gate with the FP8 MoE
# forced, check-reference on every fixture, v2's grouped table (4 sets), with FAST=1 check-reference --fast-gemm with
# the FP8 MoE forced (V4 fixtures, reported), DeepGEMM's grouped FP8 GEMMs at T = 4,096. Logs under $OUT.
set -uo pipefail
D=${1:?usage: moe_fp8_s12.sh DIR}
OUT=${OUT:-/tmp/out30}
mkdir -p "$OUT" /tmp/b30 /work
ln -sfn "$PWD" /work/wt-issue30  # the test binaries' fixture paths
tar xJf "$D/bins.tar.xz" -C /tmp/b30
B=/tmp/b30
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== parity (v2)"; date
timeout ${T_TESTS:-40} $B/v2/dsinfer_gpu_tests \
  --gtest_filter="${FILTER:-MoeGroupedFp8Gpu*:MoeGroupedGpu.SmallRagged:RouteGpu*}" > "$OUT/tests.log" 2>&1
rc=$?
echo "tests exit $rc"
[ $rc = 124 ] && VARIANTS=${VARIANTS:-v0 v1}  # v2 hung: its variants would too
grep -E "^\[ *(OK|FAILED|PASSED) |Failure|fp8 moe|Expected|Which is" "$OUT/tests.log" | head -30
echo "== variants: ms at T = 512 / 4,096, one weight set, FP8 path alone | FP8 vs bf16 output"; date
for v in ${VARIANTS:-v2 v0 v1 v2np v2d1 v2dx}; do
  [ -x $B/$v/dsinfer_moe_bench ] || continue
  echo "-- $v"
  DSINFER_MOE_BENCH_SETS=1 DSINFER_MOE_BENCH_FP8_ONLY=1 DSINFER_MOE_BENCH_T=512,4096 timeout 25 \
    $B/$v/dsinfer_moe_bench grouped 2>&1 | grep -E "grouped.*[0-9]|rror"
done 2>&1 | tee "$OUT/variants.log"
echo "== fidelity, the FP8 MoE forced for every T of the fast path"; date
timeout ${T_FID:-60} $B/dsinfer_fp8 check-reference --backend cuda --fidelity --model models/dsv4-small \
  > "$OUT/fidelity.log" 2>&1
echo "fidelity exit $?"; tail -6 "$OUT/fidelity.log"
echo "== check-reference --backend cuda, every fixture"; date
: > "$OUT/check_reference.log"
for fx in tests/fixtures/* models/*; do
  [ -f "$fx/reference.safetensors" ] || continue
  timeout 20 $B/dsinfer_fp8 check-reference --backend cuda --numerics hf --model "$fx" >> "$OUT/check_reference.log" 2>&1
  echo "$(basename "$fx"): exit $?" | tee -a "$OUT/check_reference.log"
done
if [ "${TABLE:-1}" = 1 ]; then
  echo "== v2 grouped table, 4 weight sets, FP8 path"; date
  DSINFER_MOE_BENCH_FP8_ONLY=1 timeout 40 $B/v2/dsinfer_moe_bench grouped > "$OUT/bench.log" 2>&1
  echo "exit $?"; grep -E "grouped|rror" "$OUT/bench.log"
fi
[ "${FAST:-0}" = 1 ] && echo "== check-reference --fast-gemm with the FP8 MoE forced (V4 fixtures; reported)"
[ "${FAST:-0}" = 1 ] && for fx in tests/fixtures/tiny-v4-* models/*; do
  [ -f "$fx/reference.safetensors" ] || continue
  echo "--- $(basename "$fx")" >> "$OUT/check_reference_fast.log"
  timeout 60 $B/dsinfer_fp8 check-reference --backend cuda --fast-gemm --numerics hf --model "$fx" \
    >> "$OUT/check_reference_fast.log" 2>&1
  echo "$(basename "$fx"): exit $?"
done
if [ "${PEERS:-1}" = 1 ]; then
  echo "== DeepGEMM grouped (T = ${MOE_T:-4096})"; date
  mkdir -p /tmp/site && tar xJf "$D/site.tar.xz" -C /tmp/site && export PYTHONPATH=/tmp/site
  export DG_JIT_CACHE_DIR=/tmp/dg_cache DSINFER_PEER_MOE_T=${MOE_T:-4096}
  timeout ${T_PEERS:-45} python3 bench/peers/run_peers.py peers --only peers_deepgemm_grouped --out "$OUT/peers.json" \
    > "$OUT/peers.log" 2>&1
  echo "peers exit $?"; tail -3 "$OUT/peers.log"
  python3 -c "import json; d = json.load(open('$OUT/peers.json'))
print(json.dumps({k: d[k] for k in ('peers', 'notes', 'failed')}, indent=1))"
fi
date
cd "$OUT" && tar cJf logs.tar.xz *.log *.json 2>/dev/null; ls -la "$OUT"
