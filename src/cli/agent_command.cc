#include "cli/agent_command.h"

#include <fmt/format.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_config.h"
#include "agent/cgroups.h"
#include "agent/exec_util.h"
#include "agent/mig_manager.h"
#include "agent/mps.h"
#include "agent/protocol.h"
#include "agent/runtime.h"
#include "agent/sandbox.h"
#include "agent/server_link.h"
#include "agent/tenant_guard.h"
#include "agent/users.h"
#include "api/client.h"
#include "core/files.h"
#include "core/log.h"
#include "core/strings.h"
#include "model/gpu_catalogue.h"
#include "model/node_profiles.h"

namespace tessera::cli {

using agent::agentLog;
using agent::sleepUnlessStopped;
using api::ApiClient;
using api::ClientConfig;
using api::pathSegment;
namespace {

struct DiscoverFlags {
  std::string config;
  std::string node;
  agent::GpuConfig gpus;
  CLI::Option* backend = nullptr;
  CLI::Option* library = nullptr;
  CLI::Option* profile = nullptr;
  CLI::Option* profile_file = nullptr;
  CLI::Option* fallback = nullptr;
  CLI::Option* sim_mig = nullptr;
  CLI::Option* mig_mode = nullptr;
  std::string format = "table";
};

void printTable(const agent::NodeGpus& found, const std::string& node) {
  std::cout << fmt::format("node {}: {} GPU{} ({}", node, found.gpus.size(),
                           found.gpus.size() == 1 ? "" : "s", found.backend);
  if (!found.driver_version.empty()) {
    std::cout << ", driver " << found.driver_version;
  }
  if (!found.cuda_version.empty()) {
    std::cout << ", CUDA " << found.cuda_version;
  }
  std::cout << ")\n";
  if (found.gpus.empty()) {
    return;
  }
  std::cout << fmt::format("{:<4} {:<40} {:<12} {:>10}  {:<17} {:>5}  {}\n", "IDX", "UUID", "MODEL",
                           "MEMORY", "PCI", "MINOR", "MIG");
  for (const agent::Gpu& g : found.gpus) {
    const std::string mig = !g.mig_capable  ? "-"
                            : g.mig_enabled ? fmt::format("on, {} devices", g.mig_devices.size())
                                            : (g.mig_pending ? "off (on after reset)" : "off");
    std::cout << fmt::format("{:<4} {:<40} {:<12} {:>6} MiB  {:<17} {:>5}  {}\n", g.index, g.uuid,
                             g.model.empty() ? g.name : g.model, g.memory_mib,
                             g.pci_bus_id.empty() ? "?" : g.pci_bus_id,
                             g.minor < 0 ? "?" : std::to_string(g.minor), mig);
  }
  for (const agent::Gpu& g : found.gpus) {
    for (const agent::MigDevice& m : g.mig_devices) {
      std::cout << fmt::format("  GPU {} MIG {}: {} {} {} MiB (GPU instance {}, compute {})\n",
                               g.index, m.index, m.uuid, m.profile.empty() ? m.name : m.profile,
                               m.memory_mib, m.gpu_instance_id, m.compute_instance_id);
    }
  }
  if (found.gpus.size() < 2) {
    return;
  }
  std::cout << "\nTopology (NV: NVLink; PIX: one PCIe switch, PXB: several, PHB: host bridge, "
               "NODE: one NUMA node, SYS: across NUMA nodes)\n      ";
  for (size_t j = 0; j < found.gpus.size(); ++j) {
    std::cout << fmt::format("{:<6}", "GPU" + std::to_string(j));
  }
  std::cout << "\n";
  for (size_t i = 0; i < found.gpus.size(); ++i) {
    std::cout << fmt::format("{:<6}", "GPU" + std::to_string(i));
    for (size_t j = 0; j < found.gpus.size(); ++j) {
      std::cout << fmt::format("{:<6}", agent::topologyLabel(found, i, j));
    }
    std::cout << "\n";
  }
}

// The config file, with the flags over it; errors are the user's (exit status 2).
core::Result<agent::AgentConfig> resolveConfig(const DiscoverFlags& f) {
  agent::AgentConfig config;
  if (!f.config.empty()) {
    TESSERA_ASSIGN_OR_RETURN(config, agent::readAgentConfig(f.config));
  }
  // Flags override the file.
  for (const auto& [opt, from, to] :
       {std::tuple{f.backend, &f.gpus.backend, &config.gpus.backend},
        {f.library, &f.gpus.nvml_library, &config.gpus.nvml_library},
        {f.profile, &f.gpus.profile, &config.gpus.profile},
        {f.profile_file, &f.gpus.profile_file, &config.gpus.profile_file},
        {f.fallback, &f.gpus.fallback_profile, &config.gpus.fallback_profile},
        {f.mig_mode, &f.gpus.mig_mode, &config.gpus.mig_mode}}) {
    if (opt != nullptr && opt->count() > 0) {
      *to = *from;
    }
  }
  if (f.sim_mig->count() > 0) {
    config.gpus.sim_mig = f.gpus.sim_mig;
  }
  if (!f.node.empty()) {
    config.node_name = f.node;
  }
  if (config.node_name.empty()) {
    config.node_name = agent::hostName();
  }
  TESSERA_RETURN_IF_ERROR(agent::validateGpuConfig(config.gpus));
  return config;
}

int discover(const DiscoverFlags& f) {
  auto resolved = resolveConfig(f);
  if (!resolved.isOk()) {
    std::cerr << "error: " << resolved.status().message() << "\n";
    return 2;
  }
  const agent::AgentConfig& config = *resolved;
  const model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  std::vector<std::string> log;
  auto found = agent::discoverGpus(config.gpus, config.node_name, catalogue, &log);
  for (const std::string& line : log) {
    std::cerr << "warning: " << line << "\n";
  }
  if (!found.isOk()) {
    std::cerr << "error: " << found.status().message() << "\n";
    return 1;
  }
  for (const std::string& w : found->warnings) {
    std::cerr << "warning: " << w << "\n";
  }
  if (f.format == "json") {
    nlohmann::json j = agent::toJson(*found);
    j["node"] = config.node_name;
    std::cout << j.dump(2) << "\n";
  } else {
    printTable(*found, config.node_name);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// tessera agent run

struct RunFlags {
  DiscoverFlags node;
  std::string address;
  std::string advertise_address;  // "" : the server takes the agent's connection's.
  std::string token;              // Refused: a credential on the command line (see runAgent).
  std::string token_file;
  std::string ca_cert;
  std::string work_dir = "/var/lib/tessera/agent";
  std::string cgroups = "auto";
  std::string run_as;     // "" : tenant when root, else agent.
  std::string node_mode;  // "" : the config's (shared by default).
  std::string user_pattern = "tessera-{tenant}";
  std::string device_dir;  // "" : /dev with NVML, none when simulated.
  CLI::Option* device_dir_opt = nullptr;
  std::string cuda_interposer = "auto";
  std::string cuda_driver = "auto";
  int64_t wait_ms = 2000;
  int64_t fence_after_ms = 10000;
  int64_t no_leader_bound_ms = 600000;
  std::string credentials_dir;
  std::string join_token;  // Refused, as `token`.
  std::string join_token_file;
  std::vector<std::string> labels;  // KEY=VALUE
  std::string sandbox = "auto";
  int64_t task_pids_max = 4096;
};

std::atomic<bool> g_agent_stop{false};  // `tessera agent run`'s: set by SIGTERM and SIGINT.

// The interposer's path from --cuda-interposer: "" for none. "auto" looks next to this binary
// (an installed tree's lib/tessera/, or a build tree's src/cuda/) and finds none quietly.
core::Result<std::string> interposerPath(const std::string& flag) {
  namespace fs = std::filesystem;
  if (flag == "none") {
    return std::string();
  }
  std::error_code ec;
  if (flag != "auto") {
    if (!fs::is_regular_file(flag, ec)) {
      return core::invalidArgument("--cuda-interposer '" + flag + "': no such file");
    }
    return fs::absolute(flag, ec).string();
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return std::string();
  }
  for (const fs::path& candidate :
       {exe.parent_path() / ".." / "lib" / "tessera" / "libtessera-cuda.so",
        exe.parent_path() / "src" / "cuda" / "libtessera-cuda.so"}) {
    if (fs::is_regular_file(candidate, ec)) {
      return fs::weakly_canonical(candidate, ec).string();
    }
  }
  return std::string();
}

// The name of the user this process runs as (its uid when it has none).
std::string ownUserName() {
  const uid_t uid = ::geteuid();
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return pw.pw_name;
  }
  return "uid " + std::to_string(uid);
}

std::string envOr(const std::string& flag, const char* name) {
  if (!flag.empty()) {
    return flag;
  }
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// A credential from `file` (`flag` names it in errors), else from the variable `env`, which is
// then taken out of this process's environment (no child inherits it) and blanked where
// /proc/<pid>/environ shows it. A file must be this user's (or root's) and readable by nobody
// else, as ssh asks of its keys: other users of the machine include every task's.
core::Result<std::string> credentialFrom(const std::string& file, const char* flag,
                                         const char* env) {
  if (!file.empty()) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      return core::invalidArgument(std::string(flag) + " " + file + ": " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
      return core::invalidArgument(std::string(flag) + " " + file + ": not a regular file");
    }
    if ((st.st_mode & 077) != 0) {
      return core::invalidArgument(fmt::format(
          "{} {}: mode {:04o} lets other users of this machine read the node's credential; "
          "chmod 600 {}",
          flag, file, st.st_mode & 07777, file));
    }
    if (st.st_uid != ::geteuid() && st.st_uid != 0) {
      return core::invalidArgument(
          fmt::format("{} {}: belongs to uid {}, not to this agent's user (uid {}) or root", flag,
                      file, st.st_uid, ::geteuid()));
    }
    std::ifstream in(file);
    std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      return core::invalidArgument(std::string(flag) + " " + file + ": cannot read it");
    }
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())) != 0) {
      token.pop_back();
    }
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front())) != 0) {
      token.erase(token.begin());
    }
    if (token.empty() || token.find_first_of(" \t\r\n") != std::string::npos) {
      return core::invalidArgument(std::string(flag) + " " + file +
                                   ": expected one token (a line), found " +
                                   (token.empty() ? "nothing" : "several words"));
    }
    return token;
  }
  char* v = std::getenv(env);
  if (v == nullptr) {
    return std::string();
  }
  std::string token = v;
  std::memset(v, 0, token.size());
  ::unsetenv(env);
  return token;
}

}  // namespace

