#include "server/server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "audit/auditor.h"
#include "audit/crypto.h"
#include "audit/file_sink.h"
#include "core/files.h"
#include "core/hcl.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/strings.h"
#include "model/node_profiles.h"
#include "secrets/service.h"
#include "server/certs.h"
#include "server/control_plane.h"
#include "server/fenced_store.h"
#include "server/http_server.h"
#include "server/idempotency.h"
#include "server/leader.h"
#include "server/node_records.h"
#include "server/request.h"
#include "server/route.h"
#include "store/etcd_store.h"
#include "store/sqlite_store.h"

namespace tessera::server {

using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
// SIGHUP: the audit files are reopened (logrotate moved them away).
std::atomic<bool> g_reopen{false};

// A key or salt file of the server's own (the unseal key, audit salts) is its owner's alone:
// one that group or others can read is made 0600, with a warning, before it is used.
core::Status restrictKeyFile(const std::string& path, const char* what) {
  TESSERA_ASSIGN_OR_RETURN(const std::optional<unsigned> was, core::restrictToOwner(path));
  if (was) {
    std::cerr << fmt::format("warning: {} {} was mode {:04o}, readable by others; made it 0600\n",
                             what, path, *was);
  }
  return core::Status::ok();
}

struct Hooks {
  std::function<void(ControlPlane&, const std::vector<std::string>&)> ready;
  std::function<void()> stopping;  // A signal came: before the server stops answering.
};

// What a replica answers while it does not serve: while it waits for its store, and as a
// standby (docs/server.md, "High availability"). A standby sends every request to the leader
// (307, as Vault's standbys do); while no leader is known, or the store does not answer, or the
// leader key names this replica itself (an earlier start of it, not yet taken over), it answers
// 503 with Retry-After and why, so clients try again rather than loop. `sys/health` says which:
// 429 for a standby with a leader (as Vault), 503 otherwise.
class Holding {
 public:
  explicit Holding(std::string self) : self_(std::move(self)) {}

  core::Status start(const std::vector<ListenerConfig>& listeners) {
    TESSERA_ASSIGN_OR_RETURN(
        server_, HttpServer::create(listeners, [this](const HttpRequest& r) { return answer(r); }));
    server_->start(1, 2);
    return core::Status::ok();
  }
  void stop() {
    if (server_) {
      server_->shutdown(std::chrono::milliseconds(0));
      server_.reset();
    }
  }
  // No leader can be known: `why` says what is wrong ("" once the store answers again).
  void storeTrouble(std::string why) {
    std::lock_guard lock(mu_);
    why_ = std::move(why);
  }
  void leaderIs(std::string leader) {
    std::lock_guard lock(mu_);
    leader_ = std::move(leader);
    why_.clear();
    known_ = true;
  }

 private:
  HttpResponse answer(const HttpRequest& r) {
    std::string leader;
    std::string why;
    {
      std::lock_guard lock(mu_);
      leader = leader_;
      why = why_;
    }
    // No leader can act: etcd has no quorum, or the store answered and no one holds the key.
    const bool none_can_act = why.find(store::kNoEtcdQuorum) != std::string::npos ||
                              (why.empty() && leader.empty() && known_);
    if (why.empty() && (leader.empty() || leader == self_)) {
      why = "this replica is a standby and no leader is known yet";
    }
    HttpResponse resp;
    resp.headers.emplace_back("X-Tessera-Standby", "true");
    if (none_can_act) {
      // Nobody can place work meanwhile: agents keep their tasks running (docs/agent.md).
      resp.headers.emplace_back("X-Tessera-Leader", "none");
    }
    const std::string path = r.target.substr(0, r.target.find('?'));
    if (path == "/v1/sys/health") {
      resp.status = why.empty() ? 429 : 503;
      json body = {{"standby", true}, {"leader", why.empty() ? leader : ""}};
      if (!why.empty()) {
        body["reason"] = why;
      }
      resp.body = body.dump();
    } else if (!why.empty()) {
      resp.status = 503;
      resp.headers.emplace_back("Retry-After", "1");
      resp.body = json{{"errors", {why + "; try again shortly"}}}.dump();
    } else {
      resp.status = 307;
      resp.headers.emplace_back("Location", leader + r.target);
      resp.body = json{{"errors", {"this replica is a standby; the leader is " + leader}}}.dump();
    }
    return resp;
  }

