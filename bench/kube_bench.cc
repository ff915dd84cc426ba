// The Kubernetes API under load (issue #39, Must show 5), against a real `tessera dev` with
// simulated nodes on loopback:
//   create  pods/s created through the Kubernetes API (POST .../k8s/api/v1/.../pods) and the
//           same workloads through Tessera's own (POST workloads/<name>), --clients at once;
//   list    `kubectl get pods` of every pod of the tenant (--pods in all, by default 10,000) as
//           kubectl asks for it (a Table), and as a PodList;
//   watch   --watches watches of the tenant's pods at once while one client changes a pod's
//           label --rate times a second for --seconds: the delay from each change to its
//           delivery on every watch (p50, p99, max), read from the label, which carries the
//           time of the change;
//   tenants server memory with --tenants idle tenants (by default 10,000), in a server of its
//           own: its resident size before and after creating them, each having answered one
//           `kubectl get pods` (so that what a tenant's Kubernetes API keeps is counted).
//
//   build/bench/kube_bench                         # the defaults: 10,000 pods, 1,000 watches
//   build/bench/kube_bench --pods 2000 --watches 100 --seconds 5
// Exit status: 0 when every phase ran, 1 when set-up failed, 2 for bad options, 3 when requests
// failed.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>

#include "dev_harness.h"

namespace {

using namespace tessera::bench;  // NOLINT(google-build-using-namespace): the harness.

struct Options {
  std::string tessera = "build/tessera";
  int pods = 10000;  // In all: half through each API.
  int clients = 8;
  int watches = 1000;
  double rate = 100;
  double seconds = 10;
  int tenants = 10000;
};

double since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

int64_t nowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Runs `step(conn, i)` for each i in [0, count) on `clients` connections at once; returns the
// seconds it took, or -1 when a step failed (the others stop then).
double inParallel(const DevInfo& dev, int count, int clients,
                  const std::function<bool(Connection&, int)>& step) {
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  const auto start = SteadyClock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      Connection conn(dev);
      for (int i = next++; i < count && !failed; i = next++) {
        if (!step(conn, i)) {
          failed = true;
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  return failed ? -1 : since(start);
}

// Creates `count` objects with `clients` connections, `request(i)` the i-th; returns objects/s,
// or -1 when a request failed.
double create(const DevInfo& dev, int count, int clients,
              const std::function<Request(int)>& request) {
  const double s = inParallel(dev, count, clients, [&](Connection& conn, int i) {
    const Reply r = conn.call(request(i));
    if (r.status / 100 != 2) {
      std::cerr << "  failed: " << r.status << " " << r.body.substr(0, 300) << r.error << "\n";
      return false;
    }
    return true;
  });
  return s < 0 ? -1 : count / s;
}

// The resident set of process `pid` in bytes (VmRSS), or -1.
int64_t residentBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) {
      return std::atoll(line.c_str() + 6) * 1024;  // "VmRSS:   123456 kB"
    }
  }
  return -1;
}

