// Registry of dsinfer subcommands. Each cmd_*.cpp defines one `int cmd_x(int argc, char** argv)` (argv[0] is
// the subcommand name) and it is listed in commands.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace dsinfer::cli {

struct Command {
  const char* name;
  const char* help;
  int (*run)(int argc, char** argv);
};
const std::vector<Command>& commands();

// For the subcommands' `bool f(..., std::string* error)` helpers: sets *error and returns false.
inline bool fail(std::string* error, std::string message) {
  *error = std::move(message);
  return false;
}

int cmd_check_reference(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_render_chat(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_convert(int argc, char** argv);

}  // namespace dsinfer::cli
