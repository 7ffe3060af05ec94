#!/usr/bin/env bash
# Run ON the GPU machine (issue 30, session 12; as .dev06/go.sh): FP8 grouped MoE kernel variants side by side, then
# the full checks of the first candidate that runs right, in one call. DIR holds bins.tar.xz with one folder per
# variant (dsinfer_moe_bench; the candidates also dsinfer_gpu_tests and dsinfer_fp8, a dsinfer whose plan_moe sends
# MoePath::Fast to the FP8 kernels at every T, built by hand: bench/NOTES.md "Issue 30"), and optionally site.tar.xz
# (the DeepGEMM wheels unzipped). Steps, each under a timeout: every variant's bench at T = 512 / 4,096 (one weight
# set, FP8 path alone, with the FP8-vs-bf16 output check); SET = the first of CANDIDATES whose bench runs and stays
# within 5e-2 of the bf16 path; SET's parity tests, fidelity gate (FP8 MoE forced), check-reference on every fixture
# and grouped table (4 weight sets); with FAST=1 check-reference --fast-gemm (FP8 forced, V4 fixtures, reported);
# with site.tar.xz DeepGEMM's grouped FP8 GEMMs at T = 4,096. Logs under $OUT.
set -uo pipefail
D=${1:?usage: moe_fp8_s12.sh DIR}
OUT=${OUT:-/tmp/out30}
mkdir -p "$OUT" /tmp/b30 /work
ln -sfn "$PWD" /work/wt-issue30  # the test binaries' fixture paths
tar xJf "$D/bins.tar.xz" -C /tmp/b30
B=/tmp/b30
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== variants: ms at T = 512 / 4,096, one weight set, FP8 path alone | FP8 vs bf16 output"; date
SET=${SET:-}
for v in ${VARIANTS:-v2 v0 v1}; do
  [ -x $B/$v/dsinfer_moe_bench ] || continue
  echo "-- $v"
  DSINFER_MOE_BENCH_SETS=1 DSINFER_MOE_BENCH_FP8_ONLY=1 DSINFER_MOE_BENCH_T=512,4096 timeout 25 \
    $B/$v/dsinfer_moe_bench grouped > "$OUT/bench_$v.log" 2>&1
  echo "exit $?"; grep -E "grouped.*[0-9]|rror" "$OUT/bench_$v.log"
  ok=$(awk '/grouped prefill.* 4096 /{print ($NF + 0 < 5e-2) ? 1 : 0}' "$OUT/bench_$v.log")
  if [ -z "$SET" ] && [ "$ok" = 1 ] && [[ " ${CANDIDATES:-v2} " == *" $v "* ]]; then SET=$v; fi
done > "$OUT/variants.log" 2>&1
cat "$OUT/variants.log"
echo "== SET = ${SET:-none}"
[ -n "$SET" ] || exit 1
echo "== parity ($SET)"; date
timeout ${T_TESTS:-40} $B/$SET/dsinfer_gpu_tests \
  --gtest_filter="${FILTER:-MoeGroupedFp8Gpu*:MoeGroupedGpu.SmallRagged:RouteGpu*}" > "$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "^\[ *(OK|FAILED|PASSED) |Failure|fp8 moe|Expected|Which is" "$OUT/tests.log" | head -30
echo "== fidelity, the FP8 MoE forced for every T of the fast path"; date
timeout ${T_FID:-60} $B/$SET/dsinfer_fp8 check-reference --backend cuda --fidelity --model models/dsv4-small \
  > "$OUT/fidelity.log" 2>&1
echo "fidelity exit $?"; tail -6 "$OUT/fidelity.log"
echo "== check-reference --backend cuda, every fixture"; date
: > "$OUT/check_reference.log"
for fx in tests/fixtures/* models/*; do
  [ -f "$fx/reference.safetensors" ] || continue
  timeout 20 $B/$SET/dsinfer_fp8 check-reference --backend cuda --numerics hf --model "$fx" \
    >> "$OUT/check_reference.log" 2>&1
  echo "$(basename "$fx"): exit $?" | tee -a "$OUT/check_reference.log"
done
if [ "${TABLE:-1}" = 1 ]; then
  echo "== $SET grouped table, 4 weight sets, FP8 path"; date
  DSINFER_MOE_BENCH_FP8_ONLY=1 timeout 40 $B/$SET/dsinfer_moe_bench grouped > "$OUT/bench.log" 2>&1
  echo "exit $?"; grep -E "grouped|rror" "$OUT/bench.log"
fi
if [ "${FAST:-0}" = 1 ]; then
  echo "== check-reference --fast-gemm with the FP8 MoE forced (V4 fixtures; reported)"
  for fx in tests/fixtures/tiny-v4-* models/*; do
    [ -f "$fx/reference.safetensors" ] || continue
    echo "--- $(basename "$fx")" >> "$OUT/check_reference_fast.log"
    timeout 60 $B/$SET/dsinfer_fp8 check-reference --backend cuda --fast-gemm --numerics hf --model "$fx" \
      >> "$OUT/check_reference_fast.log" 2>&1
    echo "$(basename "$fx"): exit $?"
  done
fi
if [ -f "$D/site.tar.xz" ]; then
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
