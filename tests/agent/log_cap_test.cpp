// A run's local log is bounded: its head, a marker, and its last bytes (agent/log_cap.h).
#include "agent/log_cap.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace allot::agent {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CappedLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/allot-logcap-XXXXXX";
    fd_ = mkstemp(tmpl);
    path_ = tmpl;
  }
  void TearDown() override {
    close(fd_);
    std::filesystem::remove(path_);
  }
  int fd_ = -1;
  std::string path_;
};

TEST_F(CappedLogTest, UnderTheCapEverythingIsKeptAsItIs) {
  CappedLog log(fd_, 100, 10, "stdout");
  log.write("hello\n", 6);
  log.write("world\n", 6);
  log.finish();
  EXPECT_EQ(slurp(path_), "hello\nworld\n");
  EXPECT_EQ(log.dropped(), 0);
}

TEST_F(CappedLogTest, PastTheCapTheHeadAMarkerAndTheTailAreKept) {
  CappedLog log(fd_, 10, 4, "stdout");
  // 26 bytes in pieces that straddle the cap.
  log.write("abcdefg", 7);
  log.write("hijklmnopq", 10);
  log.write("rstuvwxyz", 9);
  const std::string during = slurp(path_);
  EXPECT_EQ(during,
            "abcdefghij\nallot: stdout reached this node's cap of 10 bytes: what follows is "
            "dropped, but for its last 4 bytes, written at the end\n");
  log.finish();
  log.finish();  // once only
  EXPECT_EQ(slurp(path_), during +
                              "\nallot: 12 bytes of stdout were dropped here (this node's "
                              "cap); the last 4 bytes follow\nwxyz");
  EXPECT_EQ(log.seen(), 26);
  EXPECT_EQ(log.dropped(), 12);
}

TEST_F(CappedLogTest, AFloodStaysBounded) {
  const std::int64_t cap = 1 << 16;
  CappedLog log(fd_, cap, 1024, "stderr");
  const std::string chunk(4096, 'x');
  for (int i = 0; i < 4096; ++i) log.write(chunk.data(), chunk.size());  // 16 MiB
  log.write("the end\n", 8);
  log.finish();
  const std::string text = slurp(path_);
  EXPECT_LT(text.size(), static_cast<std::size_t>(cap) + 1024 + 400);
  EXPECT_EQ(text.substr(text.size() - 8), "the end\n");
  EXPECT_NE(text.find("allot: stderr reached this node's cap of 65536 bytes"), std::string::npos);
  EXPECT_EQ(log.dropped(), 4096LL * 4096 + 8 - cap - 1024);
}

TEST_F(CappedLogTest, NoCapKeepsAll) {
  CappedLog log(fd_, 0, 0, "stdout");
  const std::string chunk(100000, 'y');
  log.write(chunk.data(), chunk.size());
  log.finish();
  EXPECT_EQ(slurp(path_).size(), 100000u);
}

}  // namespace
}  // namespace allot::agent
