#!/usr/bin/env bash
# Several ranks (issues 12, 27, 28; docs/multi_gpu.md). Two parts:
# Part 1, any GPU count (the one-GPU dry run of issue 28): 2 and 4 ranks sharing GPU 0 through the in-process
#   communicator, in the EP, DP and TP layouts: the GpuMultiGpu tests (engine runs against one rank under
#   --batch-invariant with tolerance 0, check-reference of every layout on the exact fp32 path; the 2-GPU tests
#   skip), check-reference --gpus 2 in every layout on the other fixtures (greedy equal to the reference's, which
#   the cpu backend also passes in CI: 1 GPU == CPU), `generate --batch-invariant` on the shipped model at 1, 2 and
#   4 ranks in every layout (EP, DP, TP: same text and bitwise the same logprobs), a fault
#   injected at rank 1's step 3 (the run ends within 30 s naming the rank), `bench --gpus 2` in every layout (collective bytes and time per step) and the
#   in-process collectives' baseline (dsinfer_comm_bench). ~2 minutes.
# Part 2, 2 GPUs or more (nvidia-h200-x2, NCCL): the NCCL link baseline (all-reduce and all-to-all, 4 KB..256 MB),
#   check-reference --gpus 2 on the fixtures and the shipped model, a greedy `generate` 1 GPU vs 2 GPUs in every
#   layout, EPLB (rebalances every 4 / 2 steps must not change a token; the host balance table), the full V4-Flash
#   refusal on 1 GPU and its 43-layer bench on 2 GPUs (decode batch 1 / 64 / 256 at 4K context, prefill 4096), and
#   a fault injected on rank 1 mid-run (the other ends within 30 s with an error naming rank 1). ~4 minutes.
# Env: OUT (log folder), BIN (build/cuda), MULTIGPU_PART (1, 2 or both: the default runs part 2 only with 2 GPUs),
# MULTIGPU_TEST_FILTER (gtest filter of part 1, GpuMultiGpu.*), MULTIGPU_TEST_TIMEOUT (s, 240).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then ngpu=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .); fi
part=${MULTIGPU_PART:-both}
st=0
fail() { echo "FAIL: $1"; st=1; }
# same_outputs A.jsonl B.jsonl WHAT [logprobs]: every request's choice texts (and with "logprobs", the choices'
# logprobs, compared as numbers bit for bit) equal in two generate outputs (else a failure).
same_outputs() {
  python3 - "$1" "$2" "$3" "${4:-}" <<'PY' || fail "generate: $3 differs"
import json, sys
lp = sys.argv[4] == "logprobs"
def load(f):
    try:
        return {r["custom_id"]: [(c.get("text"), json.dumps(c.get("logprobs")) if lp else None)
                                 for c in r["response"]["body"].get("choices", [])] for r in map(json.loads, open(f))}
    except (OSError, KeyError, ValueError):
        return None
a, b = load(sys.argv[1]), load(sys.argv[2])
if not a or a.keys() != (b or {}).keys(): print("missing outputs"); sys.exit(1)
same = [k for k in a if a[k] == b[k]]
has_lp = lp and all(c[1] not in (None, "null") for v in a.values() for c in v)
print(f"generate: {len(same)}/{len(a)} requests identical{' (text and logprobs)' if lp else ''}, {sys.argv[3]}")
if lp and not has_lp: print("no logprobs in the outputs"); sys.exit(1)
sys.exit(0 if len(same) == len(a) else 1)
PY
}
req="$OUT/multigpu_requests.jsonl"
python3 - "$req" <<'PY'
import json, sys
prompts = ["def read_config(path):\n", "The quick brown fox", "import os\nimport", "1, 2, 3, 5, 8,", "Once upon a time"]
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"custom_id": f"r{i}", "url": "/v1/completions",
                            "body": {"prompt": p, "max_tokens": 48, "temperature": 0, "ignore_eos": True,
                                     "logprobs": 2}}) + "\n")
PY
layout_flags() {  # layout ranks -> the flags selecting it
  case $1 in ep) echo "--gpus $2" ;; dp) echo "--gpus $2 --data-parallel-size $2" ;; tp) echo "--gpus $2 --tensor-parallel-size $2" ;; esac
}

if [ "$part" != 2 ]; then
echo "== multigpu part 1: ranks sharing GPU 0 (in-process communicator), $ngpu GPU(s) visible"
echo "-- GPU tests (GpuMultiGpu.*; the 2-GPU ones skip on one GPU)"
timeout "${MULTIGPU_TEST_TIMEOUT:-240}" $BIN/dsinfer_gpu_tests --gtest_brief=1 --gtest_filter="${MULTIGPU_TEST_FILTER:-GpuMultiGpu.*}" \
  > "$OUT/multigpu_tests.log" 2>&1 ||
  { fail "GpuMultiGpu tests"; grep -E "Failure|FAILED|Expected|Which is|error" "$OUT/multigpu_tests.log" | head -30; }
