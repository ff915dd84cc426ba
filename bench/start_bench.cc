// Time from submission to process start, end to end: `tessera dev --nodes dgx-h100:2
// --external-agents` and two `tessera agent run` processes (simulated GPUs, real processes;
// --in-process: dev's own agents) take CPU-only workloads whose command is `date +%s%N`; each
// task's start time is the first line of its stdout.log, and its latency is that minus the
// wall-clock time just before its POST was sent.
//
//   build/bench/start_bench                       # 1 task (20 times, one after another), 100, 1000
//   build/bench/start_bench --counts 1,100 --single-runs 50 --out start.json
//
// A burst of N is N one-task workloads submitted at once by --clients threads (one TLS
// connection each, connected before the clock starts). Reported per count: p50, p99 and max
// latency, and the time until the last task started. Exit status: 0 done, 1 set-up failed or
// tasks did not start in time, 2 bad options.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>

#include "dev_harness.h"

namespace tessera::bench {
namespace {

int64_t wallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

struct Result {
  int count = 0;
  std::vector<double> latency_ms;
  double all_started_s = 0;
  int rejected = 0;  // 429s retried.
};

class StartBench {
 public:
  StartBench(fs::path data_dir, DevInfo dev, std::vector<std::string> nodes, int clients)
      : data_dir_(std::move(data_dir)),
        dev_(std::move(dev)),
        nodes_(std::move(nodes)),
        clients_(clients) {}

  bool setUp(std::string* error) {
    Connection c(dev_);
    Reply r = c.call({"POST", "/v1/tenants/bench-start", dev_.root_token,
                      R"({"request_rate": 10000000, "request_burst": 10000000,
                          "request_concurrency": 4096, "max_pending": 10000000,
                          "max_workloads": 10000000})",
                      ""});
    if (r.status != 204) {
      *error = "creating tenant bench-start: " + std::to_string(r.status) + " " + r.body + r.error;
      return false;
    }
    r = c.call({"POST", "/v1/auth/token/create", dev_.root_token,
                R"({"tenant": "bench-start", "policies": ["tenant-admin"], "ttl": "1h"})", ""});
    const json j = json::parse(r.body, nullptr, false);
    if (r.status != 200 || !j.is_object()) {
      *error = "creating its token: " + std::to_string(r.status) + " " + r.body + r.error;
      return false;
    }
    token_ = j["auth"]["client_token"];
    // Wait for every agent to register.
    const auto deadline = SteadyClock::now() + std::chrono::seconds(60);
    while (SteadyClock::now() < deadline) {
      const json n =
          json::parse(c.call({"GET", "/v1/nodes", dev_.root_token, "", ""}).body, nullptr, false);
      int ready = 0;
      if (n.is_object()) {
        for (const json& node : n["data"]["nodes"]) {
          ready += node.value("state", "") == "ready" ? 1 : 0;
        }
      }
      if (ready == static_cast<int>(nodes_.size())) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    *error = "the agents did not register within 60 s";
    return false;
  }

