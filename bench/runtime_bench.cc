// Task start latency on one node: how long ProcessRuntime::start takes, from the call until the
// task's process runs its command (start returns after the exec), for 1, 100 and 1,000 tasks
// started one after another and left running (`sleep 60`), without and with cgroups (CPU and
// memory limits and the device rule; with root and a usable hierarchy). This is the agent's
// share of issue #5's "submission to process start"; the server's dispatch comes on top.
//
//   build/bench/runtime_bench            # prints a table
//   build/bench/runtime_bench --counts 1,100
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroups.h"
#include "agent/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
using tessera::agent::Cgroups;
using tessera::agent::ProcessRuntime;
using tessera::agent::TaskSpec;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Row {
  int count = 0;
  bool cgroups = false;
  double p50_ms = 0, p99_ms = 0, max_ms = 0, total_s = 0;
  int failed = 0;
};

Row run(int count, const Cgroups* cg, const std::string& dir) {
  ProcessRuntime rt({.work_dir = dir, .cgroups = cg}, [](const std::string&, const auto&) {});
  std::vector<double> ms;
  Row row{count, cg != nullptr};
  const auto t0 = Clock::now();
  for (int i = 0; i < count; ++i) {
    TaskSpec spec;
    spec.id = fmt::format("t{}-{}", count, i);
    spec.tenant = "bench";
    spec.workload = "w";
    spec.command = {"sleep", "60"};
    spec.gpus.mode = tessera::agent::GpuPinning::Mode::kWhole;
    spec.gpus.uuids = {"GPU-bench"};
    if (cg != nullptr) {
      spec.limits.cpu_milli = 100;
      spec.limits.memory_mib = 64;
      spec.limits.restrict_devices = true;
    }
    const auto s = Clock::now();
    if (!rt.start(spec).isOk()) {
      ++row.failed;
      continue;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
  }
  row.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  row.p50_ms = percentile(ms, 0.50);
  row.p99_ms = percentile(ms, 0.99);
  row.max_ms = ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end());
  return row;  // The runtime goes: every task is killed and its cgroup removed.
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Task start latency of the agent's process runtime"};
  std::vector<int> counts = {1, 100, 1000};
  app.add_option("--counts", counts, "Tasks per run")->delimiter(',')->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::string pattern =
      (std::filesystem::temp_directory_path() / "tessera-runtime-bench-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::cerr << "error: cannot create a temporary directory\n";
    return 1;
  }
  const std::string dir = pattern;
  std::optional<Cgroups> cg;
  if (::getuid() == 0) {
    auto detected = Cgroups::detect("tessera-bench-" + std::to_string(::getpid()));
    if (detected.isOk()) {
      cg = std::move(detected).value();
    } else {
      std::cerr << "cgroups: " << detected.status().message() << "\n";
    }
  }
  std::cout << (cg ? "cgroups: " + cg->describe() : std::string("cgroups: not used (not root)"))
            << "\n";
  std::cout << fmt::format("{:>6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7}\n", "tasks", "cgroups",
                           "p50 ms", "p99 ms", "max ms", "total s", "failed");
  std::vector<const Cgroups*> modes = {nullptr};
  if (cg) {
    modes.push_back(&*cg);
  }
  for (int n : counts) {
    for (const Cgroups* c : modes) {
      const Row r = run(n, c, dir + (c != nullptr ? "/cg" : "/plain"));
      std::cout << fmt::format("{:>6} {:>8} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>7}\n", r.count,
                               r.cgroups ? "yes" : "no", r.p50_ms, r.p99_ms, r.max_ms, r.total_s,
                               r.failed);
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
