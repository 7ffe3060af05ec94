#!/usr/bin/env bash
# Run ON the GPU machine (issue 30, third session, second call): the MoE parity tests and the fidelity gate of the
# tree's FP8 kernels (dsinfer_fp8: moe_plan's first branch sending MoePath::Fast to them for every T, built by hand as
# in bench/NOTES.md), the grouped bench (T = 512 .. 8,192, bf16 and FP8 paths), DeepGEMM's grouped FP8 GEMMs at the
# same T, and timing-only variants of the FP8 kernel that leave one part out (their results are wrong on purpose:
# d1 consumers skip wgmma + promotion, d14 producer skips A loads + expansion + weight loads, d4 no expansion, d2 no
# A loads, d16 no second-term wgmmas, d8 no weight loads), at T = 4,096 with one weight set.
set -uo pipefail
D=${1:?usage: moe_fp8_final.sh DIR}
OUT=${OUT:-/tmp/out30}
mkdir -p "$OUT" /tmp/b30
tar xJf "$D/bins.tar.xz" -C /tmp/b30
B=/tmp/b30
[ -d $B/v5b ] && mkdir -p $B/v5 && cp $B/v5b/* $B/v5/  # v5b: the bench alone (the carry limit)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== parity"; date
[ -x $B/v5/dsinfer_gpu_tests ] && timeout ${T_TESTS:-60} $B/v5/dsinfer_gpu_tests \
  --gtest_filter="${FILTER:-MoeGroupedFp8Gpu*:MoeGroupedGpu.SmallRagged:MoeFastGpu*:RouteGpu*}" > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep -E "^\[ *(OK|FAILED|PASSED) |Failure|fp8 moe|Expected|Which is" "$OUT/tests.log" | head -30
echo "== fidelity, FP8 MoE forced for every T of the fast path"; date
timeout ${T_FID:-90} $B/dsinfer_fp8 check-reference --backend cuda --fidelity --model models/dsv4-small \
  > "$OUT/fidelity.log" 2>&1
echo "fidelity exit $?"; tail -8 "$OUT/fidelity.log"
echo "== bench v5 grouped, 4 sets"; date
timeout 60 $B/v5/dsinfer_moe_bench grouped > "$OUT/bench.log" 2>&1; echo "exit $?"; grep grouped "$OUT/bench.log"
for v in d1 d14 d4 d2 d16 d8; do
  echo "== $v"; DSINFER_MOE_BENCH_SETS=1 DSINFER_MOE_BENCH_T=${DIAG_T:-4096} timeout 30 $B/$v/dsinfer_moe_bench grouped \
    2>&1 | grep "grouped.*|.*[0-9]$"
done 2>&1 | tee "$OUT/diag.log"
echo "== DeepGEMM grouped"; date
mkdir -p /tmp/site && tar xJf "$D/site.tar.xz" -C /tmp/site && export PYTHONPATH=/tmp/site
export DG_JIT_CACHE_DIR=/tmp/dg_cache DSINFER_PEER_MOE_T=${MOE_T:-512,1024,2048,4096,8192}
[ -f "$D/dg_cache.tar.xz" ] && tar xJf "$D/dg_cache.tar.xz" -C /tmp
timeout 90 python3 "$D/run_peers.py" peers --only peers_deepgemm_grouped --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1
echo "peers exit $?"
python3 -c "import json; d = json.load(open('$OUT/peers.json'))
print(json.dumps({k: d[k] for k in ('peers', 'notes', 'failed')}, indent=1))"
date
cd "$OUT" && tar cJf logs.tar.xz *.log *.json 2>/dev/null; ls -la "$OUT"
