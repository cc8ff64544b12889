// The shim for the runner's tests: what `allot agent-shim` is, without the rest of the allot
// binary (so the runner tests need not build it).
#include <cstring>

#include "agent/runner.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "agent-shim") != 0) return 2;
  return allot::agent::shim_main(argc - 1, argv + 1);
}
