#!/usr/bin/env bash
# Asynchronous scheduling (issue 14, docs/engine_core.md "Asynchronous steps"): (1) the GPU tests (token-fill gather
# vs its CPU reference; engine async == sync bit for bit; prefix caching with device sampling). (2) `dsinfer generate`
# on the shipped model, 40 requests (greedy and seeded, stop strings, EOS, max_tokens 1..40, n = 2, logprobs),
# --async-scheduling on vs off with --batch-invariant: tokens, text, finish reasons and logprobs must be identical
# (exit 1 on any difference). The same pair without --batch-invariant is compared for information (async steps
# carry a finished sequence's surplus row, so a batch has a row more and batch-dependent kernels may round
# differently). (3) `dsinfer bench --engine-decode` at batch 64, sync vs async, on the shipped model and on V4-Flash
# shapes (dummy weights, 4 layers): device idle time between steps; the issue's target is < 2 % with async.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
st=0
echo "== async: GPU tests"
timeout 300 $BIN/dsinfer_gpu_tests --gtest_brief=1 --gtest_filter='GpuAsync.*' > "$OUT/async_tests.log" 2>&1 ||
  { echo "GpuAsync tests failed"; tail -30 "$OUT/async_tests.log"; st=1; }
tail -3 "$OUT/async_tests.log"

echo "== async: generate, --async-scheduling on vs off"
python3 - "$OUT/async_requests.jsonl" <<'PY'
import json, sys
texts = ["The quick brown fox", "def read_config(path):\n", "Once upon a time", "1, 2, 3, 4,", "Hello, my name is",
         "import os\nimport", "Colors of the rainbow:", "Why is the sky blue?"]
with open(sys.argv[1], "w") as f:
    for i in range(40):
        b = {"prompt": texts[i % 8], "max_tokens": 1 + (i * 7) % 40, "logprobs": 2}
        if i % 3 == 0: b["temperature"] = 0
        else: b.update({"temperature": 0.9, "top_p": 0.95, "seed": 300 + i})
        if i % 4 == 1: b["stop"] = ["e", " t", "\n"]
        if i % 9 == 4: b["n"] = 2
        f.write(json.dumps({"custom_id": f"r{i}", "body": b}) + "\n")
PY
for inv in bi plain; do
  flag=""; [ $inv = bi ] && flag="--batch-invariant"
  for mode in on off; do
    timeout 120 $BIN/dsinfer generate --backend cuda --model models/dsv4-small $flag --async-scheduling $mode \
      --max-num-seqs 64 --max-num-batched-tokens 256 --input "$OUT/async_requests.jsonl" \
      --output "$OUT/async_${inv}_$mode.jsonl" > "$OUT/async_${inv}_$mode.log" 2>&1 ||
      { echo "generate $flag --async-scheduling $mode failed"; tail -5 "$OUT/async_${inv}_$mode.log"; st=1; }
    grep -m1 "steps" "$OUT/async_${inv}_$mode.log"
  done
  python3 - "$OUT/async_${inv}_on.jsonl" "$OUT/async_${inv}_off.jsonl" $inv <<'PY' || { [ $inv = bi ] && st=1; }
import json, sys
def load(f):
    try: return {r["custom_id"]: r["response"]["body"].get("choices") for r in map(json.loads, open(f))}
    except (OSError, KeyError, ValueError): return None
on, off, inv = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
if on is None or off is None or set(on) != set(off):
    print(f"async ({inv}): missing or mismatched outputs"); sys.exit(1)
bad = [k for k in on if on[k] != off[k]]
stops = sum(c.get("finish_reason") == "stop" for k in on for c in on[k] or [])
print(f"async ({inv}): on vs off: {len(on) - len(bad)}/{len(on)} requests identical (tokens, text, logprobs); "
      f"{stops} choices ended on stop / EOS" + ("" if inv == "bi" else "  [information only]"))
for k in bad[:10]: print(f"  differs: {k}")
sys.exit(1 if bad or not on else 0)
PY
done

echo "== async: device idle between steps, batch 64 (sync vs async)"
for model in "models/dsv4-small --load-format auto" "configs/deepseek-v4-flash --load-format dummy --layers 4"; do
  name=$(echo $model | cut -d' ' -f1 | xargs basename)
  timeout 300 $BIN/dsinfer bench --engine-decode --backend cuda --model $model --batch 64 --prompt 128 --steps 64 \
    > "$OUT/async_bench_$name.log" 2>&1 || { echo "bench --engine-decode $name failed"; st=1; }
  cat "$OUT/async_bench_$name.log"
  # The last column of the async line is the idle %: the issue asks for < 2 %.
  awk -v n="$name" '$2 == "async" { if ($NF + 0 >= 2.0) { print n ": async idle " $NF " % >= 2 %"; bad = 1 } } END { exit bad }' \
    "$OUT/async_bench_$name.log" || st=1
done
echo "== async: host overhead per step, 512 running sequences"
for m in sync async; do timeout 60 $BIN/dsinfer_scheduler_bench 512 2000 $m | tail -2; done
exit $st