namespace {

// What a node that joins says of itself beside its GPUs: its CPU and memory, from its simulated
// profile, else from the machine.
std::pair<int64_t, int64_t> machineSize(const agent::AgentConfig& config,
                                        const model::GpuCatalogue& catalogue) {
  if (config.gpus.backend == "sim" && !config.gpus.profile.empty()) {
    if (auto n = model::makeProfileNode(config.gpus.profile, config.node_name, catalogue, 0);
        n.isOk()) {
      return {n->cpu.value(), n->memory.value()};
    }
  }
  const int64_t cpus = std::max<int64_t>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
  const int64_t pages = ::sysconf(_SC_PHYS_PAGES);
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  return {cpus * 1000, std::max<int64_t>(1, pages * page / (1 << 20))};
}

// The node's credential for a joined node: the one kept from an earlier run (rotated at once,
// so a copy of the file stops working), else a join with the join token. Writes the new one to
// `file` (0600) and returns it.
struct NodeCredential {
  std::string token;
  int64_t ttl_s = 3600;
};

core::Result<NodeCredential> nodeCredential(const AgentSettings& f, const agent::NodeGpus& gpus,
                                            const model::GpuCatalogue& catalogue,
                                            const std::string& file) {
  ClientConfig cc = f.client;
  cc.token.clear();
  nlohmann::json answer;
  std::error_code ec;
  if (std::filesystem::exists(file, ec)) {
    std::ifstream in(file);
    nlohmann::json kept = nlohmann::json::parse(in, nullptr, false);
    if (kept.is_discarded() || !kept.contains("token") || !kept["token"].is_string()) {
      return core::invalidArgument(file + " is not a node credential; remove it to join again");
    }
    cc.token = kept["token"].get<std::string>();
    TESSERA_ASSIGN_OR_RETURN(auto api, ApiClient::create(cc));
    auto rotated =
        api->call("POST", "/v1/sys/nodes/" + api::pathSegment(f.config.node_name) + "/credential",
                  nlohmann::json::object());
    if (!rotated.isOk()) {
      if (f.join_token.empty()) {
        return rotated.status().withContext(
            "the node credential in " + file +
            " was refused (expired, or the node was removed); join again with "
            "--join-token-file");
      }
      agentLog("the kept node credential was refused (" + rotated.status().message() +
               "); joining again with the join token");
    } else {
      answer = (*rotated)["data"];
      agentLog("node credential renewed (the old one is revoked)");
    }
  } else if (f.join_token.empty()) {
    return core::invalidArgument(
        "the agent needs a token whose policy allows read and update on sys/nodes/<node>/* "
        "(--token-file, or TESSERA_TOKEN), or a join token to join with (--join-token-file, or "
        "TESSERA_JOIN_TOKEN)");
  }
  if (answer.is_null()) {
    cc.token.clear();
    TESSERA_ASSIGN_OR_RETURN(auto api, ApiClient::create(cc));
    const auto [cpu, memory] = machineSize(f.config, catalogue);
    TESSERA_ASSIGN_OR_RETURN(nlohmann::json joined, api->call("POST", "/v1/sys/nodes/join",
                                                              {{"join_token", f.join_token},
                                                               {"node", f.config.node_name},
                                                               {"discovery", agent::toJson(gpus)},
                                                               {"cpu_milli", cpu},
                                                               {"memory_mib", memory},
                                                               {"labels", f.labels}}));
    answer = joined["data"];
    agentLog(fmt::format("joined as node {} with labels {}", f.config.node_name,
                         answer.value("labels", nlohmann::json::object()).dump()));
  }
  const std::string token = answer.value("token", "");
  if (token.empty()) {
    return core::unavailable("the server's answer holds no node credential");
  }
  TESSERA_RETURN_IF_ERROR(
      core::writeFileAtomic(file, nlohmann::json{{"token", token}}.dump(), 0600));
  const nlohmann::json ttl = answer.value("ttl", nlohmann::json(3600));
  return NodeCredential{token, ttl.is_number_integer() ? ttl.get<int64_t>() : 3600};
}

}  // namespace

