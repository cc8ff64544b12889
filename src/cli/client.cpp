// The client commands of `allot`: they talk to a server over HTTP only. The address and token come
// from --addr/--token, else ALLOT_ADDR/ALLOT_TOKEN, else ~/.config/allot/config ("addr = ...",
// "token = ..."). Exit codes: 0 done; 1 refused (bad request, conflict); 2 bad usage; 3 server
// unreachable; 4 not authorised; 5 not found; 6 server error.
//
// This file picks the command; the commands are in client_jobs.cpp and client_admin.cpp, what they
// share (connection, requests, flag values, tables) in client_common.h.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace allot::cli {

using client::Conn;
using client::die;
using client::kOk;
using client::kUsage;

namespace {

std::string first_sentence(const std::string& text) {
  const auto end = text.find(". ");
  return end == std::string::npos ? text : text.substr(0, end + 1);
}

}  // namespace

bool is_client_command(const std::string& cmd) {
  static const std::vector<std::string> cmds = {
      "submit", "ls",      "show",    "why",      "cancel", "budget", "nodes",
      "drain",  "undrain", "cordon",  "uncordon", "report", "token",  "logs",
      "me",     "hold",    "release", "advise",   "limits", "serve"};
  return std::find(cmds.begin(), cmds.end(), cmd) != cmds.end();
}

int client_main(int argc, char** argv) {
  const std::string cmd = argv[0];
  std::vector<std::string> words(argv + 1, argv + argc);
  // Errors as JSON for scripts, even those of parsing the flags (stops at "--": the job's own).
  // `-o json` (kubectl's way) is --json.
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& w = words[i];
    if (w == "--") break;
    const bool next_json = i + 1 < words.size() && words[i + 1] == "json";
    if (w == "--json" || w == "-ojson" || w == "--output=json" ||
        ((w == "-o" || w == "--output") && next_json)) {
      client::set_json_errors(true);
    }
  }
  // budget and token have subcommands, each with its own flags; the first word names it.
  std::string sub;
  if (cmd == "budget" || cmd == "token" || cmd == "serve") {
    const std::string fallback = cmd == "budget" ? "tree" : cmd == "serve" ? "list" : "ls";
    if (words.empty() || words[0].rfind("-", 0) == 0) {
      const bool help = !words.empty() && (words[0] == "--help" || words[0] == "-h");
      if (help) {
        std::printf("usage: allot %s <subcommand> ...   ('allot %s <subcommand> --help')\n\n",
                    cmd.c_str(), cmd.c_str());
        for (const auto& s : client_commands()) {
          if (s.name.rfind(cmd + " ", 0) == 0) {
            std::printf("  %-13s %s\n", s.name.substr(cmd.size() + 1).c_str(),
                        first_sentence(s.summary).c_str());
          }
        }
        std::printf("\nwithout a subcommand: %s %s\n", cmd.c_str(), fallback.c_str());
        return kOk;
      }
      sub = fallback;
    } else {
      sub = words[0] == "remove" ? "rm" : words[0];
      if (cmd == "serve" && (sub == "ls" || sub == "rm")) sub = sub == "ls" ? "list" : "delete";
      words.erase(words.begin());
    }
    if (!find_command(cmd, sub)) {
      std::vector<std::string> subs;
      for (const auto& s : client_commands()) {
        if (s.name.rfind(cmd + " ", 0) == 0) subs.push_back(s.name.substr(cmd.size() + 1));
      }
      const auto near = nearest(sub, subs);
      std::string all;
      for (const auto& s : subs) all += (all.empty() ? "" : ", ") + s;
      die(kUsage, cmd + ": unknown subcommand '" + sub + "'" +
                      (near.empty() ? "" : "; did you mean '" + near + "'?") + " (" + all + ")");
    }
  }
  const CommandSpec* spec = find_command(cmd, sub);
  if (!spec) die(kUsage, "unknown command '" + cmd + "'");
  auto parsed = parse_flags(*spec, words);
  if (!parsed.error.empty()) die(kUsage, parsed.error);
  Args a = std::move(parsed.args);
  if (a.get("output") == "json") a.opt["json"] = "1";
  if (a.has("help")) {
    std::printf("%s", help_text(*spec).c_str());
    return kOk;
  }
  if (!sub.empty()) a.pos.insert(a.pos.begin(), sub);
  Conn c = client::connection(a);
  if (cmd == "submit") return client::cmd_submit(a, c);
  if (cmd == "ls") return client::cmd_ls(a, c);
  if (cmd == "show") return client::cmd_show(a, c);
  if (cmd == "why") return client::cmd_why(a, c);
  if (cmd == "cancel") return client::cmd_cancel(a, c);
  if (cmd == "hold" || cmd == "release") return client::cmd_hold(a, c, cmd == "hold");
  if (cmd == "budget") return client::cmd_budget(a, c);
  if (cmd == "nodes") return client::cmd_nodes(a, c);
  if (cmd == "drain" || cmd == "undrain" || cmd == "cordon" || cmd == "uncordon") {
    return client::cmd_node_op(a, c, cmd);
  }
  if (cmd == "report") return client::cmd_report(a, c);
  if (cmd == "advise") return client::cmd_advise(a, c);
  if (cmd == "token") return client::cmd_token(a, c);
  if (cmd == "limits") return client::cmd_limits(a, c);
  if (cmd == "logs") return client::cmd_logs(a, c);
  if (cmd == "me") return client::cmd_me(a, c);
  if (cmd == "serve") return client::cmd_serve(a, c);
  die(kUsage, "unknown command '" + cmd + "'");
}

}  // namespace allot::cli
