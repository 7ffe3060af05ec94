# xgrammar (structured outputs: JSON Schema / regex / EBNF -> token bitmasks), built from its PyPI sdist.
# The sdist is fetched once by tools/fetch_xgrammar.sh into DSINFER_DEPS_CACHE (outside the repository),
# checked against the pinned sha256 and unpacked under the build tree; nothing of it is committed.
# Only the C++ core is compiled, as the static library `xgrammar` (no Python bindings, no tvm-ffi, no
# cpptrace): the sdist's own CMakeLists adds -flto=auto and -Werror to every target and builds the bindings,
# so its sources (cpp/**/*.cc minus cpp/tvm_ffi) are listed here instead of add_subdirectory().
set(DSINFER_XGRAMMAR_VERSION 0.2.9)
set(DSINFER_XGRAMMAR_SHA256 87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90)
if(DEFINED ENV{XDG_CACHE_HOME})
  set(_dsinfer_cache_default "$ENV{XDG_CACHE_HOME}/dsinfer")
else()
  set(_dsinfer_cache_default "$ENV{HOME}/.cache/dsinfer")
endif()
set(DSINFER_DEPS_CACHE "${_dsinfer_cache_default}" CACHE PATH "Where third-party source archives are cached")

set(_xgr_archive "${DSINFER_DEPS_CACHE}/xgrammar-${DSINFER_XGRAMMAR_VERSION}.tar.gz")
if(NOT EXISTS "${_xgr_archive}")
  message(STATUS "xgrammar: fetching the ${DSINFER_XGRAMMAR_VERSION} sdist into ${DSINFER_DEPS_CACHE}")
  execute_process(
    COMMAND bash ${CMAKE_SOURCE_DIR}/tools/fetch_xgrammar.sh ${DSINFER_XGRAMMAR_VERSION} ${DSINFER_XGRAMMAR_SHA256}
            ${DSINFER_DEPS_CACHE}
    RESULT_VARIABLE _xgr_rc)
  if(NOT _xgr_rc EQUAL 0)
    message(FATAL_ERROR "xgrammar: could not fetch the sdist (tools/fetch_xgrammar.sh failed, rc ${_xgr_rc})")
  endif()
endif()
file(SHA256 "${_xgr_archive}" _xgr_sha)
if(NOT _xgr_sha STREQUAL DSINFER_XGRAMMAR_SHA256)
  message(FATAL_ERROR "xgrammar: ${_xgr_archive} has sha256 ${_xgr_sha}, expected ${DSINFER_XGRAMMAR_SHA256}")
endif()

set(_xgr_root "${CMAKE_BINARY_DIR}/_deps")
set(XGRAMMAR_SOURCE_DIR "${_xgr_root}/xgrammar-${DSINFER_XGRAMMAR_VERSION}")
set(_xgr_stamp "${XGRAMMAR_SOURCE_DIR}/.dsinfer-sha256")
set(_xgr_want "${DSINFER_XGRAMMAR_SHA256}+patch1")
set(_xgr_have "")
if(EXISTS "${_xgr_stamp}")
  file(READ "${_xgr_stamp}" _xgr_have)
endif()
if(NOT _xgr_have STREQUAL _xgr_want)
  file(REMOVE_RECURSE "${XGRAMMAR_SOURCE_DIR}")
  file(ARCHIVE_EXTRACT INPUT "${_xgr_archive}" DESTINATION "${_xgr_root}"
       PATTERNS "xgrammar-${DSINFER_XGRAMMAR_VERSION}/cpp" "xgrammar-${DSINFER_XGRAMMAR_VERSION}/include"
                "xgrammar-${DSINFER_XGRAMMAR_VERSION}/3rdparty/picojson"
                "xgrammar-${DSINFER_XGRAMMAR_VERSION}/3rdparty/dlpack/include"
                "xgrammar-${DSINFER_XGRAMMAR_VERSION}/LICENSE")
  # Patch 1 (upstream bug in 0.2.9): a JSON string with minLength/maxLength admits raw control characters
  # (U+0000-U+001F, e.g. tabs), which JSON forbids unescaped; exclude them as the unbounded string rule does.
  set(_xgr_file "${XGRAMMAR_SOURCE_DIR}/cpp/json_schema_converter.cc")
  file(READ "${_xgr_file}" _xgr_text)
  set(_xgr_old "builder_.AddCharacterClass({{'\"', '\"'}, {'\\\\', '\\\\'}, {'\\r', '\\r'}, {'\\n', '\\n'}}, true);")
  set(_xgr_new "builder_.AddCharacterClass({{0, 0x1f}, {'\"', '\"'}, {'\\\\', '\\\\'}, {'\\r', '\\r'}, {'\\n', '\\n'}}, true);")
  string(FIND "${_xgr_text}" "${_xgr_old}" _xgr_at)
  if(_xgr_at EQUAL -1)
    message(FATAL_ERROR "xgrammar: patch 1 does not apply to ${_xgr_file} (new version? check the bounded string rule)")
  endif()
  string(REPLACE "${_xgr_old}" "${_xgr_new}" _xgr_text "${_xgr_text}")
  file(WRITE "${_xgr_file}" "${_xgr_text}")
  file(WRITE "${_xgr_stamp}" "${_xgr_want}")
endif()

file(GLOB_RECURSE _xgr_sources "${XGRAMMAR_SOURCE_DIR}/cpp/*.cc")
list(FILTER _xgr_sources EXCLUDE REGEX "/cpp/tvm_ffi/")
list(LENGTH _xgr_sources _xgr_count)
if(_xgr_count LESS 20)
  message(FATAL_ERROR "xgrammar: only ${_xgr_count} sources under ${XGRAMMAR_SOURCE_DIR}/cpp")
endif()
add_library(xgrammar STATIC ${_xgr_sources})
# Third-party code: its own standard (C++17), optimised, no debug info, our warnings off; its headers are
# SYSTEM includes for our targets so -Wall -Werror does not apply to them.
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
target_compile_options(xgrammar PRIVATE -O2 -g0 -w)
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
target_include_directories(xgrammar SYSTEM PUBLIC "${XGRAMMAR_SOURCE_DIR}/include"
                           "${XGRAMMAR_SOURCE_DIR}/3rdparty/picojson" "${XGRAMMAR_SOURCE_DIR}/3rdparty/dlpack/include")
target_link_libraries(xgrammar PUBLIC Threads::Threads)
message(STATUS "xgrammar ${DSINFER_XGRAMMAR_VERSION}: ${_xgr_count} C++ sources from ${_xgr_archive}")
