#include "server/logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace allot::server {

namespace fs = std::filesystem;
using core::Error;

namespace {

core::Status sys_error(const std::string& what) {
  return Error{"logs", what + ": " + std::strerror(errno)};
}

void sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Creates `dir` (and its parent) if needed, durably.
core::Status ensure_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return core::ok_status();
  fs::create_directories(dir, ec);
  // Jobs' output is their owners' to read through the API, nobody's on the server's disk.
  if (!ec) fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec) return Error{"logs", "cannot create " + dir + ": " + ec.message()};
  sync_dir(fs::path(dir).parent_path().string());
  return core::ok_status();
}

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::int64_t>(st.st_size) : 0;
}

// Appends to `path` and syncs it; creates it (durably) if needed.
core::Status append_file(const std::string& path, const char* p, std::size_t n) {
  const bool created = ::access(path.c_str(), F_OK) != 0;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error("open " + path);
  while (n > 0) {
    auto w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      auto st = sys_error("write " + path);
      ::close(fd);
      return st;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  if (::fdatasync(fd) != 0) {
    auto st = sys_error("sync " + path);
    ::close(fd);
    return st;
  }
  ::close(fd);
  if (created) sync_dir(fs::path(path).parent_path().string());
  return core::ok_status();
}

// Reads up to `n` bytes of `path` from `at`.
std::string read_file_at(const std::string& path, std::int64_t at, std::int64_t n) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  out.resize(static_cast<std::size_t>(n));
  std::size_t got = 0;
  while (got < out.size()) {
    auto r = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(at) + got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace

LogStore::LogStore(std::string dir, LogLimits limits) : dir_(std::move(dir)), limits_(limits) {
  ensure_dir(dir_);  // 0700 from the start; an error shows at the first append
  std::error_code ec;
  fs::permissions(dir_, fs::perms::owner_all, ec);  // one made before modes were kept
}

std::string LogStore::base(core::JobId job, int run, const std::string& node,
                           const std::string& stream) const {
  return dir_ + "/" + std::to_string(job) + "/" + std::to_string(run) + "." + node + "." + stream;
}

LogStore::Stream& LogStore::state(const std::string& b) {
  auto it = streams_.find(b);
  if (it != streams_.end()) return it->second;
  if (streams_.size() > 100000) streams_.clear();  // bounded: re-read from disk when needed
  Stream s;
  s.length = file_size(b);
  s.final = ::access((b + ".final").c_str(), F_OK) == 0;
  // Tail chunks: <base>.<k>.
  const auto parent = fs::path(b).parent_path();
  const auto prefix = fs::path(b).filename().string() + ".";
  std::int64_t lo = -1, hi = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const auto name = e.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const auto rest = name.substr(prefix.size());
    if (rest.empty() ||
        !std::all_of(rest.begin(), rest.end(), [](unsigned char c) { return std::isdigit(c); }) ||
        rest.size() > 12) {
      continue;
    }
    const std::int64_t k = std::stoll(rest);
    lo = lo < 0 ? k : std::min(lo, k);
    hi = std::max(hi, k);
  }
  if (hi >= 0) {
    s.first_chunk = lo;
    s.length = limits_.head + hi * limits_.chunk + file_size(b + "." + std::to_string(hi));
  }
  return streams_.emplace(b, s).first->second;
}

core::Status LogStore::write_at(const std::string& b, Stream& s, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::int64_t pos = s.length;
    std::string path;
    std::int64_t room = 0;
    if (pos < limits_.head) {
      path = b;
      room = limits_.head - pos;
    } else {
      const std::int64_t k = (pos - limits_.head) / limits_.chunk;
      path = b + "." + std::to_string(k);
      room = limits_.head + (k + 1) * limits_.chunk - pos;
    }
    const auto n = static_cast<std::size_t>(
        std::min<std::int64_t>(room, static_cast<std::int64_t>(bytes.size() - done)));
    if (auto st = append_file(path, bytes.data() + done, n); !st.ok()) return st;
    done += n;
    s.length += static_cast<std::int64_t>(n);
  }
  // Keep the chunks that hold the latest `tail` bytes; the ones before go.
  while (true) {
    const std::int64_t end = limits_.head + (s.first_chunk + 1) * limits_.chunk;
    if (end > s.length - limits_.tail || end > s.length) break;
    std::error_code ec;
    fs::remove(b + "." + std::to_string(s.first_chunk), ec);
    ++s.first_chunk;
  }
  return core::ok_status();
}

