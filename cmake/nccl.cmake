# NCCL header for the multi-GPU runner (src/parallel/nccl_cuda.cpp). Only nccl.h is needed to compile: the library
# (libnccl.so.2) is dlopen'ed at run time, so dsinfer starts without it and needs it only for --gpus > 1. The header
# comes from the PyPI wheel nvidia-nccl-cu13 (tools/install_deps.sh installs it); DSINFER_NCCL_INCLUDE_DIR
# overrides the lookup.
set(DSINFER_NCCL_INCLUDE_DIR "" CACHE PATH "Folder holding nccl.h (default: from the nvidia-nccl-cu13 wheel)")
if(NOT DSINFER_NCCL_INCLUDE_DIR)
  find_package(Python3 COMPONENTS Interpreter)
  set(_nccl_py python3)
  if(Python3_Interpreter_FOUND)
    set(_nccl_py ${Python3_EXECUTABLE})
  endif()
  # First as the build runs; then with -E (PYTHON* variables ignored), which sees the interpreter's own
  # site-packages from inside pip's isolated build environment (`pip install . -C cmake.define.DSINFER_CUDA=ON`),
  # where the user's nvidia-nccl-cu13 is otherwise hidden.
  foreach(_nccl_flag "" "-E")
    execute_process(
      COMMAND ${_nccl_py} ${_nccl_flag} -c
              "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include'))"
      OUTPUT_VARIABLE _nccl_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _nccl_rc)
    if(_nccl_rc EQUAL 0 AND EXISTS "${_nccl_inc}/nccl.h")
      set(DSINFER_NCCL_INCLUDE_DIR "${_nccl_inc}" CACHE PATH "Folder holding nccl.h" FORCE)
      break()
    endif()
  endforeach()
endif()
if(NOT DSINFER_NCCL_INCLUDE_DIR OR NOT EXISTS "${DSINFER_NCCL_INCLUDE_DIR}/nccl.h")
  message(FATAL_ERROR "nccl.h not found: the CUDA build needs the NCCL header of the nvidia-nccl-cu13 wheel "
                      "(python3 -m pip install nvidia-nccl-cu13, or run tools/install_deps.sh), or set "
                      "-DDSINFER_NCCL_INCLUDE_DIR=<folder with nccl.h>")
endif()
message(STATUS "NCCL header: ${DSINFER_NCCL_INCLUDE_DIR}/nccl.h (libnccl.so.2 is loaded at run time)")
