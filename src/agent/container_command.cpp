#include "agent/container_command.h"

#include <cstdio>
#include <sstream>

namespace allot::agent {
namespace {

std::string replaced(std::string word, const std::string& name, const std::string& value) {
  const std::string token = "{" + name + "}";
  for (std::size_t at = word.find(token); at != std::string::npos;
       at = word.find(token, at + value.size())) {
    word.replace(at, token.size(), value);
  }
  return word;
}

bool has(const std::string& word, const char* name) {
  return word.find(std::string("{") + name + "}") != std::string::npos;
}

std::string cpus_text(double cpus) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", cpus);
  return buf;
}

}  // namespace

core::Result<std::vector<std::string>> container_command(const std::string& container_template,
                                                         const ContainerJob& job) {
  auto error = [](const std::string& reason) { return core::Error{"container_template", reason}; };
  std::vector<std::string> out;
  bool command = false;
  std::istringstream words(container_template);
  for (std::string word; words >> word;) {
    if (word == "{command}") {
      out.insert(out.end(), job.command.begin(), job.command.end());
      command = true;
      continue;
    }
    for (std::size_t open = word.find('{'); open != std::string::npos;
         open = word.find('{', open + 1)) {
      const std::size_t close = word.find('}', open);
      const std::string name =
          word.substr(open + 1, close == std::string::npos ? std::string::npos : close - open - 1);
      static const char* known[] = {"devices", "env", "image", "workdir", "memory_mib", "cpus"};
      bool ok = false;
      for (const char* k : known) ok = ok || name == k;
      if (!ok) {
        if (name == "command") return error("{command} must be a word of its own: " + word);
        return error("unknown placeholder {" + name + "} in '" + word + "'");
      }
    }
    if (has(word, "image")) {
      if (job.image.empty()) return error("the template needs an image and the job has none");
      word = replaced(word, "image", job.image);
    }
    word = replaced(word, "workdir", job.workdir);
    if (has(word, "memory_mib")) {
      if (job.memory_mib <= 0) continue;
      word = replaced(word, "memory_mib", std::to_string(job.memory_mib));
    }
    if (has(word, "cpus")) {
      if (job.cpus <= 0) continue;
      word = replaced(word, "cpus", cpus_text(job.cpus));
    }
    if (has(word, "devices")) {
      for (const std::string& uuid : job.gpu_uuids) {
        out.push_back(replaced(word, "devices", "nvidia.com/gpu=" + uuid));
      }
      continue;
    }
    if (has(word, "env")) {
      for (const auto& [name, value] : job.env)
        out.push_back(replaced(word, "env", name + "=" + value));
      continue;
    }
    out.push_back(word);
  }
  if (!command) return error("has no {command}: where does the job's command go?");
  return out;
}

}  // namespace allot::agent