int runAgentLoop(const AgentSettings& f, const std::atomic<bool>& stop) {
  const agent::AgentConfig& config = f.config;
  agent::setLogNode(config.node_name);
  const model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  std::vector<std::string> log;
  auto gpus = agent::discoverGpus(config.gpus, config.node_name, catalogue, &log);
  for (const std::string& line : log) {
    agentLog("warning: " + line);
  }
  if (!gpus.isOk()) {
    std::cerr << "error: " << gpus.status().message() << "\n";
    return 1;
  }
  ClientConfig cc = f.client;
  cc.timeout = std::chrono::milliseconds(f.wait_ms + 5000);
  // The agent's loop tries again on its own, within its lease: a call need not wait long.
  cc.retry_for = std::chrono::milliseconds(1000);
  // A node that joined renews its credential while it runs (half its life, at most every
  // 10 minutes): it lives an hour past the agent's last renewal, not for ever.
  const bool joined = cc.token.empty();
  int64_t credential_ttl_s = 3600;
  // A token given to the agent is renewed like a joined node's credential when it can be: it
  // then lives a TTL past the agent's last renewal, and no longer runs out under it. Whether it
  // can is asked after the first heartbeat, which a restarted agent's tasks wait for.
  bool renew_credential = joined;
  bool credential_known = joined;
  if (joined) {
    std::error_code ec;
    std::filesystem::create_directories(f.work_dir, ec);
    auto token = nodeCredential(f, *gpus, catalogue, f.work_dir + "/node-credential");
    if (!token.isOk()) {
      std::cerr << "error: " << token.status().message() << "\n";
      return 2;
    }
    cc.token = token->token;
    credential_ttl_s = token->ttl_s;
  }
  auto api = ApiClient::create(cc);
  auto watch_api = ApiClient::create(cc);
  auto renew_api = ApiClient::create(cc);
  if (!api.isOk() || !watch_api.isOk() || !renew_api.isOk()) {
    std::cerr << "error: " << (api.isOk() ? watch_api : api).status().message() << "\n";
    return 2;
  }
  // Cgroups: one folder per agent (node name and work dir), so several agents can share a
  // machine (tests, dev) without one taking another's tasks for its own leftovers.
  std::optional<agent::Cgroups> cgroups;
  if (f.cgroups != "off") {
    auto cg =
        agent::Cgroups::detect("tessera/" + agent::agentInstance(config.node_name, f.work_dir));
    if (cg.isOk()) {
      cgroups = std::move(cg).value();
      agentLog("cgroups: " + cgroups->describe());
    } else if (f.cgroups == "required") {
      std::cerr << "error: " << cg.status().message() << "\n";
      return 1;
    } else {
      agentLog("warning: no cgroups (" + cg.status().message() +
               "): tasks run without CPU, memory or device limits");
    }
  }
  const bool root = ::geteuid() == 0;
  const std::string run_as = f.run_as.empty() ? (root ? "tenant" : "agent") : f.run_as;
  const bool switch_users = run_as == "tenant";
  std::optional<agent::UserMapping> users;
  if (switch_users) {
    users.emplace(agent::UserMappingOptions{.pattern = f.user_pattern, .create = root});
  }
  agentLog(agent::describeIsolation(config.node_mode, switch_users, f.user_pattern, ownUserName()));
  if (switch_users && !root) {
    agentLog(
        "warning: --run-as tenant without root: tasks start only if this process may switch "
        "users and give them their folders (CAP_SETUID, CAP_SETGID, CAP_CHOWN)");
  }
  // Tasks in namespaces of their own (agent/sandbox.h), where this machine allows it.
  bool sandbox = false;
  if (f.sandbox != "off") {
    const core::Status probe = agent::probeSandbox();
    sandbox = probe.isOk();
    if (sandbox) {
      agentLog(
          "each task runs in namespaces of its own: it sees only its own processes, its own "
          "/tmp and /dev/shm (removed with it) and only its own user of the machine's");
    } else if (f.sandbox == "required") {
      std::cerr << "error: --sandbox required: " << probe.message() << "\n";
      return 1;
    } else {
      agentLog("warning: tasks share the node's process list, /tmp and /dev/shm (no sandbox: " +
               probe.message() + ")");
    }
  }
  agent::AssignmentOptions assign;
  assign.pids_max = f.task_pids_max;
  assign.device_dir = f.device_dir ? *f.device_dir : gpus->backend == "nvml" ? "/dev" : "";
  auto interposer = interposerPath(f.cuda_interposer);
  if (!interposer.isOk()) {
    std::cerr << "error: " << interposer.status().message() << "\n";
    return 2;
  }
  assign.interposer = *interposer;
  // The node's driver, for the stand-in a sandboxed time-sliced task sees in its place.
  std::string driver;
  if (sandbox && !assign.interposer.empty()) {
    auto found = agent::findNodeDriver(f.cuda_driver);
    if (!found.isOk()) {
      std::cerr << "error: " << found.status().message() << "\n";
      return 2;
    }
    driver = *found;
    if (agent::driverStandIn(assign.interposer).empty()) {
      driver.clear();
      agentLog(std::string("warning: no ") + agent::kDriverStandIn + " beside " +
               assign.interposer +
               ": a time-sliced task's program that skips /etc/ld.so.preload (a static binary) "
               "finds the driver itself");
    } else if (driver.empty()) {
      agentLog("no CUDA driver found (--cuda-driver): time-sliced tasks see no stand-in for it");
    } else {
      agentLog("time-sliced tasks see the interposer in place of the driver " + driver);
    }
    // Mount points for a time-sliced task's /etc/ld.so.preload, CUDA caps and driver
    // (agent/sandbox.h).
    if (const core::Status made = agent::prepareCudaMountPoints(!driver.empty()); !made.isOk()) {
      agentLog("warning: time-sliced tasks will not start: " + made.message());
    }
  }
  assign.require_interposer = gpus->backend == "nvml";
  if (assign.interposer.empty()) {
    agentLog(assign.require_interposer
                 ? "warning: no CUDA interposer (libtessera-cuda.so; --cuda-interposer): "
                   "time-sliced GPU shares are refused on this node"
                 : "no CUDA interposer: time-sliced shares get their limits' variables only");
  } else {
    agentLog("time-sliced GPU shares run under " + assign.interposer);
  }
  const std::unique_ptr<agent::ControlPlaneClient> server = agent::httpControlPlane(
      std::move(api).value(), assign, users ? &*users : nullptr, f.advertise_address);
  agent::Wakeup wakeup(stop);
  // The lease the tasks' shims watch: renewed with every heartbeat, it runs out `fence_after`
  // after the last one, and then they stop their tasks even if this process is gone.
  std::error_code ec;
  std::filesystem::create_directories(f.work_dir, ec);
  if (ec) {
    std::cerr << "error: cannot create " << f.work_dir << ": " << ec.message() << "\n";
    return 1;
  }
  if (switch_users && ::chmod(f.work_dir.c_str(), 0711) != 0) {
    // Tasks pass through to their own folders (0700, their users'); nobody lists the others'.
    agentLog("warning: cannot chmod 0711 " + f.work_dir + ": " + std::strerror(errno));
  }
  // Credentials: a folder of the agent's own, checked before anything runs.
  const agent::CredentialFiles credentials(
      f.credentials_dir.empty() ? agent::CredentialFiles::defaultRoot(config.node_name, f.work_dir)
                                : f.credentials_dir);
  if (core::Status st = credentials.prepare(); !st.isOk()) {
    std::cerr << "error: " << st.message() << "\n";
    return 1;
  }
  // An agent that leaves takes with it the credentials of every task that no longer runs (all
  // of them when it stops its tasks: once the runtime, declared below and so gone first, has
  // stopped them), and its root once it is empty. Those of tasks left to their shims stay for
  // them; the last shim takes the root.
  struct CredentialsCleanup {
    const agent::CredentialFiles& files;
    bool leaving = false;
    std::set<std::string> still_running;
    ~CredentialsCleanup() {
      if (leaving) {
        for (const std::string& task : files.list()) {
          if (!still_running.contains(task)) {
            files.remove(task);
          }
        }
      }
      files.removeRootIfEmpty();
    }
  } credentials_cleanup{credentials};
  const std::string lease_file = f.work_dir + "/lease";
  const auto fence_after = std::chrono::milliseconds(f.fence_after_ms);
  // An earlier agent's lease is left as it is: only a heartbeat may extend it, or a restart
  // that cannot reach the server would keep its tasks running past the server's lease.
  if (!std::filesystem::exists(lease_file, ec)) {
    if (core::Status st = agent::writeLease(lease_file, fence_after); !st.isOk()) {
      std::cerr << "error: " << st.message() << "\n";
      return 1;
    }
  }
  agent::Agent* agent_ptr = nullptr;
  // MPS tasks get one control daemon per GPU and user: real ones with NVML, recorded ones
  // (logged) on simulated GPUs.
  std::unique_ptr<agent::MpsControl> mps_control;
  if (gpus->backend == "nvml") {
    mps_control = std::make_unique<agent::ProcessMpsControl>();
  } else {
    mps_control = std::make_unique<agent::RecordingMpsControl>();
  }
  agent::MpsDaemons mps(*mps_control, f.work_dir);
  agent::MpsRuntime sharing(
      mps,
      [&agent_ptr, &wakeup](const std::string& id, const agent::TaskExit& e) {
        if (agent_ptr != nullptr) {
          agent_ptr->onExit(id, e);
          wakeup.poke();  // Reported at once, not at the next renewal.
        }
      },
      f.work_dir + "/mps-holds");
  agent::ProcessRuntime runtime(
      {.work_dir = f.work_dir,
       .cgroups = cgroups ? &*cgroups : nullptr,
       .lease_file = lease_file,
       .container = config.container,  // Tasks with an image (docs/agent.md "Containers").
       .sandbox = sandbox,
       .cuda_driver = driver},
      sharing.exitHandler());
  sharing.wrap(runtime);
  core::RealClock clock;
  agent::AgentOptions options;
  options.fence_after = fence_after;
  options.credentials = &credentials;
  options.pull_retries = config.container.pull_retries;  // ImagePullBackOff.
  options.pull_backoff = config.container.pull_backoff;
  // MIG slices' instances: made through NVML on real GPUs, recorded (with UUIDs) on simulated.
  std::unique_ptr<agent::MigManager> mig;
  if (gpus->backend == "nvml") {
    mig = std::make_unique<agent::NvmlMigManager>(config.gpus.nvml_library, catalogue);
  } else {
    mig = std::make_unique<agent::RecordingMigManager>(catalogue, config.node_name);
  }
  options.mig = mig.get();
  options.mig_managed = config.gpus.mig_mode == "managed";
  if (std::error_code caps_ec;
      !assign.device_dir.empty() &&
      std::filesystem::is_directory(assign.device_dir + "/nvidia-caps", caps_ec)) {
    options.mig_caps_dir = assign.device_dir + "/nvidia-caps";
  }
  options.no_leader_bound = std::chrono::milliseconds(f.no_leader_bound_ms);
  options.renewed = [&](std::chrono::milliseconds for_how_long) {
    if (core::Status st = agent::writeLease(lease_file, for_how_long); !st.isOk()) {
      agentLog("warning: " + st.message());
    }
  };
  // An image pulled, or its progress: the loop ticks now (the task starts, or says how far).
  options.wake = [&wakeup] { wakeup.poke(); };
  // An agent that cannot keep tenants apart lets one tenant's tasks in at a time.
  std::optional<agent::TenantGuard> guard;
  if (agent::needsTenantGuard(config.node_mode, switch_users)) {
    guard.emplace(*server, runtime, config.node_name);
  }
  agent::Agent agent(config.node_name, *gpus,
                     guard ? static_cast<agent::ControlPlaneClient&>(*guard) : *server, sharing,
                     clock, options);
  agent_ptr = &agent;
  // Tasks an earlier agent left to their shims (a restart): adopted, or reported if they ended.
  // MPS daemons an earlier agent left with their clients count them again first, so that a
  // client ending from now on releases its daemon.
  if (core::Status st = sharing.restore(); !st.isOk()) {
    agentLog("warning: " + st.message());
  }
  const std::vector<agent::AdoptedTask> adopted = runtime.adopt();
  agent.adopt(adopted);
  // Credentials of tasks that no longer run (their shims fenced them while no agent watched, or
  // they ended) go now, before any heartbeat: the server may not be reached for a while.
  std::set<std::string> still_running;
  for (const agent::AdoptedTask& t : adopted) {
    if (!t.ended) {
      still_running.insert(t.id);
    }
  }
  for (const std::string& task : credentials.list()) {
    if (!still_running.contains(task)) {
      credentials.remove(task);
    }
  }
  sharing.forgetGone(still_running);  // Clients gone meanwhile: their daemons' last one stops it.
  for (const auto& [daemon, clients] : mps.clients()) {
    agentLog(fmt::format("MPS daemon of {} for {} adopted: {} client(s)", daemon.first,
                         daemon.second.empty() ? "the agent's user" : daemon.second, clients));
  }
  for (const agent::AdoptedTask& t : adopted) {
    agentLog(t.ended ? fmt::format("task {} (generation {}) ended while no agent watched it: {}",
                                   t.id, t.tag, t.ended->describe())
                     : fmt::format("task {} (generation {}) adopted: still running", t.id, t.tag));
  }
  agentLog(fmt::format("node {}: {} GPUs ({}), tasks in {}, credentials in {}", config.node_name,
                       gpus->gpus.size(), gpus->backend, f.work_dir, credentials.root()));
  std::atomic<bool> watching_stops{false};  // Set once the loop below ends, for any reason.
  std::thread watcher([&] {
    agent::watchTasks(**watch_api, config.node_name, f.work_dir,
                      std::chrono::milliseconds(f.wait_ms), wakeup, watching_stops);
  });
  // The node's credential is renewed at half its life (a periodic one: its period), at most
  // this many seconds apart: a credential of an hour twice an hour (each renewal is two audit
  // records; a failed one is tried again in 5 s, with half its life left).
  constexpr int64_t kMostBetweenRenewalsS = 1800;
  // Renew well within the fencing period, so one lost call does not stop the tasks.
  const auto renew_every = std::max(std::chrono::milliseconds(200), fence_after / 4);
  bool failing = false;
  bool fenced = false;
  bool removed = false;  // The server said the node is gone: exit non-zero.
  auto credential_renewed = std::chrono::steady_clock::now();
  auto credential_every =
      std::chrono::seconds(std::clamp<int64_t>(credential_ttl_s / 2, 1, kMostBetweenRenewalsS));
  while (!stop) {
    if (renew_credential &&
        std::chrono::steady_clock::now() - credential_renewed > credential_every) {
      auto renewed =
          (*renew_api)->call("POST", "/v1/auth/token/renew-self", nlohmann::json::object());
      if (renewed.isOk()) {
        credential_renewed = std::chrono::steady_clock::now();
        const nlohmann::json data = renewed->value("data", nlohmann::json::object());
        const nlohmann::json ttl = data.value("ttl", nlohmann::json(3600));
        credential_every = std::chrono::seconds(std::clamp<int64_t>(
            (ttl.is_number_integer() ? ttl.get<int64_t>() : 3600) / 2, 1, kMostBetweenRenewalsS));
      } else {
        agentLog("cannot renew the node's credential: " + renewed.status().message());
        credential_renewed += std::chrono::seconds(5);  // Again soon.
      }
    }
    core::Status st;
    try {
      st = agent.tick();
    } catch (const nlohmann::json::exception& e) {
      // An answer of the wrong shape (a server in the middle of a failover): a failed
      // heartbeat, never the end of the agent.
      st = core::unavailable(std::string("the server's answer is malformed: ") + e.what());
    }
    if (!st.isOk() && (st.code() == core::StatusCode::kNotFound ||
                       st.code() == core::StatusCode::kPermissionDenied)) {
      // The server no longer knows this node, or no longer takes its credential: removed
      // (`tessera node remove` revokes it). No lease will come back; running on fenced would
      // only hide that.
      auto looked = (*renew_api)->call("GET", "/v1/auth/token/lookup-self");
      if (st.code() == core::StatusCode::kNotFound ||
          (!looked.isOk() && looked.status().code() == core::StatusCode::kPermissionDenied)) {
        agentLog("error: this node was removed from the server, or its credential revoked (" +
                 st.message() +
                 "); exiting. Join it again to serve (tessera node join-token "
                 "create)");
        removed = true;
        break;
      }
    }
    if (!st.isOk()) {
      if (!failing) {
        agentLog("cannot renew the node's lease: " + st.message());
      }
      failing = true;
      if (agent.fenced() && !fenced) {
        agentLog(fmt::format("no heartbeat for {} ms: stopped every task here (fenced)",
                             f.fence_after_ms));
      }
      fenced = agent.fenced();
      sleepUnlessStopped(std::chrono::milliseconds(500), stop);
      continue;
    }
    if (failing) {
      agentLog("lease renewed");
    }
    failing = false;
    fenced = false;
    if (!credential_known) {
      auto looked = (*renew_api)->call("GET", "/v1/auth/token/lookup-self");
      credential_known = true;
      if (looked.isOk()) {
        const nlohmann::json data = looked->value("data", nlohmann::json::object());
        const nlohmann::json ttl = data.value("ttl", nlohmann::json(0));
        renew_credential =
            data.value("renewable", false) && ttl.is_number_integer() && ttl.get<int64_t>() > 0;
        if (renew_credential) {
          credential_renewed = std::chrono::steady_clock::now();
          credential_every = std::chrono::seconds(
              std::clamp<int64_t>(ttl.get<int64_t>() / 2, 1, kMostBetweenRenewalsS));
        }
      } else {
        agentLog("warning: cannot look up the node's token (" + looked.status().message() +
                 "); it is not renewed");
      }
    }
    if (!agent.hasReports()) {
      wakeup.wait(renew_every);
    }
  }
  watching_stops = true;
  watcher.join();
  credentials_cleanup.leaving = true;
  if (removed) {
    agentLog(
        fmt::format("stopping: {} task(s) still running are stopped", runtime.running().size()));
    return 3;
  }
  if (!f.detach_on_stop) {
    agentLog(
        fmt::format("stopping: {} task(s) still running are stopped", runtime.running().size()));
    return 0;
  }
  // A restart must not stop the node's work: the tasks stay with their shims, the next agent
  // adopts them, and if none comes before the lease runs out the shims stop them.
  runtime.detach();
  mps.detach();  // Their MPS daemons stay with them.
  for (const std::string& id : runtime.running()) {
    credentials_cleanup.still_running.insert(id);
  }
  agentLog(
      fmt::format("stopping: {} task(s) left running under their shims; they stop in {} ms "
                  "unless an agent takes them over",
                  runtime.running().size(), f.fence_after_ms));
  return 0;
}

