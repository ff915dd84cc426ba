// API load generator: drives a running Tessera server over HTTPS on loopback, like many users
// would, and reports throughput and latency per phase.
//
//   build/bench/api_bench                        # starts `build/tessera dev` in a temp dir
//   build/bench/api_bench --clients 1,16 --seconds 5 --out api.json
//   build/bench/api_bench --dev-json DIR/dev.json   # an already running `tessera dev`
//
// Phases, each with 1 and 16 concurrent clients (--clients), --seconds long:
//   submit  POST tenants/bench-load/workloads/<unique name> (202: stored durably); then the time
//           until every sampled accepted workload is scheduled, which gives the end-to-end
//           rate (accepted, stored and scheduled).
//   get     GET tenants/bench-load/workloads/<name> of one workload.
//           Tenant bench-load (--load-tenant, created here) has admission limits far above what
//           the server can take, so these phases measure the server, not one tenant's quota.
//   noisy   tenant `quiet` (created here) GETs its workload with one client at --quiet-rate
//           (100/s), alone and then while 16 clients of `demo` flood the API with GETs and
//           submissions back to back. --flood-body-bytes gives each flood GET a JSON body of
//           that size (issue #36: 1 MiB bodies on GETs, which read none), and --flood-rate
//           paces the whole flood (5/s: the issue's shape).
//
// Every client thread keeps one TLS connection alive for the whole phase (connected before the
// clock starts), so the numbers are the server's cost per request, not handshakes. Latency
// percentiles are over 2xx answers; 429s (rate limit, pending cap, stored cap) are counted apart,
// and a client pauses --backoff-ms after one (default 1 ms, so a phase keeps its concurrency;
// 1000 behaves like a client that honours Retry-After).
// Per phase the table also shows the mean time inside the server's handler (from sys/metrics:
// audit fsyncs and store writes, not the wait for an I/O thread) and the CPU the server and this
// program used (1 core = 100%): on a small machine they compete for the same cores.
// The default workload is CPU-only and tiny ({"cpuMilli": 10, "duration": 1}) so the scheduler
// starts it at once and the tenant stays under its pending cap (1000 by default); the stored
// cap (10000 per tenant) bounds how many submissions one server takes in all phases together.
// The server's data directory decides what fsync costs: --work-dir puts it on a chosen disk.
// Exit status: 0 when every phase ran cleanly (whether or not the targets were met), 1 when
// the set-up failed, 2 for bad options, 3 when requests failed with other errors than 429.
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <latch>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dev_harness.h"

namespace tessera::bench {
namespace {

double secondsBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Makes the `seq`-th request of client `client`.
using Generator = std::function<Request(int client, uint64_t seq)>;

// What one client saw.
struct ClientLog {
  std::vector<double> latency_ms;      // Of 2xx answers.
  int64_t rate_limited = 0;            // 429 from the per-tenant token bucket.
  int64_t too_large = 0;               // 413: a body the route refuses.
  int64_t pending_cap = 0;             // 429: the tenant is at its limit of pending workloads.
  int64_t stored_cap = 0;              // 429: ... of stored workloads.
  std::map<unsigned, int64_t> errors;  // Other non-2xx statuses; 0 = no answer.
  std::string first_error;
  std::vector<std::pair<std::string, SteadyClock::time_point>> accepted;  // 202s, in order.
  int connects = 0;
};

void logReply(const Request& req, const Reply& rep, double ms, SteadyClock::time_point at,
              ClientLog& log) {
  if (rep.status >= 200 && rep.status < 300) {
    log.latency_ms.push_back(ms);
    if (rep.status == 202 && !req.workload.empty()) {
      log.accepted.emplace_back(req.workload, at);
    }
    return;
  }
  if (rep.status == 413) {
    ++log.too_large;
    return;
  }
  if (rep.status == 429) {
    if (rep.body.find("pending workloads") != std::string::npos) {
      ++log.pending_cap;
    } else if (rep.body.find("stored workloads") != std::string::npos) {
      ++log.stored_cap;
    } else {
      ++log.rate_limited;
    }
    return;
  }
  ++log.errors[rep.status];
  if (log.first_error.empty()) {
    log.first_error = req.method + " " + req.target + " -> " +
                      (rep.status == 0 ? rep.error : std::to_string(rep.status) + " " + rep.body);
  }
}

struct Pace {
  std::chrono::milliseconds backoff{1};  // Pause after a 429.
  double per_client_per_s = 0;           // > 0: each client sends at most this often.
};

// One client: a keep-alive HTTPS connection that sends a request, reads its answer, logs it and
// sends the next, until stopped; back to back, or paced (a client that falls behind sends at
// once, without catching up). Asynchronous, so that many clients can share one thread, as wrk's
// connections do.
class Client : public std::enable_shared_from_this<Client> {
 public:
  Client(asio::io_context& io, ssl::context& ctx, const DevInfo& dev, int id, const Generator& gen,
         Pace pace, const std::atomic<bool>& stop, ClientLog& log)
      : io_(io),
        ctx_(ctx),
        dev_(dev),
        id_(id),
        gen_(gen),
        pace_(pace),
        stop_(stop),
        log_(log),
        timer_(io) {}

  // Connects and completes the TLS handshake now (blocking), so that no timed request pays it.
  bool connect(std::string* error) {
    stream_.emplace(io_, ctx_);
    buffer_.clear();
    if (!connectTls(*stream_, dev_, error)) {
      stream_.reset();
      return false;
    }
    ++log_.connects;
    return true;
  }

  // Sends the first request (on the io_context's thread); the phase began at `began`.
  void start(SteadyClock::time_point began) {
    next_ = began;
    interval_ = std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(pace_.per_client_per_s > 0 ? 1 / pace_.per_client_per_s : 0));
    asio::post(io_, [self = shared_from_this()] { self->next(); });
  }

