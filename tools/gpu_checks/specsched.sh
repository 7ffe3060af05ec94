#!/usr/bin/env bash
# Speculation against the step cost model (issue 32), shipped model, greedy, 128 tokens per request, EOS ignored:
# output tok/s, per-token latency (per-user speed), mean accepted length and drafts verified per round for
# --speculative off / dspark / mtp1 (default --speculative-cost-model auto: profiled at start-up, cached under
# $OUT/specsched/cache) and DSpark with every draft verified (--speculative-cost-model off), at batch 1, 8, 32, 64
# and 128 (4 / 16 requests at 1 / 8, B requests above); greedy outputs compared with off; --batch-invariant: off
# alone vs DSpark alone and at 32 (identical expected); the confidence head's calibration on the GPU
# (dsinfer_spec_calibration); the V4-Flash-shape verify-step cost (dummy weights, 4 layers, 1..5 drafts, batch 1
# and 64: the projection's input). Gets OUT and BIN from tools/gpu_run.sh; about 2-3 minutes.
# SPECSCHED_TABLE_ONLY=1: only the must-show table (off / dspark / mtp1 at every batch, dspark verifying every draft
# at 1 and 64) and the greedy comparison, about a minute; each run's wall time (start-up included) is logged.
# SPECSCHED_VERIFY_ALL=0: without the runs that verify every draft (--speculative-cost-model off).
# The "identical to off" counts are of the fast path, where a run's logits depend on its step shapes, so off at one
# batch differs from off at another too: a count below n/n is a sample of near-ties, not a lossless failure. The
# exact check is the --batch-invariant block below; tools/gpu_checks/spec_divergence_b8.sh measures the margins at
# each difference (docs/decisions.md 2026-12-03 "Speculation's lossless contract on the GPU").
# Each speculative run also logs the gate's probes, its steps at rest and the step graphs the runner captured.
# SPECSCHED_REPEATS=R (default 1): off / dspark / mtp1 run R times each at every batch, interleaved (off, dspark,
# mtp1, off, ...), and a closing table gives each one's median output tok/s, its ratio to off's median and the
# spread (min-max over the repeats, in % of the median): single runs of 0.2-0.4 s move by up to +-10 %.
# SPECSCHED_MAX_TOKENS=T (default 128): tokens per request at batch 1 and 8 (the short runs; 128 above).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/cuda}
O=${OUT:-/tmp/dsinfer_gpu_out}/specsched
mkdir -p "$O/logs" "$O/cache" /tmp/b32
export DSINFER_CACHE_DIR=$O/cache
rc=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
export SPECSCHED_MAX_TOKENS=${SPECSCHED_MAX_TOKENS:-128}
python3 - <<'PY'
import json, os, pathlib
src = "".join(pathlib.Path(f).read_text() for f in ["tools/train/arch.py", "tools/train/train.py", "tools/train/evaluate.py"])
for b in (1, 8, 32, 64, 128):
    n = max(2 * b, 4) if b <= 8 else b
    with open(f"/tmp/b32/req{b}.jsonl", "w") as f:
        for i in range(n):
            s = (i * 1543) % (len(src) - 400)
            mt = int(os.environ["SPECSCHED_MAX_TOKENS"]) if b <= 8 else 128
            body = {"prompt": src[s:s + 200], "max_tokens": mt, "temperature": 0, "ignore_eos": True}
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
PY
gen() {  # name batch flags...
  local name=$1 b=$2; shift 2
  local t0=$(date +%s.%N)
  timeout 60 $BIN/dsinfer generate --model models/dsv4-small --backend cuda --input /tmp/b32/req$b.jsonl \
    --output /tmp/b32/$name.out.jsonl --max-num-seqs $b --max-model-len 512 "$@" > "$O/logs/$name.log" 2>&1
  local st=$?
  [ $st -eq 0 ] || rc=1
  echo "$name rc=$st run $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s $(grep -E 'profiled|output tok/s|accepted length|drafts verified|per-token|gate probes' "$O/logs/$name.log" \
    | tr -s ' \n' ' ')"
}
QUICK=${SPECSCHED_TABLE_ONLY:-0}
REPEATS=${SPECSCHED_REPEATS:-1}
for b in 1 8 32 64 128; do
  for r in $(seq 1 $REPEATS); do
    sfx=$([ $r = 1 ] || echo _r$r)
    gen off_b$b$sfx $b
    gen dspark_b$b$sfx $b --speculative dspark
    gen mtp1_b$b$sfx $b --speculative mtp1
  done
  if [ "${SPECSCHED_VERIFY_ALL:-1}" = 1 ] && { [ "$QUICK" != 1 ] || [ $b = 1 ] || [ $b = 64 ]; }; then
    gen dspark_all_b$b $b --speculative dspark --speculative-cost-model off
  fi