grep -E "tokens identical|exact path|bench,|PASSED|FAILED|SKIPPED" "$OUT/multigpu_tests.log" | head -60

echo "-- generate --batch-invariant, shipped model: 1 rank vs 2 and 4 ranks in every layout (text and logprobs)"
gen() {  # tag flags...
  local tag=$1; shift
  timeout 90 $BIN/dsinfer generate --backend cuda --batch-invariant --model models/dsv4-small --input "$req" \
    --output "$OUT/multigpu_gen_$tag.jsonl" "$@" > "$OUT/multigpu_gen_$tag.log" 2>&1 || { fail "generate $tag"; tail -5 "$OUT/multigpu_gen_$tag.log"; }
}
gen one --gpus 1
for lay in ep dp tp; do
  for n in 2 4; do
    gen "${lay}$n" $(layout_flags $lay $n) --communicator in-process
    same_outputs "$OUT/multigpu_gen_one.jsonl" "$OUT/multigpu_gen_${lay}$n.jsonl" "1 rank vs $lay x$n on one GPU" logprobs
  done
done

echo "-- fault: rank 1 fails at its step 3 (2 ranks on one GPU): the run ends within 30 s, the error names rank 1"
t0=$(date +%s)
timeout 30 $BIN/dsinfer generate --backend cuda --gpus 2 --communicator in-process --inject-fault 1:step:3 \
  --model models/dsv4-small --input "$req" --output "$OUT/multigpu_fault.jsonl" > "$OUT/multigpu_fault.log" 2>&1
rc=$?
echo "exit $rc after $(( $(date +%s) - t0 )) s; $(grep -o 'rank 1[^"]*failed[^"]*' "$OUT/multigpu_fault.log" "$OUT/multigpu_fault.jsonl" 2>/dev/null | head -1)"
[ $rc -ne 124 ] || fail "fault run did not end within 30 s"
grep -q "rank 1" "$OUT/multigpu_fault.log" "$OUT/multigpu_fault.jsonl" 2>/dev/null || fail "fault run did not name rank 1"

echo "-- bench --gpus 2 (V4-Flash shapes, 2 layers, dummy weights), every layout: collective bytes and time per step"
for lay in ep dp tp; do
  timeout 60 $BIN/dsinfer bench $(layout_flags $lay 2) --communicator in-process --model configs/deepseek-v4-flash \
    --load-format dummy --layers 2 --batch 1,64 --context 1024 --prefill 0 --iters 3 > "$OUT/multigpu_bench_$lay.log" 2>&1 ||
    { fail "bench $lay"; tail -4 "$OUT/multigpu_bench_$lay.log"; }
  echo "$lay: $(grep -E "collectives:" "$OUT/multigpu_bench_$lay.log" | tr '\n' ' ')"
done
[ -x "$BIN/dsinfer_comm_bench" ] && timeout 60 $BIN/dsinfer_comm_bench --ranks 2 --communicator in-process \
  --max-bytes 16777216 --iters 3 || echo "(dsinfer_comm_bench not run)"
echo "-- check-reference --gpus N --communicator in-process (exact fp32 path), every layout, the other fixtures"
for fx in tests/fixtures/tiny-v4-a-bf16 tests/fixtures/tiny-v4-c tests/fixtures/tiny-v4-official tests/fixtures/tiny-v41-a tests/fixtures/tiny-v41-b; do
  [ -f "$fx/reference.safetensors" ] || { echo "$fx: no reference, skipped"; continue; }
  name=$(basename "$fx")
  extra=""; layouts="ep dp tp"
  case $name in tiny-v41-*) extra="--numerics hf-noqat --reference $fx/reference_noqat.safetensors --tolerance 1e-5"; layouts="ep dp" ;; esac
  for lay in $layouts; do
    log="$OUT/multigpu_check_${name}_$lay.log"
    timeout 60 $BIN/dsinfer check-reference --backend cuda $(layout_flags $lay 2) --communicator in-process \
      --model "$fx" $extra > "$log" 2>&1 || { fail "check-reference $lay 2 ranks $name"; tail -4 "$log"; }
    echo "$name $lay x2: $(grep -E "PASS|FAIL" "$log" | tail -1)"
  done
done

fi

if [ "$part" = 1 ] || { [ "$part" = both ] && [ "$ngpu" -lt 2 ]; }; then
  echo "== multigpu part 2 (NCCL): skipped, $ngpu GPU(s) visible (needs 2)"
  exit $st
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
echo "== multigpu part 2: $ngpu GPUs, NCCL library: ${DSINFER_NCCL_LIBRARY:-not found (dsinfer will try libnccl.so.2)}"

