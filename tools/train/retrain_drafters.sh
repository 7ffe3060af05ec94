#!/usr/bin/env bash
# Retrains the shipped model's drafters (DSpark mtp.* and MTP-1 mtp1/) by distillation from the frozen shipped
# target (docs/small_model.md, "Drafter retraining"). Run from the repository root:
#
#   bash tools/train/retrain_drafters.sh OUT [--budget-seconds N] [--device cuda|cpu] [--smoke] [--model DIR]
#
# H200 (default budget 390 s of wall time, everything included; must stay under 7 minutes):
#   bash tools/train/retrain_drafters.sh /tmp/retrain          then   bash tools/train/apply_retrained.sh /tmp/retrain
# Smoke test of every stage (tiny data and budget, < 60 s on the H200, a few minutes on a small CPU):
#   bash tools/train/retrain_drafters.sh /tmp/retrain_smoke --smoke [--device cpu]
#
# Steps (each command is appended to OUT/training/commands.txt; intermediate files in OUT/work/):
#   1 data.py        held-out prompts / validation stream as run_all.sh builds them (same corpus, same split),
#                    the shipped tokenizer (no BPE training), training-split prompts for the distillation data
#   2 retrain.py     shipped checkpoint -> frozen target + warm-start drafters; target-generated continuations
#                    (greedy and temperature 1); train.py drafters --loss distill until the training deadline
#   3 evaluate.py    perplexity, acceptance (greedy, T=1), STS temperatures, lossless + determinism checks
#   4 export.py finalize --base-model   OUT/model/: shipped target tensors + the new mtp.* / mtp1, config with the
#                    new STS temperatures, everything else copied from the shipped model
#   5 verify_export.py   every target tensor byte-identical to the shipped one (SHA-256), mtp.* names/dtypes/shapes
#   6 report.py      OUT/training/{report.md, report.json, train_log.txt}
#   7 dump_drafter_reference.py   OUT/fixtures/dspark-reference.safetensors (tests/unit/test_spec_drafter.cpp)
set -euo pipefail
OUT=${1:?usage: retrain_drafters.sh OUT [--budget-seconds N] [--device cuda|cpu] [--smoke] [--model DIR]}
shift
BUDGET=390
DEVICE=${DSINFER_TRAIN_DEVICE:-auto}
SMOKE=0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL="$HERE/../../models/dsv4-small"
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-seconds) BUDGET=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --model) MODEL=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
MODEL=$(cd "$MODEL" && pwd)
PY=${PYTHON:-python3}
START=$(date +%s.%N)
WORK="$OUT/work"
rm -rf "$WORK" "$OUT/model" "$OUT/training" "$OUT/fixtures"
mkdir -p "$WORK" "$OUT/training" "$OUT/fixtures"
# Provenance: the shipped model's own commands (its target is kept), then this run's.
{ if [ -f "$MODEL/training/commands.txt" ]; then
    echo "# target and first drafters: the shipped model (tools/train/run_all.sh)"; cat "$MODEL/training/commands.txt"
  fi
  echo "# drafters retrained (tools/train/retrain_drafters.sh)"; } > "$OUT/training/commands.txt"
run() { echo "$*" >> "$OUT/training/commands.txt"; echo "+ $*"; "$@"; }
elapsed() { $PY -c "import time; print(round(time.time() - $START, 1))"; }
export TOKENIZERS_PARALLELISM=true PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

if [ "$DEVICE" = "auto" ]; then
  DEVICE=$($PY -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
fi
# RESERVE: seconds kept after training for evaluation, export, verification, report, fixture and start-ups.
if [ "$SMOKE" = 1 ]; then
  DATA_ARGS=(--max-chars 2000000 --n-prompts 4 --heldout-mod 10 --train-prompts 64)
  RT_ARGS=(--gen-batch 8 --batch 4 --anchors 8 --seq 48 --prompt-lens 16,24 --gen-fraction 0.5)
  EVAL_ARGS=(--n-prompts 2 --prompt-len 16 --new-tokens 8)
  BUDGET=10; RESERVE=0   # training ends 10 s after the start (or 5 s after the data step, if later)
elif [ "$DEVICE" = cuda ]; then
  DATA_ARGS=(--train-prompts 8192)
  RT_ARGS=()
  EVAL_ARGS=(--n-prompts 32 --prompt-len 48 --new-tokens 96)
  RESERVE=110
else
  DATA_ARGS=(--max-chars 3000000 --n-prompts 16 --heldout-mod 10 --train-prompts 512)
  RT_ARGS=(--gen-batch 16 --batch 4 --anchors 8 --seq 128 --prompt-lens 32,48)
  EVAL_ARGS=(--n-prompts 3 --prompt-len 24 --new-tokens 12)
  RESERVE=0
fi
echo "device $DEVICE, budget $BUDGET s, smoke $SMOKE, model $MODEL" | tee "$WORK/run_info.txt"

run $PY "$HERE/data.py" --out "$WORK" --tokenizer "$MODEL/tokenizer.json" --no-train-stream "${DATA_ARGS[@]}"
DEADLINE=$($PY -c "import time; print(max(time.time() + 5, $START + $BUDGET - $RESERVE))")
echo "training deadline: $($PY -c "print(round($DEADLINE - $START, 1))") s after the start" | tee -a "$WORK/run_info.txt"
run $PY "$HERE/retrain.py" --model "$MODEL" --work "$WORK" --deadline "$DEADLINE" --device "$DEVICE" "${RT_ARGS[@]}"
run $PY "$HERE/evaluate.py" --work "$WORK" --device "$DEVICE" "${EVAL_ARGS[@]}"
run $PY "$HERE/export.py" finalize --work "$WORK" --out "$OUT" --base-model "$MODEL"
run $PY "$HERE/verify_export.py" --base "$MODEL" --new "$OUT/model" --out "$WORK/verify.json"
echo "total_seconds_before_report $(elapsed)" >> "$WORK/run_info.txt"
run $PY "$HERE/report.py" --work "$WORK" --out "$OUT/training"
# The C++ parity fixture of the new drafters (CPU, fp32; the unit test reads it).
run $PY "$HERE/dump_drafter_reference.py" --model "$OUT/model" --out "$OUT/fixtures/dspark-reference.safetensors"
echo "done in $(elapsed) s: $OUT/model/{model.safetensors,mtp1/model.safetensors,config.json}" \
  "$OUT/training/{report.md,report.json,train_log.txt,commands.txt} $OUT/fixtures/dspark-reference.safetensors"
echo "total_seconds $(elapsed)" | tee -a "$OUT/training/report.md"
