// The client commands' flags: what each command takes, what it refuses, and with which hint.
#include "cli/flags.h"

#include <gtest/gtest.h>

#include <set>

namespace allot::cli {
namespace {

ParseResult parse(const std::string& cmd, const std::string& sub,
                  const std::vector<std::string>& args) {
  const CommandSpec* spec = find_command(cmd, sub);
  EXPECT_NE(spec, nullptr) << cmd << " " << sub;
  return spec ? parse_flags(*spec, args) : ParseResult{};
}

TEST(Flags, MisspeltFlagsAreRefusedWithTheNearestOne) {
  struct Case {
    std::string cmd;
    std::vector<std::string> args;
    std::string hint;
  };
  const std::vector<Case> cases = {
      {"submit", {"--min-runtim", "2h"}, "did you mean --min-runtime?"},
      {"submit", {"--gpu", "1"}, "did you mean --gpus?"},
      {"submit", {"--resumeable", "--name", "x"}, "did you mean --resumable?"},
      {"submit", {"--min", "2h"}, "did you mean --min-runtime?"},
      {"ls", {"--stat", "running"}, "did you mean --state?"},
      {"ls", {"--ownr", "ann"}, "did you mean --owner?"},
      {"logs", {"1", "--stdrr"}, "did you mean --stderr?"},
      {"report", {"--formt", "csv"}, "did you mean --format?"},
  };
  for (const auto& c : cases) {
    auto r = parse(c.cmd, "", c.args);
    EXPECT_NE(r.error.find("unknown option"), std::string::npos) << c.cmd << ": " << r.error;
    EXPECT_NE(r.error.find(c.hint), std::string::npos) << c.cmd << ": " << r.error;
  }
  // Far from every flag: no guess.
  auto r = parse("ls", "", {"--frobnicate"});
  EXPECT_NE(r.error.find("unknown option --frobnicate"), std::string::npos) << r.error;
  EXPECT_EQ(r.error.find("did you mean"), std::string::npos) << r.error;
  // A flag of another command is unknown here.
  r = parse("show", "", {"1", "--budget", "/x"});
  EXPECT_NE(r.error.find("unknown option --budget"), std::string::npos) << r.error;
}

TEST(Flags, ValuesAreCheckedAndMissingValuesRefused) {
  auto r = parse("ls", "", {"--state", "bogus"});
  EXPECT_NE(r.error.find("'bogus' is not one of pending"), std::string::npos) << r.error;
  r = parse("ls", "", {"--state", "running,runing"});
  EXPECT_NE(r.error.find("did you mean running?"), std::string::npos) << r.error;
  r = parse("ls", "", {"--state", "running,pending"});
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.args.get("state"), "running,pending");
  r = parse("submit", "", {"--min-runtime"});
  EXPECT_NE(r.error.find("--min-runtime needs a value"), std::string::npos) << r.error;
  r = parse("submit", "", {"--min-runtime", "--gpus", "2"});
  EXPECT_NE(r.error.find("--min-runtime needs a value"), std::string::npos) << r.error;
  r = parse("submit", "", {"--resumable=yes"});
  EXPECT_NE(r.error.find("--resumable takes no value"), std::string::npos) << r.error;
  r = parse("submit", "", {"--priority", "hgh"});
  EXPECT_NE(r.error.find("did you mean high?"), std::string::npos) << r.error;
  r = parse("submit", "", {"--gpus", "1", "--gpus", "2"});
  EXPECT_NE(r.error.find("given twice"), std::string::npos) << r.error;
  r = parse("token", "create", {"x", "--role", "root"});
  EXPECT_NE(r.error.find("'root' is not one of admin"), std::string::npos) << r.error;
}

TEST(Flags, ArgumentsAndTheCommandAfterDoubleDash) {
  auto r = parse("submit", "",
                 {"job.yaml", "--budget=/lab/a", "--env", "A=1", "--env=B=2", "--resumable", "--",
                  "python", "--gpus", "3"});
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.args.pos, std::vector<std::string>{"job.yaml"});
  EXPECT_EQ(r.args.get("budget"), "/lab/a");
  EXPECT_EQ(r.args.env, (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_TRUE(r.args.has("resumable"));
  EXPECT_EQ(r.args.rest, (std::vector<std::string>{"python", "--gpus", "3"}));
  // A second positional is a command without "--".
  r = parse("submit", "", {"job.yaml", "python"});
  EXPECT_NE(r.error.find("put the job's command after --"), std::string::npos) << r.error;
  r = parse("ls", "", {"running"});
  EXPECT_NE(r.error.find("takes no arguments"), std::string::npos) << r.error;
  r = parse("show", "", {});
  EXPECT_NE(r.error.find("missing argument"), std::string::npos) << r.error;
  r = parse("show", "", {"1", "--", "x"});
  EXPECT_NE(r.error.find("takes no command"), std::string::npos) << r.error;
  r = parse("logs", "", {"1", "-f"});
  EXPECT_TRUE(r.args.has("follow")) << r.error;
  r = parse("ls", "", {"-x"});
  EXPECT_NE(r.error.find("unknown option '-x'"), std::string::npos) << r.error;
  r = parse("ls", "", {"-h"});
  EXPECT_TRUE(r.error.empty());
  EXPECT_TRUE(r.args.has("help"));
}

TEST(Flags, EachCommandHasItsOwnHelp) {
  std::set<std::string> texts;
  for (const auto& spec : client_commands()) {
    const auto h = help_text(spec);
    EXPECT_EQ(h.rfind("usage: allot " + spec.name, 0), 0u) << h;
    for (const auto& f : spec.flags) {
      EXPECT_NE(h.find("--" + f.name), std::string::npos) << spec.name << " --" << f.name;
      EXPECT_FALSE(f.help.empty()) << spec.name << " --" << f.name;
    }
    EXPECT_NE(h.find("example:\n  allot "), std::string::npos) << h;
    EXPECT_NE(h.find("exit codes:"), std::string::npos);
    texts.insert(h);
  }
  EXPECT_EQ(texts.size(), client_commands().size());  // no two alike
  const auto submit = help_text(*find_command("submit", ""));
  EXPECT_NE(submit.find("unallocated"), std::string::npos);
  EXPECT_NE(submit.find("--min-runtime DURATION"), std::string::npos);
}

TEST(Flags, NearestIsOnlyForTypos) {
  EXPECT_EQ(nearest("gpu", {"gpus", "cpus", "nodes"}), "gpus");
  EXPECT_EQ(nearest("stat", {"state", "all"}), "state");
  EXPECT_EQ(nearest("xyz", {"state", "all"}), "");
  EXPECT_EQ(nearest("min", {"min-runtime", "memory"}), "min-runtime");
}

}  // namespace
}  // namespace allot::cli
