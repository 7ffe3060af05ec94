#!/usr/bin/env bash
# Run HERE (development machine) before a device call: builds the CUDA preset (sm_90a), strips the binaries
# that travel, and copies ../shared/fixtures into .gpu_carry/ (../shared does not travel with the tree).
# Then call the device with carry = [.gpu_pack] and the command `bash tools/gpu_run.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
cmake --preset cuda >/dev/null
cmake --build build/cuda -j "$(nproc)" --target dsinfer dsinfer_gpu_tests
rm -rf .gpu_carry && mkdir -p .gpu_carry
cp -r ../shared/fixtures .gpu_carry/shared_fixtures
# The GPU-side benches (the tokenizer bench is a CPU bench and stays here); the structured-output bench times its
# masks on the real V3/V4 vocabulary.
for b in build/cuda/dsinfer_*bench; do [ -x "$b" ] && [ "$(basename "$b")" != dsinfer_tokenizer_bench ] && cp "$b" .gpu_carry/; done
cp ../shared/tokenizers/deepseek-v3/tokenizer.json .gpu_carry/v3_tokenizer.json
strip build/cuda/dsinfer build/cuda/dsinfer_gpu_tests .gpu_carry/dsinfer_*bench 2>/dev/null || true
# The device takes at most 64 MiB with the tree: binaries and fixtures travel xz-packed (gpu_run.sh unpacks).
rm -rf .gpu_pack && mkdir -p .gpu_pack
tar cJf .gpu_pack/bins.tar.xz build/cuda/dsinfer build/cuda/dsinfer_gpu_tests .gpu_carry
du -sh .gpu_pack
