#!/usr/bin/env bash
# Speculative decoding on the GPU (issue 13): the drafter parity / device-pick and end-to-end greedy-equality GPU
# tests (fast: teacher-forced near ties; --batch-invariant: identical), output tokens/s of the shipped model at
# batch 1 and 32 with --speculative off / dspark / mtp1 (CUDA graphs on: decode, uniform verify steps, DSpark's
# propose round), each with its ratio to off, mean accepted length and draft share of the step time; DSpark batch 1
# also with DSINFER_CUDA_GRAPHS=0 (the un-graphed round, for attribution) and with --speculative-cost-model off (every
# draft verified), the held-out evaluation prompts (report.json's samples) and the per-round arithmetic (draft +
# verify ms against what 1.8x needs); the verify-step cost on V4-Flash shapes
# (dummy weights, 4 layers, k = 1 and 5, batch 1 and 64). Gets OUT and BIN from tools/gpu_run.sh; about 2 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT/cudaspec"
D="$OUT/cudaspec"
rc=0

echo "== cudaspec: GPU tests (drafter parity, greedy equality with DSpark / MTP-1)"
timeout 170 $BIN/dsinfer_gpu_tests --gtest_filter='DraftGpu.*:SpecGpu.*' 2>&1 | tee "$D/tests.log" \
  | grep -E "OK \]|FAILED|drafter|greedy|Failure|error|margin" | head -50
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "cudaspec: GPU tests failed"; rc=1; }

# Requests: windows of this repository's Python sources as completion prompts (the model was trained on code),
# greedy, 128 tokens each, EOS ignored so every run emits the same number of tokens.
python3 - "$D" <<'PY'
import json, sys, pathlib
src = "".join(pathlib.Path(f).read_text() for f in ["tools/train/arch.py", "tools/train/train.py", "tools/train/evaluate.py"])
# The held-out evaluation prompts in the repository: the 4 samples of models/dsv4-small/training/report.json
# (evaluate.py: 48-token prompts, 96 new tokens), for the engine's accepted length on the evaluation's text.
r = json.load(open("models/dsv4-small/training/report.json"))
with open(f"{sys.argv[1]}/heldout.jsonl", "w") as f:
    for i, smp in enumerate(r["greedy"]["samples"]):
        body = {"prompt": smp["prompt"], "max_tokens": 96, "temperature": 0, "ignore_eos": True}
        f.write(json.dumps({"custom_id": f"h{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
for name, n in (("b1", 8), ("b32", 64)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for i in range(n):
            s = (i * 1543) % (len(src) - 400)
            body = {"prompt": src[s:s + 200], "max_tokens": 128, "temperature": 0, "ignore_eos": True}
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
PY

declare -A TPS
gen() {  # name, request file, max seqs, env assignments ("" = none), generate flags...
  local name=$1 input=$2 seqs=$3 envs=$4
  shift 4
  # shellcheck disable=SC2086
  timeout 60 env $envs $BIN/dsinfer generate --model models/dsv4-small --backend cuda --input "$D/$input.jsonl" \
    --output "$D/$name.out.jsonl" --max-num-seqs "$seqs" --max-model-len 512 "$@" > "$D/$name.log" 2>&1
  local st=$? tps spec ratio=""
  tps=$(grep -oE "[0-9.]+ output tok/s" "$D/$name.log" | head -1 | cut -d' ' -f1)
  TPS[$name]=${tps:-0}
  local off=${TPS[${OFFKEY:-off_b${seqs}}]:-}
  [ -n "$tps" ] && [ -n "$off" ] && ratio=$(awk -v a="$tps" -v b="$off" 'BEGIN{ if (b > 0) printf "%.2fx off", a / b }')
  spec=$(grep -A1 "^speculative:" "$D/$name.log" | tr -s ' \n' ' ' | sed -E 's/speculative: [a-z0-9]+, //; s/acceptance per position \[[^]]*\], //')
  printf "%-22s %-16s %-10s %s\n" "$name" "${tps:-FAILED (exit $st)}" "$ratio" "$spec"
  [ $st -eq 0 ] || { tail -3 "$D/$name.log"; rc=1; }
}
same() {  # outputs identical to the plain run's (greedy; GPU numerics are not batch-invariant: reported only)
  python3 - "$D/$1.out.jsonl" "$D/$2.out.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
text = lambda r: r.get("response", {}).get("body", {}).get("choices", [{}])[0].get("text")
same = sum(text(x) == text(y) for x, y in zip(a, b))
print(f"  {sys.argv[2].split('/')[-1]}: {same}/{len(a)} outputs identical to {sys.argv[1].split('/')[-1]}")
PY
}
echo "== cudaspec: generate on models/dsv4-small, greedy, 128 tokens per request, graphs on (tok/s, ratio, accepted length, draft share)"
for b in 1 32; do
  f=b1; [ "$b" = 32 ] && f=b32
  gen "off_b$b" $f $b ""
  gen "dspark_b$b" $f $b "" --speculative dspark
  gen "mtp1_b$b" $f $b "" --speculative mtp1
  same "off_b$b" "dspark_b$b"
  same "off_b$b" "mtp1_b$b"
done
gen "dspark_b1_nographs" b1 1 "DSINFER_CUDA_GRAPHS=0" --speculative dspark
# Cost model off: every round verifies the whole block (the evaluation's definition; the default schedule cuts
# tails at batch 1). Held-out prompts: the evaluation's text, every draft verified.
gen "dspark_b1_rc0" b1 1 "" --speculative dspark --speculative-cost-model off
gen "off_heldout" heldout 1 ""
OFFKEY=off_heldout gen "dspark_heldout_rc0" heldout 1 "" --speculative dspark --speculative-cost-model off
same off_heldout dspark_heldout_rc0
arith() {  # step arithmetic of a batch-1 run: round = accepted length / tok/s; draft = its share; 1.8x needs
  local log="$D/$1.log" tps=${TPS[$1]:-0} off=${TPS[off_b1]:-0}
  awk -v tps="$tps" -v off="$off" -v name="$1" '
    /mean accepted length/ { for (i = 1; i <= NF; ++i) if ($i == "length") acc = $(i + 1) }
    /draft time/ { for (i = 1; i <= NF; ++i) if ($i == "time") share = $(i + 1) }
    END { if (tps > 0 && off > 0) { r = 1000 * acc / tps; sub("%", "", share); d = r * share / 100;
      printf "  %s: round %.3f ms = draft %.3f + verify/host %.3f (accepted %.2f); off %.3f ms/token; 1.8x needs a round <= %.3f ms\n",
             name, r, d, r - d, acc, 1000 / off, 1000 * acc / (1.8 * off) } }' "$log"
}
arith dspark_b1
arith dspark_b1_rc0
arith mtp1_b1

echo "== cudaspec: verify-step cost, V4-Flash shapes (dummy weights, 4 layers), k = 1 and 5, batch 1 and 64"
timeout 90 $BIN/dsinfer bench --model configs/deepseek-v4-flash --load-format dummy --layers 4 --batch 1,64 \
  --context 4096 --prefill 0 --iters 3 --verify-tokens 1,5 > "$D/verify_bench.log" 2>&1
st=$?
grep -E "^== |^step|tokens/s" "$D/verify_bench.log" | head -40
[ $st -eq 0 ] || { echo "cudaspec: verify bench failed (exit $st)"; tail -5 "$D/verify_bench.log"; rc=1; }
exit $rc