  const std::string self_;
  std::mutex mu_;
  std::string leader_;
  std::string why_;
  bool known_ = false;  // The store has answered who leads (or that none does).
  std::unique_ptr<HttpServer> server_;
};

// A standby replica: campaigns every 100 ms until it leads (true), or a stop signal (false).
// Its listeners are `holding`'s meanwhile.
core::Result<bool> standBy(const ServerConfig& config, LeaderElection& election, Holding& holding) {
  std::string told = "?";
  bool troubled = false;
  while (!g_stop) {
    auto won = election.campaign();
    if (!won.isOk()) {
      if (!troubled) {
        core::logWarn("leader election: {}", won.status().message());
      }
      troubled = true;
      holding.storeTrouble("the store does not answer, so no leader is known: " +
                           won.status().message());
    } else if (*won) {
      core::logInfo("leading: {} took the leader key; loading the state from the store",
                    config.ha->api_addr);
      return true;
    } else {
      troubled = false;
      holding.leaderIs(election.leader());
      if (election.leader() != told) {
        told = election.leader();
        if (told.empty()) {
          core::logInfo("standby: no leader is known");
        }
        std::cout << "standby: the leader is " << (told.empty() ? "not known" : told) << "\n";
        std::cout.flush();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Set in the environment of a replica restartInPlace() started.
constexpr const char* kRestartedInPlace = "TESSERA_RESTARTED_IN_PLACE";

// Every fd above standard error, closed (or marked close-on-exec).
void closeInheritedFds(bool on_exec = false) {
  std::vector<int> fds;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    try {
      fds.push_back(std::stoi(fd.path().filename().string()));
    } catch (const std::exception&) {
    }
  }
  for (int n : fds) {
    if (n > 2) {
      if (on_exec) {
        ::fcntl(n, F_SETFD, FD_CLOEXEC);
      } else {
        ::close(n);  // Including the directory iterator's own, closed by now.
      }
    }
  }
}

// A leader that lost its lease (or was fenced) starts again as this same process (exec: the
// same pid, so a supervisor sees no exit), with nothing of its state kept: a standby, until it
// leads again. Everything it had open closes with the exec.
[[noreturn]] void restartInPlace() {
  std::vector<std::string> args;
  {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string arg;
    while (std::getline(in, arg, '\0')) {
      args.push_back(arg);
    }
  }
  // Other threads run on until the exec and may open more (a connection accepted meanwhile):
  // the next life closes whatever it inherits.
  closeInheritedFds(/*on_exec=*/true);
  std::vector<char*> argv;
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::string mark = std::string(kRestartedInPlace) + "=1";
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    envp.push_back(*e);
  }
  envp.push_back(mark.data());
  envp.push_back(nullptr);
  std::cerr << "restarting as a standby\n";
  std::cerr.flush();
  if (!args.empty()) {
    ::execve("/proc/self/exe", argv.data(), envp.data());
  }
  std::_Exit(3);  // Could not: a supervisor starts it again.
}

int serve(const ServerConfig& config, const Hooks& hooks) {
  const model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  core::RealClock clock;
  auto fail = [](const core::Status& s) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  };
  auto declared_nodes = declaredNodes(config, catalogue);
  if (!declared_nodes.isOk()) {
    return fail(declared_nodes.status());
  }
  std::vector<model::Node> nodes = std::move(declared_nodes).value();
  const size_t simulated = parseNodeList(config.simulated_nodes, "simulated")->size();
  std::vector<std::string> declared;
  for (const model::Node& n : nodes) {
    declared.push_back(n.name);
  }
  // A store in etcd may be out of reach (no quorum, a network cut): the replica waits for it,
  // answering 503 with why meanwhile, rather than exit and be started again and again.
  Holding holding(config.ha ? config.ha->api_addr : "");
  holding.storeTrouble("starting: waiting for the store's first answer");
  if (config.etcd || config.ha) {
    if (core::Status st = holding.start(config.listeners); !st.isOk()) {
      return fail(st);
    }
  }
  auto store = config.etcd ? store::EtcdStore::open(*config.etcd, clock)
                           : store::SqliteStore::open(config.storage_path, {}, clock);
  bool waited = false;
  while (config.etcd && !store.isOk() && store.status().code() == core::StatusCode::kUnavailable &&
         !g_stop) {
    if (!waited) {
      core::logWarn("waiting for the store: {}", store.status().message());
    }
    waited = true;
    holding.storeTrouble("the store does not answer: " + store.status().message());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    store::EtcdStoreOptions again = *config.etcd;  // Tried often, each try short.
    again.dial_timeout = std::min(again.dial_timeout, std::chrono::milliseconds(1000));
    store = store::EtcdStore::open(again, clock);
  }
  if (g_stop) {
    return 0;
  }
  if (!store.isOk()) {
    return fail(store.status());
  }
  // One of several replicas: it waits, sending clients to the leader, until it leads.
  std::unique_ptr<LeaderElection> election;
  std::unique_ptr<FencedStore> fenced;
  store::Store* st = store->get();
  if (config.ha) {
    election = std::make_unique<LeaderElection>(**store, config.ha->api_addr,
                                                std::chrono::milliseconds(config.ha->lease_ttl_ms));
    auto leads = standBy(config, *election, holding);
    if (!leads.isOk()) {
      return fail(leads.status());
    }
    if (!*leads) {
      return 0;
    }
    // A leader that cannot renew its lease for most of a TTL stops leading at once, before
    // another replica may lead: two must never run the scheduler (its agents' tasks keep
    // running, and the next leader keeps them). And every write it makes is fenced, so one
    // that has lost the lease without knowing it yet cannot change anything.
    election->startKeepAlive([] { restartInPlace(); });
    LeaderElection* e = election.get();
    fenced = std::make_unique<FencedStore>(**store, election->fence(),
                                           [e] { e->stepDown("the store fenced a write"); });
    st = fenced.get();
  }
  // Changes sent again under their Idempotency-Key are applied once (server/idempotency.h).
  IdempotentStore idempotent(*st);
  st = &idempotent;
  holding.stop();
  // Nodes that joined with a join token before this start: agent-run nodes like the declared
  // ones (docs/server.md, "Nodes join"). A declared node of the same name wins.
  {
    auto records = loadNodeRecords(*st, catalogue);
    if (!records.isOk()) {
      return fail(records.status());
    }
    for (auto& [name, rec] : *records) {
      if (!rec.joined) {
        continue;
      }
      if (std::find(declared.begin(), declared.end(), name) != declared.end()) {
        core::logWarn("node {} joined once but is declared in the config now: the config's wins",
                      name);
        continue;
      }
      nodes.push_back(std::move(rec.node));
    }
  }
  if (nodes.empty()) {
    core::logWarn(
        "no nodes yet: declare some (nodes {{ agents = ... }}) or let agents join with a join "
        "token (tessera node join-token create)");
  }
  std::vector<std::unique_ptr<audit::AuditSink>> sinks;
  for (const ServerConfig::AuditFile& a : config.audit) {
    if (core::Status st = restrictKeyFile(a.salt_file, "audit salt file"); !st.isOk()) {
      return fail(st);
    }
    auto salt = std::filesystem::exists(a.salt_file) ? audit::readSaltFile(a.salt_file)
                                                     : audit::createSaltFile(a.salt_file);
    if (!salt.isOk()) {
      return fail(salt.status());
    }
    audit::FileSinkOptions opts;
    opts.sink.salt = *salt;
    opts.sink.checkpoint_every = a.checkpoint_every;
    opts.sink.checkpoint_interval = std::chrono::milliseconds(a.checkpoint_interval_ms);
    opts.appended_flush_delay = std::chrono::milliseconds(a.flush_delay_ms);
    opts.rotate_bytes = a.rotate_bytes;
    opts.rotate_interval = std::chrono::seconds(a.rotate_interval_s);
    opts.retain_files = static_cast<uint32_t>(a.retain_files);
    // Checkpoints are signed unless the config says none: without a key a log whose records
    // are edited and every later hash recomputed still verifies. A key of its own is made
    // beside the log the first time (<path>.signing-key.pem, 0600, and <path>.public.pem for
    // whoever verifies it: `tessera audit verify` finds it there, `tessera audit pubkey`
    // prints it).
    std::string key_file = a.signing_key_file;
    if (key_file.empty()) {
      key_file = a.path + ".signing-key.pem";
      if (!std::filesystem::exists(key_file)) {
        if (core::Status made = audit::writeKeyPairFiles(key_file, a.path + ".public.pem");
            !made.isOk()) {
          return fail(made.withContext("audit: a checkpoint signing key for " + a.path));
        }
        core::logInfo(
            "audit: checkpoints of {} are signed with a new key, {}; its public key "
            "is {} (tessera audit verify {} checks them with it)",
            a.path, key_file, a.path + ".public.pem", a.path);
      }
    }
    if (key_file != "none") {
      auto key = audit::SigningKey::fromPemFile(key_file);
      if (!key.isOk()) {
        return fail(key.status());
      }
      opts.sink.signing_key = std::shared_ptr<const audit::SigningKey>(std::move(key).value());
      // The last checkpoint, outside the log: `tessera audit verify` holds the log against it,
      // so a log cut back to before it fails (docs/server.md, "The audit log's tail").
      opts.checkpoint_copy = a.checkpoint_copy_file.empty()     ? a.path + ".checkpoint"
                             : a.checkpoint_copy_file == "none" ? ""
                                                                : a.checkpoint_copy_file;
    }
    auto sink = audit::FileSink::open(a.path, opts, clock);
    if (!sink.isOk()) {
      return fail(sink.status());
    }
    sinks.push_back(std::move(sink).value());
  }
  auto auditor = audit::Auditor::create(std::move(sinks));
  if (!auditor.isOk()) {
    return fail(auditor.status().withContext("audit"));
  }
  // This start's epoch: how many times the server has started on this store.
  uint32_t epoch = 1;
  {
    auto got = st->range("/sys/epoch");
    if (got.isOk() && !got->kvs.empty()) {
      epoch = static_cast<uint32_t>(got->kvs[0].version + 1) & 0xffffU;
    }
    if (auto put = st->put("/sys/epoch", std::to_string(epoch)); !put.isOk()) {
      return fail(put.status());
    }
  }
  ControlPlane* cp_ptr = nullptr;
  DriverOptions dopts;
  dopts.epoch = epoch;
  dopts.policy = config.policy;
  dopts.pass_interval = std::chrono::milliseconds(config.pass_interval_ms);
  sched::SchedulerOptions so;
  so.policy = config.policy;
  so.min_runtime = std::chrono::seconds(0);
  so.reclaim_patience = std::chrono::seconds(config.reclaim_patience_s);
  so.max_moves_per_pass = config.max_moves_per_pass;
  so.max_unsaved_gpu_time = std::chrono::seconds(config.max_unsaved_gpu_seconds);
  so.cpu_per_free_gpu_milli = config.cpu_per_free_gpu_milli;
  dopts.scheduler = so;
  dopts.profile_min_tasks = static_cast<double>(config.profile_min_tasks);
  dopts.profile_half_life = std::chrono::seconds(config.profile_half_life_s);
  dopts.task_default_cpu_milli = config.task_default_cpu_milli;
  dopts.task_default_memory_mib = config.task_default_memory_mib;
  dopts.lease_ttl = std::chrono::milliseconds(config.node_lease_ttl_ms);
  for (size_t i = simulated; i < nodes.size(); ++i) {
    dopts.agent_nodes.push_back(nodes[i].name);
  }
  auto driver = SchedulerDriver::create(
      catalogue, std::move(nodes), clock, dopts,
      [&cp_ptr](const std::map<std::string, WorkloadStatus>& changed) {
        return cp_ptr != nullptr ? cp_ptr->onDriverChanges(changed) : core::Status::ok();
      });
  if (!driver.isOk()) {
    return fail(driver.status());
  }
  ControlPlaneOptions copts;
  copts.tenant_rate_per_s = config.tenant_rate;
  copts.tenant_burst = config.tenant_burst;
  copts.default_max_workloads = config.max_workloads;
  copts.default_max_pending = config.max_pending;
  copts.default_max_queues = config.max_queues;
  copts.default_max_tokens = config.max_tokens;
  copts.default_max_policies = config.max_policies;
  copts.default_max_secrets = config.max_secrets;
  copts.default_max_bytes = config.max_bytes;
  copts.default_workload_retention_s = config.workload_retention_s;
  copts.min_free_disk_bytes = config.min_free_disk_mb << 20;
  if (!config.etcd) {
    copts.disk_paths.push_back(
        std::filesystem::absolute(config.storage_path).parent_path().string());
  }
  for (const ServerConfig::AuditFile& a : config.audit) {
    copts.disk_paths.push_back(std::filesystem::absolute(a.path).parent_path().string());
  }
  copts.tenant_max_in_flight =
      config.tenant_max_in_flight > 0
          ? config.tenant_max_in_flight
          : defaultTenantConcurrency(std::thread::hardware_concurrency(), config.workers);
  copts.reject_delay = std::chrono::milliseconds(config.reject_delay_ms);
  // Three quarters of a pass, at least 100 ms (a loaded disk's fsync), at most 1 s.
  copts.status_write_deadline =
      std::clamp(std::chrono::milliseconds(config.pass_interval_ms * 3 / 4),
                 std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
  copts.node_lease_ttl = dopts.lease_ttl;
  copts.declared_nodes = declared;
  // A node's credential is a periodic token with this period, which max_ttl bounds.
  copts.node_token_ttl =
      std::chrono::seconds(std::min(config.node_credential_ttl_s, config.max_ttl_s));
  copts.audit_file = config.audit.empty() ? "" : config.audit[0].path;
  copts.durable_every_answer = config.audit_durable_every_answer;
  copts.refusals = config.refusals;
  copts.tokens.default_ttl = std::chrono::seconds(config.default_ttl_s);
  copts.tokens.max_ttl = std::chrono::seconds(config.max_ttl_s);
  secrets::SecretsOptions sopts;
  sopts.seal.mode = config.seal == "shamir" ? secrets::SealOptions::Mode::kShamir
                                            : secrets::SealOptions::Mode::kKeyFile;
  sopts.seal.key_file =
      config.seal_key_file.empty() ? config.storage_path + ".unseal-key" : config.seal_key_file;
  if (core::Status st = restrictKeyFile(sopts.seal.key_file, "unseal key file"); !st.isOk()) {
    return fail(st);
  }
  // TLS keys may be shared with other services (a group such as ssl-cert): said, not changed.
  for (const ListenerConfig& l : config.listeners) {
    if (auto mode = core::openToOthers(l.tls_key_file)) {
      std::cerr << fmt::format(
          "warning: TLS key file {} is mode {:04o}: group or others can read it (chmod 0600)\n",
          l.tls_key_file, *mode);
    }
  }
  auto secrets = secrets::Secrets::open(*st, clock, sopts);
  if (!secrets.isOk()) {
    return fail(secrets.status().withContext("secrets"));
  }
  if (config.seal == "shamir" && (*secrets)->keys().status().sealed) {
    std::cerr << ((*secrets)->keys().status().initialized
                      ? "secrets are sealed: unseal with `tessera operator unseal`\n"
                      : "secrets are not initialized: run `tessera operator init`\n");
  }
  auto cp = ControlPlane::open(*st, **auditor, **driver, catalogue, clock, copts, secrets->get());
  if (!cp.isOk()) {
    return fail(cp.status());
  }
  cp_ptr = cp->get();
  (*driver)->start();
  (*secrets)->start();
  std::vector<ListenerConfig> listeners = config.listeners;
  auto http = HttpServer::create(
      listeners,
      [&](const HttpRequest& r, Reply reply) { cp_ptr->handle(r, listeners, std::move(reply)); },
      [&](const HttpRequest& r) { return cp_ptr->admit(r, listeners); },
      [&](const HttpRequest& head) { return bodyAllowance(head, listeners); });
  if (!http.isOk()) {
    (*driver)->stop();
    return fail(http.status());
  }
  // The HTTP layer's own refusals (413, 431, malformed requests, full queues) are recorded too.
  (*http)->setRefusalObserver([&](const HttpRequest& r, const HttpResponse& resp) {
    cp_ptr->recordRefusal(r, resp, listeners);
  });
  (*http)->start(config.io_threads, config.workers);
  std::vector<std::string> addresses;
  const std::vector<uint16_t> ports = (*http)->ports();
  for (size_t i = 0; i < listeners.size(); ++i) {
    const std::string host = listeners[i].address.substr(0, listeners[i].address.rfind(':'));
    addresses.push_back((listeners[i].tls_cert_file.empty() ? "http://" : "https://") + host + ":" +
                        std::to_string(ports[i]));
  }
  {
    secrets::IdentityOptions iopts;
    iopts.issuer = config.oidc_issuer.empty() ? addresses[0] : config.oidc_issuer;
    iopts.token_ttl = std::chrono::seconds(config.identity_ttl_s);
    if (core::Status st = (*secrets)->openIdentity(iopts); !st.isOk()) {
      std::cerr << "warning: no workload identities: " << st.message() << "\n";
    }
  }
  if (!cp_ptr->rootTokenExists() && !hooks.ready) {
    auto root = cp_ptr->bootstrapRootToken();
    if (root.isOk()) {
      std::cout << "Root token (shown once; revoke it once you have created other tokens):\n  "
                << root->secret << "\n";
    }
  } else if (cp_ptr->rootTokenExists()) {
    std::cerr << "warning: a root token exists; it never expires. Revoke it "
                 "(auth/token/revoke-self with it) once other admin tokens exist.\n";
  }
  if (hooks.ready) {
    hooks.ready(*cp_ptr, addresses);
  } else {
    for (size_t i = 0; i < addresses.size(); ++i) {
      std::cout << "listening on " << addresses[i]
                << (listeners[i].chroot_tenant.empty()
                        ? ""
                        : " (chrooted to tenant '" + listeners[i].chroot_tenant + "')")
                << "\n";
    }
  }
  std::cout.flush();
  // Housekeeping until a signal: token expiry, store leases.
  while (!g_stop) {
    for (int i = 0; i < 10 && !g_stop && !g_reopen; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (g_reopen.exchange(false)) {
      // After logrotate renamed the audit files (postrotate: kill -HUP): each goes on in a new
      // file at its path, chained to the renamed one's last record.
      if (core::Status s = (*auditor)->reopen(); !s.isOk()) {
        core::logError("audit: SIGHUP: {}", s.message());
      } else {
        core::logInfo("audit: SIGHUP: audit files reopened");
      }
    }
    cp_ptr->housekeeping();
    (void)st->expireLeases();
  }
  if (hooks.stopping) {
    hooks.stopping();
  }
  std::cerr << "shutting down: finishing requests in flight\n";
  cp_ptr->stopWatches();  // Agents' waiting watches are answered now, not at their timeout.
  (*http)->shutdown(std::chrono::seconds(10));
  (*secrets)->stop();
  (*driver)->stop();
  cp_ptr->storeProfile(true);  // A restart places by what this one learned.
  (void)(*auditor)->close();
  cp_ptr->dropDurableAuditNotes();  // The close flushed every sink.
  if (election) {
    election->resign();  // Another replica leads at once, not a TTL later.
  }
  return 0;
}

void installSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = true; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction hup {};
  hup.sa_handler = [](int) { g_reopen = true; };
  sigemptyset(&hup.sa_mask);
  sigaction(SIGHUP, &hup, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);  // A file-size limit becomes EFBIG, handled like a full disk.
}

}  // namespace

int runServer(const ServerConfig& config) {
  if (std::getenv(kRestartedInPlace) != nullptr) {
    // Started again by restartInPlace(): what the last life had open and the exec did not close
    // (a connection accepted after its fds were marked close-on-exec) is nobody's now. Closed,
    // so its client is answered (the connection ends) rather than left waiting for ever.
    ::unsetenv(kRestartedInPlace);
    closeInheritedFds();
  }
  installSignalHandlers();
  return serve(config, {});
}

int runDev(const DevOptions& options) {
  installSignalHandlers();
  std::string dir = options.data_dir;
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-dev-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::cerr << "error: cannot create a temporary directory\n";
      return 1;
    }
    dir = tmpl;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "error: cannot create '" << dir << "': " << ec.message() << "\n";
    return 1;
  }
  const std::string host = options.addr.substr(0, options.addr.rfind(':'));
  const bool fresh = !std::filesystem::exists(dir + "/ca.pem");
  if (fresh) {
    auto ca = CertAuthority::create("tessera dev CA", std::chrono::hours(24 * 30));
    if (!ca.isOk()) {
      std::cerr << "error: " << ca.status().message() << "\n";
      return 1;
    }
    auto leaf =
        (*ca)->issue("localhost", {"localhost"}, {host == "localhost" ? "127.0.0.1" : host}, false);
    if (!leaf.isOk()) {
      std::cerr << "error: " << leaf.status().message() << "\n";
      return 1;
    }
    for (const auto& [file, content, secret] :
         std::vector<std::tuple<std::string, std::string, bool>>{
             {"ca.pem", (*ca)->certPem(), false},
             {"server.pem", leaf->cert_pem, false},
             {"server-key.pem", leaf->key_pem, true}}) {
      core::Status st = writeFile(dir + "/" + file, content, secret);
      if (!st.isOk()) {
        std::cerr << "error: " << st.message() << "\n";
        return 1;
      }
    }
  }
  ServerConfig config;
  config.storage_path = dir + "/tessera.db";
  ListenerConfig l;
  l.address = options.addr;
  l.tls_cert_file = dir + "/server.pem";
  l.tls_key_file = dir + "/server-key.pem";
  config.listeners.push_back(l);
  config.audit.push_back({dir + "/audit.log", dir + "/audit.salt", "", 1000, 50});
  config.audit_durable_every_answer = options.audit_durable_every_answer;
  std::vector<NodeDecl> decls;
  if (options.start_agents) {
    auto parsed = parseNodeList(options.nodes, "--nodes");
    if (!parsed.isOk()) {
      std::cerr << "error: " << parsed.status().message() << "\n";
      return 2;
    }
    decls = std::move(parsed).value();
    config.simulated_nodes = "";
    config.agent_nodes = options.nodes;
  } else {
    config.simulated_nodes = options.nodes;
  }
  Hooks hooks;
  hooks.stopping = options.stop_agents;
  hooks.ready = [&](ControlPlane& cp, const std::vector<std::string>& addresses) {
    DevInfo info;
    info.address = addresses[0];
    info.ca_cert = dir + "/ca.pem";
    info.data_dir = dir;
    info.nodes = decls;
    info.tenant = "demo";
    if (std::filesystem::exists(dir + "/dev.json")) {
      try {
        std::ifstream in(dir + "/dev.json");
        const json old = json::parse(in);
        info.root_token = old.value("root_token", "");
        info.tenant_token = old.value("tenant_token", "");
      } catch (const std::exception&) {
      }
    }
    if (!cp.rootTokenExists()) {
      auto root = cp.bootstrapRootToken();
      if (!root.isOk()) {
        std::cerr << "error: " << root.status().message() << "\n";
        g_stop = true;
        return;
      }
      info.root_token = root->secret;
      auto root_info = cp.tokens().lookup(root->secret);
      auto tenant = cp.createTenantWithToken("demo", json{{"quota", {{"gpu", 8}}}}, *root_info);
      if (!tenant.isOk()) {
        std::cerr << "error: " << tenant.status().message() << "\n";
        g_stop = true;
        return;
      }
      info.tenant_token = tenant->secret;
    }
    const json out = {{"address", info.address},           {"ca_cert", info.ca_cert},
                      {"root_token", info.root_token},     {"tenant", info.tenant},
                      {"tenant_token", info.tenant_token}, {"pid", static_cast<int64_t>(getpid())}};
    (void)writeFile(dir + "/dev.json", out.dump(2) + "\n", true);
    std::cout << "Tessera dev server\n"
              << "  address:      " << info.address << "\n"
              << "  CA cert:      " << info.ca_cert << "\n"
              << "  root token:   " << info.root_token << "\n"
              << "  tenant:       " << info.tenant << "\n"
              << "  tenant token: " << info.tenant_token << "\n"
              << "  data:         " << dir << " (dev.json, audit.log)\n\n"
              << "Use it from a shell with the tessera client:\n"
              << "  export TESSERA_ADDR=" << info.address << " TESSERA_CACERT=" << info.ca_cert
              << " TESSERA_TOKEN=" << info.tenant_token << "\n"
              << "  tessera run hello --gpus 1 -- sh -c 'echo $CUDA_VISIBLE_DEVICES; sleep 30'\n"
              << "  tessera ps && tessera logs hello -f\n\n"
              << "Or with curl:\n"
              << "  curl --cacert " << info.ca_cert << " -H 'X-Tessera-Token: " << info.tenant_token
              << "' \\\n    -X POST " << info.address
              << "/v1/tenants/demo/workloads/hello -d '{\"gpu\": {\"count\": 1}, \"command\": "
                 "[\"sleep\", \"60\"]}'\n"
              << "  curl --cacert " << info.ca_cert << " -H 'X-Tessera-Token: " << info.tenant_token
              << "' " << info.address << "/v1/tenants/demo/workloads/hello\n"
              << std::flush;
    if (options.start_agents) {
      // The agents run with their nodes' own credentials, never the root token: a task that
      // got hold of one could act as its node only (docs/agent.md "Tenant isolation").
      std::error_code mk;
      std::filesystem::create_directories(dir + "/agent-tokens", mk);
      (void)::chmod((dir + "/agent-tokens").c_str(), 0700);
      for (const NodeDecl& n : decls) {
        auto credential = cp.createNodeCredential(n.name);
        const std::string file = dir + "/agent-tokens/" + n.name;
        core::Status st = credential.isOk() ? core::writeFileAtomic(file, credential->secret, 0600)
                                            : credential.status();
        if (!st.isOk()) {
          std::cerr << "error: node " << n.name << "'s credential: " << st.message() << "\n";
          g_stop = true;
          return;
        }
        info.node_tokens[n.name] = credential->secret;
        info.node_token_files[n.name] = file;
      }
      options.start_agents(info);
    }
  };
  return serve(config, hooks);
}

}  // namespace tessera::server
