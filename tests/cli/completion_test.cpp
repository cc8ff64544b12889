// Shell completion (cli/completion.h): the generated bash script, run by a real bash with the
// words typed so far, offers the commands, subcommands, flags and flag values the parser accepts.
#include "cli/completion.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"

namespace allot::cli {
namespace {

class Completion : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = (std::filesystem::temp_directory_path() /
               ("allot-completion-" + std::to_string(::getpid()) + ".bash"))
                  .string();
    std::ofstream(script_) << completion_script("bash");
  }
  void TearDown() override { std::filesystem::remove(script_); }

  // What bash completes for `words` (the last one is the word being typed), one per element.
  std::vector<std::string> complete(const std::vector<std::string>& words) {
    std::string arr;
    for (const auto& w : words) arr += " '" + w + "'";
    const std::string cmd = "bash --norc --noprofile -c 'source " + script_ + "; COMP_WORDS=(" +
                            escape(arr) + "); COMP_CWORD=" + std::to_string(words.size() - 1) +
                            "; _allot; printf \"%s\\n\" \"${COMPREPLY[@]}\"'";
    std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
    std::vector<std::string> out;
    if (!p) return out;
    std::array<char, 4096> buf{};
    std::string all;
    while (std::fgets(buf.data(), buf.size(), p.get())) all += buf.data();
    std::istringstream in(all);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(line);
    }
    return out;
  }
  // Single quotes inside the single-quoted bash -c argument.
  static std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out;
  }
  static bool has(const std::vector<std::string>& v, const std::string& w) {
    return std::find(v.begin(), v.end(), w) != v.end();
  }

  std::string script_;
};

TEST_F(Completion, CommandsSubcommandsFlagsAndValues) {
  EXPECT_EQ(complete({"allot", "sub"}), std::vector<std::string>{"submit"});
  auto all = complete({"allot", ""});
  for (const char* c : {"submit", "ls", "me", "budget", "token", "sim", "up", "completion"}) {
    EXPECT_TRUE(has(all, c)) << c;
  }
  EXPECT_EQ(complete({"allot", "budget", "se"}), std::vector<std::string>{"set"});
  EXPECT_EQ(complete({"allot", "submit", "--min-r"}), std::vector<std::string>{"--min-runtime"});
  EXPECT_EQ(complete({"allot", "budget", "usage", "--by", ""}),
            (std::vector<std::string>{"budget", "user"}));
  EXPECT_EQ(complete({"allot", "me", "--gp"}), std::vector<std::string>{"--gpus"});
  // A one-letter alias completes the values of its long flag: kubectl's `-o wide`.
  EXPECT_EQ(complete({"allot", "ls", "-o", ""}), (std::vector<std::string>{"wide", "json"}));
  EXPECT_EQ(complete({"allot", "ls", "--output", "w"}), std::vector<std::string>{"wide"});
  // After "--" come the job's own command and arguments: no allot flags there.
  EXPECT_FALSE(has(complete({"allot", "submit", "--", "--b"}), "--budget"));
}

TEST_F(Completion, EveryFlagOfEveryCommandIsOffered) {
  for (const auto& c : client_commands()) {
    std::vector<std::string> words = {"allot"};
    std::istringstream name(c.name);
    for (std::string w; name >> w;) words.push_back(w);
    words.push_back("--");
    words.back() = "-";
    const auto got = complete(words);
    for (const auto& f : c.flags) EXPECT_TRUE(has(got, "--" + f.name)) << c.name << " --" << f.name;
  }
}

TEST(CompletionScript, ZshLoadsBashCompletionAndOtherShellsHaveNone) {
  const auto zsh = completion_script("zsh");
  EXPECT_NE(zsh.find("bashcompinit"), std::string::npos);
  EXPECT_NE(zsh.find("complete -F _allot allot"), std::string::npos);
  EXPECT_TRUE(completion_script("fish").empty());
}

}  // namespace
}  // namespace allot::cli