  // Submits `names` (spread over the clients) and waits until every task has started.
  std::optional<Result> burst(const std::vector<std::string>& names) {
    Result res;
    res.count = static_cast<int>(names.size());
    const int threads = std::min<int>(clients_, static_cast<int>(names.size()));
    std::vector<std::unique_ptr<Connection>> conns;
    for (int i = 0; i < threads; ++i) {
      conns.push_back(std::make_unique<Connection>(dev_));
      std::string error;
      if (!conns.back()->connect(&error)) {
        std::cerr << "error: " << error << "\n";
        return std::nullopt;
      }
    }
    std::vector<int64_t> posted(names.size(), 0);
    std::mutex mu;
    std::string failure;
    const auto t0 = SteadyClock::now();
    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(threads));
    for (int w = 0; w < threads; ++w) {
      workers.emplace_back([&, w] {
        for (size_t i = static_cast<size_t>(w); i < names.size();
             i += static_cast<size_t>(threads)) {
          const std::string body = R"({"cpuMilli": 10, "command": ["date", "+%s%N"]})";
          while (true) {
            posted[i] = wallNs();
            Reply r = conns[static_cast<size_t>(w)]->call(
                {"POST", "/v1/tenants/bench-start/workloads/" + names[i], token_, body, ""});
            if (r.status == 202) {
              break;
            }
            std::lock_guard lock(mu);
            if (r.status == 429) {
              ++res.rejected;
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
              continue;
            }
            failure = names[i] + ": " + std::to_string(r.status) + " " + r.body + r.error;
            return;
          }
        }
      });
    }
    for (std::thread& t : workers) {
      t.join();
    }
    if (!failure.empty()) {
      std::cerr << "error: submitting " << failure << "\n";
      return std::nullopt;
    }
    // Each task's first line: its start, in ns since the epoch. Only folders the agents have
    // created are read (one listing per node and round), so polling costs little next to what
    // is measured.
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < names.size(); ++i) {
      index["bench-start." + names[i] + ".0"] = i;
    }
    std::vector<int64_t> started(names.size(), 0);
    size_t left = names.size();
    const auto deadline = SteadyClock::now() + std::chrono::seconds(300);
    while (left > 0 && SteadyClock::now() < deadline) {
      for (const std::string& node : nodes_) {
        std::error_code ec;
        for (const fs::directory_entry& e :
             fs::directory_iterator(data_dir_ / "nodes" / node, ec)) {
          auto it = index.find(e.path().filename().string());
          if (it == index.end() || started[it->second] != 0) {
            continue;
          }
          std::ifstream in(e.path() / "stdout.log");
          int64_t ns = 0;
          if (in >> ns && ns > 0) {
            started[it->second] = ns;
            --left;
          }
        }
      }
      if (left > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(names.size() == 1 ? 1 : 20));
      }
    }
    if (left > 0) {
      std::cerr << "error: " << left << " of " << names.size() << " tasks did not start in 300 s\n";
      return std::nullopt;
    }
    res.all_started_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    for (size_t i = 0; i < names.size(); ++i) {
      res.latency_ms.push_back(static_cast<double>(started[i] - posted[i]) / 1e6);
    }
    return res;
  }

 private:
  fs::path data_dir_;
  DevInfo dev_;
  std::vector<std::string> nodes_;
  int clients_;
  std::string token_;
};

