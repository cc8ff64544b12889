// Shell completion for `allot`, generated from the client commands' flag declarations (flags.h),
// so completion offers exactly what the parser accepts: `allot completion bash|zsh`.
#pragma once

#include <string>

namespace allot::cli {

// The completion script for `shell` ("bash" or "zsh"); empty for any other shell.
std::string completion_script(const std::string& shell);
// `allot completion SHELL`: prints the script (exit 0) or says which shells exist (exit 2).
int completion_main(int argc, char** argv);

}  // namespace allot::cli
