#!/usr/bin/env bash
# Run ON the GPU machine (issue 30, session 14: the CUTLASS grouped FP8 MoE beside DeepGEMM), in ONE device call:
#   0. DeepGEMM's grouped FP8 GEMMs started in the background at once with an empty JIT cache (NVRTC, so its
#      first-use compiles overlap steps 1-3; this run's timings are discarded),
#   1. the parity tests (MoeCutlassFp8Gpu.*, MoeGroupedFp8Gpu.SmallRagged as the old path's regression),
#   2. the fidelity gate with the CUTLASS path forced for every T (dsinfer_cutlass: a dsinfer whose plan_moe sends
#      MoePath::Fast to CutlassFp8 at every T) on a copy of models/dsv4-small with FP8_BLOCK experts
#      (fp8_experts_model.py: the same expert values, exactly), and check-reference (exact, and --fast-gemm with the
#      path forced) on that copy,
#   3. check-reference --backend cuda on every fixture (the plain dsinfer),
#   4. dsinfer_moe_cutlass_bench (both cluster shapes) and then DeepGEMM again on the warm cache, back to back,
#   5. DeepGEMM's JIT cache returned as dg_cache.tar.xz.
# DIR holds bins.tar.xz (stripped dsinfer_cutlass (linked by hand without ICU's data: see step 3), dsinfer_gpu_tests
# (the MoE test file alone, linked by hand),
# dsinfer_moe_cutlass_bench: any subset, the steps of a missing binary are skipped; PEERS=0 skips 0 and 4-5) and site.tar.xz (sgl-deep-gemm 0.1.5.post1 + apache-tvm-ffi 0.1.11 unzipped). Under $OUT (at most 8 files
# come back): summary.log, bench.log, peers.json, dg_cache.tar.xz, logs.tar.xz (every log).
# Usage: bash bench/peers/moe_cutlass_s14.sh DIR
set -uo pipefail
D=${1:?usage: moe_cutlass_s14.sh DIR}
OUT=${OUT:-/tmp/out_s14}
L=/tmp/l14
mkdir -p "$OUT" "$L" /tmp/b14 /tmp/site
S="$OUT/summary.log"
exec > >(tee -a "$S") 2>&1
mkdir -p /work && ln -sfn "$PWD" /work/wt-s14-moe  # the test binary's compiled-in source paths
date
tar xJf "$D/bins.tar.xz" -C /tmp/b14 && tar xJf "$D/site.tar.xz" -C /tmp/site
B=/tmp/b14
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv,noheader
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 DG_JIT_CACHE_DIR=/tmp/dg_cache DG_JIT_USE_NVRTC=${DG_NVRTC:-1}
export DSINFER_PEER_MOE_T=${MOE_T:-4096}
peers() {
  timeout "$1" python3 bench/peers/run_peers.py peers --only peers_deepgemm_grouped --out "$2" > "$3" 2>&1
}
JIT=
[ "${PEERS:-1}" = 1 ] && { peers "${T_JIT:-150}" "$L/peers_jit.json" "$L/peers_jit.log" & JIT=$!; }

if [ -x "$B/dsinfer_gpu_tests" ]; then
echo "== parity"; date
timeout "${T_TESTS:-60}" "$B/dsinfer_gpu_tests" \
  --gtest_filter="${FILTER:-MoeCutlassFp8Gpu.*:MoeGroupedFp8Gpu.SmallRagged}" > "$L/tests.log" 2>&1
echo "tests exit $?"
grep -E "^\[ *(OK|FAILED|PASSED) |Failure|cutlass moe|fp8 moe|Expected|Which is|error" "$L/tests.log" | head -30

fi
if [ -x "$B/dsinfer_cutlass" ]; then
echo "== fidelity, CUTLASS path forced, FP8_BLOCK copy of dsv4-small"; date
FP8M=bench/peers/fp8_experts_model.py
[ -f "$FP8M" ] || FP8M="$D/fp8_experts_model.py"  # a tree without it (main before the merge): the staged copy
python3 "$FP8M" models/dsv4-small /tmp/dsv4-small-fp8
timeout "${T_FID:-60}" "$B/dsinfer_cutlass" check-reference --backend cuda --fidelity --model /tmp/dsv4-small-fp8 \
  > "$L/fidelity.log" 2>&1
echo "fidelity exit $?"; tail -6 "$L/fidelity.log"
[ "${CRFP8:-1}" = 1 ] && for mode in "" "--fast-gemm"; do
  timeout 30 "$B/dsinfer_cutlass" check-reference --backend cuda $mode --numerics hf --model /tmp/dsv4-small-fp8 \
    > "$L/cr_fp8$mode.log" 2>&1
  echo "check-reference ${mode:-exact} (forced binary) on the FP8-expert copy: exit $?"
  grep -E "PASS|FAIL|error" "$L/cr_fp8$mode.log" | head -4
done

# The forced binary differs from dsinfer only where experts are FP8_BLOCK and the path is MoePath::Fast: on these
# fixtures it is the plain binary. It is linked without ICU's 31 MB data (the carry limit), which only V4.1's Engram
# vocabulary normalization reads, so the V4.1 fixtures are left out.
echo "== check-reference on the V4 fixtures"; date
: > "$L/check_reference.log"
for fx in tests/fixtures/* models/*; do
  [ -f "$fx/reference.safetensors" ] || continue
  grep -q '"model_type": *"deepseek_v41' "$fx/config.json" && continue
  timeout "${T_FX:-30}" "$B/dsinfer_cutlass" check-reference --backend cuda --numerics hf --model "$fx" \
    >> "$L/check_reference.log" 2>&1
  echo "$(basename "$fx"): exit $?"
done

fi
[ -n "$JIT" ] || { date; ls -la "$OUT"; tar cJf "$OUT/logs.tar.xz" -C "$L" .; exit 0; }
echo "== DeepGEMM JIT run (background) "; date
wait $JIT; echo "jit run exit $?"; tail -3 "$L/peers_jit.log"
du -sh /tmp/dg_cache 2>/dev/null
# NVRTC failed (no masked timing in the JIT run's JSON): the last run compiles with nvcc instead, with more time
if ! grep -q "DeepGEMM grouped masked" "$L/peers_jit.json" 2>/dev/null; then
  echo "NVRTC JIT run gave no masked timing: the final DeepGEMM run uses nvcc"
  export DG_JIT_USE_NVRTC=0 T_PEERS=${T_PEERS_NVCC:-120}
fi

echo "== bench"; date
timeout "${T_BENCH:-60}" "$B/dsinfer_moe_cutlass_bench" ${BENCH_T:-512 4096 16384} > "$OUT/bench.log" 2>&1
echo "bench exit $?"; cat "$OUT/bench.log"
echo "== DeepGEMM grouped (warm cache)"; date
peers "${T_PEERS:-60}" "$OUT/peers.json" "$L/peers.log"
echo "peers exit $?"; tail -3 "$L/peers.log"
[ -f "$OUT/peers.json" ] && python3 -c "import json; d = json.load(open('$OUT/peers.json'))
print(json.dumps({k: d.get(k) for k in ('peers', 'notes', 'failed', 'unavailable')}, indent=1))"
[ -d /tmp/dg_cache ] && tar cJf "$OUT/dg_cache.tar.xz" -C /tmp dg_cache
cp "$OUT/bench.log" "$L/" 2>/dev/null
tar cJf "$OUT/logs.tar.xz" -C "$L" . 2>/dev/null
ls -la "$OUT"; date
