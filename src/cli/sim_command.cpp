// Placeholder until the simulator lands (issue 3): says so instead of pretending.
#include <cstdio>

#include "cli/commands.h"

namespace allot::cli {
int sim_main(int, char**) {
  std::fprintf(stderr, "allot sim: the simulator is not built yet\n");
  return 2;
}
}  // namespace allot::cli