 private:
  void next() {
    if (stop_) {
      return;
    }
    if (interval_.count() > 0) {
      next_ = std::max(next_ + interval_, SteadyClock::now());
      after(next_, [](Client& c) { c.send(); });
      return;
    }
    send();
  }

  // Calls `then` at `at`, unless the phase has stopped by then.
  void after(SteadyClock::time_point at, void (*then)(Client&)) {
    timer_.expires_at(at);
    timer_.async_wait([self = shared_from_this(), then](beast::error_code ec) {
      if (!ec && !self->stop_) {
        then(*self);
      }
    });
  }

  void send() {
    if (!stream_) {
      std::string error;
      if (!connect(&error)) {
        finish({0, "", error}, SteadyClock::now());
        return;
      }
    }
    current_ = gen_(id_, seq_++);
    req_ = toHttp(current_, dev_.host);
    sent_ = SteadyClock::now();
    http::async_write(*stream_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->finish({0, "", ec.message()}, SteadyClock::now());
        return;
      }
      self->resp_ = {};
      http::async_read(
          *self->stream_, self->buffer_, self->resp_, [self](beast::error_code ec, size_t) {
            const auto at = SteadyClock::now();
            if (ec) {
              self->finish({0, "", ec.message()}, at);
              return;
            }
            if (!self->resp_.keep_alive()) {
              self->close();
            }
            self->finish({self->resp_.result_int(), std::move(self->resp_.body()), ""}, at);
          });
    });
  }

  void finish(const Reply& rep, SteadyClock::time_point at) {
    logReply(current_, rep, secondsBetween(sent_, at) * 1000, at, log_);
    if (rep.status == 0 || rep.status == 429) {
      // Do not spin: a refused client backs off briefly, as a polite one would; one whose
      // connection failed connects again after a pause.
      if (rep.status == 0) {
        close();
      }
      after(at + (rep.status == 0 ? std::chrono::milliseconds(10) : pace_.backoff),
            [](Client& c) { c.next(); });
      return;
    }
    next();
  }

  void close() {
    if (stream_) {
      beast::error_code ec;
      beast::get_lowest_layer(*stream_).socket().close(ec);
      stream_.reset();
    }
  }

  asio::io_context& io_;
  ssl::context& ctx_;
  const DevInfo& dev_;
  const int id_;
  const Generator& gen_;
  const Pace pace_;
  const std::atomic<bool>& stop_;
  ClientLog& log_;
  asio::steady_timer timer_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> stream_;
  beast::flat_buffer buffer_;
  Request current_;
  http::request<http::string_body> req_;
  http::response<http::string_body> resp_;
  uint64_t seq_ = 0;
  SteadyClock::time_point sent_{};
  SteadyClock::time_point next_{};
  SteadyClock::duration interval_{};
};

// `clients` clients spread over `threads` threads (each with its own event loop), sending
// requests from begin() until stop().
class Load {
 public:
  Load(const DevInfo& dev, int clients, int threads, Generator gen, Pace pace)
      : threads_count_(std::clamp(threads, 1, clients)),
        ready_(threads_count_),
        go_(1),
        gen_(std::move(gen)),
        pace_(pace),
        logs_(static_cast<size_t>(clients)) {
    for (int t = 0; t < threads_count_; ++t) {
      threads_.emplace_back([this, &dev, t, clients] { run(dev, t, clients); });
    }
  }
  ~Load() {
    stop_ = true;
    if (!released_) {
      ready_.wait();
      go_.count_down();
    }
    stop();
  }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

  // Waits until every client is connected, then releases them all.
  void begin() {
    ready_.wait();
    began_ = SteadyClock::now();
    released_ = true;
    go_.count_down();
  }
  // Stops the clients after their request in flight; returns their logs (once).
  std::vector<ClientLog> stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) {
        t.join();
      }
    }
    if (ended_ == SteadyClock::time_point{}) {
      ended_ = SteadyClock::now();
    }
    return std::move(logs_);
  }
  double elapsedSeconds() const { return secondsBetween(began_, ended_); }
  SteadyClock::time_point began() const { return began_; }

 private:
  // Thread `t` runs clients t, t + threads, t + 2 threads, ...
  void run(const DevInfo& dev, int t, int clients) {
    asio::io_context io(1);
    ssl::context ctx(ssl::context::tls_client);
    ctx.add_certificate_authority(asio::buffer(dev.ca_pem));
    ctx.set_verify_mode(ssl::verify_peer);
    std::vector<std::shared_ptr<Client>> mine;
    for (int c = t; c < clients; c += threads_count_) {
      ClientLog& log = logs_[static_cast<size_t>(c)];
      auto client = std::make_shared<Client>(io, ctx, dev, c, gen_, pace_, stop_, log);
      std::string error;
      if (!client->connect(&error)) {
        log.first_error = error;
      }
      mine.push_back(std::move(client));
    }
    ready_.count_down();
    go_.wait();
    for (const auto& client : mine) {
      client->start(began_);
    }
    io.run();  // Until every client has stopped after its last answer.
  }

  const int threads_count_;
  std::latch ready_;
  std::latch go_;
  Generator gen_;
  Pace pace_;
  std::vector<ClientLog> logs_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  bool released_ = false;  // begin() was called.
  SteadyClock::time_point began_{};
  SteadyClock::time_point ended_{};
};

// CPU seconds used by this process and by the server (when it runs here).
struct CpuSample {
  double self_s = 0;
  double server_s = -1;  // -1: not readable.
};

CpuSample cpuNow(pid_t server) {
  CpuSample s;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  s.self_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  if (server > 0) {
    std::istringstream in(slurp("/proc/" + std::to_string(server) + "/stat"));
    std::string field;
    // utime and stime are fields 14 and 15; the name (field 2) has no spaces in our case.
    for (int i = 1; i <= 15 && in >> field; ++i) {
      if (i == 14) {
        s.server_s = std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
      } else if (i == 15 && s.server_s >= 0) {
        s.server_s += std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
      }
    }
  }
  return s;
}

