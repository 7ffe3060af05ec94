#!/usr/bin/env bash
# Issue 32, session 16: why DSpark's greedy output differs from off at batch 8 (specsched.sh's 16 requests x 128
# tokens, 8 running, with "logprobs": 5). Greedy runs of off (8 and 1 running: the control without speculation),
# DSpark (auto, every draft verified), MTP-1 (every draft verified), the off / DSpark pair under --numerics hf and
# under --batch-invariant, each pair compared by tools/gpu_checks/spec_divergence.py (first difference, top-2
# margins, margin sum, shared-prefix logprob change); the SpecGpu.DsparkLongOutputs* tests; an ncu listing of the
# kernels of a batch-1 DSpark round (400 launches from the 1,500th); then, while the call is under 70 s, the
# specsched table at batch 1 / 64 / 32 / 8. Gets OUT and BIN (build/cuda) from the caller (tools/gpu_run.sh);
# about 35 s on the H200. Session 16 ran it as .dev55/go.sh (bench/NOTES.md "Session 16 — issue 32").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
L=$OUT/divergence.log
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee $L
export DSINFER_CACHE_DIR=/tmp/dcache
mkdir -p /tmp/b32 $DSINFER_CACHE_DIR $OUT/logs
python3 - <<'PY'
import json, pathlib
src = "".join(pathlib.Path(f).read_text() for f in ["tools/train/arch.py", "tools/train/train.py", "tools/train/evaluate.py"])
with open("/tmp/b32/req8.jsonl", "w") as f:
    for i in range(16):
        s = (i * 1543) % (len(src) - 400)
        body = {"prompt": src[s:s + 200], "max_tokens": 128, "temperature": 0, "ignore_eos": True, "logprobs": 5}
        f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
PY
gen() {  # name max-num-seqs flags...
  local n=$1 b=$2; shift 2
  timeout 40 $BIN/dsinfer generate --model models/dsv4-small --backend cuda --input /tmp/b32/req8.jsonl \
    --output /tmp/b32/$n.out.jsonl --max-num-seqs $b --max-model-len 512 "$@" > $OUT/logs/$n.log 2>&1
  echo "$n rc=$? $(grep -E 'output tok/s|accepted length|drafts verified|gate probes' $OUT/logs/$n.log | tr -s ' \n' ' ' | cut -c1-300)" | tee -a $L
}
gen off_b8 8
gen off_b1 1
gen dspark_b8 8 --speculative dspark
gen dspark_all_b8 8 --speculative dspark --speculative-cost-model off
gen mtp1_all_b8 8 --speculative mtp1 --speculative-cost-model off
gen off_b8_hf 8 --numerics hf
gen dspark_all_b8_hf 8 --numerics hf --speculative dspark --speculative-cost-model off
gen off_bi_b8 8 --batch-invariant
gen dspark_all_bi_b8 8 --batch-invariant --speculative dspark --speculative-cost-model off
D="python3 tools/gpu_checks/spec_divergence.py"
echo "== divergences (reference first)" | tee -a $L
$D /tmp/b32/off_b8.out.jsonl /tmp/b32/off_b1.out.jsonl off_b1 | tee -a $L
$D /tmp/b32/off_b8.out.jsonl /tmp/b32/dspark_b8.out.jsonl dspark_b8 | tee -a $L
$D /tmp/b32/off_b8.out.jsonl /tmp/b32/dspark_all_b8.out.jsonl dspark_all_b8 | tee -a $L
$D /tmp/b32/off_b8.out.jsonl /tmp/b32/mtp1_all_b8.out.jsonl mtp1_all_b8 | tee -a $L
$D /tmp/b32/off_b1.out.jsonl /tmp/b32/dspark_all_b8.out.jsonl dspark_all_b8_vs_off_b1 | tee -a $L
$D /tmp/b32/off_b8_hf.out.jsonl /tmp/b32/dspark_all_b8_hf.out.jsonl dspark_all_b8_hf | tee -a $L
$D /tmp/b32/off_bi_b8.out.jsonl /tmp/b32/dspark_all_bi_b8.out.jsonl dspark_all_bi_b8 | tee -a $L
echo "== GPU tests" | tee -a $L
timeout 60 $BIN/dsinfer_gpu_tests --gtest_filter='SpecGpu.DsparkLongOutputs*' 2>&1 | grep -vE '^\[ *(RUN|OK) ' | tail -30 | tee -a $L
echo "== ncu: kernels of a batch-1 round (dspark verifying all) and of plain steps, elapsed ${SECONDS}s" | tee -a $L
head -1 /tmp/b32/req8.jsonl | sed 's/"max_tokens": 128/"max_tokens": 64/; s/, "logprobs": 5//' > /tmp/b32/one.jsonl
for cfg in "dspark --speculative dspark --speculative-cost-model off"; do
  set -- $cfg; n=$1; shift
  [ $SECONDS -lt 50 ] || { echo "ncu $n skipped (time)" | tee -a $L; continue; }
  timeout 20 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 1500 --launch-count 400 --csv \
    $BIN/dsinfer generate --model models/dsv4-small --backend cuda --input /tmp/b32/one.jsonl \
    --output /tmp/b32/ncu_$n.out.jsonl --max-num-seqs 1 --max-model-len 512 "$@" > $OUT/ncu_$n.csv 2> /tmp/b32/ncu_$n.err
  echo "ncu $n rc=$? $(grep -c gpu__time_duration $OUT/ncu_$n.csv) kernels; $(tail -2 /tmp/b32/ncu_$n.err | tr '\n' ' ' | cut -c1-200)" | tee -a $L
done
echo "== table (no logprobs; as specsched.sh), run only while the call is young: elapsed ${SECONDS}s" | tee -a $L
python3 - <<'PY'
import json, pathlib
src = "".join(pathlib.Path(f).read_text() for f in ["tools/train/arch.py", "tools/train/train.py", "tools/train/evaluate.py"])
for b in (1, 8, 32, 64):
    n = max(2 * b, 4) if b <= 8 else b
    with open(f"/tmp/b32/t{b}.jsonl", "w") as f:
        for i in range(n):
            s = (i * 1543) % (len(src) - 400)
            body = {"prompt": src[s:s + 200], "max_tokens": 128, "temperature": 0, "ignore_eos": True}
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
PY
tgen() {  # name batch flags...
  local n=$1 b=$2; shift 2
  [ $SECONDS -lt 70 ] || { echo "$n skipped (time)" | tee -a $L; return; }
  local t0=$SECONDS
  timeout 30 $BIN/dsinfer generate --model models/dsv4-small --backend cuda --input /tmp/b32/t$b.jsonl \
    --output /tmp/b32/t_$n.out.jsonl --max-num-seqs $b --max-model-len 512 "$@" > $OUT/logs/t_$n.log 2>&1
  echo "t_$n rc=$? $((SECONDS - t0)) s $(grep -E 'output tok/s|accepted length|drafts verified|per-token|gate probes' $OUT/logs/t_$n.log | tr -s ' \n' ' ' | cut -c1-400)" | tee -a $L
}
for b in 1 64 32 8; do
  tgen off_b$b $b
  tgen dspark_b$b $b --speculative dspark
  tgen mtp1_b$b $b --speculative mtp1
done
tgen dspark_all_b1 1 --speculative dspark --speculative-cost-model off
echo "== cost model" | tee -a $L
find $DSINFER_CACHE_DIR -type f | while read f; do echo "# $f"; head -20 "$f"; done | tee -a $L
cd /tmp/b32 && tar cJf $OUT/outs.tar.xz *.out.jsonl
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
