#!/usr/bin/env bash
# The single command that builds the shipped small DeepSeek-V4 model, its DSpark drafter and the MTP-1 baseline.
#
#   bash tools/train/run_all.sh OUT_DIR [--budget-seconds N] [--device cuda|cpu]      (or DSINFER_TRAIN_DEVICE=cpu)
#
# H200 (default budget 520 s, about 9 minutes wall in all):  bash tools/train/run_all.sh /tmp/small
# CPU micro test of the pipeline:   bash tools/train/run_all.sh /tmp/train_out --budget-seconds 120 --device cpu
#
# Steps (each prints its exact command to OUT_DIR/commands.txt):
#   1 data.py         corpus (installed packages' Python source and docs), BPE tokenizer, token streams, prompts
#   2 train.py target       target model, time-budgeted (60 % of what is left after step 1 and a fixed reserve)
#   3 export.py quantize-target   FP8 / FP4 official tensors + dequantized transformers copy
#   4 train.py drafters     DSpark + MTP-1 against the dequantized target (the rest of the training budget)
#   5 evaluate.py     perplexity, acceptance (greedy, T=1), STS calibration, ECE, samples
#   6 export.py finalize    OUT_DIR/model/ (official layout) + reference logits + OUT_DIR/model.tar
#   7 report.py       OUT_DIR/report.json, report.md; train_log.txt copied to OUT_DIR
set -euo pipefail
OUT=${1:?usage: run_all.sh OUT_DIR [--budget-seconds N] [--device cuda|cpu]}
shift
BUDGET=520
DEVICE=${DSINFER_TRAIN_DEVICE:-auto}
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-seconds) BUDGET=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT/work"
WORK="$OUT/work"
START=$(date +%s.%N)
: > "$OUT/commands.txt"
run() { echo "$*" >> "$OUT/commands.txt"; echo "+ $*"; "$@"; }
elapsed() { $PY -c "import time; print(time.time() - $START)"; }
export TOKENIZERS_PARALLELISM=true PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

if [ "$DEVICE" = "cpu" ] || { [ "$DEVICE" = "auto" ] && ! $PY -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; }; then
  DEVICE=cpu
  DATA_ARGS=(--max-chars 3000000 --tok-chars 1500000 --n-prompts 16 --heldout-mod 10)
  EVAL_ARGS=(--n-prompts 3 --prompt-len 24 --new-tokens 12)
  RESERVE=0
else
  DEVICE=cuda
  DATA_ARGS=()
  EVAL_ARGS=(--n-prompts 32 --prompt-len 48 --new-tokens 96)
  RESERVE=100   # seconds kept for quantization, evaluation, export, report and process start-ups
fi
echo "device $DEVICE, budget $BUDGET s" | tee "$OUT/run_info.txt"

run $PY "$HERE/data.py" --out "$WORK" "${DATA_ARGS[@]}"
read TGT DFT < <($PY -c "
b, e, r = $BUDGET, $(elapsed), $RESERVE
left = max(20.0, b - e - r)
print(round(0.8 * left, 1), round(0.2 * left, 1))")
echo "training budget: target $TGT s, drafters $DFT s" | tee -a "$OUT/run_info.txt"
run $PY "$HERE/train.py" target --work "$WORK" --seconds "$TGT" --device "$DEVICE"
run $PY "$HERE/export.py" quantize-target --work "$WORK"
run $PY "$HERE/train.py" drafters --work "$WORK" --seconds "$DFT" --device "$DEVICE"
run $PY "$HERE/evaluate.py" --work "$WORK" --device "$DEVICE" "${EVAL_ARGS[@]}"
run $PY "$HERE/export.py" finalize --work "$WORK" --out "$OUT"
echo "total_seconds $(elapsed)" >> "$OUT/run_info.txt"
run $PY "$HERE/report.py" --work "$WORK" --out "$OUT"
echo "done in $(elapsed) s: $OUT/model.tar $OUT/report.md $OUT/report.json $OUT/train_log.txt"
