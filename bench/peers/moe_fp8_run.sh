#!/usr/bin/env bash
# Run ON the GPU machine (issue 30): the FP8 grouped MoE parity tests, dsinfer_moe_bench grouped and DeepGEMM's grouped
# FP8 GEMMs in one call, then check-reference and the fidelity gate with dsinfer_fp8 (a dsinfer whose moe_plan sends
# MoePath::Fast to the FP8 kernels; built by hand, see bench/NOTES.md "Issue 30"). Env: FILTER (gtest), PEERS=0,
# GATE=0, T_* time limits. Logs under $OUT.
set -uo pipefail
D=${1:?usage: moe_fp8_run.sh DIR (holding bins.tar.xz, site.tar.xz, dg_cache.tar.xz)}
OUT=${OUT:-/tmp/out30}
mkdir -p "$OUT" /tmp/b30
tar xJf $D/bins.tar.xz -C /tmp/b30
B=/tmp/b30
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== parity tests"; date
timeout ${T_TESTS:-200} $B/dsinfer_gpu_tests --gtest_filter="${FILTER:-MoeGroupedFp8Gpu*:MoeGroupedGpu.SmallRagged}" > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|fp8 moe|Expected|Which is|error" "$OUT/tests.log" | head -40
echo "== moe bench grouped"; date
[ -x $B/dsinfer_moe_bench ] && timeout ${T_BENCH:-120} $B/dsinfer_moe_bench grouped > "$OUT/bench.log" 2>&1; echo "bench exit $?"; cat "$OUT/bench.log"
if [ "${PEERS:-1}" = 1 ]; then
  echo "== DeepGEMM grouped"; date
  mkdir -p /tmp/site && tar xJf $D/site.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site  # the two wheels, unzipped
  export DG_JIT_CACHE_DIR=/tmp/dg_cache
  [ -f $D/dg_cache.tar.xz ] && tar xJf $D/dg_cache.tar.xz -C /tmp
  timeout ${T_PEERS:-150} python3 "$(dirname "$0")/run_peers.py" peers --only peers_deepgemm_grouped --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1
  echo "peers exit $?"; tail -5 "$OUT/peers.log"; python3 -c "import json;d=json.load(open('$OUT/peers.json'));print(json.dumps({k:d[k] for k in ('peers','notes','failed')},indent=1))"
  [ -d /tmp/dg_cache ] && tar cJf "$OUT/dg_cache.tar.xz" -C /tmp dg_cache
fi
if [ "${GATE:-1}" = 1 ] && [ -x $B/dsinfer_fp8 ]; then
  echo "== check-reference (FP8 MoE forced for the fast/default paths)"; date
  for fx in tests/fixtures/* models/*; do
    [ -f "$fx/reference.safetensors" ] || continue
    grep -q '"model_type": *"deepseek_v41' "$fx/config.json" && continue
    timeout 60 $B/dsinfer_fp8 check-reference --backend cuda --numerics hf --model "$fx" >> "$OUT/checkref.log" 2>&1
    echo "$(basename "$fx"): exit $?" | tee -a "$OUT/checkref.log"
    echo "--- $(basename "$fx") fast" >> "$OUT/checkref_fast.log"
    timeout 60 $B/dsinfer_fp8 check-reference --backend cuda --fast-gemm --numerics hf --model "$fx" >> "$OUT/checkref_fast.log" 2>&1
    echo "$(basename "$fx") --fast-gemm (FP8 MoE): exit $?"
  done
  echo "== fidelity (fast path with FP8 MoE vs exact)"; date
  timeout ${T_FID:-200} $B/dsinfer_fp8 check-reference --backend cuda --fidelity --model models/dsv4-small > "$OUT/fidelity.log" 2>&1
  echo "fidelity exit $?"; tail -5 "$OUT/fidelity.log"
fi
date
cd "$OUT" && tar cJf logs.tar.xz *.log *.json 2>/dev/null; ls -la "$OUT"
