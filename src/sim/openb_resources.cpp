// The openb traces as resource requests and node capacities (see openb_resources.h).
#include "sim/openb_resources.h"

#include <map>
#include <sstream>

#include "sim/csv_line.h"
#include "sim/text_file.h"

namespace allot::sim {
namespace {

// Larger CPU (milli) or memory (MiB) figures than any machine has are malformed.
constexpr long long kMaxCpuMilli = 100'000'000;     // 100,000 cores
constexpr long long kMaxMemoryMib = 1'000'000'000;  // ~1 PiB

// The file's lines and each needed column's position, or an error naming the missing column.
struct Table {
  std::vector<std::string> lines;
  std::map<std::string, std::size_t> at;
  std::size_t width = 0;
};

core::Result<Table> read_table(const std::string& text, const std::string& name,
                               std::initializer_list<const char*> needed) {
  Table t;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) t.lines.push_back(std::move(line));
  if (t.lines.empty()) return core::Error{name, "the file is empty"};
  const auto header = split_csv(t.lines[0]);
  t.width = header.size();
  for (std::size_t i = 0; i < header.size(); ++i) t.at.emplace(std::string(header[i]), i);
  for (const char* n : needed) {
    if (!t.at.count(n)) return core::Error{name + ":1: " + n, "column missing from the header"};
  }
  return t;
}

std::optional<long long> in_range(std::string_view text, long long lo, long long hi) {
  const auto v = parse_int(text);
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return v;
}

// Line i's fields, or nothing (the line empty, or skipped for its width).
std::optional<std::vector<std::string_view>> fields_of(const Table& t, std::size_t i,
                                                       const std::string& name, Diagnostics& diag) {
  if (t.lines[i].empty() || t.lines[i] == "\r") return std::nullopt;
  auto f = split_csv(t.lines[i]);
  if (f.size() != t.width) {
    diag.skip(name, i + 1, "line",
              "expected " + std::to_string(t.width) + " fields, found " + std::to_string(f.size()));
    return std::nullopt;
  }
  return f;
}

// The line's cpu_milli and memory_mib, or false (skipped, naming the field).
bool cpu_and_memory(const Table& t, const std::vector<std::string_view>& f, std::size_t i,
                    const std::string& name, Diagnostics& diag, std::int64_t* cpu,
                    std::int64_t* mem) {
  const auto c = in_range(f[t.at.at("cpu_milli")], 0, kMaxCpuMilli);
  if (!c) {
    diag.skip(name, i + 1, "cpu_milli", "expected an integer between 0 and 100000000");
    return false;
  }
  const auto m = in_range(f[t.at.at("memory_mib")], 0, kMaxMemoryMib);
  if (!m) {
    diag.skip(name, i + 1, "memory_mib", "expected an integer between 0 and 1000000000");
    return false;
  }
  *cpu = *c;
  *mem = *m;
  return true;
}

// Calls on(fields, line number, cpu, memory) for each data line with the right width and valid
// CPU and memory; the rest are skipped (or, when empty, passed over).
template <typename On>
void each_record(const Table& t, const std::string& name, Diagnostics& diag, On on) {
  for (std::size_t i = 1; i < t.lines.size(); ++i) {
    const auto fields = fields_of(t, i, name, diag);
    std::int64_t cpu = 0, mem = 0;
    if (fields && cpu_and_memory(t, *fields, i, name, diag, &cpu, &mem)) {
      on(*fields, i + 1, cpu, mem);
    }
  }
}

}  // namespace

core::Result<std::vector<core::FragRequest>> parse_openb_requests(const std::string& text,
                                                                  const std::string& name,
                                                                  Diagnostics& diag) {
  auto table =
      read_table(text, name, {"cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"});
  if (!table.ok()) return table.error();
  const Table& t = table.value();
  std::vector<core::FragRequest> out;
  each_record(t, name, diag,
              [&](const std::vector<std::string_view>& f, std::size_t n, std::int64_t cpu,
                  std::int64_t mem) {
                const auto gpus = in_range(f[t.at.at("num_gpu")], 0, 64);
                if (!gpus) {
                  diag.skip(name, n, "num_gpu", "expected an integer between 0 and 64");
                  return;
                }
                const auto milli = in_range(f[t.at.at("gpu_milli")], 0, core::kWholeGpu);
                if (!milli || (*gpus == 0) != (*milli == 0)) {
                  diag.skip(name, n, "gpu_milli",
                            "expected 0 with num_gpu 0, else an integer 1-1000");
                  return;
                }
                if (*gpus > 1 && *milli < core::kWholeGpu) {
                  diag.skip(name, n, "gpu_milli", "a fraction of a GPU is only for num_gpu 1");
                  return;
                }
                core::FragRequest r;
                r.gpus = static_cast<int>(*gpus);
                r.milli = *milli;
                r.cpu_milli = cpu;
                r.memory_mib = mem;
                std::string_view spec = f[t.at.at("gpu_spec")];
                while (!spec.empty()) {  // "V100M16|V100M32"
                  const auto bar = spec.find('|');
                  if (bar != 0) r.models.emplace_back(spec.substr(0, bar));
                  spec = bar == std::string_view::npos ? std::string_view() : spec.substr(bar + 1);
                }
                out.push_back(std::move(r));
              });
  if (out.empty()) return core::Error{name, "no pods"};
  return out;
}

core::Result<std::vector<core::FragNode>> parse_openb_node_resources(const std::string& text,
                                                                     const std::string& name,
                                                                     Diagnostics& diag) {
  auto table = read_table(text, name, {"cpu_milli", "memory_mib", "gpu", "model"});
  if (!table.ok()) return table.error();
  const Table& t = table.value();
  std::vector<core::FragNode> out;
  each_record(t, name, diag,
              [&](const std::vector<std::string_view>& f, std::size_t n, std::int64_t cpu,
                  std::int64_t mem) {
                const auto gpus = in_range(f[t.at.at("gpu")], 0, 64);
                if (!gpus) {
                  diag.skip(name, n, "gpu", "expected an integer between 0 and 64");
                  return;
                }
                const std::string_view model = f[t.at.at("model")];
                if (*gpus == 0 || model.empty()) {
                  diag.ignore();
                  return;
                }
                core::FragNode node;
                node.model = std::string(model);
                node.gpu_free.assign(static_cast<std::size_t>(*gpus), core::kWholeGpu);
                node.cpu_free = cpu;
                node.memory_free = mem;
                out.push_back(std::move(node));
              });
  if (out.empty()) return core::Error{name, "no GPU nodes"};
  return out;
}

core::Result<std::vector<core::FragRequest>> load_openb_requests(const std::string& path,
                                                                 Diagnostics& diag) {
  auto text = read_text_file(path, "openb pod list");
  if (!text.ok()) return text.error();
  return parse_openb_requests(text.value(), path, diag);
}

core::Result<std::vector<core::FragNode>> load_openb_node_resources(const std::string& path,
                                                                    Diagnostics& diag) {
  auto text = read_text_file(path, "openb node list");
  if (!text.ok()) return text.error();
  return parse_openb_node_resources(text.value(), path, diag);
}

}  // namespace allot::sim
