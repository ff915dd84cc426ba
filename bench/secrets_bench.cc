// Secrets throughput (issue #6): KV reads and writes per second through the API, and how fast the
// lease expiry manager clears a pile of leases that are all due at once.
//
//   build/bench/secrets_bench                    # starts `build/tessera dev --simulated`
//   build/bench/secrets_bench --clients 16 --seconds 5 --leases 100000 --out secrets.json
//
// Phase 1, KV through the API: `tessera dev --simulated` in a temp dir, tenant demo (its token
// from dev.json). --keys keys are written first (bench/k<i>, one field of --value-bytes random
// characters); then --clients threads, each with its own TLS keep-alive connection (connected
// before the clock starts), PUT new versions of random keys for --seconds, and then GET random
// keys for --seconds. Reported per phase: 200 answers per second, p50/p99/max latency, and any
// other answer as an error (the first one printed). The demo tenant's request limits (1000/s by
// default) are raised first with the root token, since the targets are about the secrets path,
// not the per-tenant rate limiter; --default-limits keeps them.
//
// Phase 2, lease expiry, in this process without a server: a SqliteStore in the temp dir gets
// --leases lease records written directly (kind "noop", expired a second ago), by 8 threads in
// transactions of store::kMaxTxnOps puts (set-up, not measured). Then what a restarting server
// does is timed: LeaseManager::open (loads every record), and tick() until every lease was
// revoked by a revoker that only counts its calls. Checked: one call per lease, and no /leases/
// record left in the store.
//
// Targets: reads >= 5,000/s, writes >= 1,000/s with 16 clients; 100,000 expirations within 30 s
// (load + tick). Exit status: 0 when everything ran cleanly, whether or not the targets were met;
// 1 when something failed (set-up, a request answered other than 200, a check of phase 2);
// 2 for bad options.
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <latch>
#include <mutex>
#include <random>

#include "core/clock.h"
#include "dev_harness.h"
#include "secrets/leases.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace tessera::bench {
namespace {

constexpr double kReadsTarget = 5000;      // Per second.
constexpr double kWritesTarget = 1000;     // Per second.
constexpr double kExpiryTargetS = 30;      // For all the leases, load + tick.
constexpr int kLeaseWriterThreads = 8;     // Set-up of phase 2.
constexpr int64_t kProgressEvery = 10000;  // Leases written between progress lines.

double secondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

std::string randomChars(std::mt19937_64& rng, size_t n) {
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string s(n, ' ');
  for (char& c : s) {
    c = kAlphabet[pick(rng)];
  }
  return s;
}

struct Options {
  std::string tessera;
  int clients = 16;
  double seconds = 5;
  int keys = 1000;
  int64_t leases = 100000;
  size_t value_bytes = 64;
  bool default_limits = false;
};

// ---------------------------------------------------------------------------------------------
// Phase 1: KV through the API.

struct PhaseResult {
  std::string name;
  int clients = 0;
  double seconds = 0;
  int64_t ok = 0;
  double per_s = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  int64_t errors = 0;
  std::string first_error;
};

json toJson(const PhaseResult& p) {
  return {{"clients", p.clients}, {"seconds", p.seconds}, {"ok", p.ok},
          {"per_s", p.per_s},     {"p50_ms", p.p50_ms},   {"p99_ms", p.p99_ms},
          {"max_ms", p.max_ms},   {"errors", p.errors},   {"first_error", p.first_error}};
}

class KvBench {
 public:
  KvBench(const DevInfo& dev, const Options& o) : dev_(dev), o_(o) {}

