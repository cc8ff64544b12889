// Reading an input file whole, the one way every reader of the simulator does it.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "core/status.h"

namespace allot::sim {

// The contents of `path`, or an error naming it: "cannot open the <what>".
inline core::Result<std::string> read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return core::Error{path, "cannot open the " + what};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace allot::sim