done
O="$O" REPEATS=$REPEATS python3 - <<'PY'
# Medians over the repeats: output tok/s, ratio to off, spread, per-user tok/s (output tok/s / running sequences),
# and the speculative runs' accepted length and drafts verified per round (from the first repeat's log).
import os, re, statistics
O, R = os.environ["O"], int(os.environ["REPEATS"])
def grab(name, pat):
    try:
        m = re.search(pat, open(f"{O}/logs/{name}.log").read())
        return float(m.group(1)) if m else None
    except OSError:
        return None
print("batch method median_tok_s x_off spread_% per_user_tok_s accepted verified_per_round runs")
for b in (1, 8, 32, 64, 128):
    users = min(b, max(2 * b, 4) if b <= 8 else b)
    med = {}
    for m in ("off", "dspark", "mtp1"):
        xs = [grab(f"{m}_b{b}" + ("" if r == 1 else f"_r{r}"), r"([0-9.]+) output tok/s") for r in range(1, R + 1)]
        xs = [x for x in xs if x]
        if not xs:
            continue
        med[m] = statistics.median(xs)
        acc = grab(f"{m}_b{b}", r"mean accepted length ([0-9.]+)")
        ver = grab(f"{m}_b{b}", r"drafts verified per round ([0-9.]+)")
        spread = 100.0 * (max(xs) - min(xs)) / med[m]
        print(f"{b} {m} {med[m]:.1f} {med[m] / med['off']:.3f} {spread:.1f} {med[m] / users:.1f} "
              f"{acc if acc is not None else '-'} {ver if ver is not None else '-'} {' '.join(f'{x:.0f}' for x in xs)}")
PY
if [ "$QUICK" != 1 ]; then
  gen dspark_b1_again 1 --speculative dspark
  gen mtp1_all_b1 1 --speculative mtp1 --speculative-cost-model off
  gen mtp1_all_b64 64 --speculative mtp1 --speculative-cost-model off
fi
python3 - <<'PY'
import json
def texts(n):
    return [json.loads(l)["response"]["body"]["choices"][0]["text"] for l in open(f"/tmp/b32/{n}.out.jsonl")]
for b in (1, 8, 32, 64, 128):
    off = texts(f"off_b{b}")
    for m in ("dspark", "dspark_all", "mtp1"):
        try:
            t = texts(f"{m}_b{b}")
            print(f"identical to off: {m}_b{b} {sum(x == y for x, y in zip(off, t))}/{len(off)}")
        except Exception as e:
            print(f"{m}_b{b}: {e}")
PY
if [ "$QUICK" = 1 ]; then
  echo "== cost model files"; for f in "$O"/cache/*; do echo "# $f"; cat "$f"; done
  exit $rc
fi
echo "== batch-invariant: off b1, dspark b1, dspark b32 (32 requests), outputs compared"
for cfg in "off_bi1 1" "dspark_bi1 1 --speculative dspark" "dspark_bi32 32 --speculative dspark"; do
  set -- $cfg; n=$1; b=$2; shift 2
  timeout 60 $BIN/dsinfer generate --model models/dsv4-small --backend cuda --input /tmp/b32/req32.jsonl \
    --output /tmp/b32/$n.out.jsonl --max-num-seqs $b --max-model-len 512 --batch-invariant "$@" > "$O/logs/$n.log" 2>&1
  echo "$n rc=$? $(grep -E 'output tok/s|accepted length' "$O/logs/$n.log" | tr -s ' \n' ' ' | cut -c1-200)"
done
python3 - <<'PY'
import json
t = lambda n: [json.loads(l)["response"]["body"]["choices"][0]["text"] for l in open(f"/tmp/b32/{n}.out.jsonl")]
try:
    a = t("off_bi1")
    bad = 0
    for n in ("dspark_bi1", "dspark_bi32"):
        b = t(n)
        same = sum(x == y for x, y in zip(a, b))
        bad += same != len(a)
        print(f"batch-invariant identical to off_bi1: {n} {same}/{len(a)}")
    raise SystemExit(1 if bad else 0)
except Exception as e:
    print("bi compare:", e)
    raise SystemExit(1)
PY
[ $? -eq 0 ] || { echo "specsched: batch-invariant outputs differ"; rc=1; }
echo "== calibration (GPU)"
timeout 60 $BIN/dsinfer_spec_calibration --backend cuda --model models/dsv4-small --tools tools --prompts 64 \
  --max-tokens 96 \
  --max-num-seqs 64 > "$O/logs/calibration_gpu.txt" 2>&1; echo "calibration rc=$?"; cat "$O/logs/calibration_gpu.txt"
echo "== cost model files"; for f in "$O"/cache/*; do echo "# $f"; cat "$f"; done
echo "== V4-Flash shapes verify cost (dummy weights, 4 layers)"
timeout 35 $BIN/dsinfer bench --model configs/deepseek-v4-flash --load-format dummy --layers 4 --batch 1,64 \
  --context 4096 --prefill 0 --iters 3 --verify-tokens 1,2,3,4,5 > "$O/logs/verify_bench.log" 2>&1
echo "verify bench rc=$?"; grep -E "^== |^step|tokens/s" "$O/logs/verify_bench.log" | head -40
exit $rc