// Requests and handler seconds per tenant from GET sys/metrics (audited requests only: a 429
// from the rate limit is answered before the handler's clock).
std::map<std::string, std::pair<double, double>> handlerTime(Connection& conn, const DevInfo& dev) {
  std::map<std::string, std::pair<double, double>> out;
  const Reply r = conn.call({"GET", "/v1/sys/metrics", dev.root_token, "", ""});
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    const bool count = line.rfind("tessera_tenant_http_requests_total{", 0) == 0;
    const bool secs = line.rfind("tessera_tenant_http_request_seconds_total{", 0) == 0;
    const size_t t = line.find("tenant=\"");
    const size_t close = line.rfind('}');
    if ((!count && !secs) || t == std::string::npos || close == std::string::npos) {
      continue;
    }
    const std::string tenant = line.substr(t + 8, line.find('"', t + 8) - t - 8);
    const double v = std::strtod(line.c_str() + close + 1, nullptr);
    (count ? out[tenant].first : out[tenant].second) += v;
  }
  return out;
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) {
    return 0;
  }
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// After a submission phase: until when every sampled accepted workload was seen scheduled.
struct Drain {
  int sampled = 0;
  int scheduled = 0;
  int failed = 0;            // Ended failed or cancelled instead.
  double after_last_s = -1;  // From the last 202 until the last sampled one was seen scheduled.
  double e2e_per_s = 0;      // Accepted / (phase start .. all sampled seen scheduled).
  bool timed_out = false;
};

struct PhaseResult {
  std::string name;
  std::string tenant;
  int clients = 0;
  double seconds = 0;
  int64_t ok = 0;
  double rate_per_s = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  int64_t rate_limited = 0, pending_cap = 0, stored_cap = 0, too_large = 0;
  std::map<unsigned, int64_t> errors;
  std::string first_error;
  int reconnects = 0;
  double server_handler_ms = -1;  // Mean time inside the server's handler (sys/metrics).
  double server_cpu = -1;         // Server CPU seconds per second (1 = one core busy).
  double bench_cpu = -1;          // This program's; -1: not measured.
  std::optional<Drain> drain;
  int64_t accepted = 0;
};

json toJson(const PhaseResult& p) {
  json errors = json::object();
  for (const auto& [status, n] : p.errors) {
    errors[status == 0 ? "no_answer" : std::to_string(status)] = n;
  }
  json j = {{"phase", p.name},
            {"tenant", p.tenant},
            {"clients", p.clients},
            {"seconds", p.seconds},
            {"ok", p.ok},
            {"rate_per_s", p.rate_per_s},
            {"latency_ms", {{"p50", p.p50_ms}, {"p99", p.p99_ms}, {"max", p.max_ms}}},
            {"rejected_429",
             {{"rate_limit", p.rate_limited},
              {"too_large_413", p.too_large},
              {"pending_cap", p.pending_cap},
              {"stored_cap", p.stored_cap}}},
            {"errors", errors},
            {"reconnects", p.reconnects},
            {"server_handler_ms_mean", p.server_handler_ms},
            {"server_cpu_cores", p.server_cpu},
            {"bench_cpu_cores", p.bench_cpu}};
  if (!p.first_error.empty()) {
    j["first_error"] = p.first_error;
  }
  if (p.drain) {
    j["accepted"] = p.accepted;
    j["end_to_end"] = {{"sampled", p.drain->sampled},
                       {"scheduled", p.drain->scheduled},
                       {"failed", p.drain->failed},
                       {"scheduled_after_last_accept_s", p.drain->after_last_s},
                       {"accepted_stored_scheduled_per_s", p.drain->e2e_per_s},
                       {"timed_out", p.drain->timed_out}};
  }
  return j;
}

class Bench {
 public:
  struct Options {
    std::vector<int> clients = {1, 16};
    double seconds = 5;
    int noisy_clients = 16;
    int flood_submit_every = 4;   // Every Nth flood request is a submission, the rest GETs.
    size_t flood_body_bytes = 0;  // > 0: each flood GET carries a JSON body of about this size.
    double flood_rate = 0;        // > 0: the flood's requests/s, all its clients together.
    bool flood_kv = false;  // The flood's bodies go in KV writes (POST, read) instead of GETs.
    int sample = 200;
    double drain_timeout_s = 60;
    int backoff_ms = 1;
    double quiet_rate = 100;  // Requests/s of tenant quiet's one client (0: back to back).
    std::string spec = R"({"cpuMilli": 10, "duration": 1})";
    std::vector<std::string> phases = {"submit", "get", "noisy"};
    std::string load_tenant = "bench-load";
    int client_threads = 0;  // Threads the clients of a phase share; 0: one per client.
    bool idempotency_keys = false;  // Submissions carry an Idempotency-Key, as the CLI's do.
  };

  Bench(const DevInfo& dev, Options options)
      : dev_(dev), options_(std::move(options)), admin_(dev), tag_(runTag()) {}

  // Runs the chosen phases; false (with a message on stderr) if the set-up failed.
  bool run() {
    if (!setUp()) {
      return false;
    }
    for (const std::string& phase : options_.phases) {
      if (phase == "submit") {
        for (int c : options_.clients) {
          submitPhase(c);
        }
      } else if (phase == "get") {
        for (int c : options_.clients) {
          results_.push_back(measure("get", load_.name, c, getOne(load_.token, load_.target)));
        }
      } else if (phase == "noisy") {
        noisyPhase();
      }
    }
    // Leave nothing running on a server someone else started.
    for (const Tenant* t : {&load_, &flood_, &quiet_}) {
      if (!t->target.empty()) {
        (void)admin_.call({"DELETE", t->target, t->token, "", ""});
      }
    }
    return true;
  }