  // Raises the tenant's request limits (unless --default-limits) and writes every key once.
  bool setUp(std::string* error) {
    Connection admin(dev_);
    if (!o_.default_limits) {
      const Reply r = admin.call({"POST", "/v1/tenants/" + dev_.tenant, dev_.root_token,
                                  R"({"request_rate": 10000000, "request_burst": 10000000,
                                      "request_concurrency": 4096})",
                                  ""});
      if (r.status != 204) {
        *error = fmt::format("raising tenant {}'s request limits: {} {}{}", dev_.tenant, r.status,
                             r.body, r.error);
        return false;
      }
    }
    const auto t0 = SteadyClock::now();
    const int threads = std::min(o_.clients, o_.keys);
    std::vector<std::unique_ptr<Connection>> conns;
    for (int i = 0; i < threads; ++i) {
      conns.push_back(std::make_unique<Connection>(dev_));
      if (!conns.back()->connect(error)) {
        return false;
      }
    }
    std::mutex mu;
    std::string failure;  // Guarded by mu.
    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(threads));
    for (int w = 0; w < threads; ++w) {
      workers.emplace_back([&, w] {
        std::mt19937_64 rng(static_cast<uint64_t>(w) + 1);
        for (int k = w; k < o_.keys; k += threads) {
          const Request req = write(k, rng);
          const Reply r = conns[static_cast<size_t>(w)]->call(req);
          if (r.status != 200) {
            std::lock_guard lock(mu);
            if (failure.empty()) {
              failure = describe(req, r);
            }
            return;
          }
        }
      });
    }
    for (std::thread& t : workers) {
      t.join();
    }
    if (!failure.empty()) {
      *error = "writing the keys: " + failure;
      return false;
    }
    prefill_s_ = secondsSince(t0);
    std::cerr << fmt::format("  {} keys written in {:.2f} s\n", o_.keys, prefill_s_);
    return true;
  }

  // --clients threads sending back to back for --seconds; `writes` chooses PUT or GET.
  std::optional<PhaseResult> measure(bool writes) {
    PhaseResult res;
    res.name = writes ? "writes" : "reads";
    res.clients = o_.clients;
    std::vector<std::unique_ptr<Connection>> conns;
    for (int i = 0; i < o_.clients; ++i) {
      conns.push_back(std::make_unique<Connection>(dev_));
      std::string error;
      if (!conns.back()->connect(&error)) {
        std::cerr << "error: " << error << "\n";
        return std::nullopt;
      }
    }
    struct Log {
      std::vector<double> latency_ms;  // Of 200 answers.
      int64_t errors = 0;
      std::string first_error;
    };
    std::vector<Log> logs(static_cast<size_t>(o_.clients));
    std::latch go(1);
    const auto length = std::chrono::duration_cast<SteadyClock::duration>(
        std::chrono::duration<double>(o_.seconds));
    SteadyClock::time_point t0;
    std::vector<std::thread> workers;
    workers.reserve(static_cast<size_t>(o_.clients));
    for (int c = 0; c < o_.clients; ++c) {
      workers.emplace_back([&, c] {
        const auto index = static_cast<size_t>(c);
        Log& log = logs[index];
        std::mt19937_64 rng(0x5ec7e75ULL * (static_cast<uint64_t>(c) + 1) + (writes ? 1 : 0));
        std::uniform_int_distribution<int> key(0, o_.keys - 1);
        go.wait();
        const auto deadline = t0 + length;
        while (SteadyClock::now() < deadline) {
          const int k = key(rng);
          const Request req = writes ? write(k, rng) : read(k);
          const auto sent = SteadyClock::now();
          const Reply r = conns[index]->call(req);
          const double ms =
              std::chrono::duration<double, std::milli>(SteadyClock::now() - sent).count();
          if (r.status == 200) {
            log.latency_ms.push_back(ms);
          } else {
            ++log.errors;
            if (log.first_error.empty()) {
              log.first_error = describe(req, r);
            }
          }
        }
      });
    }
    t0 = SteadyClock::now();
    go.count_down();
    for (std::thread& t : workers) {
      t.join();
    }
    res.seconds = secondsSince(t0);
    std::vector<double> all;
    for (Log& log : logs) {
      all.insert(all.end(), log.latency_ms.begin(), log.latency_ms.end());
      res.errors += log.errors;
      if (res.first_error.empty()) {
        res.first_error = log.first_error;
      }
    }
    res.ok = static_cast<int64_t>(all.size());
    res.per_s = res.seconds > 0 ? static_cast<double>(res.ok) / res.seconds : 0;
    res.p50_ms = percentile(all, 50);
    res.p99_ms = percentile(all, 99);
    res.max_ms = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
    return res;
  }

  double prefillSeconds() const { return prefill_s_; }

 private:
  std::string path(int key) const {
    return fmt::format("/v1/tenants/{}/secrets/kv/data/bench/k{}", dev_.tenant, key);
  }
  Request write(int key, std::mt19937_64& rng) const {
    const json body = {{"data", {{"v", randomChars(rng, o_.value_bytes)}}}};
    return {"PUT", path(key), dev_.tenant_token, body.dump(), ""};
  }
  Request read(int key) const { return {"GET", path(key), dev_.tenant_token, "", ""}; }
  static std::string describe(const Request& req, const Reply& r) {
    return req.method + " " + req.target + " -> " +
           (r.status == 0 ? r.error : std::to_string(r.status) + " " + r.body.substr(0, 300));
  }

  const DevInfo& dev_;
  const Options& o_;
  double prefill_s_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Phase 2: lease expiry in process.

