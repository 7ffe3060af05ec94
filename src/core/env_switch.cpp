// env_switch (see env_switch.h).
#include "core/env_switch.h"

#include <cstdio>
#include <cstdlib>

namespace dsinfer {

std::string env_switch_value(const char* name, const char* value, std::initializer_list<const char*> allowed) {
  if (!value || !*value) return "";
  std::string takes;
  for (const char* a : allowed) {
    if (std::string(a) == value) return value;
    takes += (takes.empty() ? "" : ", ") + std::string(a);
  }
  std::fprintf(stderr, "%s must be one of %s (or unset), found '%s': ignored\n", name, takes.c_str(), value);
  return "";
}

std::string env_switch(const char* name, std::initializer_list<const char*> allowed) {
  return env_switch_value(name, std::getenv(name), allowed);
}

}  // namespace dsinfer
