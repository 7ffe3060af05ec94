#!/usr/bin/env bash
# Copies the outputs of tools/train/retrain_drafters.sh OUT into the repository (run from the repository root):
#   OUT/model/{model.safetensors, mtp1/model.safetensors, config.json}       -> models/dsv4-small/
#   OUT/training/{report.md, report.json, train_log.txt, commands.txt}     -> models/dsv4-small/training/
#   OUT/fixtures/dspark-reference.safetensors                               -> tests/fixtures/
# Nothing else: the target tensors, tokenizer and reference.safetensors do not change (verify_export.py checked).
set -euo pipefail
OUT=${1:?usage: apply_retrained.sh OUT}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
M="$ROOT/models/dsv4-small"
SRC=("$OUT/model/model.safetensors" "$OUT/model/mtp1/model.safetensors" "$OUT/model/config.json"
     "$OUT/training/report.md" "$OUT/training/report.json" "$OUT/training/train_log.txt"
     "$OUT/training/commands.txt" "$OUT/fixtures/dspark-reference.safetensors")
for f in "${SRC[@]}"; do [ -f "$f" ] || { echo "missing $f (did retrain_drafters.sh finish?)" >&2; exit 1; }; done
cp "$OUT/model/model.safetensors" "$OUT/model/config.json" "$M/"
cp "$OUT/model/mtp1/model.safetensors" "$M/mtp1/"
cp "$OUT/training/report.md" "$OUT/training/report.json" "$OUT/training/train_log.txt" \
   "$OUT/training/commands.txt" "$M/training/"
cp "$OUT/fixtures/dspark-reference.safetensors" "$ROOT/tests/fixtures/"
echo "applied $OUT to $M and tests/fixtures/dspark-reference.safetensors"
