# CUTLASS / CuTe headers for the grouped FP8 MoE GEMM (src/ops/moe/moe_grouped_cutlass.cu, the only translation unit
# that includes them). Header-only: they come from the PyPI wheel nvidia-cutlass, pinned to DSINFER_CUTLASS_VERSION
# below (tools/install_deps.sh installs it with --no-deps: only its source/include folder is used);
# DSINFER_CUTLASS_INCLUDE_DIR overrides the lookup.
set(DSINFER_CUTLASS_VERSION "4.2.0.0")
set(DSINFER_CUTLASS_INCLUDE_DIR "" CACHE PATH "Folder holding cutlass/ and cute/ (default: from the nvidia-cutlass wheel)")
if(NOT DSINFER_CUTLASS_INCLUDE_DIR)
  find_package(Python3 COMPONENTS Interpreter)
  set(_cutlass_py python3)
  if(Python3_Interpreter_FOUND)
    set(_cutlass_py ${Python3_EXECUTABLE})
  endif()
  # find_spec does not import the package (its Python dependencies are not installed); -E as in cmake/nccl.cmake.
  foreach(_cutlass_flag "" "-E")
    execute_process(
      COMMAND ${_cutlass_py} ${_cutlass_flag} -c
              "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(os.path.dirname(s.origin), 'source', 'include'))"
      OUTPUT_VARIABLE _cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _cutlass_rc)
    if(_cutlass_rc EQUAL 0 AND EXISTS "${_cutlass_inc}/cutlass/version.h")
      set(DSINFER_CUTLASS_INCLUDE_DIR "${_cutlass_inc}" CACHE PATH "Folder holding cutlass/ and cute/" FORCE)
      break()
    endif()
  endforeach()
endif()
if(NOT DSINFER_CUTLASS_INCLUDE_DIR OR NOT EXISTS "${DSINFER_CUTLASS_INCLUDE_DIR}/cutlass/version.h")
  message(FATAL_ERROR "CUTLASS headers not found: the CUDA build needs the nvidia-cutlass wheel "
                      "(python3 -m pip install --no-deps nvidia-cutlass==${DSINFER_CUTLASS_VERSION}, or run "
                      "tools/install_deps.sh), or set -DDSINFER_CUTLASS_INCLUDE_DIR=<folder with cutlass/ and cute/>")
endif()
file(STRINGS "${DSINFER_CUTLASS_INCLUDE_DIR}/cutlass/version.h" _cutlass_ver REGEX "#define CUTLASS_(MAJOR|MINOR) ")
string(REGEX REPLACE ".*CUTLASS_MAJOR ([0-9]+).*CUTLASS_MINOR ([0-9]+).*" "\\1.\\2" _cutlass_mm "${_cutlass_ver}")
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _cutlass_want "${DSINFER_CUTLASS_VERSION}")
if(NOT _cutlass_mm STREQUAL _cutlass_want)
  message(FATAL_ERROR "CUTLASS ${_cutlass_mm} found at ${DSINFER_CUTLASS_INCLUDE_DIR}, the build is pinned to "
                      "${DSINFER_CUTLASS_VERSION} (python3 -m pip install --no-deps nvidia-cutlass==${DSINFER_CUTLASS_VERSION})")
endif()
message(STATUS "CUTLASS headers ${_cutlass_mm}: ${DSINFER_CUTLASS_INCLUDE_DIR}")
