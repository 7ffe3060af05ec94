#!/usr/bin/env bash
# DeepSeek-V4.1 on the GPU (issue 19): the V4.1 kernel parity tests, check-reference --backend cuda on every
# tiny-v41 fixture (as the CPU ctest cases check them: hf-noqat against reference_noqat.safetensors at 1e-5, hf
# against reference.safetensors at 0.2, greedy identical in both), then a short V4.1-Flash dummy-weight bench.
# Env: OUT (log folder), BIN (build/cuda). Exits non-zero when a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsinfer_gpu_out}
BIN=${BIN:-build/cuda}
mkdir -p "$OUT"
st=0
echo "== V4.1 GPU parity tests"
timeout 120 $BIN/dsinfer_gpu_tests --gtest_brief=1 --gtest_filter='GpuV41*' > "$OUT/v41_gpu_tests.log" 2>&1
rc=$?
tail -4 "$OUT/v41_gpu_tests.log"
[ $rc -eq 0 ] || { echo "V4.1 GPU tests: exit $rc"; st=1; }

echo "== check-reference --backend cuda, tiny-v41 fixtures"
fixtures=()
for fx in tests/fixtures/tiny-v41-*; do
  [ -f "$fx/reference.safetensors" ] && fixtures+=("$fx")
done
[ ${#fixtures[@]} -gt 0 ] || { echo "no tiny-v41 fixture found"; st=1; }
declare -A seen=()
for fx in "${fixtures[@]}"; do
  name=$(basename "$fx")
  [ -n "${seen[$name]:-}" ] && continue
  seen[$name]=1
  log="$OUT/v41_check_$name.log"
  timeout 120 $BIN/dsinfer check-reference --backend cuda --model "$fx" --numerics hf-noqat \
    --reference "$fx/reference_noqat.safetensors" --tolerance 1e-5 > "$log" 2>&1
  rc=$?
  echo "$name hf-noqat (1e-5): exit $rc"; [ $rc -eq 0 ] || { st=1; tail -8 "$log"; }
  timeout 120 $BIN/dsinfer check-reference --backend cuda --model "$fx" --numerics hf --tolerance 0.2 >> "$log" 2>&1
  rc=$?
  echo "$name hf (0.2): exit $rc"; [ $rc -eq 0 ] || { st=1; tail -8 "$log"; }
  grep -E "prompt|max" "$log" | head -12
done

echo "== bench: V4.1-Flash shapes, dummy weights, 4 layers"
timeout 180 $BIN/dsinfer bench --model configs/deepseek-v4.1-flash --numerics hf --load-format dummy --layers 4 --batch 1,64 \
  --context 4096 --iters 3 > "$OUT/v41_bench.log" 2>&1
rc=$?
tail -60 "$OUT/v41_bench.log"
echo "-- indexer ops (issue 19: were 5.86 / 5.88 ms scores, 0.60 ms top-k per step at b1 / b64)"
grep -E "indexer_(scores|topk)" "$OUT/v41_bench.log" | head -8
[ $rc -eq 0 ] || { echo "V4.1 bench: exit $rc"; st=1; }
exit $st