// Revokes nothing; counts its calls.
class CountingRevoker final : public secrets::Revoker {
 public:
  core::Status revoke(const secrets::Lease& lease) override {
    (void)lease;
    calls_.fetch_add(1, std::memory_order_relaxed);
    return core::Status::ok();
  }
  int64_t calls() const { return calls_.load(); }

 private:
  std::atomic<int64_t> calls_{0};
};

struct ExpiryResult {
  int64_t leases = 0;
  double write_s = 0;  // Set-up.
  double load_s = 0;
  double tick_s = 0;
  int ticks = 0;
  int64_t expired = 0;  // What tick() reported finished.
  int64_t revoker_calls = 0;
  int64_t records_left = 0;
  size_t manager_left = 0;
  double totalSeconds() const { return load_s + tick_s; }
  double perSecond() const {
    return totalSeconds() > 0 ? static_cast<double>(expired) / totalSeconds() : 0;
  }
  bool clean() const {
    return expired == leases && revoker_calls == leases && records_left == 0 && manager_left == 0;
  }
};

// Writes `count` expired leases straight into the store, from several threads.
core::Status writeLeases(store::Store& store, core::WallTime now, int64_t count) {
  std::atomic<int64_t> next_batch{0};
  std::atomic<int64_t> written{0};
  std::mutex mu;
  core::Status failure;  // Guarded by mu.
  const auto batch = static_cast<int64_t>(store::kMaxTxnOps);
  std::vector<std::thread> workers;
  workers.reserve(kLeaseWriterThreads);
  for (int w = 0; w < kLeaseWriterThreads; ++w) {
    workers.emplace_back([&] {
      for (;;) {
        const int64_t from = next_batch.fetch_add(1) * batch;
        if (from >= count) {
          return;
        }
        {
          std::lock_guard lock(mu);
          if (!failure.isOk()) {
            return;
          }
        }
        const int64_t to = std::min(count, from + batch);
        store::Txn txn;
        txn.success.reserve(static_cast<size_t>(to - from));
        for (int64_t i = from; i < to; ++i) {
          secrets::Lease l;
          l.id = fmt::format("bench/x/{:x}", i);
          l.tenant = "demo";
          l.kind = "noop";
          l.issued = now - std::chrono::hours(1);
          l.expires = now - std::chrono::seconds(1);
          l.max_expires = now + std::chrono::hours(1);
          l.state = secrets::LeaseState::kActive;
          // The key the manager derives from tenant and id, so that it finds and deletes it.
          txn.success.push_back(
              store::Op::put("/leases/" + l.tenant + "/" + l.id, l.toJson().dump()));
        }
        auto r = store.txn(std::move(txn));
        if (!r.isOk()) {
          std::lock_guard lock(mu);
          if (failure.isOk()) {
            failure = r.status();
          }
          return;
        }
        const int64_t done = written.fetch_add(to - from) + (to - from);
        if (done / kProgressEvery != (done - (to - from)) / kProgressEvery || done == count) {
          std::lock_guard lock(mu);
          std::cerr << fmt::format("  {} / {} leases written\n", done, count);
        }
      }
    });
  }
  for (std::thread& t : workers) {
    t.join();
  }
  return failure;
}

