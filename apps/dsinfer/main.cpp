// The dsinfer command line: one subcommand per job; each lives in its own cmd_*.cpp.
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/dsinfer/commands.h"

int main(int argc, char** argv) {
  using namespace dsinfer::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fprintf(stderr, "usage: dsinfer <command> [options]\n\ncommands:\n");
    for (const auto& c : commands()) std::fprintf(stderr, "  %-18s %s\n", c.name, c.help);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : commands())
    if (argv[1] == std::string(c.name)) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "dsinfer: unknown command '%s' (try dsinfer --help)\n", argv[1]);
  return 2;
}
