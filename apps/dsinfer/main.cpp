// The dsinfer command line: one subcommand per job; each lives in its own cmd_*.cpp.
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/dsinfer/commands.h"

#ifndef DSINFER_VERSION
#define DSINFER_VERSION "0.1.0"
#endif

int main(int argc, char** argv) {
  using namespace dsinfer::cli;
  // Help asked for goes to stdout (exit 0); help after a usage error goes to stderr (exit 2).
  const bool asked = argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help"));
  if (argc < 2 || asked) {
    FILE* f = asked ? stdout : stderr;
    std::fprintf(f, "usage: dsinfer <command> [options]   (dsinfer <command> --help for its options)\n\ncommands:\n");
    for (const auto& c : commands()) std::fprintf(f, "  %-18s %s\n", c.name, c.help);
    std::fprintf(f, "  %-18s %s\n", "--version", "print the version and the backends this binary was built with");
    return asked ? 0 : 2;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
#ifdef DSINFER_HAS_CUDA
    const char* backends = "cpu, cuda";
#else
    const char* backends = "cpu";
#endif
    std::printf("dsinfer %s (backends: %s)\n", DSINFER_VERSION, backends);
    return 0;
  }
  for (const auto& c : commands())
    if (argv[1] == std::string(c.name)) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "dsinfer: unknown command '%s' (try dsinfer --help)\n", argv[1]);
  return 2;
}
