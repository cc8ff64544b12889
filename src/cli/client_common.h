// What the client commands share: the connection to the server (address and token from the flags,
// the environment or ~/.config/allot/config), requests that exit with the server's refusal, the
// parsers of flag values, and the table printer. Only for src/cli/client*.cpp.
#pragma once

#include <httplib.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/flags.h"

namespace allot::cli::client {

using json = nlohmann::json;

// The exit codes of the client commands (the list is in client.cpp's opening comment).
enum Exit {
  kOk = 0,
  kRefused = 1,
  kUsage = 2,
  kUnreachable = 3,
  kAuth = 4,
  kNotFound = 5,
  kServer = 6
};

// Says `msg` on stderr and exits with `code`. Under --json (set_json_errors) the message is one
// JSON line instead: {"error": {"exit_code", "message", and the server's "status" and "field"
// when it refused}}.
[[noreturn]] void die(int code, const std::string& msg, int status = 0,
                      const std::string& field = "");
void set_json_errors(bool on);

struct Conn {
  std::string addr, token, cacert;
  bool insecure = false;
  // --addr / ALLOT_ADDR as a list "URL,URL,...": the servers on one PostgreSQL database; `addr`
  // is then the leader's, found by asking each for GET /api/v1/health.
  std::string servers;
};

// Words put before every error message from now on ("" to stop): `ls -w` says that the watch
// stopped, and since when its listing is old.
void set_error_context(const std::string& context);

// The server and credentials to use; exits (kAuth) without a token.
Conn connection(const Args& a);
// The leader among c.servers (a standby names it); waits up to 15 s for one, then exits
// (kUnreachable).
std::string find_leader(const Conn& c);
void configure(httplib::Client& cli, const Conn& c);
[[noreturn]] void unreachable(const Conn& c, httplib::Error e);
// Exits with the error the server gave (its field and reason) and the matching exit code.
[[noreturn]] void refused(int status, const std::string& body);
// The server's JSON answer to one request; any failure exits. A POST with a body is retried once.
json request(const Conn& c, const std::string& method, const std::string& path,
             const json* body = nullptr);

// Flag values; a bad one exits (kUsage) naming the flag.
std::string qs_escape(const std::string& s);
long long parse_duration(const std::string& field, const std::string& s);
long long parse_count(const std::string& field, const std::string& s);
long long parse_mib(const std::string& field, const std::string& s);
double parse_number(const std::string& field, const std::string& s);
json yaml_to_json(const YAML::Node& n);
std::string random_key();

// Printing.
int terminal_width();
// Prints rows as columns; the last column is cut to fit the terminal unless `cut` is false.
void table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
           bool cut = true);
std::string gpus_of(const json& j);
std::string ago(long long t);  // "5m": how long ago the Unix time `t` was

// The commands, by group: client_jobs.cpp, client_admin.cpp.
int cmd_submit(const Args& a, const Conn& c);
int cmd_ls(const Args& a, const Conn& c);
int cmd_show(const Args& a, const Conn& c);
int cmd_why(const Args& a, const Conn& c);
int cmd_cancel(const Args& a, const Conn& c);
// `allot hold JOB...` (hold) and `allot release JOB...`: each job in turn, stopping at the first
// one refused (its error and exit code).
int cmd_hold(const Args& a, const Conn& c, bool hold);
int cmd_logs(const Args& a, const Conn& c);
int cmd_budget(const Args& a, const Conn& c);
int cmd_report(const Args& a, const Conn& c);
int cmd_advise(const Args& a, const Conn& c);  // client_advise.cpp
int cmd_nodes(const Args& a, const Conn& c);
bool natural_less(const std::string& a, const std::string& b);  // "n2" < "n10"
int cmd_node_op(const Args& a, const Conn& c, const std::string& op);
int cmd_token(const Args& a, const Conn& c);
int cmd_limits(const Args& a, const Conn& c);
int cmd_me(const Args& a, const Conn& c);     // client_standing.cpp
int cmd_serve(const Args& a, const Conn& c);  // client_services.cpp: allot serve SUBCOMMAND

}  // namespace allot::cli::client