namespace {

int runAgent(const RunFlags& f) {
  auto resolved = resolveConfig(f.node);
  if (!resolved.isOk()) {
    std::cerr << "error: " << resolved.status().message() << "\n";
    return 2;
  }
  AgentSettings settings;
  settings.config = *resolved;
  if (!f.node_mode.empty()) {
    auto mode = agent::parseNodeMode(f.node_mode);
    if (!mode.isOk()) {
      std::cerr << "error: --node-mode: " << mode.status().message() << "\n";
      return 2;
    }
    settings.config.node_mode = *mode;
  }
  // A token in argv is in /proc/<pid>/cmdline, which every process of the machine reads (every
  // task's too), and in every shim's, whose command line is the agent's.
  for (const auto& [given, flag, instead, env] :
       {std::tuple<const std::string&, const char*, const char*, const char*>{
            f.token, "--token", "--token-file", "TESSERA_TOKEN"},
        {f.join_token, "--join-token", "--join-token-file", "TESSERA_JOIN_TOKEN"}}) {
    if (!given.empty()) {
      std::cerr << "error: " << flag
                << " puts the node's credential on the command line, where every process on "
                   "this machine can read it (/proc/<pid>/cmdline); give it in a file ("
                << instead << " FILE, mode 0600) or in " << env << "\n";
      return 2;
    }
  }
  ClientConfig& cc = settings.client;
  cc.address = envOr(f.address, "TESSERA_ADDR");
  cc.ca_cert_file = envOr(f.ca_cert, "TESSERA_CACERT");
  auto token = credentialFrom(f.token_file, "--token-file", "TESSERA_TOKEN");
  auto join_token = credentialFrom(f.join_token_file, "--join-token-file", "TESSERA_JOIN_TOKEN");
  if (!token.isOk() || !join_token.isOk()) {
    std::cerr << "error: " << (token.isOk() ? join_token : token).status().message() << "\n";
    return 2;
  }
  cc.token = *token;
  settings.join_token = *join_token;
  for (const std::string& l : f.labels) {
    const size_t eq = l.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "error: --label " << l << ": expected KEY=VALUE\n";
      return 2;
    }
    settings.labels[l.substr(0, eq)] = l.substr(eq + 1);
  }
  if (cc.address.empty()) {
    std::cerr << "error: the agent needs the server's address (--address, or TESSERA_ADDR)\n";
    return 2;
  }
  if (cc.token.empty() && settings.join_token.empty() &&
      !std::filesystem::exists(f.work_dir + "/node-credential")) {
    std::cerr << "error: the agent needs a token whose policy allows read and update on "
                 "sys/nodes/<node>/* (--token-file, or TESSERA_TOKEN), or a join token "
                 "(--join-token-file, or TESSERA_JOIN_TOKEN; tessera node join-token create "
                 "makes one)\n";
    return 2;
  }
  settings.sandbox = f.sandbox;
  settings.task_pids_max = f.task_pids_max;
  if (f.advertise_address.size() > 255 ||
      f.advertise_address.find_first_of(" \t\r\n,") != std::string::npos) {
    std::cerr << "error: --advertise-address '" << f.advertise_address
              << "': expected a host name or IP address\n";
    return 2;
  }
  settings.advertise_address = f.advertise_address;
  settings.work_dir = f.work_dir;
  settings.cgroups = f.cgroups;
  settings.run_as = f.run_as;
  settings.user_pattern = f.user_pattern;
  if (f.device_dir_opt->count() > 0) {
    settings.device_dir = f.device_dir;
  }
  settings.cuda_interposer = f.cuda_interposer;
  settings.cuda_driver = f.cuda_driver;
  settings.wait_ms = f.wait_ms;
  settings.fence_after_ms = f.fence_after_ms;
  settings.no_leader_bound_ms = f.no_leader_bound_ms;
  settings.credentials_dir = f.credentials_dir;
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_agent_stop = true; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return runAgentLoop(settings, g_agent_stop);
}

}  // namespace

