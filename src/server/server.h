// `tessera server` and `tessera dev`: the configuration file, and the process that wires the
// store, the audit log, the scheduler driver, the control plane and the listeners together.
//
// server.hcl (or the same in JSON):
//   storage "sqlite" { path = "/var/lib/tessera/tessera.db" }
//   listener "tcp" {
//     address            = "127.0.0.1:8300"
//     chroot_tenant      = "team-1"
//     tls_cert_file      = "/etc/tessera/team-1.pem"
//     tls_key_file       = "/etc/tessera/team-1-key.pem"
//     tls_client_ca_file = "/etc/tessera/clients-ca.pem"   # optional mTLS
//   }
//   audit "file" { path = "/var/log/tessera/audit.log"  salt_file = "/etc/tessera/audit.salt"
//                  checkpoint_interval_ms = 5000  checkpoint_copy_file = "<path>.checkpoint"
//                  rotate_bytes = 104857600  rotate_interval = "24h"  retain_files = 0 }
//   audit_refusals { per_source_rate = 10  per_source_burst = 100  unauthenticated_rate = 100
//                    unauthenticated_burst = 1000 }
//   scheduler { policy = "tessera"  pass_interval_ms = 200  reclaim_patience_s = 0
//               max_moves_per_pass = 8  max_unsaved_gpu_seconds = 3600
//               cpu_per_free_gpu_milli = 0  profile_min_tasks = 100
//               profile_half_life_s = 86400
//               task_default_cpu_milli = 1000  task_default_memory_mib = 2048 }
//   nodes { simulated = "dgx-h100:2,a100-8x:1"               # run by the server itself
//           agents = "gpu-a=dgx-h100,gpu-b=dgx-h100"         # run by `tessera agent`
//           lease_ttl_ms = 15000 }                           # an agent silent this long: lost
//   limits { tenant_rate = 1000  tenant_burst = 2000  tenant_concurrency = <half the cores>
//            max_workloads = 10000  max_pending = 1000  max_queues = 32  max_tokens = 10000
//            max_policies = 256  max_secrets = 10000  reject_delay_ms = 100
//            max_bytes = 1073741824  min_free_disk_mb = 100 }
//   tokens { default_ttl = "1h"  max_ttl = "768h" }
//   secrets { seal = "file"  key_file = "/etc/tessera/unseal.key"      # or seal = "shamir"
//             oidc_issuer = "https://tessera.example.com"  identity_ttl = "1h" }
//   io_threads = 2   workers = 16
//
// Every error names the file and the block or field.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "server/http_server.h"
#include "server/refusal_log.h"
#include "store/etcd_store.h"

