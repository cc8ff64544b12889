// The flags of the client commands, declared once per command: the parser refuses what a command
// does not take (with the nearest flag it does take), and each command's --help is printed from
// the same declaration, so the two cannot drift apart.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace allot::cli {

struct FlagSpec {
  FlagSpec(std::string name_, std::string value_, std::string help_,
           std::vector<std::string> choices_ = {}, bool list_ = false, bool repeatable_ = false)
      : name(std::move(name_)),
        value(std::move(value_)),
        help(std::move(help_)),
        choices(std::move(choices_)),
        list(list_),
        repeatable(repeatable_) {}
  std::string name;                  // without the dashes: "min-runtime"
  std::string value;                 // what the value is ("DURATION"); empty for an on/off flag;
                                     // in brackets ("[INTERVAL]") when it may be left out
  std::string help;                  // what it means, with units and the default
  std::vector<std::string> choices;  // the values it accepts, if it is one of a few
  bool list = false;                 // a comma-separated list of choices
  bool repeatable = false;           // may be given more than once (--env)
};

struct CommandSpec {
  std::string name;      // "submit", "budget set"
  std::string synopsis;  // what follows the name in the usage line
  std::string summary;   // one sentence
  std::vector<FlagSpec> flags;
  std::size_t min_args = 0, max_args = 0;  // positional arguments (before any "--")
  bool takes_command = false;              // may end with "-- COMMAND ARGS..."
  std::string example;
};

struct Args {
  std::vector<std::string> pos;
  std::map<std::string, std::string> opt;  // --key value (on/off flags: "1")
  std::vector<std::string> rest;           // after --
  std::vector<std::string> env;            // --env K=V, repeatable
  bool has(const std::string& k) const { return opt.count(k) > 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = opt.find(k);
    return it == opt.end() ? def : it->second;
  }
};

struct ParseResult {
  Args args;
  std::string error;  // empty when the arguments are good
};

// The spec of a client command; for "budget" and "token", of the subcommand named by the first
// argument ("budget set"). nullptr if there is no such command or subcommand.
const CommandSpec* find_command(const std::string& command, const std::string& sub);
// Every client command and subcommand, in the order --help lists them.
const std::vector<CommandSpec>& client_commands();

// Parses args (the words after the command and subcommand) against spec. Pure: no output, no
// exit, so tests can call it.
ParseResult parse_flags(const CommandSpec& spec, const std::vector<std::string>& args);
// The long name of a one-letter alias ('o' -> "output"), "" if none; and back (0 if none). A
// command takes the alias where it takes the long flag.
std::string short_flag_name(char letter);
char short_flag_of(const std::string& name);
// The closest of `candidates` to `typed` when it is close enough to be a typo, else "".
std::string nearest(const std::string& typed, const std::vector<std::string>& candidates);
// The command's own usage: synopsis, what each flag means, an example, the exit codes.
std::string help_text(const CommandSpec& spec);
// The exit codes of every client command, as --help prints them.
std::string exit_codes_text();

}  // namespace allot::cli
