// Entry points of the `allot` subcommands. argv[0] is the subcommand's name.
#pragma once

#include <string>

namespace allot::cli {

int demo_main(int argc, char** argv);
int sim_main(int argc, char** argv);  // src/cli/sim_command.cpp, on the simulator in src/sim
int sim_fragmentation_main(int argc, char** argv);  // src/cli/sim_fragmentation.cpp

int server_main(int argc, char** argv);  // src/cli/server_command.cpp: the control plane
int up_main(int argc, char** argv);
int store_main(int argc, char** argv);  // src/cli/store_command.cpp: allot store copy
int agent_main(int argc, char** argv);  // src/cli/agent_command.cpp: the node agent      // the
                                        // control plane and a simulated local cluster
// src/cli/client.cpp: the commands that talk to a server over HTTP.
bool is_client_command(const std::string& cmd);
int client_main(int argc, char** argv);

}  // namespace allot::cli
