#!/usr/bin/env bash
# Several GPUs (issue 12, docs/multi_gpu.md): expert parallelism over 2 GPUs of one node with NCCL. Skips (exit 0)
# with fewer than 2 visible GPUs. Checks: the GPU test (1 vs 2 GPUs through the Engine: same greedy tokens,
# logprobs within 2e-3), check-reference --gpus 2 on the fixtures and the shipped model, a greedy `generate`
# 1 GPU vs 2 GPUs token for token, the full V4-Flash refusal on 1 GPU (it does not fit) and the full V4-Flash
# bench (all 43 layers, dummy weights) on 2 GPUs; EPLB (--eplb, docs/multi_gpu.md): the GPU tests above include
# EPLB on vs off, a greedy `generate` with a rebalance every 4 steps must match the plain 2-GPU run token for token
# and log its rebalances, the same with dummy weights (moved slots regenerated from their seeds, every 2 steps),
# and the host balance table (dsinfer_eplb_bench). ~3 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then ngpu=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .); fi
if [ "$ngpu" -lt 2 ]; then
  echo "== multigpu: skipped, $ngpu GPU(s) visible (needs 2)"
  exit 0
fi
# libnccl.so.2: the device's PyTorch NCCL (or any nvidia/nccl*/lib on LD_LIBRARY_PATH or in site-packages).
if [ -z "${DSINFER_NCCL_LIBRARY:-}" ]; then
  cands=(/opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl*/lib/libnccl.so.2)
  IFS=: read -ra ldp <<< "${LD_LIBRARY_PATH:-}"
  for d in "${ldp[@]}"; do [ -n "$d" ] && cands+=("$d"/libnccl.so.2); done
  py=$(python3 -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0] + '/lib/libnccl.so.2')" 2>/dev/null)
  [ -n "$py" ] && cands+=("$py")
  for c in "${cands[@]}"; do
    if [ -f "$c" ]; then export DSINFER_NCCL_LIBRARY="$c"; break; fi
  done
fi
echo "== multigpu: $ngpu GPUs, NCCL library: ${DSINFER_NCCL_LIBRARY:-not found (dsinfer will try libnccl.so.2)}"
st=0
fail() { echo "FAIL: $1"; st=1; }
# same_outputs A.jsonl B.jsonl WHAT: every request's choice texts equal in two generate outputs (else a failure).
same_outputs() {
  python3 - "$1" "$2" "$3" <<'PY' || fail "generate: $3 differs"
import json, sys
def load(f):
    try:
        return {r["custom_id"]: [c.get("text") for c in r["response"]["body"].get("choices", [])] for r in map(json.loads, open(f))}
    except (OSError, KeyError, ValueError):
        return None
a, b = load(sys.argv[1]), load(sys.argv[2])
if not a or a.keys() != (b or {}).keys(): print("missing outputs"); sys.exit(1)
same = [k for k in a if a[k] == b[k]]
print(f"generate: {len(same)}/{len(a)} requests identical, {sys.argv[3]}")
sys.exit(0 if len(same) == len(a) else 1)
PY
}

echo "-- GPU test: 1 vs 2 GPUs"
timeout 300 $BIN/dsinfer_gpu_tests --gtest_brief=1 --gtest_filter='GpuMultiGpu.*' > "$OUT/multigpu_tests.log" 2>&1 ||
  { fail "GpuMultiGpu tests"; tail -30 "$OUT/multigpu_tests.log"; }
grep -E "tokens identical|PASSED|FAILED|SKIPPED" "$OUT/multigpu_tests.log" | head -10

echo "-- check-reference --gpus 2"
for fx in tests/fixtures/tiny-v4-a tests/fixtures/tiny-v4-b models/dsv4-small; do
  [ -f "$fx/reference.safetensors" ] || { echo "$fx: no reference, skipped"; continue; }
  timeout 120 $BIN/dsinfer check-reference --backend cuda --gpus 2 --numerics hf --model "$fx" \
    > "$OUT/multigpu_check_$(basename "$fx").log" 2>&1 || { fail "check-reference --gpus 2 $fx"; tail -5 "$OUT/multigpu_check_$(basename "$fx").log"; }
  echo "$(basename "$fx"): $(grep -E "PASS|FAIL" "$OUT/multigpu_check_$(basename "$fx").log" | tail -1)"
done

