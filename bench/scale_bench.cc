// KAI Scheduler's published scale test (../shared/reference/kai-and-peers.md, "Scale-test
// harness"), replayed through Tessera's live API on `tessera dev --simulated` nodes (issue #40,
// item 7). For each --nodes N (DGX H100 nodes, 8 GPUs each):
//
//   fill     N x 8 one-GPU jobs from one tenant over --clients HTTPS connections: the time until
//            every job is accepted (submissions/s) and until every one runs (KAI: 4,000 jobs on
//            500 nodes in 398 s). The tenant's quota is all GPUs but 8; it borrows those.
//   reclaim  with the cluster full, tenant `starved` (quota 8 GPUs) submits one one-GPU job at a
//            time and waits for it to run: a GPU reclaimed from the borrower (KAI: 13.9 s on
//            average). --reclaims times; p50 and the largest.
//   gang     tenant `gang` (no quota, so no share of a cluster whose quotas are all given)
//            submits a gang of 10 tasks x 8 GPUs: the time until its status says why it cannot
//            run (KAI: 249.5 s). --gangs times (each cancelled before the next).
//   many     on a fresh server, the same fill from --tenants tenants, one connection each.
//
//   build/bench/scale_bench --tessera build/tessera --nodes 500,5000 --out scale.json
//
// The server and this program share the machine's cores; the table says how many there are.
// Tokens come from the server's dev.json, never a command line. Exit status: 0 when every phase
// ran (whether or not it met KAI's figures), 1 when one failed, 2 for bad options.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dev_harness.h"

namespace {

using tessera::bench::Connection;
using tessera::bench::DevInfo;
using tessera::bench::DevServer;
using tessera::bench::json;
using tessera::bench::Reply;
using tessera::bench::Request;
using tessera::bench::SteadyClock;
namespace fs = std::filesystem;

double since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

struct Options {
  std::string tessera = "build/tessera";
  std::vector<int> nodes = {500};
  int clients = 8;
  int tenants = 8;
  int reclaims = 8;
  int gangs = 3;
  std::string out;
  std::string work_dir;
};

const std::string kJob = R"({"gpu": {"count": 1}, "cpuMilli": 1000, "memoryMiB": 1024})";

// A server for one phase: started, its admin connection, and tenants made through the API.
class Bench {
 public:
  Bench(const Options& o, int nodes, const std::string& tag) : o_(o), nodes_(nodes) {
    dir_ = fs::path(o.work_dir.empty() ? fs::temp_directory_path().string() : o.work_dir) /
           fmt::format("tessera-scale-{}-{}-{}", ::getpid(), nodes, tag);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_ = DevServer::start(o.tessera, dir_, fmt::format("dgx-h100:{}", nodes), true, &error_);
    if (server_ != nullptr) {
      std::string e;
      if (auto d = tessera::bench::readDevJson(dir_ / "dev.json", &e)) {
        dev_ = *d;
        admin_ = std::make_unique<Connection>(dev_);
      } else {
        error_ = e;
      }
    }
  }
  ~Bench() {
    admin_.reset();
    server_.reset();
    fs::remove_all(dir_);
  }
  const std::string& error() const { return error_; }
  bool ok() const { return admin_ != nullptr; }
  const DevInfo& dev() const { return dev_; }

  // Creates `name` with these settings (and caps raised for the run) and returns its token.
  std::string tenant(const std::string& name, int64_t quota_gpus) {
    const json body = {{"quota", {{"gpu", quota_gpus}}},
                       {"max_workloads", 10'000'000},
                       {"max_pending", 10'000'000},
                       {"request_rate", 1'000'000},
                       {"request_burst", 1'000'000}};
    Reply r = admin_->call({"POST", "/v1/tenants/" + name, dev_.root_token, body.dump(), ""});
    if (r.status != 204) {
      error_ = fmt::format("creating tenant {}: HTTP {} {}{}", name, r.status, r.body, r.error);
      return "";
    }
    const json t = {{"tenant", name}, {"policies", {"tenant-admin"}}, {"ttl", "4h"}};
    r = admin_->call({"POST", "/v1/auth/token/create", dev_.root_token, t.dump(), ""});
    const json got = json::parse(r.body, nullptr, false);
    if (r.status != 200 || !got.is_object()) {
      error_ = fmt::format("a token for {}: HTTP {} {}", name, r.status, r.body);
      return "";
    }
    return got["auth"]["client_token"].get<std::string>();
  }