namespace tessera::server {

struct ServerConfig {
  std::string storage_path;  // storage "sqlite" { path = ... }
  // storage "etcd" { endpoints = ["https://..."]  ca_file  cert_file  key_file  prefix }: the
  // store in an etcd v3 cluster (store/etcd_store.h); set instead of storage_path.
  std::optional<store::EtcdStoreOptions> etcd;
  // ha { api_addr = "https://10.0.0.1:8200"  lease_ttl_ms = 2000 }: one of several replicas on
  // one etcd store (docs/server.md, "High availability"): it leads (serves) while it holds the
  // leader key, and until then answers every request with the leader's address.
  struct Ha {
    std::string api_addr;  // How clients reach this replica (what standbys redirect to).
    int64_t lease_ttl_ms = 2000;
  };
  std::optional<Ha> ha;
  std::vector<ListenerConfig> listeners;
  struct AuditFile {
    std::string path;
    std::string salt_file;         // Created (0600) if missing.
    std::string signing_key_file;  // Optional: signed checkpoints.
    uint64_t checkpoint_every = 1000;
    // Records nobody waits for (answers sent before their flush) are flushed this long after.
    int64_t flush_delay_ms = 50;
    // A signed checkpoint at most this long after the first record that follows the last one
    // (0: only every checkpoint_every records and at a stop).
    int64_t checkpoint_interval_ms = 5000;
    // Where the copy of the last checkpoint is kept; empty: `<path>.checkpoint`; "none": none.
    std::string checkpoint_copy_file = {};
    // Rotation (audit/file_sink.h): a new file once the live one holds this many bytes (0:
    // never by size), or once its first record is this many seconds old (0: never by age);
    // rotated files kept beside it (0: all).
    uint64_t rotate_bytes = 100ull << 20;
    int64_t rotate_interval_s = 86400;
    int64_t retain_files = 0;
  };
  std::vector<AuditFile> audit;
  // audit_durable_answers = "secrets" (false) | "all" (true): whether every answer waits until
  // its audit records are on stable storage, or only one that reveals secrets
  // (ControlPlaneOptions::durable_every_answer).
  bool audit_durable_every_answer = false;
  // audit_refusals { per_source_rate = 10  per_source_burst = 100  unauthenticated_rate = 100
  //                  unauthenticated_burst = 1000 }: the records of refused requests
  // (server/refusal_log.h).
  RefusalLogOptions refusals;
  std::string policy = "tessera";
  int pass_interval_ms = 200;
  // Fair share (docs/fairness.md): how long a queue waits within its share before it may
  // reclaim, how many tasks consolidation moves per pass, and the default bound on the unsaved
  // GPU-seconds a reclaim may destroy (a tenant or team queue may set its own).
  int64_t reclaim_patience_s = 0;
  int max_moves_per_pass = 8;
  int64_t max_unsaved_gpu_seconds = 3600;
  // CPU each node holds for GPU tasks per free GPU, out of reach of tasks with no GPU (0: none;
  // sched::ClusterState::setCpuPerFreeGpu).
  int64_t cpu_per_free_gpu_milli = 0;
  // The workload profile (DriverOptions): used once this many tasks are counted; a task counts
  // half as much after the half-life.
  int64_t profile_min_tasks = 100;
  int64_t profile_half_life_s = 86400;
  // The CPU and memory an agent holds a task with no GPU to when it asks for none (a task with
  // GPUs gets its GPUs' share of its node; DriverOptions).
  int64_t task_default_cpu_milli = 1000;
  int64_t task_default_memory_mib = 2048;
  // Nodes the server simulates itself (nothing runs on them): only what the config asks for
  // (`tessera dev` sets its own). "" : none.
  std::string simulated_nodes;
  std::string agent_nodes;  // Nodes agents register under.
  // nodes { labels = { "gpu-a" = { pool = "team-1", zone = "a" } } }: declared nodes' labels.
  std::map<std::string, std::map<std::string, std::string>> node_labels;
  // nodes { credential_ttl_s }: how long a joined node's credential lives (its agent renews it
  // at half that while it runs).
  int64_t node_credential_ttl_s = 3600;
  int64_t node_lease_ttl_ms = 15000;
  double tenant_rate = 1000;
  double tenant_burst = 2000;
  int64_t max_workloads = 10000;
  int64_t max_pending = 1000;
  int64_t max_queues = 32;
  int64_t max_tokens = 10000;
  int64_t max_policies = 256;
  int64_t max_secrets = 10000;
  int64_t max_bytes = int64_t{1} << 30;  // What one tenant may store (TenantUsage).
  int64_t workload_retention_s = 86400;  // Finished workloads kept this long (0: for ever).
  int64_t min_free_disk_mb = 100;        // Below it writes get 507; 0: never.
  // secrets { seal = "file" | "shamir"  key_file = PATH }: how the barrier's unseal key is kept
  // (docs/secrets.md). Default: a key file beside the store (created on the first start), which
  // protects a copy of the store but not a copy of the whole disk.
  std::string seal = "file";
  std::string seal_key_file;  // Empty: storage_path + ".unseal-key".
  // The workload identity issuer's URL (`iss`, and where relying parties fetch
  // /.well-known/openid-configuration); empty: the first listener's address.
  std::string oidc_issuer;
  int64_t identity_ttl_s = 3600;  // Tasks' identity tokens live this long (renewed at half).
  int64_t default_ttl_s = 3600;
  // tokens { max_ttl }: no token (nor grant) is renewable past a day from its issue unless the
  // operator says so, so a fresh install's tokens pass `tessera doctor` (its threshold is a
  // day); service credentials are periodic tokens, which no maximum caps (docs/server.md).
  int64_t max_ttl_s = int64_t{24} * 3600;
  int io_threads = 2;  // TLS and HTTP; they never block.
  int workers = 16;    // Run the handlers; writes block on fsync: more share each group commit.
  // Requests of one tenant handled at once. 0: defaultTenantConcurrency (half the cores).
  int tenant_max_in_flight = 0;
  int64_t reject_delay_ms = 100;
};

// The default of `limits { tenant_concurrency }`: half of `cores`, at least 2 and at most half of
// `workers`. One tenant's handlers then never occupy more than half the machine, so a flood
// leaves the other half for everyone else (docs/benchmarks.md, "API end to end", measures it).
int defaultTenantConcurrency(unsigned cores, int workers);

// One node of a `nodes { simulated = ... agents = ... }` list.
struct NodeDecl {
  std::string name;
  std::string profile;  // A node profile (model/node_profiles.h).
};

// "dgx-h100:2,a100-8x:1" (named PROFILE-0, PROFILE-1, ...) or "gpu-a=dgx-h100,gpu-b=l40s-4x",
// or both mixed. `field` names the list in errors. Profiles are checked when nodes are built.
core::Result<std::vector<NodeDecl>> parseNodeList(const std::string& spec, const char* field);

// The nodes a config declares: its simulated ones first, then its agents' (labels applied).
// Fails as the server's start would: an unknown profile, a name declared twice, labels of a
// node that is not declared.
core::Result<std::vector<model::Node>> declaredNodes(const ServerConfig& config,
                                                     const model::GpuCatalogue& catalogue);

// What the server's start would find wrong with what a read config names, without opening
// the store or binding a port: listeners (an address that is no IP:PORT, TLS files that do not
// load), and the files the store, the seal and the audit logs create or read (a folder that is
// not there, a key file named but missing). Empty: nothing (`tessera server -validate`).
std::vector<std::string> configStartProblems(const ServerConfig& config);

// Reads and validates a config file (.hcl or .json): everything the server's start checks
// without opening anything (the store, the listeners' ports, the audit log) or reading the
// files it names (`tessera server -validate` reads those).
core::Result<ServerConfig> readServerConfig(const std::string& path);

// What `tessera dev` leaves for clients (also written to DIR/dev.json).
struct DevInfo {
  std::string address;  // https://127.0.0.1:PORT
  std::string ca_cert;  // Path of the CA certificate to trust.
  std::string root_token;
  std::string tenant;
  std::string tenant_token;
  std::string data_dir;
  std::vector<NodeDecl> nodes;
  // Each node's credential (ControlPlane::createNodeCredential: its own calls only), issued at
  // each start, and the file (0600, DATA_DIR/agent-tokens/<node>) that holds it for an agent
  // started by hand (`tessera agent run --token-file`).
  std::map<std::string, std::string> node_tokens;
  std::map<std::string, std::string> node_token_files;
};

struct DevOptions {
  std::string data_dir;  // Empty: a new temporary directory.
  std::string addr = "127.0.0.1:8200";
  std::string nodes = "dgx-h100:2,a100-8x:1";
  bool audit_durable_every_answer = false;  // ServerConfig::audit_durable_every_answer.
  // Set: the nodes are run by agents, which this starts once the server is ready (`tessera
  // dev` runs one in-process agent per node); unset: the server simulates them.
  std::function<void(const DevInfo&)> start_agents;
  // Called when the server is about to stop (SIGINT/SIGTERM), before it stops answering.
  std::function<void()> stop_agents;
};

// Runs the server until SIGINT or SIGTERM, then shuts down gracefully: prints each listener's
// address, and the root token on the first start. Returns the process exit code.
int runServer(const ServerConfig& config);

// Dev mode: a data directory, a CA and certificate, a config, the server, a root token and a
// demo tenant with its token; prints them and writes DIR/dev.json. Blocks like runServer.
int runDev(const DevOptions& options);

}  // namespace tessera::server
