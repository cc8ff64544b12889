// Durations as people write them: "90s", "30m", "8h", "7d", "1h30m", or plain seconds.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/types.h"

namespace allot::sim {

std::optional<core::Duration> parse_duration(std::string_view text);
// The shortest exact form: "7d", "1h30m", "45s", "0s".
std::string duration_text(core::Duration d);

}  // namespace allot::sim