  const std::vector<PhaseResult>& results() const { return results_; }
  const std::optional<json>& noisy() const { return noisy_; }

 private:
  static std::string runTag() {
    const auto t = std::chrono::system_clock::now().time_since_epoch().count();
    return fmt::format(
        "r{:x}", (static_cast<uint64_t>(t) ^ (static_cast<uint64_t>(getpid()) << 16)) & 0xffffff);
  }

  std::string workloadPath(const std::string& tenant, const std::string& name) const {
    return "/v1/tenants/" + tenant + "/workloads/" + name;
  }

  // A tenant of the run, a token for it and its GET target: a workload that keeps running
  // (duration 0 runs until cancelled).
  struct Tenant {
    std::string name;
    std::string token;
    std::string target;
  };

  bool setUp() {
    std::string error;
    if (!admin_.connect(&error)) {
      std::cerr << "error: " << error << "\n";
      return false;
    }
    // Throughput and GET latency are measured on a tenant whose own admission limits are out of
    // the way (what the server can do); the flood comes from the demo tenant with the server's
    // default limits (what one tenant may do to the others).
    const std::string unthrottled = fmt::format(
        R"({{"quota": {{"gpu": 1}}, "request_rate": 10000000, "request_burst": 10000000,
             "request_concurrency": 4096, "max_pending": 10000000, "max_workloads": 10000000}})");
    return setUpTenant(options_.load_tenant, unthrottled, &load_) &&
           setUpTenant(dev_.tenant, "", &flood_, dev_.tenant_token) &&
           setUpTenant("quiet", R"({"quota": {"gpu": 1}})", &quiet_);
  }

  // Creates tenant `name` with `config` (with the root token) unless it exists, a token for it
  // (unless `token` is given), and its GET target.
  bool setUpTenant(const std::string& name, const std::string& config, Tenant* out,
                   const std::string& token = "") {
    out->name = name;
    out->token = token;
    Reply r = admin_.call({"GET", "/v1/tenants/" + name, dev_.root_token, "", ""});
    if (r.status == 404) {
      r = admin_.call({"POST", "/v1/tenants/" + name, dev_.root_token, config, ""});
      if (r.status / 100 != 2) {
        std::cerr << "error: creating tenant " << name << ": " << r.status << " " << r.body
                  << r.error << "\n";
        return false;
      }
    }
    if (out->token.empty()) {
      r = admin_.call({"POST", "/v1/auth/token/create", dev_.root_token,
                       json{{"tenant", name}, {"policies", {"tenant-admin"}}, {"ttl", "1h"}}.dump(),
                       ""});
      const json j = json::parse(r.body, nullptr, false);
      if (r.status != 200 || !j.is_object() || !j["auth"].contains("client_token")) {
        std::cerr << "error: a token for tenant " << name << ": " << r.status << " " << r.body
                  << r.error << "\n";
        return false;
      }
      out->token = j["auth"]["client_token"];
    }
    out->target = workloadPath(name, tag_ + "-get");
    r = admin_.call({"POST", out->target, out->token, R"({"cpuMilli": 10})", ""});
    if (r.status != 202) {
      std::cerr << "error: submitting " << name << "'s GET target: " << r.status << " " << r.body
                << r.error << "\n";
      return false;
    }
    return true;
  }

  int threadsFor(int clients) const {
    return options_.client_threads > 0 ? options_.client_threads : clients;
  }

  Pace pace(double per_client_per_s = 0) const {
    return {std::chrono::milliseconds(options_.backoff_ms), per_client_per_s};
  }

  Generator getOne(const std::string& token, const std::string& target) const {
    return [token, target](int, uint64_t) { return Request{"GET", target, token, "", ""}; };
  }

  Generator submit(const Tenant& t, const std::string& label) const {
    return [this, t, label](int client, uint64_t seq) {
      const std::string name = fmt::format("{}-{}-{}-{}", tag_, label, client, seq);
      return Request{"POST", workloadPath(t.name, name), t.token, options_.spec, name,
                     options_.idempotency_keys ? name : ""};
    };
  }

  // Runs `gen` with `clients` clients for --seconds and summarizes it.
  PhaseResult measure(const std::string& name, const std::string& tenant, int clients,
                      Generator gen, std::vector<ClientLog>* logs_out = nullptr,
                      double per_client_per_s = 0) {
    std::cerr << fmt::format("  {} ({}, {} client{}) ...\n", name, tenant, clients,
                             clients == 1 ? "" : "s");
    const auto metrics0 = handlerTime(admin_, dev_);
    Load load(dev_, clients, threadsFor(clients), std::move(gen), pace(per_client_per_s));
    load.begin();
    const CpuSample cpu0 = cpuNow(dev_.pid);
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.seconds));
    std::vector<ClientLog> logs = load.stop();
    const CpuSample cpu1 = cpuNow(dev_.pid);
    const auto metrics1 = handlerTime(admin_, dev_);
    PhaseResult p = summarize(name, tenant, clients, load.elapsedSeconds(), logs);
    p.bench_cpu = (cpu1.self_s - cpu0.self_s) / p.seconds;
    if (cpu0.server_s >= 0 && cpu1.server_s >= 0) {
      p.server_cpu = (cpu1.server_s - cpu0.server_s) / p.seconds;
    }
    auto at = [](const auto& m, const std::string& t) {
      auto it = m.find(t);
      return it == m.end() ? std::pair<double, double>{0, 0} : it->second;
    };
    const auto [n0, s0] = at(metrics0, tenant);
    const auto [n1, s1] = at(metrics1, tenant);
    if (n1 > n0) {
      p.server_handler_ms = (s1 - s0) / (n1 - n0) * 1000;
    }
    if (logs_out != nullptr) {
      *logs_out = std::move(logs);
    }
    phase_began_ = load.began();
    return p;
  }

  static PhaseResult summarize(const std::string& name, const std::string& tenant, int clients,
                               double seconds, const std::vector<ClientLog>& logs) {
    PhaseResult p;
    p.name = name;
    p.tenant = tenant;
    p.clients = clients;
    p.seconds = seconds;
    std::vector<double> all;
    for (const ClientLog& l : logs) {
      all.insert(all.end(), l.latency_ms.begin(), l.latency_ms.end());
      p.rate_limited += l.rate_limited;
      p.too_large += l.too_large;
      p.pending_cap += l.pending_cap;
      p.stored_cap += l.stored_cap;
      for (const auto& [s, n] : l.errors) {
        p.errors[s] += n;
      }
      if (p.first_error.empty()) {
        p.first_error = l.first_error;
      }
      p.reconnects += std::max(0, l.connects - 1);
      p.accepted += static_cast<int64_t>(l.accepted.size());
    }
    std::sort(all.begin(), all.end());
    p.ok = static_cast<int64_t>(all.size());
    p.rate_per_s = seconds > 0 ? static_cast<double>(p.ok) / seconds : 0;
    p.p50_ms = percentile(all, 0.50);
    p.p99_ms = percentile(all, 0.99);
    p.max_ms = all.empty() ? 0 : all.back();
    return p;
  }

  void submitPhase(int clients) {
    std::vector<ClientLog> logs;
    PhaseResult p = measure("submit", load_.name, clients,
                            submit(load_, fmt::format("p{}s{}", ++submit_phases_, clients)), &logs);
    std::vector<std::pair<std::string, SteadyClock::time_point>> accepted;
    for (const ClientLog& l : logs) {
      accepted.insert(accepted.end(), l.accepted.begin(), l.accepted.end());
    }
    std::sort(accepted.begin(), accepted.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    p.drain = drain(load_.name, accepted, phase_began_);
    results_.push_back(p);
    settle(load_.name, accepted);
  }

  // Polls a sample of the accepted workloads (evenly spread, always the last one) with the root
  // token (its own rate bucket) until each is running or succeeded.
  Drain drain(const std::string& tenant,
              const std::vector<std::pair<std::string, SteadyClock::time_point>>& accepted,
              SteadyClock::time_point began) {
    Drain d;
    if (accepted.empty()) {
      return d;
    }
    std::vector<std::string> sample;
    const size_t n = std::min(accepted.size(), static_cast<size_t>(std::max(1, options_.sample)));
    for (size_t i = 0; i < n; ++i) {
      const size_t idx = n == 1 ? accepted.size() - 1 : i * (accepted.size() - 1) / (n - 1);
      sample.push_back(accepted[idx].first);
    }
    d.sampled = static_cast<int>(sample.size());
    const int pollers = static_cast<int>(std::min<size_t>(4, sample.size()));
    std::vector<SteadyClock::time_point> seen(pollers, SteadyClock::time_point{});
    std::vector<int> scheduled(pollers, 0), failed(pollers, 0);
    std::atomic<bool> timed_out{false};
    const auto deadline =
        SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                 std::chrono::duration<double>(options_.drain_timeout_s));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(pollers));
    for (int k = 0; k < pollers; ++k) {
      threads.emplace_back([&, k] {
        Connection conn(dev_);
        std::vector<std::string> mine;
        for (size_t i = static_cast<size_t>(k); i < sample.size(); i += pollers) {
          mine.push_back(sample[i]);
        }
        while (!mine.empty()) {
          if (SteadyClock::now() > deadline) {
            timed_out = true;
            return;
          }
          std::vector<std::string> left;
          for (const std::string& name : mine) {
            const Reply r = conn.call({"GET", workloadPath(tenant, name), dev_.root_token, "", ""});
            const json j = json::parse(r.body, nullptr, false);
            const std::string phase =
                r.status == 200 && j.is_object() ? j["data"]["status"].value("phase", "") : "";
            if (phase == "running" || phase == "succeeded") {
              ++scheduled[k];
              seen[k] = std::max(seen[k], SteadyClock::now());
            } else if (phase == "failed" || phase == "cancelled") {
              ++failed[k];
            } else {
              left.push_back(name);
              if (r.status != 200) {
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
              }
            }
          }
          mine = std::move(left);
        }
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
    SteadyClock::time_point last_seen{};
    for (int k = 0; k < pollers; ++k) {
      d.scheduled += scheduled[k];
      d.failed += failed[k];
      last_seen = std::max(last_seen, seen[k]);
    }
    d.timed_out = timed_out;
    if (!d.timed_out && d.scheduled > 0) {
      d.after_last_s = secondsBetween(accepted.back().second, last_seen);
      d.e2e_per_s = static_cast<double>(accepted.size()) / secondsBetween(began, last_seen);
    }
    return d;
  }

  // Lets the submitted workloads finish (the scheduler's store writes for them would otherwise
  // load the next phase): waits until the last accepted one has succeeded, then a moment more.
  void settle(const std::string& tenant,
              const std::vector<std::pair<std::string, SteadyClock::time_point>>& accepted) {
    if (accepted.empty()) {
      return;
    }
    const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
    while (SteadyClock::now() < deadline) {
      const Reply r = admin_.call(
          {"GET", workloadPath(tenant, accepted.back().first), dev_.root_token, "", ""});
      const json j = json::parse(r.body, nullptr, false);
      if (r.status == 200 && j.is_object() && j["data"]["status"].value("phase", "") != "pending" &&
          j["data"]["status"].value("phase", "") != "running") {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }

  // A JSON object of about `bytes` bytes, of many small members (what a client might send, and
  // costly to parse: nlohmann::json builds a node for each).
  static std::string jsonBody(size_t bytes) {
    std::string out = R"({"items": [)";
    for (int i = 0; out.size() + 40 < bytes; ++i) {
      out += fmt::format(R"({}{{"id": {}, "name": "item-{:06}"}})", i == 0 ? "" : ", ", i, i);
    }
    return out + "]}";
  }

  void noisyPhase() {
    const Generator quiet = getOne(quiet_.token, quiet_.target);
    PhaseResult alone = measure("quiet alone", "quiet", 1, quiet, nullptr, options_.quiet_rate);
    results_.push_back(alone);
    // The flood: every Nth request a submission, the rest GETs of demo's workload (with a body
    // of --flood-body-bytes, which a GET does not read).
    Generator get = getOne(flood_.token, flood_.target);
    if (options_.flood_body_bytes > 0) {
      auto body = std::make_shared<const std::string>(
          options_.flood_kv ? R"({"data": )" + jsonBody(options_.flood_body_bytes) + "}"
                            : jsonBody(options_.flood_body_bytes));
      const std::string kv = "/v1/tenants/" + flood_.name + "/secrets/kv/data/" + tag_ + "-flood-";
      get = [get, body, kv, to_kv = options_.flood_kv](int c, uint64_t seq) {
        Request r = get(c, seq);
        if (to_kv) {
          r.method = "POST";
          r.target = kv + std::to_string(c) + "-" + std::to_string(seq);
        }
        r.body = *body;
        return r;
      };
    }
    const Generator sub = submit(flood_, "flood");
    const int every = options_.flood_submit_every;
    Load flood(
        dev_, options_.noisy_clients, threadsFor(options_.noisy_clients),
        [get, sub, every](int c, uint64_t seq) {
          return every > 0 && seq % static_cast<uint64_t>(every) == 0 ? sub(c, seq) : get(c, seq);
        },
        pace(options_.flood_rate > 0 ? options_.flood_rate / options_.noisy_clients : 0));
    std::cerr << fmt::format("  flood ({}, {} clients) starts\n", flood_.name,
                             options_.noisy_clients);
    flood.begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    PhaseResult loaded =
        measure("quiet under flood", "quiet", 1, quiet, nullptr, options_.quiet_rate);
    std::vector<ClientLog> flood_logs = flood.stop();
    std::string flood_name = every > 0 ? fmt::format("flood (1/{} submit)", every) : "flood (GETs)";
    if (options_.flood_body_bytes > 0) {
      flood_name =
          fmt::format("flood ({}, {} KiB bodies)", options_.flood_kv ? "KV writes" : "GETs",
                      options_.flood_body_bytes / 1024);
    }
    PhaseResult f = summarize(flood_name, flood_.name, options_.noisy_clients,
                              flood.elapsedSeconds(), flood_logs);
    results_.push_back(loaded);
    results_.push_back(f);
    const double ratio = alone.p99_ms > 0 ? loaded.p99_ms / alone.p99_ms : 0;
    noisy_ = json{{"quiet_p99_alone_ms", alone.p99_ms},
                  {"quiet_p99_under_flood_ms", loaded.p99_ms},
                  {"ratio", ratio},
                  {"target_ratio", 2.0},
                  {"met", ratio > 0 && ratio <= 2.0}};
    std::vector<std::pair<std::string, SteadyClock::time_point>> accepted;
    for (const ClientLog& l : flood_logs) {
      accepted.insert(accepted.end(), l.accepted.begin(), l.accepted.end());
    }
    std::sort(accepted.begin(), accepted.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    settle(flood_.name, accepted);
  }

  const DevInfo& dev_;
  Options options_;
  Connection admin_;  // Set-up, metrics and polling from the main thread.
  std::string tag_;   // Makes this run's workload names unique on a reused server.
  Tenant load_;       // Submissions and GETs: admission limits out of the way.
  Tenant flood_;      // The noisy neighbour: the demo tenant, with the server's default limits.
  Tenant quiet_;      // Its victim.
  SteadyClock::time_point phase_began_{};
  int submit_phases_ = 0;  // Numbers the submission phases: their workload names differ.
  std::vector<PhaseResult> results_;
  std::optional<json> noisy_;
};

std::string ms(double v) { return v < 0 ? "-" : fmt::format("{:.2f}", v); }

void printTable(const std::vector<PhaseResult>& results, const std::optional<json>& noisy) {
  std::cout << fmt::format(
      "{:<22} {:<6} {:>7} {:>8} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6} "
      "{:>9} {:>7} {:>7}\n",
      "phase", "tenant", "clients", "ok", "ok/s", "p50 ms", "p99 ms", "max ms", "429rate", "429cap",
      "errors", "srv ms/r", "srv cpu", "bench");
  for (const PhaseResult& p : results) {
    int64_t errors = 0;
    for (const auto& [s, n] : p.errors) {
      errors += n;
    }
    std::cout << fmt::format(
        "{:<22} {:<6} {:>7} {:>8} {:>9.1f} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6} {:>9} {:>7} "
        "{:>7}\n",
        p.name, p.tenant, p.clients, p.ok, p.rate_per_s, ms(p.p50_ms), ms(p.p99_ms), ms(p.max_ms),
        p.rate_limited, p.pending_cap + p.stored_cap, errors, ms(p.server_handler_ms),
        p.server_cpu < 0 ? "-" : fmt::format("{:.0f}%", p.server_cpu * 100),
        p.bench_cpu < 0 ? "-" : fmt::format("{:.0f}%", p.bench_cpu * 100));
    if (p.drain) {
      const Drain& d = *p.drain;
      if (d.timed_out || d.scheduled == 0) {
        std::cout << fmt::format("    end to end: {} accepted; {} of {} sampled seen scheduled{}\n",
                                 p.accepted, d.scheduled, d.sampled,
                                 d.timed_out ? " before the drain timeout" : "");
      } else {
        std::cout << fmt::format(
            "    end to end: {} accepted in {:.2f} s; all {} sampled scheduled {:.2f} s after the "
            "last 202 ({} failed): {:.1f}/s accepted, stored and scheduled\n",
            p.accepted, p.seconds, d.sampled, d.after_last_s, d.failed, d.e2e_per_s);
      }
    }
    if (p.too_large > 0) {
      std::cout << fmt::format("    {} refused with 413 (a body the route does not take)\n",
                               p.too_large);
    }
    if (!p.first_error.empty()) {
      std::cout << "    first error: " << p.first_error.substr(0, 200) << "\n";
    }
  }
  if (noisy) {
    std::cout << fmt::format(
        "noisy neighbour: quiet's p99 {:.2f} ms alone, {:.2f} ms under the flood: {:.2f}x "
        "(target <= 2x: {})\n",
        (*noisy)["quiet_p99_alone_ms"].get<double>(),
        (*noisy)["quiet_p99_under_flood_ms"].get<double>(), (*noisy)["ratio"].get<double>(),
        (*noisy)["met"].get<bool>() ? "met" : "missed");
  }
}

// The issue's targets against what was measured.
json targets(const std::vector<PhaseResult>& results, const std::optional<json>& noisy) {
  double best_accept = -1, best_e2e = -1, worst_get_p99 = -1;
  for (const PhaseResult& p : results) {
    if (p.name == "submit") {
      best_accept = std::max(best_accept, p.rate_per_s);
      if (p.drain) {
        best_e2e = std::max(best_e2e, p.drain->e2e_per_s);
      }
    }
    if (p.name == "get") {
      worst_get_p99 = std::max(worst_get_p99, p.p99_ms);
    }
  }
  json t = json::object();
  if (best_accept >= 0) {
    t["submissions_per_s"] = {{"target", 2000},
                              {"best_accepted", best_accept},
                              {"best_end_to_end", best_e2e},
                              {"met", best_accept >= 2000 && best_e2e >= 2000}};
  }
  if (worst_get_p99 >= 0) {
    t["get_p99_ms"] = {{"target", 5}, {"worst", worst_get_p99}, {"met", worst_get_p99 < 5}};
  }
  if (noisy) {
    t["noisy_neighbour_ratio"] = {
        {"target", 2}, {"measured", (*noisy)["ratio"]}, {"met", (*noisy)["met"]}};
  }
  return t;
}

void printTargets(const json& t) {
  if (t.contains("submissions_per_s")) {
    const json& s = t["submissions_per_s"];
    std::cout << fmt::format(
        "target >= 2000 submissions/s: {} (best {:.0f}/s accepted, {:.0f}/s end to end)\n",
        s["met"].get<bool>() ? "met" : "missed", s["best_accepted"].get<double>(),
        s["best_end_to_end"].get<double>());
  }
  if (t.contains("get_p99_ms")) {
    const json& g = t["get_p99_ms"];
    std::cout << fmt::format("target GET p99 < 5 ms: {} (worst {:.2f} ms)\n",
                             g["met"].get<bool>() ? "met" : "missed", g["worst"].get<double>());
  }
  if (t.contains("noisy_neighbour_ratio")) {
    const json& n = t["noisy_neighbour_ratio"];
    std::cout << fmt::format("target quiet p99 <= 2x unloaded: {} ({:.2f}x)\n",
                             n["met"].get<bool>() ? "met" : "missed", n["measured"].get<double>());
  }
}

std::string defaultTesseraBinary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return "tessera";
  }
  return (self.parent_path().parent_path() / "tessera").string();
}

int run(int argc, char** argv) {
  CLI::App app{
      "Load generator for the Tessera API: submissions end to end, GET latency and a noisy "
      "neighbour, over persistent HTTPS connections on loopback.",
      "api_bench"};
  std::string tessera = defaultTesseraBinary();
  std::string dev_json;
  std::string work_dir = fs::temp_directory_path().string();
  std::string nodes;
  std::string durable_answers = "secrets";
  std::string out;
  std::string clients_text = "1,16";
  std::string phases_text = "submit,get,noisy";
  bool keep = false;
  Bench::Options o;
  app.add_option("--tessera", tessera, "The tessera binary to start as `tessera dev`")
      ->capture_default_str();
  app.add_option("--dev-json", dev_json,
                 "Use the server this dev.json describes instead of starting one");
  app.add_option("--work-dir", work_dir,
                 "Where the started server's data directory goes (its disk decides fsync costs)")
      ->capture_default_str();
  app.add_option("--nodes", nodes, "--nodes for tessera dev (default: its own)");
  app.add_option("--audit-durable-answers", durable_answers,
                 "--audit-durable-answers for tessera dev: whether every answer waits for the "
                 "audit log's disk flush (all) or only one that reveals secrets (secrets)")
      ->capture_default_str()
      ->check(CLI::IsMember({"secrets", "all"}));
  app.add_option("--clients", clients_text, "Concurrent clients per phase, comma-separated")
      ->capture_default_str();
  app.add_option("--seconds", o.seconds, "Length of each phase")->capture_default_str();
  app.add_option("--phases", phases_text, "Which phases: submit, get, noisy")
      ->capture_default_str();
  app.add_option("--noisy-clients", o.noisy_clients, "Clients of tenant demo in the flood")
      ->capture_default_str();
  app.add_option("--backoff-ms", o.backoff_ms,
                 "A client's pause after a 429 (1000: like one that honours Retry-After)")
      ->capture_default_str()
      ->check(CLI::Range(0, 60000));
  app.add_option("--quiet-rate", o.quiet_rate,
                 "Requests/s of the quiet tenant's client (0: back to back, which is not quiet: "
                 "on a fast disk one client exceeds a tenant's 1000/s)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100000.0));
  app.add_option("--flood-body-bytes", o.flood_body_bytes,
                 "Each flood GET carries a JSON body of about this many bytes (0: none)")
      ->capture_default_str();
  app.add_option("--flood-rate", o.flood_rate,
                 "Requests/s of the whole flood, shared by its clients (0: back to back)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000000.0));
  app.add_flag("--flood-kv", o.flood_kv,
               "With --flood-body-bytes: the flood writes its bodies as KV secrets (a route that "
               "reads them) instead of sending them on GETs");
  app.add_option("--flood-submit-every", o.flood_submit_every,
                 "Every Nth flood request is a submission, the others GETs (0: GETs only)")
      ->capture_default_str();
  app.add_option("--client-threads", o.client_threads,
                 "Threads a phase's clients share, each running an event loop over its share of "
                 "the connections, like wrk's (0: one thread per client)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--sample", o.sample, "Accepted workloads polled for the end-to-end time")
      ->capture_default_str();
  app.add_option("--load-tenant", o.load_tenant,
                 "Tenant of the submit and get phases (created without admission limits)")
      ->capture_default_str();
  app.add_option("--spec", o.spec, "The workload submitted")->capture_default_str();
  app.add_option("--out", out, "Also write the results as JSON to this file");
  app.add_flag("--idempotency-keys", o.idempotency_keys,
               "Submissions carry an Idempotency-Key header (as the tessera CLI's and API "
               "client's changes do): the cost of the server's record of each");
  app.add_flag("--keep", keep, "Keep the started server's data directory (audit log, store)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  o.clients.clear();
  for (const std::string& c : CLI::detail::split(clients_text, ',')) {
    try {
      o.clients.push_back(std::stoi(c));
    } catch (const std::exception&) {
      std::cerr << "error: --clients: '" << c << "' is not a number\n";
      return 2;
    }
    if (o.clients.back() < 1 || o.clients.back() > 1024) {
      std::cerr << "error: --clients: " << c << " is outside 1..1024\n";
      return 2;
    }
  }
  o.phases = CLI::detail::split(phases_text, ',');
  for (const std::string& p : o.phases) {
    if (p != "submit" && p != "get" && p != "noisy") {
      std::cerr << "error: --phases: unknown phase '" << p << "' (submit, get, noisy)\n";
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<DevServer> server;
  fs::path data_dir;
  std::string error;
  if (dev_json.empty()) {
    std::string pattern = (fs::path(work_dir) / "tessera-api-bench-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "error: cannot create a directory in " << work_dir << "\n";
      return 1;
    }
    data_dir = pattern;
    // Simulated nodes: this measures the API; agents would run every submission as a process.
    server = DevServer::start(tessera, data_dir, nodes, /*simulated=*/true, &error,
                              {"--audit-durable-answers", durable_answers});
    if (server == nullptr) {
      std::cerr << "error: " << error << "\n";
      fs::remove_all(data_dir);
      return 1;
    }
    dev_json = (data_dir / "dev.json").string();
  }
  const std::optional<DevInfo> dev = readDevJson(dev_json, &error);
  if (!dev) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  std::cerr << fmt::format("server https://{}:{} (pid {}){}\n", dev->host, dev->port, dev->pid,
                           data_dir.empty() ? "" : ", data in " + data_dir.string());
  Bench bench(*dev, o);
  const bool ok = bench.run();
  int server_exit = 0;
  if (server != nullptr) {
    server_exit = server->stop();
    if (!keep) {
      fs::remove_all(data_dir);
    }
  }
  if (!ok) {
    return 1;
  }
  printTable(bench.results(), bench.noisy());
  const json t = targets(bench.results(), bench.noisy());
  printTargets(t);
  if (server_exit != 0) {
    std::cerr << "warning: the server exited with " << server_exit << "\n";
  }
  if (!out.empty()) {
    json j = {{"config",
               {{"clients", o.clients},
                {"seconds", o.seconds},
                {"noisy_clients", o.noisy_clients},
                {"flood_submit_every", o.flood_submit_every},
                {"flood_body_bytes", o.flood_body_bytes},
                {"flood_rate_per_s", o.flood_rate},
                {"flood_kv", o.flood_kv},
                {"backoff_ms", o.backoff_ms},
                {"quiet_rate_per_s", o.quiet_rate},
                {"sample", o.sample},
                {"spec", json::parse(o.spec, nullptr, false)},
                {"nodes", nodes},
                {"audit_durable_answers", server != nullptr ? durable_answers : ""},
                {"server", server != nullptr ? "started: tessera dev" : "dev.json " + dev_json},
                {"work_dir", server != nullptr ? work_dir : ""},
                {"hardware_threads", std::thread::hardware_concurrency()}}},
              {"phases", json::array()},
              {"targets", t}};
    for (const PhaseResult& p : bench.results()) {
      j["phases"].push_back(toJson(p));
    }
    if (bench.noisy()) {
      j["noisy_neighbour"] = *bench.noisy();
    }
    std::ofstream f(out);
    f << j.dump(2) << "\n";
    if (!f) {
      std::cerr << "error: cannot write " << out << "\n";
      return 1;
    }
  }
  // Missed targets are results; requests that failed mean the numbers are not to be trusted.
  for (const PhaseResult& p : bench.results()) {
    if ((p.ok == 0 && p.too_large == 0) || !p.errors.empty() ||
        (p.drain && (p.drain->timed_out || p.drain->failed > 0))) {
      std::cerr << "error: phase '" << p.name << "' (" << p.clients
                << " clients) had failed requests, no successful one, or workloads that were "
                   "never scheduled; see the table\n";
      return 3;
    }
  }
  return 0;
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
