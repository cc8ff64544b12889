// Latency from submit to process started on an idle cluster: a real `allot server` and one real
// `allot agent` (fake 8-GPU node) on loopback; each job records when its process began, and the
// program compares that with the moment just before its submit request was sent. Jobs go one at
// a time (each waits for the previous to end), so every one meets an idle cluster.
//
//   build/bench/submit_to_start [jobs=30] [poll-ms=500]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../tests/e2e/cluster.h"

int main(int argc, char** argv) {
  using namespace allot::e2e;
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 30;
  const std::string poll = argc > 2 ? argv[2] : "500";
  try {
    Cluster c({"--tick-ms", "1000"});
    c.start_server();
    c.budget("/lab/a", 1);
    c.start_agent("n1", 8, {"--poll-ms", poll});
    std::vector<double> lat;
    for (int i = 0; i < jobs; ++i) {
      const std::string mark = c.out("t" + std::to_string(i));
      const double sent =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      auto id = c.submit({{"budget", "/lab/a"},
                          {"gpus_per_node", 1},
                          {"min_runtime", 60},
                          {"command", {"/bin/sh", "-c", "date +%s.%N > " + mark}}});
      if (!c.wait_state(id, "succeeded")) {
        std::fprintf(stderr, "job %llu did not finish\n", static_cast<unsigned long long>(id));
        c.keep();
        return 1;
      }
      lat.push_back(std::stod(slurp(mark)) - sent);
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) { return lat[static_cast<std::size_t>(p * (lat.size() - 1))]; };
    std::printf("submit -> process started, idle cluster, %d jobs, agent poll %s ms:\n", jobs,
                poll.c_str());
    std::printf("  p50 %.0f ms   p90 %.0f ms   max %.0f ms\n", pct(0.5) * 1000, pct(0.9) * 1000,
                lat.back() * 1000);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "submit_to_start: %s\n", e.what());
    return 1;
  }
  return 0;
}
