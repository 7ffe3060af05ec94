#!/usr/bin/env bash
# Run ON the GPU machine (issue 30, third session): find the bound of the FP8 grouped MoE kernels. DIR holds
# bins.tar.xz (v5/: dsinfer_gpu_tests + dsinfer_moe_bench of commit 57e50cc; v4p/, v5a4/, v5np/: its bench with
# the macros DSINFER_MOE_FP8_RAW_AHEAD / _L2_PREFETCH (since removed) at 2 / 0, 4 / 1, 6 / 0; v4/: session 2's bench),
# site.tar.xz + dg_cache.tar.xz (DeepGEMM, as moe_fp8_run.sh). Steps: parity tests of v5, the grouped bench of v5
# (T = 512 .. 8,192), v5 and v4p at T = 512 / 4,096 with 4 rotating weight sets and with 1, ncu (SpeedOfLight,
# MemoryWorkloadAnalysis, WarpStateStats, SchedulerStats) of v4's and v5's kernels and DeepGEMM's at T = 512 / 4,096.
set -uo pipefail
D=${1:?usage: moe_fp8_profile.sh DIR}
OUT=${OUT:-/tmp/out30}
mkdir -p "$OUT" /tmp/b30
tar xJf "$D/bins.tar.xz" -C /tmp/b30
B=/tmp/b30
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== parity (v5)"; date
timeout ${T_TESTS:-60} $B/v5/dsinfer_gpu_tests --gtest_filter="${FILTER:-MoeGroupedFp8Gpu*:MoeGroupedGpu.SmallRagged}" \
  > "$OUT/tests.log" 2>&1
echo "tests exit $?"; grep -E "^\[ *(OK|FAILED|PASSED) |Failure|fp8 moe|Expected|Which is" "$OUT/tests.log" | head -30
echo "== bench v5 grouped, 4 sets"; date
timeout 100 $B/v5/dsinfer_moe_bench grouped > "$OUT/bench_v5.log" 2>&1; echo "exit $?"; grep grouped "$OUT/bench_v5.log"
for v in v5 v4p; do for s in 4 1; do
  echo "== $v sets $s"
  DSINFER_MOE_BENCH_SETS=$s DSINFER_MOE_BENCH_T=512,4096 timeout 60 $B/$v/dsinfer_moe_bench grouped 2>&1 | grep grouped
done; done 2>&1 | tee "$OUT/bench_rot.log"
for v in v5a4 v5np; do  # v5 with 4 raw stages ahead / v5 without the L2::256B prefetch
  [ -x $B/$v/dsinfer_moe_bench ] || continue
  echo "== $v sets 4"; DSINFER_MOE_BENCH_T=512,4096 timeout 60 $B/$v/dsinfer_moe_bench grouped 2>&1 | grep grouped
done 2>&1 | tee -a "$OUT/bench_rot.log"
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
NCU="ncu --clock-control none $SEC"
echo "== ncu v4 / v5 (T = 512: first 2 launches; T = 4,096)"; date
for v in v4 v5; do for T in 512 4096; do
  if [ $v = v4 ]; then
    skip=$([ $T = 512 ] && echo 0 || echo 168)  # v4 bench: 28 launches x 2 kernels per T, T = 512, 1024, 2048 first
    timeout 90 $NCU --kernel-name regex:moe_grouped_fp8 --launch-skip $skip --launch-count 2 $B/v4/dsinfer_moe_bench \
      grouped > "$OUT/ncu_${v}_$T.log" 2>&1
  else
    DSINFER_MOE_BENCH_T=$T timeout 60 $NCU --kernel-name regex:moe_grouped_fp8 --launch-count 2 \
      $B/v5/dsinfer_moe_bench grouped > "$OUT/ncu_${v}_$T.log" 2>&1
  fi
  echo "ncu $v $T exit $?"
  grep -E "moe_grouped_fp8_kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Issued Warp|No Eligible|Warp Cycles Per Issued" "$OUT/ncu_${v}_$T.log" | head -30
done; done
if [ "${PEERS:-1}" = 1 ]; then
  echo "== ncu DeepGEMM (contiguous gate/up, first launch at T)"; date
  mkdir -p /tmp/site && tar xJf "$D/site.tar.xz" -C /tmp/site && export PYTHONPATH=/tmp/site
  export DG_JIT_CACHE_DIR=/tmp/dg_cache
  [ -f "$D/dg_cache.tar.xz" ] && tar xJf "$D/dg_cache.tar.xz" -C /tmp
  for T in 512 4096; do
    DSINFER_PEER_MOE_T=$T timeout 80 $NCU --kernel-name regex:gemm --launch-count 1 python3 "$D/run_peers.py" peers \
      --only peers_deepgemm_grouped --out "$OUT/peers_$T.json" > "$OUT/ncu_dg_$T.log" 2>&1
    echo "ncu dg $T exit $?"
    grep -E "  [a-z_0-9]*gemm|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|L2 Hit|Mem Busy|Issued Warp|No Eligible" \
      "$OUT/ncu_dg_$T.log" | head -14
  done
fi
date
cd "$OUT" && tar cJf logs.tar.xz *.log *.json 2>/dev/null; ls -la "$OUT"