std::optional<ExpiryResult> expiryPhase(const fs::path& dir, int64_t count) {
  ExpiryResult res;
  res.leases = count;
  core::RealClock clock;
  store::SqliteStoreOptions options;
  options.lease_check_interval = std::chrono::milliseconds(0);  // No store leases here.
  const std::string db = (dir / "leases.db").string();
  auto opened = store::SqliteStore::open(db, options, clock);
  if (!opened.isOk()) {
    std::cerr << "error: opening " << db << ": " << opened.status().toString() << "\n";
    return std::nullopt;
  }
  std::unique_ptr<store::Store> store = std::move(opened).value();

  auto t0 = SteadyClock::now();
  if (core::Status st = writeLeases(*store, clock.wallNow(), count); !st.isOk()) {
    std::cerr << "error: writing the lease records: " << st.toString() << "\n";
    return std::nullopt;
  }
  res.write_s = secondsSince(t0);
  std::cerr << fmt::format("  {} lease records written in {:.2f} s (set-up, not measured)\n", count,
                           res.write_s);

  CountingRevoker revoker;
  t0 = SteadyClock::now();
  auto manager = secrets::LeaseManager::open(*store, clock, {});
  if (!manager.isOk()) {
    std::cerr << "error: LeaseManager::open: " << manager.status().toString() << "\n";
    return std::nullopt;
  }
  res.load_s = secondsSince(t0);
  std::unique_ptr<secrets::LeaseManager> m = std::move(manager).value();
  m->setRevoker("noop", &revoker);
  std::cerr << fmt::format("  {} leases loaded in {:.2f} s; expiring them\n", m->count(),
                           res.load_s);
  t0 = SteadyClock::now();
  while (res.expired < count) {
    auto n = m->tick();
    ++res.ticks;
    if (!n.isOk()) {
      std::cerr << "error: LeaseManager::tick: " << n.status().toString() << "\n";
      return std::nullopt;
    }
    if (*n == 0) {
      break;  // Nothing more due: the checks below say what is missing.
    }
    res.expired += static_cast<int64_t>(*n);
  }
  res.tick_s = secondsSince(t0);
  res.revoker_calls = revoker.calls();
  res.manager_left = m->count();
  auto left = store->range("/leases/", store::prefixEnd("/leases/"), 1);
  if (!left.isOk()) {
    std::cerr << "error: reading /leases/ afterwards: " << left.status().toString() << "\n";
    return std::nullopt;
  }
  res.records_left = left->count;
  return res;
}

json toJson(const ExpiryResult& r) {
  return {{"leases", r.leases},
          {"write_seconds", r.write_s},
          {"load_seconds", r.load_s},
          {"tick_seconds", r.tick_s},
          {"total_seconds", r.totalSeconds()},
          {"ticks", r.ticks},
          {"expired", r.expired},
          {"expirations_per_s", r.perSecond()},
          {"revoker_calls", r.revoker_calls},
          {"records_left", r.records_left},
          {"manager_left", r.manager_left}};
}

// ---------------------------------------------------------------------------------------------

std::string defaultTesseraBinary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return "tessera";
  }
  return (self.parent_path().parent_path() / "tessera").string();
}

const char* met(bool b) { return b ? "MET" : "NOT MET"; }