echo "-- generate 1 GPU vs 2 GPUs (greedy, token for token)"
req="$OUT/multigpu_requests.jsonl"
python3 - "$req" <<'PY'
import json, sys
prompts = ["def read_config(path):\n", "The quick brown fox", "import os\nimport", "1, 2, 3, 5, 8,", "Once upon a time"]
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"custom_id": f"r{i}", "url": "/v1/completions",
                            "body": {"prompt": p, "max_tokens": 48, "temperature": 0, "ignore_eos": True}}) + "\n")
PY
for g in 1 2; do
  timeout 120 $BIN/dsinfer generate --backend cuda --gpus $g --model models/dsv4-small --input "$req" \
    --output "$OUT/multigpu_gen_$g.jsonl" > "$OUT/multigpu_gen_$g.log" 2>&1 || { fail "generate --gpus $g"; tail -5 "$OUT/multigpu_gen_$g.log"; }
done
same_outputs "$OUT/multigpu_gen_1.jsonl" "$OUT/multigpu_gen_2.jsonl" "1 vs 2 GPUs"

echo "-- EPLB: generate 2 GPUs with a rebalance every 4 steps vs plain 2 GPUs"
DSINFER_EPLB_LOG=1 timeout 120 $BIN/dsinfer generate --backend cuda --gpus 2 --eplb --num-redundant-experts 2 \
  --eplb-interval 4 --model models/dsv4-small --input "$req" --output "$OUT/multigpu_gen_eplb.jsonl" \
  > "$OUT/multigpu_gen_eplb.log" 2>&1 || { fail "generate --eplb"; tail -5 "$OUT/multigpu_gen_eplb.log"; }
grep -c "^eplb: step" "$OUT/multigpu_gen_eplb.log" | sed 's/^/rebalances logged: /'
grep -q "^eplb: step" "$OUT/multigpu_gen_eplb.log" || fail "generate --eplb logged no rebalance"
grep "^eplb: step" "$OUT/multigpu_gen_eplb.log" | tail -2
same_outputs "$OUT/multigpu_gen_2.jsonl" "$OUT/multigpu_gen_eplb.jsonl" "EPLB on vs off (checkpoint)"
echo "-- EPLB: dummy weights (moved slots regenerated from their seeds), rebalance every 2 steps vs plain 2 GPUs"
for mode in plain eplb; do
  flags=""; [ $mode = eplb ] && flags="--eplb --num-redundant-experts 4 --eplb-interval 2"
  DSINFER_EPLB_LOG=1 timeout 120 $BIN/dsinfer generate --backend cuda --gpus 2 $flags --load-format dummy \
    --model models/dsv4-small --input "$req" --output "$OUT/multigpu_dummy_$mode.jsonl" > "$OUT/multigpu_dummy_$mode.log" 2>&1 ||
    { fail "generate dummy $mode"; tail -5 "$OUT/multigpu_dummy_$mode.log"; }
done
grep -q "^eplb: step" "$OUT/multigpu_dummy_eplb.log" || fail "dummy --eplb logged no rebalance"
grep "^eplb: step" "$OUT/multigpu_dummy_eplb.log" | tail -1
same_outputs "$OUT/multigpu_dummy_plain.jsonl" "$OUT/multigpu_dummy_eplb.jsonl" "EPLB on vs off (dummy weights)"
[ -x "$BIN/dsinfer_eplb_bench" ] && $BIN/dsinfer_eplb_bench | head -20

echo "-- V4-Flash (43 layers, dummy weights): 1 GPU must refuse, 2 GPUs bench"
timeout 60 $BIN/dsinfer bench --gpus 1 --model configs/deepseek-v4-flash --load-format dummy --batch 1 --prefill 0 \
  --iters 1 > "$OUT/multigpu_flash_1gpu.log" 2>&1
rc=$?
grep -q "needs .* GiB of weights per GPU" "$OUT/multigpu_flash_1gpu.log" && [ $rc -ne 0 ] ||
  fail "1-GPU V4-Flash did not refuse clearly (rc $rc)"
tail -1 "$OUT/multigpu_flash_1gpu.log"
timeout 240 $BIN/dsinfer bench --gpus 2 --model configs/deepseek-v4-flash --load-format dummy --batch 1,64,256 \
  --context 4096 --prefill 4096 --iters 3 > "$OUT/multigpu_flash_bench.log" 2>&1 || fail "V4-Flash bench on 2 GPUs"
grep -E "^bench:|^== |^moe|^total ops|^step|tokens/s|rror" "$OUT/multigpu_flash_bench.log" | head -60
exit $st