core::Result<std::int64_t> LogStore::append(core::JobId job, int run, const std::string& node,
                                            const std::string& stream, std::int64_t offset,
                                            const std::string& data, bool final) {
  if (static_cast<std::int64_t>(data.size()) > limits_.max_append) {
    return Error{"body", "at most " + std::to_string(limits_.max_append) + " bytes per post"};
  }
  std::lock_guard lk(mu_);
  if (auto st = ensure_dir(dir_ + "/" + std::to_string(job)); !st.ok()) return st.error();
  const auto b = base(job, run, node, stream);
  auto& s = state(b);
  if (offset > s.length) {
    return Error{"offset", "leaves a gap: the server has " + std::to_string(s.length) +
                               " bytes of this stream; resend from offset " +
                               std::to_string(s.length)};
  }
  const auto skip = static_cast<std::size_t>(s.length - offset);
  if (skip < data.size()) {
    if (auto st = write_at(b, s, data.substr(skip)); !st.ok()) return st.error();
  }
  if (final && !s.final) {
    if (auto st = append_file(b + ".final", "", 0); !st.ok()) return st.error();
    s.final = true;
  }
  return s.length;
}

core::Result<LogRead> LogStore::read(core::JobId job, int run, const std::string& node,
                                     const std::string& stream, std::int64_t offset,
                                     std::int64_t max) {
  std::lock_guard lk(mu_);
  const auto b = base(job, run, node, stream);
  auto& s = state(b);
  LogRead out;
  out.length = s.length;
  out.final = s.final;
  if (offset > s.length) {
    return Error{"offset", "past the end of the stream (" + std::to_string(s.length) + " bytes)"};
  }
  std::int64_t pos = offset;
  const std::int64_t kept_from = limits_.head + s.first_chunk * limits_.chunk;
  if (pos >= limits_.head && pos < kept_from) pos = kept_from;  // dropped from the middle
  out.start = pos;
  while (pos < s.length && static_cast<std::int64_t>(out.data.size()) < max) {
    const std::int64_t want = max - static_cast<std::int64_t>(out.data.size());
    std::string part;
    if (pos < limits_.head) {
      part = read_file_at(b, pos, std::min(want, std::min(s.length, limits_.head) - pos));
    } else {
      const std::int64_t k = (pos - limits_.head) / limits_.chunk;
      const std::int64_t in = pos - limits_.head - k * limits_.chunk;
      part = read_file_at(b + "." + std::to_string(k), in, std::min(want, limits_.chunk - in));
    }
    if (part.empty()) break;
    pos += static_cast<std::int64_t>(part.size());
    out.data += part;
    if (pos == limits_.head && pos < kept_from) pos = kept_from;
  }
  out.next = pos;
  return out;
}

std::vector<std::string> LogStore::nodes(core::JobId job, int run) const {
  std::vector<std::string> out;
  std::ifstream in(dir_ + "/" + std::to_string(job) + "/" + std::to_string(run) + ".nodes");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

void LogStore::set_nodes(core::JobId job, int run, const std::vector<std::string>& nodes) {
  std::lock_guard lk(mu_);
  const auto d = dir_ + "/" + std::to_string(job);
  const auto path = d + "/" + std::to_string(run) + ".nodes";
  if (::access(path.c_str(), F_OK) == 0 || !ensure_dir(d).ok()) return;
  std::string text;
  for (const auto& n : nodes) text += n + "\n";
  const auto tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  if (append_file(tmp, text.data(), text.size()).ok()) {
    ::rename(tmp.c_str(), path.c_str());
    sync_dir(d);
  }
}

}  // namespace allot::server
