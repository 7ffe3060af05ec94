// A/B switches read from the environment where no Status can carry an error (a constructor, a kernel plan's
// function-local static): the value the variable holds when it is one of the values the switch takes, else "" (unset,
// empty, or a value it cannot use: that one is named on stderr with what the switch takes, and read as unset, so a
// typo never silently picks a path).
#pragma once
#include <initializer_list>
#include <string>

namespace dsinfer {

std::string env_switch(const char* name, std::initializer_list<const char*> allowed);
// The same with the variable's value given (nullptr = unset): what env_switch decides, for tests.
std::string env_switch_value(const char* name, const char* value, std::initializer_list<const char*> allowed);

}  // namespace dsinfer
