#include "cli/commands.h"
namespace allot::cli {
int demo_main(int, char**) { return 0; }
}  // namespace allot::cli
