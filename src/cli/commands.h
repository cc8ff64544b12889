// Entry points of the `allot` subcommands. argv[0] is the subcommand's name.
#pragma once

namespace allot::cli {

int demo_main(int argc, char** argv);
int sim_main(int argc, char** argv);  // src/cli/sim_command.cpp, on the simulator in src/sim

}  // namespace allot::cli
