#!/usr/bin/env bash
# The graph warm-up (--graph-warmup, engine/graph_warmup.h) through `dsinfer generate` on the shipped model: 64
# greedy requests of 256 tokens (EOS ignored) through 64 slots, and 256 requests through 64 slots (sequences finish
# at different steps, so the batch passes through every graph bucket), each with --speculative off, dspark (the
# gate) and dspark verifying every draft (--speculative-cost-model off), with the warm-up on and off. Fails when a
# run with the warm-up captured a step graph while requests waited ("N during the run" in generate's summary), or
# when a run's outputs differ from the same run without the warm-up (same shapes, same kernels: identical bits).
# Logs each run's output tok/s, the graphs captured at start-up and during the run (the runner's, asserted, and the
# DSpark drafter's: its round and proposal graphs, reported) and the warm-up's seconds. Gets
# OUT and BIN from tools/gpu_run.sh; about a minute.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/cuda}
O=${OUT:-/tmp/dsinfer_gpu_out}/warmup
mkdir -p "$O/logs" "$O/cache" /tmp/warmup
export DSINFER_CACHE_DIR=$O/cache  # the cost model profiled by the first run, read by the others (the same gate)
rc=0
python3 - <<'PY'
import json, pathlib
src = "".join(pathlib.Path(f).read_text() for f in ["tools/train/arch.py", "tools/train/train.py"])
for n in (64, 256):
    with open(f"/tmp/warmup/req{n}.jsonl", "w") as f:
        for i in range(n):
            s = (i * 1543) % (len(src) - 400)
            body = {"prompt": src[s:s + 200], "max_tokens": 256 if n == 64 else 64 + (i * 37) % 193,
                    "temperature": 0, "ignore_eos": True}
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
PY
for n in 64 256; do
  for cfg in "off" "dspark --speculative dspark" "dspark_all --speculative dspark --speculative-cost-model off"; do
    set -- $cfg
    name=$1
    shift
    for w in on off; do
      run=${name}_n${n}_$w
      timeout 60 $BIN/dsinfer generate --model models/dsv4-small --backend cuda --input /tmp/warmup/req$n.jsonl \
        --output /tmp/warmup/$run.out.jsonl --max-num-seqs 64 --max-model-len 512 --graph-warmup $w "$@" \
        > "$O/logs/$run.log" 2>&1
      st=$?
      [ $st -eq 0 ] || { echo "$run: exit $st"; rc=1; }
      echo "$run: $(grep -oE '[0-9.]+ output tok/s|step graphs: .*|gate probes [0-9]+' "$O/logs/$run.log" | tr '\n' ' ')"
      if [ $w = on ] && ! grep -qE 'step graphs: [0-9]+ captured at start-up \([^)]*\), 0 during the run' "$O/logs/$run.log"; then
        echo "$run: FAILED: step graphs captured while requests waited"
        rc=1
      fi
    done
    python3 - /tmp/warmup/${name}_n${n}_on.out.jsonl /tmp/warmup/${name}_n${n}_off.out.jsonl <<'PY' || rc=1
import json, sys
a, b = ([json.loads(l)["response"]["body"]["choices"][0]["text"] for l in open(f)] for f in sys.argv[1:3])
same = sum(x == y for x, y in zip(a, b))
print(f"  warm-up on vs off: {same}/{len(a)} identical")
sys.exit(0 if same == len(a) == len(b) else 1)
PY
  done
done
[ $rc -eq 0 ] && echo "warmup: passed" || echo "warmup: FAILED"
exit $rc
