#!/usr/bin/env bash
# Run ON the GPU machine: the peers' kernels and ours at V4-Flash shapes in one call, then the side-by-side table
# (bench/peers/README.md). DIR holds what was carried: wheels/ (sgl-deep-gemm 0.1.5.post1, apache-tvm-ffi 0.1.11),
# flashmla/sgl_kernel/{flash_mla.py,flashmla_ops.abi3.so}, optionally dg_cache.tar.xz (DeepGEMM's JIT cache of an
# earlier call) and bins.tar.xz (our CUDA build: dsinfer and the kernel benches). Logs and the table go to $OUT.
# Usage: bash bench/peers/run.sh DIR [peers|ours|all]
set -uo pipefail
DIR=${1:?usage: run.sh DIR [peers|ours|all]}
WHAT=${2:-all}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/peers_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DG_JIT_CACHE_DIR=/tmp/dg_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "$WHAT" != ours ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$DIR"/wheels/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  [ -f "$DIR/dg_cache.tar.xz" ] && tar xJf "$DIR/dg_cache.tar.xz" -C /tmp
  echo "== peers"
  timeout "${PEERS_TIMEOUT:-300}" python3 "$HERE/run_peers.py" peers --out "$OUT/peers.json" --flashmla-dir "$DIR/flashmla" \
    > "$OUT/peers.log" 2>&1
  echo "peers: exit $?"
  tail -25 "$OUT/peers.log"
  [ -d /tmp/dg_cache ] && tar cJf "$OUT/dg_cache.tar.xz" -C /tmp dg_cache
fi
if [ "$WHAT" != peers ] && [ -f "$DIR/bins.tar.xz" ]; then
  mkdir -p /tmp/ours && tar xJf "$DIR/bins.tar.xz" -C /tmp/ours
  B=/tmp/ours/bin
  echo "== ours"
  timeout 150 "$B/dsinfer_gemm_bench" --peer > "$OUT/gemm.log" 2>&1; echo "gemm: exit $?"
  timeout 150 "$B/dsinfer_moe_bench" 64 > "$OUT/moe.log" 2>&1; echo "moe: exit $?"
  timeout 60 "$B/dsinfer_attention_bench" > "$OUT/attn.log" 2>&1; echo "attention: exit $?"
  if [ -n "${MODEL:-}" ]; then
    timeout 300 "$B/dsinfer" bench --model "$MODEL" --load-format dummy --layers 4 --batch 1,64,256 --context 4096 \
      --prefill 4096 --iters 5 > "$OUT/bench.log" 2>&1
    echo "dsinfer bench: exit $?"
    grep -E "^== |^ceilings|^STEP AS RUN|^SUM OF OPS|^PER LAYER|^HEAD APART" "$OUT/bench.log"
  fi
fi
python3 "$HERE/run_peers.py" table --peers "$OUT/peers.json" --gemm "$OUT/gemm.log" --moe "$OUT/moe.log" \
  --attn "$OUT/attn.log" --model-bench "$OUT/bench.log" | tee "$OUT/table.md"