  // Milli-GPU allocated to the tenants whose queues start with `prefix`, as GET /v1/queues says.
  int64_t allocated(const std::string& prefix) {
    Reply r = admin_->call({"GET", "/v1/queues", dev_.root_token, "", ""});
    const json got = json::parse(r.body, nullptr, false);
    int64_t sum = 0;
    if (got.is_object()) {
      for (const json& q : got["data"]["queues"]) {
        const std::string name = q.value("name", "");
        // Tenant rows only ("fill"), not their leaves ("fill/default"), counted once.
        if (name.rfind(prefix, 0) == 0 && name.find('/') == std::string::npos) {
          sum += q.value("allocated_milli_gpu", int64_t{0});
        }
      }
    }
    return sum;
  }

  struct Fill {
    double accepted_s = 0;  // Until the last job was accepted.
    double running_s = 0;   // Until every job ran.
    double rate_first = 0;  // Submissions/s over the first and the last tenth.
    double rate_last = 0;
    int64_t refused = 0;  // Answers other than 202 and 429.
  };

  // Submits `jobs` one-GPU jobs spread over the (tenant, token) pairs, `per_tenant` connections
  // each, and waits until all run.
  std::optional<Fill> fill(const std::vector<std::pair<std::string, std::string>>& tenants,
                           int per_tenant, int64_t jobs, const std::string& prefix) {
    Fill f;
    const auto t0 = SteadyClock::now();
    std::atomic<int64_t> accepted{0};
    std::atomic<int64_t> refused{0};
    std::mutex mu;
    std::vector<std::pair<int64_t, double>> marks;  // (accepted, seconds)
    const int64_t tenth = std::max<int64_t>(1, jobs / 10);
    std::vector<std::thread> threads;
    const int64_t streams = static_cast<int64_t>(tenants.size()) * per_tenant;
    for (int64_t k = 0; k < streams; ++k) {
      threads.emplace_back([&, k] {
        const auto& [name, token] = tenants[static_cast<size_t>(k / per_tenant)];
        Connection c(dev_);
        for (int64_t i = k; i < jobs; i += streams) {
          const Request req{"POST", fmt::format("/v1/tenants/{}/workloads/j{}", name, i), token,
                            kJob, ""};
          Reply r = c.call(req);
          while (r.status == 429) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            r = c.call(req);
          }
          if (r.status != 202) {
            if (refused++ == 0) {
              std::lock_guard lock(mu);
              std::cerr << fmt::format("{}: HTTP {} {}{}\n", req.target, r.status, r.body, r.error);
            }
            continue;
          }
          const int64_t n = ++accepted;
          if (n % tenth == 0 || n == jobs) {
            std::lock_guard lock(mu);
            marks.emplace_back(n, since(t0));
          }
        }
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
    f.accepted_s = since(t0);
    f.refused = refused;
    std::sort(marks.begin(), marks.end());
    if (marks.size() >= 2) {
      f.rate_first = static_cast<double>(marks[0].first) / marks[0].second;
      const auto& [n1, s1] = marks[marks.size() - 2];
      const auto& [n2, s2] = marks.back();
      f.rate_last = s2 > s1 ? static_cast<double>(n2 - n1) / (s2 - s1) : 0;
    }
    const int64_t want = (jobs - f.refused) * 1000;
    while (allocated(prefix) < want) {
      if (since(t0) > 3600) {
        error_ = fmt::format("after an hour {} of {} milli-GPU run", allocated(prefix), want);
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    f.running_s = since(t0);
    return f;
  }

  // Submits `body` as tenant/name and polls its status every 2 ms until `done` says so: the
  // seconds it took and the status then.
  std::optional<std::pair<double, json>> until(const std::string& tenant, const std::string& token,
                                               const std::string& name, const std::string& body,
                                               const std::function<bool(const json&)>& done) {
    Connection c(dev_);
    std::string e;
    if (!c.connect(&e)) {
      error_ = e;
      return std::nullopt;
    }
    const std::string path = fmt::format("/v1/tenants/{}/workloads/{}", tenant, name);
    const auto t0 = SteadyClock::now();
    Reply r = c.call({"POST", path, token, body, ""});
    if (r.status != 202) {
      error_ = fmt::format("POST {}: HTTP {} {}{}", path, r.status, r.body, r.error);
      return std::nullopt;
    }
    while (since(t0) < 600) {
      r = c.call({"GET", path, token, "", ""});
      const json got = json::parse(r.body, nullptr, false);
      if (got.is_object() && done(got["data"]["status"])) {
        return std::pair{since(t0), got["data"]["status"]};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    error_ = path + ": nothing decided within 600 s";
    return std::nullopt;
  }

  void cancel(const std::string& tenant, const std::string& token, const std::string& name) {
    admin_->call(
        {"DELETE", fmt::format("/v1/tenants/{}/workloads/{}", tenant, name), token, "", ""});
  }

 private:
  const Options& o_;
  int nodes_;
  fs::path dir_;
  std::string error_;
  std::unique_ptr<DevServer> server_;
  DevInfo dev_;
  std::unique_ptr<Connection> admin_;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int run(const Options& o) {
  json results = json::array();
  std::cout << fmt::format(
      "KAI's scale test through Tessera's API (tessera dev --simulated, DGX H100 nodes); {} "
      "cores\n",
      std::thread::hardware_concurrency());
  for (const int n : o.nodes) {
    const int64_t jobs = int64_t{n} * 8;
    json row = {{"nodes", n}, {"jobs", jobs}};
    {
      Bench b(o, n, "one");
      if (!b.ok()) {
        std::cerr << "error: " << b.error() << "\n";
        return 1;
      }
      const std::string fill_token = b.tenant("fill", jobs - 8);
      const std::string starved_token = b.tenant("starved", 8);
      const std::string gang_token = b.tenant("gang", 0);
      if (fill_token.empty() || starved_token.empty() || gang_token.empty()) {
        std::cerr << "error: " << b.error() << "\n";
        return 1;
      }
      std::cout << fmt::format("{} nodes: filling {} GPUs from one tenant ({} connections)...\n", n,
                               jobs, o.clients);
      auto f = b.fill({{"fill", fill_token}}, o.clients, jobs, "fill");
      if (!f) {
        std::cerr << "error: " << b.error() << "\n";
        return 1;
      }
      std::vector<double> reclaim;
      for (int i = 0; i < o.reclaims; ++i) {
        auto r = b.until("starved", starved_token, fmt::format("r{}", i), kJob,
                         [](const json& s) { return s.value("phase", "") == "running"; });
        if (!r) {
          std::cerr << "error: reclaim: " << b.error() << "\n";
          return 1;
        }
        reclaim.push_back(r->first);
      }
      std::vector<double> gang;
      std::string verdict;
      for (int i = 0; i < o.gangs; ++i) {
        auto r =
            b.until("gang", gang_token, fmt::format("g{}", i),
                    R"({"tasks": 10, "gpu": {"count": 8}, "cpuMilli": 1000, "memoryMiB": 1024})",
                    [](const json& s) {
                      // Pending with the scheduler's reason (not the stored record's first
                      // "not scheduled yet", nor none before the first pass saw it).
                      const std::string reason = s.value("reason", "");
                      return s.value("phase", "") != "pending" ||
                             (!reason.empty() && reason != "not scheduled yet");
                    });
        if (!r) {
          std::cerr << "error: gang: " << b.error() << "\n";
          return 1;
        }
        if (r->second.value("phase", "") != "pending") {
          std::cerr << "error: the gang of a tenant with no share ran: " << r->second.dump()
                    << "\n";
          return 1;
        }
        gang.push_back(r->first);
        verdict = r->second.value("reason", "");
        b.cancel("gang", gang_token, fmt::format("g{}", i));
      }
      row["one_tenant"] = {{"accepted_s", f->accepted_s},
                           {"running_s", f->running_s},
                           {"submissions_per_s", static_cast<double>(jobs) / f->accepted_s},
                           {"rate_first_tenth", f->rate_first},
                           {"rate_last_tenth", f->rate_last},
                           {"refused", f->refused}};
      row["reclaim_s"] = {
          {"p50", percentile(reclaim, 0.5)}, {"max", percentile(reclaim, 1)}, {"samples", reclaim}};
      row["gang_verdict_s"] = {{"p50", percentile(gang, 0.5)},
                               {"max", percentile(gang, 1)},
                               {"samples", gang},
                               {"reason", verdict}};
    }
    {
      Bench b(o, n, "many");
      if (!b.ok()) {
        std::cerr << "error: " << b.error() << "\n";
        return 1;
      }
      std::vector<std::pair<std::string, std::string>> tenants;
      for (int t = 0; t < o.tenants; ++t) {
        const std::string name = fmt::format("fill-{}", t);
        tenants.emplace_back(name, b.tenant(name, jobs / o.tenants));
        if (tenants.back().second.empty()) {
          std::cerr << "error: " << b.error() << "\n";
          return 1;
        }
      }
      std::cout << fmt::format(
          "{} nodes: filling {} GPUs from {} tenants (one connection each)...\n", n, jobs,
          o.tenants);
      auto f = b.fill(tenants, 1, jobs, "fill-");
      if (!f) {
        std::cerr << "error: " << b.error() << "\n";
        return 1;
      }
      row["many_tenants"] = {{"tenants", o.tenants},
                             {"accepted_s", f->accepted_s},
                             {"running_s", f->running_s},
                             {"submissions_per_s", static_cast<double>(jobs) / f->accepted_s},
                             {"rate_first_tenth", f->rate_first},
                             {"rate_last_tenth", f->rate_last},
                             {"refused", f->refused}};
    }
    results.push_back(row);
  }
  std::cout << fmt::format(
      "\n{:>6} {:>7} | {:>10} {:>8} {:>12} | {:>10} {:>8} | {:>8} {:>8} | {:>8}\n", "nodes", "jobs",
      "fill (1 t)", "sub/s", "first/last", "fill (many)", "sub/s", "reclaim", "max", "gang");
  for (const json& r : results) {
    const json& one = r["one_tenant"];
    const json& many = r["many_tenants"];
    std::cout << fmt::format(
        "{:>6} {:>7} | {:>9.1f}s {:>8.0f} {:>5.0f}/{:<6.0f} | {:>10.1f}s {:>8.0f} | {:>7.3f}s "
        "{:>7.3f}s | {:>7.3f}s\n",
        r["nodes"].get<int>(), r["jobs"].get<int64_t>(), one["running_s"].get<double>(),
        one["submissions_per_s"].get<double>(), one["rate_first_tenth"].get<double>(),
        one["rate_last_tenth"].get<double>(), many["running_s"].get<double>(),
        many["submissions_per_s"].get<double>(), r["reclaim_s"]["p50"].get<double>(),
        r["reclaim_s"]["max"].get<double>(), r["gang_verdict_s"]["p50"].get<double>());
  }
  std::cout << "KAI (500 nodes, 4,000 jobs): fill 398 s, reclaim 13.9 s on average, gang verdict "
               "249.5 s\n";
  if (!results.empty()) {
    std::cout << "gang verdict: " << results.back()["gang_verdict_s"]["reason"].get<std::string>()
              << "\n";
  }
  if (!o.out.empty()) {
    std::ofstream(o.out) << results.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("KAI's scale test through Tessera's live API on simulated nodes (issue #40)");
  Options o;
  app.add_option("--tessera", o.tessera, "The tessera binary")->capture_default_str();
  app.add_option("--nodes", o.nodes, "Cluster sizes (DGX H100 nodes, 8 GPUs each)")
      ->delimiter(',')
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  app.add_option("--clients", o.clients, "Connections of the one tenant that fills")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--tenants", o.tenants, "Tenants that fill in the many-tenant phase")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--reclaims", o.reclaims, "One-GPU reclaims timed (at most 8: its quota)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app.add_option("--gangs", o.gangs, "Gang verdicts timed")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--out", o.out, "Write the results as JSON here");
  app.add_option("--work-dir", o.work_dir, "Where the servers keep their data (default: TMPDIR)");
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
