// Secrets into workloads (issue #6; docs/secrets.md "Secrets into workloads"). A workload's
// `secrets` names KV paths and database roles of its own tenant; each of its tasks gets them in
// one file, `secrets.json`, which travels with the task's assignment in the heartbeat answer
// (over TLS) and which the agent keeps in the task's credentials folder (a tmpfs where the
// machine has one), next to its identity token:
//   {"kv": {"app/config": {<the current version's data>}},
//    "db": {"readonly": {"username", "password", "lease_id", "expire_time"}}}
//
//   TaskSecrets secrets(engine, store, auditor, clock);
//   TESSERA_RETURN_IF_ERROR(secrets.load());          // at start: leases of earlier tasks
//   auto file = secrets.resolve(task);                // per heartbeat, per task with secrets
//   secrets.sweep([&] { return driver.liveTasks(); });  // housekeeping
//
// - Dynamic credentials are made once per task generation (a lease of the role's default TTL),
//   renewed by `sweep` while the task is assigned (at half of the TTL, up to the role's max TTL,
//   where a new credential replaces it in the file), and revoked by `sweep` once it is not
//   (finished, cancelled, preempted, its node lost).
// - KV values are read again when older than `kv_refresh`, so a changed secret reaches running
//   tasks (the agent rewrites the file when its content changes).
// - The credentials themselves are kept only in memory and in the task's folder. Their lease ids
//   are stored (/taskcreds/<tenant>/<task>@<generation>, no secret in it), so a restarted server
//   revokes those of tasks that ended while it was down (after a restart every task runs at a
//   new generation, with new credentials).
// - Each issue and revocation is in the tenant's audit stream (paths, roles and lease ids; no
//   value). An issue the audit log cannot record is undone and refused.
// - A task whose secrets cannot be resolved (no such path, a role that fails, sealed) is not
//   started: the heartbeat answer carries the error, and the agent reports the start as failed.
//   Once a task has its file, a later failure to refresh keeps the file it has.
// Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "audit/auditor.h"
#include "core/clock.h"
#include "core/status.h"
#include "secrets/service.h"
#include "server/driver.h"
#include "store/store.h"

namespace tessera::server {

struct TaskSecretsOptions {
  core::Duration kv_refresh = std::chrono::seconds(30);
};

// A registry login, from a workload's pull secret.
struct PullCredentials {
  std::string username;
  std::string password;
};

// The login for `registry` ("host[:port]", "docker.io") in a pull secret's KV data: Docker's
// config.json shape ({"auths": {"<registry>": {"auth": base64("user:password")} or
// {"username", "password"}}}, as the data itself, as a string under "auths", or as a string
// under ".dockerconfigjson" like Kubernetes' secrets), or plain {"username", "password"} (for
// whichever registry the image names). Errors say what is wrong with the secret, never its values.
core::Result<PullCredentials> registryLogin(const nlohmann::json& data,
                                            const std::string& registry);

class TaskSecrets {
 public:
  TaskSecrets(secrets::Secrets& engine, store::Store& store, audit::Auditor& auditor,
              const core::Clock& clock, TaskSecretsOptions options = {});

  // Reads the lease ids kept for earlier tasks; the next `sweep` revokes those not live.
  core::Status load();
  // The content of `t`'s secrets.json (its first call makes the task's credentials).
  core::Result<std::string> resolve(const NodeTask& t);
  // The login `t`'s image's registry gets (its workload's `pullSecret`, a KV path of its
  // tenant). Read at the task's first call and again when older than kv_refresh; each read
  // that finds a new value is in the tenant's audit stream (the password HMAC'd).
  core::Result<PullCredentials> pullCredentials(const NodeTask& t);
  // What `t`'s volumes (NodeTask::volumes) hold, as its agent gets them: each kv volume's secret
  // as files, read at the task's first call and again when older than kv_refresh (a failed
  // refresh keeps what the task has; each read that finds new data is in the tenant's audit
  // stream, paths only). A secret or item key that is not there is an error unless the volume is
  // optional. Every key of a secret that is a plain file name is a file (as itself, or as its
  // volume's `items` say); a value that is not a string is its JSON.
  core::Result<std::vector<protocol::TaskVolume>> volumes(const NodeTask& t);
  // Revokes the credentials of tasks that are not live and renews the leases of those that
  // are, past half their TTL. `live_tasks` gives the live ones now ("<task id>@<generation>",
  // SchedulerDriver::liveTasks). Returns how many tasks' credentials it revoked.
  size_t sweep(const std::function<std::set<std::string>()>& live_tasks);
  // Forgets a deleted tenant's tasks and their records (its leases are revoked with the
  // tenant).
  core::Status forgetTenant(const std::string& tenant);
  // Tasks with credentials now (for tests and metrics).
  size_t size() const;

 private:
  struct DbCred {
    std::string role;
    std::string username;
    std::string password;
    secrets::Lease lease;
    core::WallTime renew_at{};  // Half its TTL after it was made or last renewed.
  };
  struct Entry {
    std::mutex mu;  // Guards the fields below; held while credentials are made or revoked.
    std::string tenant;
    std::string workload;
    int index = 0;
    bool resolved = false;  // `content` holds a complete file.
    bool ended = false;     // Revoked by sweep: never resolved again.
    std::string content;    // The file: `kv` and `db` rendered.
    nlohmann::json kv;      // The KV values as last read.
    core::WallTime kv_read{};
    std::vector<DbCred> db;
    // The pull secret's login, when the task has one, and when it was read.
    bool pull_resolved = false;
    PullCredentials pull;
    core::WallTime pull_read{};
    // The kv volumes' data as last read (by volume, null: an optional one not there), and when.
    bool volumes_resolved = false;
    nlohmann::json volume_kv;
    core::WallTime volumes_read{};
    // Leases no longer in the file: loaded at start (an earlier process's), or replaced at
    // their max TTL. Revoked with the task.
    std::vector<std::string> stored_leases;
  };

  // The entry of task `t` at `key` ("<task id>@<generation>"), made if new.
  std::shared_ptr<Entry> entryFor(const NodeTask& t, const std::string& key);
  static void wipe(std::vector<DbCred>& creds);
  static void setContent(Entry& e, std::string content);  // Wipes the old file's bytes.  // Clears
                                                          // the passwords' bytes, then the list.
  static std::string recordKey(const std::string& tenant, const std::string& key);
  core::Status issueLocked(Entry& e, const NodeTask& t, const std::string& key);
  // Stores the ids of every lease the entry holds (no secret), for a restarted server.
  core::Status persistLocked(const Entry& e, const std::string& key);
  core::Result<nlohmann::json> readKv(const std::string& tenant,
                                      const std::vector<std::string>& paths) const;
  std::string render(const nlohmann::json& kv, const std::vector<DbCred>& db) const;
  // The data of `t`'s kv volumes, by volume (null: an optional one not there).
  core::Result<nlohmann::json> readVolumes(const NodeTask& t) const;
  void revokeLocked(Entry& e, const std::string& key);
  core::Status audit(const std::string& tenant, const std::string& what, const std::string& key,
                     const nlohmann::json& details);

  secrets::Secrets& engine_;
  store::Store& store_;
  audit::Auditor& auditor_;
  const core::Clock& clock_;
  const TaskSecretsOptions options_;
  mutable std::mutex mu_;                                  // Guards entries_ (not the entries).
  std::map<std::string, std::shared_ptr<Entry>> entries_;  // By "<task id>@<generation>".
};

}  // namespace tessera::server