void addAgentCommands(CLI::App& app, int* rc) {
  CLI::App* agent_cmd =
      app.add_subcommand("agent", "The node agent: what runs on every GPU machine");
  agent_cmd->require_subcommand(1);
  auto f = std::make_shared<DiscoverFlags>();
  CLI::App* d = agent_cmd->add_subcommand(
      "discover", "Show the GPUs the agent finds here (NVML, or a simulated node profile)");
  d->add_option("-c,--config", f->config, "Agent configuration (.hcl or .json)");
  d->add_option("--node", f->node, "Node name (default: the config's node_name, or the host name)");
  f->backend = d->add_option("--backend", f->gpus.backend, "nvml or sim")
                   ->check(CLI::IsMember({"nvml", "sim"}));
  f->library = d->add_option("--nvml-library", f->gpus.nvml_library,
                             "The NVML library to load (default libnvidia-ml.so.1)");
  f->profile = d->add_option("--profile", f->gpus.profile,
                             "Node profile for --backend sim (dgx-h100, dgx-h200, a100-8x, "
                             "a100-40gb-8x, l40s-4x, t4-2x, or one of --profile-file)");
  f->profile_file =
      d->add_option("--profile-file", f->gpus.profile_file, "More node profiles (.hcl or .json)");
  f->fallback = d->add_option("--fallback-profile", f->gpus.fallback_profile,
                              "Simulate this profile when NVML fails (default: fail)");
  f->sim_mig = d->add_option("--sim-mig", f->gpus.sim_mig,
                             "Simulated GPUs to show with MIG mode on (--sim-mig 6,7)")
                   ->delimiter(',');
  d->add_option("--format", f->format, "Output: table or json (also -format=json)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  d->footer(
      "Exit status: 0 found, 1 discovery failed (the error says which call and why), 2 bad "
      "flags or config. Warnings (facts NVML could not give) go to standard error.");
  d->callback([f, rc] { *rc = discover(*f); });

  auto r = std::make_shared<RunFlags>();
  CLI::App* run = agent_cmd->add_subcommand(
      "run", "Run the node agent: register this node with the server and run its tasks");
  run->add_option("-c,--config", r->node.config, "Agent configuration (.hcl or .json)");
  run->add_option("--node", r->node.node,
                  "Node name: one of the server's nodes { agents = ... }, or the name to join "
                  "under (default: the config's node_name, or the host name)");
  r->node.backend = run->add_option("--backend", r->node.gpus.backend, "nvml or sim")
                        ->check(CLI::IsMember({"nvml", "sim"}));
  r->node.library = run->add_option("--nvml-library", r->node.gpus.nvml_library,
                                    "The NVML library to load (default libnvidia-ml.so.1)");
  r->node.profile =
      run->add_option("--profile", r->node.gpus.profile, "Node profile for --backend sim");
  r->node.profile_file = run->add_option("--profile-file", r->node.gpus.profile_file,
                                         "More node profiles (.hcl or .json)");
  r->node.fallback = run->add_option("--fallback-profile", r->node.gpus.fallback_profile,
                                     "Simulate this profile when NVML fails (default: fail)");
  r->node.sim_mig =
      run->add_option("--sim-mig", r->node.gpus.sim_mig,
                      "Simulated GPUs with MIG mode on, where MIG slices go (--sim-mig 6,7)")
          ->delimiter(',');
  r->node.mig_mode =
      run->add_option("--mig-mode", r->node.gpus.mig_mode,
                      "fixed (MIG mode is the operator's) or managed (the agent turns it on and "
                      "off on idle GPUs as the work placed there needs; NVML resets the GPU)")
          ->check(CLI::IsMember({"fixed", "managed"}));
  run->add_option("--address", r->address, "Server address (default: $TESSERA_ADDR)");
  run->add_option("--advertise-address", r->advertise_address,
                  "The address other nodes reach this one at: its tasks' peers in a distributed "
                  "workload (MASTER_ADDR, TESSERA_HOSTS). Default: the address the server sees "
                  "this agent's connections come from");
  run->add_option("--token-file", r->token_file,
                  "File (mode 0600) holding a token allowed to read and update "
                  "sys/nodes/<node>/* (default: $TESSERA_TOKEN); renewed while the agent runs "
                  "if it is renewable");
  run->add_option("--token", r->token,
                  "Refused: a token on the command line is readable by every process on the "
                  "machine; use --token-file or TESSERA_TOKEN");
  run->add_option("--join-token-file", r->join_token_file,
                  "File (mode 0600) holding a join token (tessera node join-token create; "
                  "default: $TESSERA_JOIN_TOKEN): the node joins the server with its GPUs from "
                  "discovery, and its credential is kept in <work-dir>/node-credential and "
                  "renewed while it runs");
  run->add_option("--join-token", r->join_token,
                  "Refused, as --token: use --join-token-file or TESSERA_JOIN_TOKEN");
  run->add_option("--label", r->labels,
                  "A label of the joining node, KEY=VALUE (repeatable; the join token's labels "
                  "win, and pool comes only from the token)");
  run->add_option("--ca-cert", r->ca_cert,
                  "PEM file of the CA that signed the server's certificate (default: "
                  "$TESSERA_CACERT, else the system's CAs)");
  run->add_option("--work-dir", r->work_dir, "Where task folders and logs go")
      ->capture_default_str();
  run->add_option("--credentials-dir", r->credentials_dir,
                  "Where tasks' credential files (identity tokens) go: a tmpfs, readable by each "
                  "task's user only (default: /dev/shm/tessera-<node>-<id>, else "
                  "<work-dir>/credentials)");
  run->add_option("--cgroups", r->cgroups,
                  "auto (use them if the machine allows), required, or off")
      ->check(CLI::IsMember({"auto", "required", "off"}))
      ->capture_default_str();
  run->add_option("--sandbox", r->sandbox,
                  "Each task (not a container, which has its own) in namespaces of its own: it "
                  "sees only its own processes, its own /tmp and /dev/shm (removed with it) and "
                  "its own user in /etc/passwd. auto (when the machine allows it: root), "
                  "required, or off")
      ->check(CLI::IsMember({"auto", "required", "off"}))
      ->capture_default_str();
  run->add_option("--task-pids-max", r->task_pids_max,
                  "Processes and threads each task may have at once (the pids cgroup); 0: no "
                  "limit")
      ->check(CLI::Range(int64_t{0}, int64_t{4194304}))
      ->capture_default_str();
  run->add_option("--run-as", r->run_as,
                  "tenant (each tenant's own Unix user, created on demand; the default as root) "
                  "or agent (the agent's user; the default otherwise)")
      ->check(CLI::IsMember({"tenant", "agent"}));
  run->add_option("--user-pattern", r->user_pattern, "Unix user of a tenant's tasks")
      ->capture_default_str();
  run->add_option("--node-mode", r->node_mode,
                  "shared (the default: tenants kept apart; an agent that cannot switch users "
                  "runs one tenant's tasks at a time), single-tenant or development (any "
                  "tenant's tasks, not kept apart without users); default: the config's "
                  "node_mode")
      ->check(CLI::IsMember({"shared", "single-tenant", "development"}));
  r->device_dir_opt = run->add_option(
      "--device-dir", r->device_dir,
      "Where the GPUs' device nodes (nvidiaN) are; a task may open only its own (default: /dev "
      "with NVML, none when simulated)");
  run->add_option("--cuda-interposer", r->cuda_interposer,
                  "libtessera-cuda.so, preloaded into tasks on a time-sliced GPU share to hold "
                  "them to its memory and compute: a path, auto (next to this binary) or none; "
                  "without it, a node with NVML GPUs refuses such tasks")
      ->capture_default_str();
  run->add_option("--cuda-driver", r->cuda_driver,
                  "The node's libcuda.so.1, which a sandboxed time-sliced task sees only through "
                  "the interposer (libtessera-cuda-driver.so in its place): a path, auto (the "
                  "first libcuda.so.1 in the usual library folders) or none")
      ->capture_default_str();
  run->add_option("--wait-ms", r->wait_ms,
                  "How long a watch for new tasks waits at the server before it asks again")
      ->check(CLI::Range(int64_t{0}, int64_t{10000}))
      ->capture_default_str();
  run->add_option("--fence-after-ms", r->fence_after_ms,
                  "Stop every task when the server has not been reached for this long (keep it "
                  "below the server's lease, 15 s by default)")
      ->check(CLI::Range(int64_t{1000}, int64_t{3600000}))
      ->capture_default_str();
  run->add_option("--no-leader-bound-ms", r->no_leader_bound_ms,
                  "While the servers answer that no leader can act (their etcd has no quorum), "
                  "keep the tasks running up to this long without a heartbeat, not only "
                  "--fence-after-ms: nobody can place them elsewhere meanwhile (docs/agent.md)")
      ->check(CLI::Range(int64_t{1000}, int64_t{86400000}))
      ->capture_default_str();
  run->footer(
      "The node is declared in the server's config (nodes { agents = \"NAME=PROFILE\" }) with "
      "the GPUs this machine has, and runs with a token for it (--token-file); or it joins "
      "with a join token (--join-token-file). Exit status: 0 stopped by SIGTERM/SIGINT, 1 "
      "discovery, cgroups or sandbox failed, 2 bad flags or config.");
  run->callback([r, rc] { *rc = runAgent(*r); });
}

}  // namespace tessera::cli
