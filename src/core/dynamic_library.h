// Libraries opened at run time (NCCL for several GPUs, UCX for P/D state transfers), so the binary starts and runs
// without them: dlopen with the loader's reason on failure, and symbols typed by the caller's function pointers.
#pragma once
#include <dlfcn.h>

#include <string>

namespace dsinfer {

// dlopen(path) with immediate binding and local symbols; nullptr on failure, with dlerror()'s text in `why`.
inline void* open_library(const std::string& path, std::string& why) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    why = e ? e : "unknown error";
  }
  return lib;
}

// out = the symbol `name` of lib as the function pointer type F; false when the library lacks it.
template <typename F>
bool load_symbol(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

}  // namespace dsinfer