// Stops the server (if any) and removes the run's directory (unless kept) on every way out.
struct RunDir {
  fs::path path;
  bool keep = false;
  std::unique_ptr<DevServer> server;
  RunDir() = default;
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  ~RunDir() {
    server.reset();
    if (!path.empty() && !keep) {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  }
};

int run(int argc, char** argv) {
  CLI::App app{
      "Secrets benchmark (issue #6): KV reads and writes per second through the API, and lease "
      "expirations per second with every lease due at once.",
      "secrets_bench"};
  Options o;
  o.tessera = defaultTesseraBinary();
  std::string work_dir = fs::temp_directory_path().string();
  std::string out;
  bool keep = false;
  app.add_option("--tessera", o.tessera, "The tessera binary to start as `tessera dev`")
      ->capture_default_str();
  app.add_option("--clients", o.clients, "Concurrent API clients in the KV phases")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--seconds", o.seconds, "Length of each KV phase")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
  app.add_option("--keys", o.keys,
                 "KV keys written first, then read and rewritten at random (at most the "
                 "tenant's max_secrets: 10,000 unless the server's limits say otherwise)")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--leases", o.leases, "Leases due at once in the expiry phase")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  app.add_option("--value-bytes", o.value_bytes, "Size of each KV value")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1024} * 1024));
  app.add_flag("--default-limits", o.default_limits,
               "Keep the tenant's default request limits (1000/s) instead of raising them");
  app.add_option("--work-dir", work_dir,
                 "Where this run's temporary directory (server data, lease store) is created; "
                 "its disk decides fsync costs")
      ->capture_default_str();
  app.add_flag("--keep", keep, "Keep this run's temporary directory");
  app.add_option("--out", out, "Also write the results as JSON to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);

  if (access(o.tessera.c_str(), X_OK) != 0) {
    std::cerr << "error: --tessera " << o.tessera
              << " is not an executable (build it: ninja -C build tessera)\n";
    return 1;
  }
  RunDir dir;
  std::string pattern = (fs::path(work_dir) / "tessera-secrets-bench-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    std::cerr << "error: cannot create a directory in " << work_dir << "\n";
    return 1;
  }
  dir.path = pattern;
  dir.keep = keep;
  std::cerr << "work dir " << dir.path.string() << (keep ? " (kept)" : "") << "\n";

  // Phase 1.
  std::cerr << "== KV through the API\n";
  const fs::path data_dir = dir.path / "dev";
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  if (ec) {
    std::cerr << "error: cannot create " << data_dir.string() << ": " << ec.message() << "\n";
    return 1;
  }
  std::string error;
  dir.server = DevServer::start(o.tessera, data_dir, "", /*simulated=*/true, &error);
  if (dir.server == nullptr) {
    std::cerr << "error: the server did not start: " << error << "\n";
    return 1;
  }
  const std::optional<DevInfo> dev = readDevJson(data_dir / "dev.json", &error);
  if (!dev) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  if (dev->tenant_token.empty()) {
    std::cerr << "error: " << (data_dir / "dev.json").string() << " has no tenant_token\n";
    return 1;
  }
  std::cerr << fmt::format("  server https://{}:{} (pid {}), tenant {}\n", dev->host, dev->port,
                           dev->pid, dev->tenant);
  KvBench kv(*dev, o);
  if (!kv.setUp(&error)) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  std::vector<PhaseResult> phases;
  for (const bool writes : {true, false}) {
    std::cerr << fmt::format("  {}: {} clients, {} s\n", writes ? "writes" : "reads", o.clients,
                             o.seconds);
    std::optional<PhaseResult> p = kv.measure(writes);
    if (!p) {
      return 1;
    }
    phases.push_back(std::move(*p));
  }
  const int server_exit = dir.server->stop();
  if (server_exit != 0) {
    std::cerr << "warning: the server exited with " << server_exit << ": "
              << slurp(data_dir / "server.err").substr(0, 2000) << "\n";
  }

  // Phase 2, with the server gone so that it competes for nothing.
  std::cerr << fmt::format("== Lease expiry: {} leases due at once\n", o.leases);
  const std::optional<ExpiryResult> expiry = expiryPhase(dir.path, o.leases);
  if (!expiry) {
    return 1;
  }

  std::cout << fmt::format("{:<8} {:>7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>7}\n", "phase", "clients",
                           "ok", "ok/s", "p50 ms", "p99 ms", "max ms", "errors");
  for (const PhaseResult& p : phases) {
    std::cout << fmt::format("{:<8} {:>7} {:>9} {:>10.1f} {:>8.2f} {:>8.2f} {:>8.2f} {:>7}\n",
                             p.name, p.clients, p.ok, p.per_s, p.p50_ms, p.p99_ms, p.max_ms,
                             p.errors);
    if (!p.first_error.empty()) {
      std::cout << "    first error: " << p.first_error << "\n";
    }
  }
  const ExpiryResult& e = *expiry;
  std::cout << fmt::format(
      "leases: {} expired of {}: load {:.2f} s + tick {:.2f} s ({} ticks) = {:.2f} s, {:.0f} "
      "expirations/s (records written in {:.2f} s, not counted)\n",
      e.expired, e.leases, e.load_s, e.tick_s, e.ticks, e.totalSeconds(), e.perSecond(), e.write_s);
  std::cout << fmt::format(
      "    revoker calls {} (want {}), lease records left in the store {}, in the manager {}: "
      "{}\n",
      e.revoker_calls, e.leases, e.records_left, e.manager_left, e.clean() ? "ok" : "WRONG");

  const PhaseResult& writes = phases[0];
  const PhaseResult& reads = phases[1];
  const bool reads_met = reads.per_s >= kReadsTarget;
  const bool writes_met = writes.per_s >= kWritesTarget;
  const bool expiry_met = e.clean() && e.totalSeconds() < kExpiryTargetS;
  std::cout << fmt::format("target reads >= {:.0f}/s ({} clients): {} ({:.0f}/s)\n", kReadsTarget,
                           o.clients, met(reads_met), reads.per_s);
  std::cout << fmt::format("target writes >= {:.0f}/s ({} clients): {} ({:.0f}/s)\n", kWritesTarget,
                           o.clients, met(writes_met), writes.per_s);
  std::cout << fmt::format("target all {} expirations < {:.0f} s (load + tick): {} ({:.2f} s)\n",
                           e.leases, kExpiryTargetS, met(expiry_met), e.totalSeconds());

  if (!out.empty()) {
    const json j = {
        {"config",
         {{"clients", o.clients},
          {"seconds", o.seconds},
          {"keys", o.keys},
          {"leases", o.leases},
          {"value_bytes", o.value_bytes},
          {"default_limits", o.default_limits},
          {"work_dir", work_dir},
          {"hardware_threads", std::thread::hardware_concurrency()}}},
        {"kv",
         {{"prefill_seconds", kv.prefillSeconds()},
          {"writes", toJson(writes)},
          {"reads", toJson(reads)}}},
        {"leases", toJson(e)},
        {"targets",
         {{"reads_per_s",
           {{"target", kReadsTarget}, {"measured", reads.per_s}, {"met", reads_met}}},
          {"writes_per_s",
           {{"target", kWritesTarget}, {"measured", writes.per_s}, {"met", writes_met}}},
          {"expiry_seconds",
           {{"target", kExpiryTargetS}, {"measured", e.totalSeconds()}, {"met", expiry_met}}}}}};
    std::ofstream f(out);
    f << j.dump(2) << "\n";
    if (!f) {
      std::cerr << "error: cannot write " << out << "\n";
      return 1;
    }
  }

  // Missed targets are results; failed requests or checks mean the numbers are not to be trusted.
  bool failed = false;
  for (const PhaseResult& p : phases) {
    if (p.ok == 0 || p.errors > 0) {
      std::cerr << fmt::format("error: the {} phase had {} failed requests and {} successful\n",
                               p.name, p.errors, p.ok);
      failed = true;
    }
  }
  if (!e.clean()) {
    std::cerr << "error: the lease expiry phase did not revoke and remove every lease\n";
    failed = true;
  }
  return failed ? 1 : 0;
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
