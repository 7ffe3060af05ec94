// The list of subcommands shown by `dsinfer --help`.
#include "apps/dsinfer/commands.h"

namespace dsinfer::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {


  };
  return kCommands;
}

}  // namespace dsinfer::cli
