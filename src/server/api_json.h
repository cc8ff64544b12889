// How the API writes its records out: jobs (straight to text, for the submit and list paths),
// nodes, and the words that records of who did what use. Stateless; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server/auth.h"
#include "store/store.h"

namespace allot::server {

// A job as the API shows it, appended to `out` as JSON text: the canonical spec and the
// placement are stored as JSON already and go in as they are (a submit storm encodes thousands a
// second).
void append_job(std::string& out, const store::JobRecord& j);
std::string job_text(const store::JobRecord& j);

// A node as the API shows it. `gpus`: the node's latest GPU telemetry ({"time": ..., "gpus":
// [...]}), "" if none.
nlohmann::json node_json(const store::NodeRecord& n, const std::string& gpus);

// `text` parsed, or `fallback` when it is not JSON.
nlohmann::json parsed_or(const std::string& text, const nlohmann::json& fallback);

// Who did something, for the records that say so: the token's subject and the token's id (a
// subject may hold several tokens; revoking the right one needs the id).
std::string acting(const Principal& p);
// A token as the audit log names it.
std::string token_words(std::int64_t id, const std::string& name, const std::string& role,
                        const std::string& subject, const std::string& scope);

// `v` as printf's %g writes it (the submission quota's rates in its refusals).
std::string number_text(double v);

}  // namespace allot::server