// CPU seconds process `pid` has used (user and system), or -1.
double cpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // The name may hold spaces.
  if (paren == std::string::npos) {
    return -1;
  }
  std::istringstream fields(text.substr(paren + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14 || i == 15) {  // utime, stime.
      ticks += std::stod(f);
    }
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Creates `count` tenants in a server of their own, each answering one Kubernetes list; prints
// the server's memory per tenant. False when it could not be measured.
bool idleTenants(const std::string& tessera, int count, int clients, bool keep) {
  std::string pattern = (fs::temp_directory_path() / "tessera-kube-tenants-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return false;
  }
  const fs::path dir = pattern;
  std::string error;
  auto server = DevServer::start(tessera, dir, "dgx-h100:4", /*simulated=*/true, &error);
  const std::optional<DevInfo> dev =
      server == nullptr ? std::nullopt : readDevJson(dir / "dev.json", &error);
  if (!dev) {
    std::cerr << "error: the server did not start: " << error << "\n";
    return false;
  }
  // Warm: one tenant through the same path, so that the baseline holds what any first tenant
  // brings (threads, caches), not what each one does.
  // A request refused by the root's rate limit (429) is sent again after a while, as a client
  // should.
  auto call = [](Connection& conn, const Request& req) {
    Reply r = conn.call(req);
    for (int tries = 0; r.status == 429 && tries < 600; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      r = conn.call(req);
    }
    return r;
  };
  auto make = [&](Connection& conn, const std::string& name) {
    const Reply made = call(conn, {"POST", "/v1/tenants/" + name, dev->root_token, "{}", ""});
    if (made.status / 100 != 2) {
      std::cerr << "  creating " << name << ": " << made.status << " " << made.body.substr(0, 300)
                << made.error << "\n";
      return false;
    }
    Request list{"GET", "/v1/tenants/" + name + "/k8s/api/v1/namespaces/default/pods",
                 dev->root_token, "", ""};
    list.accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    const Reply listed = call(conn, list);
    if (listed.status != 200) {
      std::cerr << "  listing " << name << "'s pods: " << listed.status << " "
                << listed.body.substr(0, 300) << listed.error << "\n";
      return false;
    }
    return true;
  };
  {
    Connection warm(*dev);
    if (!make(warm, "warm-up")) {
      return false;
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t before = residentBytes(server->pid());
  const auto start = SteadyClock::now();
  const double took = inParallel(*dev, count, clients, [&](Connection& conn, int i) {
    if (i > 0 && i % 2000 == 0) {
      std::cout << fmt::format("  {} tenants, {:.0f} s\n", i, since(start));
    }
    return make(conn, fmt::format("idle-{:05}", i));
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));  // Their first passes, status writes.
  const int64_t after = residentBytes(server->pid());
  server->stop();
  if (!keep) {
    fs::remove_all(dir);
  }
  if (took < 0 || before < 0 || after < 0) {
    return false;
  }
  std::cout << fmt::format(
      "  {} tenants created in {:.1f} s ({:.0f}/s)\n  server resident: {:.1f} MiB before, "
      "{:.1f} MiB after: {:.1f} KiB per idle tenant\n",
      count, took, count / took, static_cast<double>(before) / 1048576,
      static_cast<double>(after) / 1048576, static_cast<double>(after - before) / 1024 / count);
  return true;
}

// One watch: a TLS connection that has sent its request and read the answer's header, then
// reads the chunked stream asynchronously, noting each event's delay (now minus the time in its
// pod's `t` label). All watches share one thread, as a client with many watches would (a
// thread each would measure the client's context switches on the server's cores).
struct Watch {
  Watch(asio::io_context& io, ssl::context& ctx) : stream(io, ctx) {}

  // Connects and starts the watch (blocking); false, with `error`, when it failed.
  bool start(const DevInfo& dev, const Request& r, std::string* error) {
    if (!connectTls(stream, dev, error)) {
      return false;
    }
    beast::error_code ec;
    http::write(stream, toHttp(r, dev.host), ec);
    parser.body_limit(boost::none);
    if (!ec) {
      http::read_header(stream, buffer, parser, ec);
    }
    if (ec || parser.get().result_int() != 200) {
      *error = ec ? ec.message() : std::to_string(parser.get().result_int());
      return false;
    }
    return true;
  }

  void read() {
    http::async_read_some(stream, buffer, parser, [this](beast::error_code ec, size_t) {
      consume();
      if (!ec && !parser.is_done()) {
        read();
      }
    });
  }

  void consume() {
    std::string& body = parser.get().body();
    size_t start = 0;
    for (size_t nl = body.find('\n'); nl != std::string::npos; nl = body.find('\n', start)) {
      // Not a full parse: the server writes compact JSON, and only the label `t` is a key "t"
      // in a pod.
      const std::string_view line(body.data() + start, nl - start);
      start = nl + 1;
      if (line.find(R"("type":"MODIFIED")") == std::string_view::npos) {
        continue;
      }
      const size_t t = line.find(R"("t":")");
      if (t != std::string_view::npos) {
        delays.push_back(static_cast<double>(nowMicros() - std::atoll(line.data() + t + 5)) /
                         1000.0);
      }
    }
    body.erase(0, start);
  }

  beast::ssl_stream<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  std::vector<double> delays;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool keep = false;
  CLI::App app{
      "The Kubernetes API under load: creates, a 10,000-pod Table, 1,000 watches, 10,000 idle "
      "tenants"};
  app.add_option("--tessera", o.tessera, "The tessera binary to start as `tessera dev`")
      ->capture_default_str();
  app.add_option("--pods", o.pods, "Pods in the tenant, half created through each API")
      ->capture_default_str();
  app.add_option("--clients", o.clients, "Concurrent clients that create")->capture_default_str();
  app.add_option("--watches", o.watches, "Concurrent watches")->capture_default_str();
  app.add_option("--rate", o.rate, "Changes per second while they watch")->capture_default_str();
  app.add_option("--seconds", o.seconds, "How long they watch")->capture_default_str();
  app.add_option("--tenants", o.tenants, "Idle tenants, in a server of their own (0: none)")
      ->capture_default_str();
  app.add_flag("--keep", keep, "Keep this run's temporary directory");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);
  std::cout << std::unitbuf;  // Each line as it is written: the phases take a while.
  if (access(o.tessera.c_str(), X_OK) != 0) {
    std::cerr << "error: --tessera " << o.tessera << " is not an executable\n";
    return 1;
  }
  std::string pattern = (fs::temp_directory_path() / "tessera-kube-bench-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    std::cerr << "error: cannot create a temporary directory\n";
    return 1;
  }
  const fs::path dir = pattern;
  std::string error;
  auto server = DevServer::start(o.tessera, dir, "dgx-h100:16", /*simulated=*/true, &error);
  if (server == nullptr) {
    std::cerr << "error: the server did not start: " << error << "\n";
    return 1;
  }
  const std::optional<DevInfo> dev = readDevJson(dir / "dev.json", &error);
  if (!dev) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  // One tenant whose own limits are out of the way: what the server can do.
  Connection admin(*dev);
  const std::string tenant = "bench-kube";
  Reply r = admin.call({"POST", "/v1/tenants/" + tenant, dev->root_token,
                        R"({"quota": {"gpu": 1}, "request_rate": 10000000,
                            "request_burst": 10000000, "request_concurrency": 4096,
                            "max_pending": 10000000, "max_workloads": 10000000})",
                        ""});
  if (r.status / 100 != 2) {
    std::cerr << "error: creating the tenant: " << r.status << " " << r.body << "\n";
    return 1;
  }
  r = admin.call({"POST", "/v1/auth/token/create", dev->root_token,
                  json{{"tenant", tenant}, {"policies", {"tenant-admin"}}, {"ttl", "2h"}}.dump(),
                  ""});
  const json tok = json::parse(r.body, nullptr, false);
  if (r.status != 200 || !tok.is_object()) {
    std::cerr << "error: a token: " << r.status << " " << r.body << "\n";
    return 1;
  }
  const std::string token = tok["auth"]["client_token"];
  const std::string k8s = "/v1/tenants/" + tenant + "/k8s/api/v1/namespaces/default/pods";
  int status = 0;

  std::cout << fmt::format("== create: {} pods through each API, {} clients\n", o.pods / 2,
                           o.clients);
  const double via_kube = create(*dev, o.pods / 2, o.clients, [&](int i) {
    const json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", fmt::format("kube-{}", i)}, {"labels", {{"app", "bench"}}}}},
        {"spec",
         {{"restartPolicy", "Never"},
          {"containers",
           {{{"name", "main"},
             {"command", {"sleep", "3600"}},
             {"resources", {{"requests", {{"cpu", "10m"}}}}}}}}}}};
    Request req{"POST", k8s + "?fieldManager=kubectl-create", token, pod.dump(), ""};
    req.content_type = "application/json";
    return req;
  });
  const double via_tessera = create(*dev, o.pods / 2, o.clients, [&](int i) {
    return Request{"POST", fmt::format("/v1/tenants/{}/workloads/own-{}", tenant, i), token,
                   R"({"cpuMilli": 10, "command": ["sleep", "3600"]})", ""};
  });
  if (via_kube < 0 || via_tessera < 0) {
    status = 3;
  }
  std::cout << fmt::format("  Kubernetes API  {:8.0f} pods/s\n  Tessera API     {:8.0f} pods/s\n",
                           via_kube, via_tessera);

  std::cout << fmt::format("== list: every pod of the tenant ({}), 5 times each\n", o.pods);
  for (const bool table : {true, false}) {
    std::vector<double> times;
    size_t bytes = 0;
    size_t rows = 0;
    for (int i = 0; i < 5; ++i) {
      Request req{"GET", k8s + "?limit=500", token, "", ""};
      req.accept = table ? "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
                         : "application/json";
      const auto start = SteadyClock::now();
      const Reply list = admin.call(req);
      times.push_back(since(start) * 1000);
      bytes = list.body.size();
      const json j = json::parse(list.body, nullptr, false);
      rows = j.is_object() ? j.value(table ? "rows" : "items", json::array()).size() : 0;
      if (list.status != 200) {
        status = 3;
      }
    }
    std::cout << fmt::format("  {:<9} {} rows, {:.1f} MB: median {:.0f} ms, max {:.0f} ms\n",
                             table ? "Table" : "PodList", rows, static_cast<double>(bytes) / 1e6,
                             percentile(times, 0.5), percentile(times, 1.0));
  }

  std::cout << fmt::format("== watch: {} watches, {:.0f} changes/s for {:.0f} s\n", o.watches,
                           o.rate, o.seconds);
  std::atomic<int> errors{0};
  const std::string rv = json::parse(admin.call({"GET", k8s + "?limit=1", token, "", ""}).body,
                                     nullptr, false)["metadata"]
                             .value("resourceVersion", "0");
  // The watches are closed 2 s after the last change; timeoutSeconds is for a bench that dies.
  const std::string target =
      k8s + "?watch=true&fieldSelector=metadata.name%3Dkube-0&resourceVersion=" + rv +
      "&timeoutSeconds=" + std::to_string(static_cast<int>(o.seconds) + 600);
  asio::io_context io;
  ssl::context ctx(ssl::context::tls_client);
  ctx.add_certificate_authority(asio::buffer(dev->ca_pem));
  ctx.set_verify_mode(ssl::verify_peer);
  std::vector<std::unique_ptr<Watch>> watches;
  const auto setup = SteadyClock::now();
  for (int i = 0; i < o.watches; ++i) {
    auto w = std::make_unique<Watch>(io, ctx);
    if (!w->start(*dev, Request{"GET", target, token, "", ""}, &error)) {
      if (errors++ == 0) {
        std::cerr << "  a watch failed: " << error << "\n";
      }
      continue;
    }
    w->read();
    watches.push_back(std::move(w));
  }
  std::thread reader([&] { io.run(); });
  std::cout << fmt::format("  {} watches started in {:.1f} s\n", watches.size(), since(setup));
  const int changes = static_cast<int>(o.rate * o.seconds);
  const double cpu_before = cpuSeconds(server->pid());
  const auto start = SteadyClock::now();
  for (int i = 0; i < changes; ++i) {
    std::this_thread::sleep_until(
        start + std::chrono::microseconds(static_cast<int64_t>(i * 1e6 / o.rate)));
    Request req{"PATCH", k8s + "/kube-0", token,
                json{{"metadata", {{"labels", {{"t", std::to_string(nowMicros())}}}}}}.dump(), ""};
    req.content_type = "application/merge-patch+json";
    if (const Reply patched = admin.call(req); patched.status != 200 && errors++ == 0) {
      std::cerr << "  a change failed: " << patched.status << " " << patched.body.substr(0, 300)
                << patched.error << "\n";
    }
  }
  const double took = since(start);
  // What is not delivered 2 s after the last change counts as lost.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  asio::post(io, [&] {
    for (const auto& w : watches) {
      beast::get_lowest_layer(w->stream).close();
    }
  });
  reader.join();
  const double server_cpu = cpuSeconds(server->pid()) - cpu_before;
  std::vector<double> delays;
  for (const auto& w : watches) {
    delays.insert(delays.end(), w->delays.begin(), w->delays.end());
  }
  std::cout << fmt::format(
      "  {} changes in {:.1f} s ({:.0f}/s); {} deliveries of {} expected; errors {}\n"
      "  delay from change to delivery: p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms\n"
      "  server CPU {:.1f} s over {:.1f} s: {:.1f} us per delivery\n",
      changes, took, changes / took, delays.size(), static_cast<size_t>(changes) * o.watches,
      errors.load(), percentile(delays, 0.5), percentile(delays, 0.99), percentile(delays, 1.0),
      server_cpu, took + 2,
      delays.empty() ? 0.0 : server_cpu * 1e6 / static_cast<double>(delays.size()));
  if (errors > 0) {
    status = 3;
  }
  server->stop();
  if (!keep) {
    fs::remove_all(dir);
  }

  if (o.tenants > 0) {
    std::cout << fmt::format("== tenants: server memory with {} idle tenants\n", o.tenants);
    if (!idleTenants(o.tessera, o.tenants, o.clients, keep)) {
      status = 3;
    }
  }
  return status;
}