int run(int argc, char** argv) {
  CLI::App app{"Submission-to-process-start latency through the server and two agents"};
  std::string tessera = (fs::path(argv[0]).parent_path().parent_path() / "tessera").string();
  std::string counts_text = "1,100,1000";
  int single_runs = 20;
  int clients = 16;
  std::string work_dir = fs::temp_directory_path().string();
  std::string out;
  app.add_option("--tessera", tessera, "The tessera binary to start as `tessera dev`")
      ->capture_default_str();
  app.add_option("--counts", counts_text, "Burst sizes, comma-separated (1: --single-runs times)")
      ->capture_default_str();
  app.add_option("--single-runs", single_runs, "Single-task submissions, one after another")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--clients", clients, "Client threads submitting a burst")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--work-dir", work_dir, "Where the dev server's data directory goes")
      ->capture_default_str();
  bool in_process = false;
  std::vector<std::string> agent_args;
  app.add_option("--agent-arg", agent_args,
                 "More arguments for `tessera agent run` (repeat; e.g. --agent-arg=--cgroups "
                 "--agent-arg=off)");
  app.add_flag("--in-process", in_process,
               "Use `tessera dev`'s in-process agents instead of two `tessera agent run` "
               "processes (each task's fork then copies the server's page tables)");
  app.add_option("--out", out, "Also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  std::vector<int> counts;
  for (const std::string& c : CLI::detail::split(counts_text, ',')) {
    try {
      counts.push_back(std::stoi(c));
    } catch (const std::exception&) {
      counts.push_back(0);
    }
    if (counts.back() < 1 || counts.back() > 100000) {
      std::cerr << "error: --counts: '" << c << "' is not 1..100000\n";
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  std::string pattern = (fs::path(work_dir) / "tessera-start-bench-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    std::cerr << "error: cannot create a directory in " << work_dir << "\n";
    return 1;
  }
  const fs::path data_dir = pattern;
  const std::vector<std::string> nodes = {"dgx-h100-0", "dgx-h100-1"};
  std::string error;
  auto server = DevServer::start(
      tessera, data_dir, "dgx-h100:2",
      /*simulated=*/false, &error,
      in_process ? std::vector<std::string>{} : std::vector<std::string>{"--external-agents"});
  if (server == nullptr) {
    std::cerr << "error: " << error << "\n";
    fs::remove_all(data_dir);
    return 1;
  }
  auto dev = readDevJson(data_dir / "dev.json", &error);
  if (!dev) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  // Agents as on real machines: one `tessera agent run` process per node.
  std::vector<pid_t> agents;
  if (!in_process) {
    const json info = json::parse(slurp(data_dir / "dev.json"), nullptr, false);
    for (const std::string& node : nodes) {
      std::vector<std::string> args = {tessera,
                                       "agent",
                                       "run",
                                       "--node",
                                       node,
                                       "--backend",
                                       "sim",
                                       "--profile",
                                       "dgx-h100",
                                       "--address",
                                       info.value("address", ""),
                                       "--ca-cert",
                                       info.value("ca_cert", ""),
                                       "--token-file",  // The node's own, as dev prints.
                                       (data_dir / "agent-tokens" / node).string(),
                                       "--work-dir",
                                       (data_dir / "nodes" / node).string(),
                                       "--run-as",
                                       "agent"};
      args.insert(args.end(), agent_args.begin(), agent_args.end());
      const pid_t pid = fork();
      if (pid == 0) {
        if (freopen((data_dir / (node + ".log")).c_str(), "w", stderr) == nullptr) {
          _exit(126);
        }
        std::vector<char*> argv;
        argv.reserve(args.size() + 1);
        for (std::string& a : args) {
          argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        execv(tessera.c_str(), argv.data());
        _exit(127);
      }
      agents.push_back(pid);
    }
  }
  auto stop_agents = [&] {
    for (pid_t pid : agents) {
      kill(pid, SIGTERM);
      int status = 0;
      waitpid(pid, &status, 0);
    }
    agents.clear();
  };
  StartBench bench(data_dir, *dev, nodes, clients);
  if (!bench.setUp(&error)) {
    std::cerr << "error: " << error << "\n";
    stop_agents();
    return 1;
  }
  std::cout << fmt::format("{:>6} {:>6} {:>9} {:>9} {:>9} {:>13} {:>6}\n", "tasks", "runs",
                           "p50_ms", "p99_ms", "max_ms", "all_start_s", "429s");
  json results = json::array();
  int seq = 0;
  bool ok = true;
  for (int count : counts) {
    Result total;
    total.count = count;
    const int runs = count == 1 ? single_runs : 1;
    for (int r = 0; r < runs && ok; ++r) {
      std::vector<std::string> names;
      names.reserve(static_cast<size_t>(count));
      ++seq;
      for (int i = 0; i < count; ++i) {
        names.push_back(fmt::format("r{}-{}", seq, i));
      }
      std::optional<Result> res = bench.burst(names);
      if (!res) {
        ok = false;
        break;
      }
      total.latency_ms.insert(total.latency_ms.end(), res->latency_ms.begin(),
                              res->latency_ms.end());
      total.all_started_s = std::max(total.all_started_s, res->all_started_s);
      total.rejected += res->rejected;
    }
    if (!ok) {
      break;
    }
    const double p50 = percentile(total.latency_ms, 50);
    const double p99 = percentile(total.latency_ms, 99);
    const double max = percentile(total.latency_ms, 100);
    std::cout << fmt::format("{:>6} {:>6} {:>9.1f} {:>9.1f} {:>9.1f} {:>13.2f} {:>6}\n", count,
                             runs, p50, p99, max, total.all_started_s, total.rejected)
              << std::flush;
    results.push_back({{"tasks", count},
                       {"runs", runs},
                       {"p50_ms", p50},
                       {"p99_ms", p99},
                       {"max_ms", max},
                       {"all_started_s", total.all_started_s},
                       {"rejected_429", total.rejected}});
    if (count == 1) {
      results.back()["latencies_ms"] = total.latency_ms;  // In submission order.
    }
  }
  if (ok && !results.empty() && results[0]["tasks"] == 1) {
    const double p50 = results[0]["p50_ms"];
    std::cout << fmt::format("target: one task's p50 under 50 ms: {:.1f} ms, {}\n", p50,
                             p50 < 50 ? "met" : "NOT met");
  }
  if (!out.empty()) {
    std::ofstream(out) << json({{"results", results}}).dump(2) << "\n";
  }
  stop_agents();
  server->stop();
  fs::remove_all(data_dir);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  try {
    return tessera::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