echo "-- NCCL link baseline: all-reduce and all-to-all, 4 KB..256 MB"
timeout 120 $BIN/dsinfer_comm_bench --ranks 2 --communicator nccl > "$OUT/multigpu_comm_nccl.log" 2>&1 || fail "NCCL comm bench"
cat "$OUT/multigpu_comm_nccl.log"

if [ "$part" = 2 ]; then  # part 1 ran them already, with both GPUs visible
  echo "-- GPU test: 1 vs 2 GPUs"
  timeout 300 $BIN/dsinfer_gpu_tests --gtest_brief=1 --gtest_filter='GpuMultiGpu.*' > "$OUT/multigpu_tests.log" 2>&1 ||
    { fail "GpuMultiGpu tests"; tail -30 "$OUT/multigpu_tests.log"; }
  grep -E "tokens identical|PASSED|FAILED|SKIPPED" "$OUT/multigpu_tests.log" | head -10
fi

echo "-- check-reference --gpus 2"
for fx in tests/fixtures/tiny-v4-a tests/fixtures/tiny-v4-b models/dsv4-small; do
  [ -f "$fx/reference.safetensors" ] || { echo "$fx: no reference, skipped"; continue; }
  timeout 120 $BIN/dsinfer check-reference --backend cuda --gpus 2 --numerics hf --model "$fx" \
    > "$OUT/multigpu_check_$(basename "$fx").log" 2>&1 || { fail "check-reference --gpus 2 $fx"; tail -5 "$OUT/multigpu_check_$(basename "$fx").log"; }
  echo "$(basename "$fx"): $(grep -E "PASS|FAIL" "$OUT/multigpu_check_$(basename "$fx").log" | tail -1)"
done

echo "-- generate 1 GPU vs 2 GPUs in every layout (greedy, token for token)"
for g in 1 2; do
  timeout 120 $BIN/dsinfer generate --backend cuda --gpus $g --model models/dsv4-small --input "$req" \
    --output "$OUT/multigpu_gen_$g.jsonl" > "$OUT/multigpu_gen_$g.log" 2>&1 || { fail "generate --gpus $g"; tail -5 "$OUT/multigpu_gen_$g.log"; }
done
same_outputs "$OUT/multigpu_gen_1.jsonl" "$OUT/multigpu_gen_2.jsonl" "1 vs 2 GPUs"
for lay in dp tp; do
  timeout 120 $BIN/dsinfer generate --backend cuda $(layout_flags $lay 2) --model models/dsv4-small --input "$req" \
    --output "$OUT/multigpu_gen_2$lay.jsonl" > "$OUT/multigpu_gen_2$lay.log" 2>&1 || { fail "generate $lay"; tail -5 "$OUT/multigpu_gen_2$lay.log"; }
  same_outputs "$OUT/multigpu_gen_1.jsonl" "$OUT/multigpu_gen_2$lay.jsonl" "1 GPU vs 2 GPUs, $lay"
done
for lay in ep dp tp; do
  timeout 120 $BIN/dsinfer generate --backend cuda --batch-invariant $(layout_flags $lay 2) --model models/dsv4-small \
    --input "$req" --output "$OUT/multigpu_gen_bi2$lay.jsonl" > /dev/null 2>&1 || fail "generate --batch-invariant $lay"
done
timeout 120 $BIN/dsinfer generate --backend cuda --batch-invariant --gpus 1 --model models/dsv4-small --input "$req" \
  --output "$OUT/multigpu_gen_bi1.jsonl" > /dev/null 2>&1 || fail "generate --batch-invariant 1 GPU"
for lay in ep dp tp; do
  same_outputs "$OUT/multigpu_gen_bi1.jsonl" "$OUT/multigpu_gen_bi2$lay.jsonl" "--batch-invariant 1 GPU vs 2 GPUs, $lay" logprobs
done

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
grep -E "^bench:|^== |^moe|^total ops|^step|tokens/s|collectives|rror" "$OUT/multigpu_flash_bench.log" | head -60

echo "-- fault: rank 1 fails mid-run on 2 GPUs (NCCL): the other ends within 30 s with an error naming rank 1"
t0=$(date +%s)
timeout 30 $BIN/dsinfer generate --backend cuda --gpus 2 --inject-fault 1:step:3 --model models/dsv4-small \
  --input "$req" --output "$OUT/multigpu_fault_nccl.jsonl" > "$OUT/multigpu_fault_nccl.log" 2>&1
rc=$?
echo "exit $rc after $(( $(date +%s) - t0 )) s"
[ $rc -ne 124 ] || fail "NCCL fault run did not end within 30 s"
grep -q "rank 1" "$OUT/multigpu_fault_nccl.log" "$OUT/multigpu_fault_nccl.jsonl" 2>/dev/null || fail "NCCL fault run did not name rank 1"
exit $st
