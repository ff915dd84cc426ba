// The control plane: tenants as virtual clusters, their tokens, policies and workloads, behind
// one request handler that the HTTP server calls (docs/server.md has the API).
//
//   auto cp = ControlPlane::open(store, *auditor, driver, clock, options);
//   auto root = cp->bootstrapRootToken();   // first start only
//   HttpServer::create(listeners, [&](const HttpRequest& r, Reply reply) {
//     cp->handle(r, listeners, std::move(reply));
//   });
//
// Every request goes: scope (the listener's chroot, the path's tenant) -> authenticate ->
// per-tenant rate limit -> tenant boundary (another tenant's path is 404, never 403) -> audit
// the request (fail closed: 503 if no sink records it) -> authorize (ACL) -> handler -> audit
// the response. Writes go to the store before they are acknowledged.
// Thread-safe: `handle` is called from many I/O threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "audit/auditor.h"
#include "core/clock.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "secrets/service.h"
#include "server/acl.h"
#include "server/driver.h"
#include "server/grants.h"
#include "server/http_server.h"
#include "server/idempotency.h"
#include "server/kube/access.h"
#include "server/kube/objects.h"
#include "server/kube/selector.h"
#include "server/metrics.h"
#include "server/node_mailbox.h"
#include "server/node_records.h"
#include "server/node_watchers.h"
#include "server/refusal_log.h"
#include "server/resumer.h"
#include "server/route.h"
#include "server/task_secrets.h"
#include "server/tenant_usage.h"
#include "server/tokens.h"
#include "server/workload_registry.h"
#include "store/store.h"

namespace tessera::server {

struct ControlPlaneOptions {
  TokenOptions tokens;
  // Per-tenant request rate (token bucket): sustained requests per second, and burst.
  double tenant_rate_per_s = 1000;
  double tenant_burst = 2000;
  // Defaults for tenants that do not set their own caps.
  int64_t default_max_workloads = 10000;  // Stored workloads, finished ones included.
  int64_t default_max_pending = 1000;     // Workloads not yet running.
  int64_t default_max_tokens = 10000;     // A tenant's tokens held (until revoked or expired).
  int64_t default_max_secrets = 10000;    // A tenant's KV keys (until destroyed with metadata).
  int64_t default_max_policies = 256;     // A tenant's ACL policies, tenant-admin included.
  int64_t default_max_queues = 32;        // Team queues in service (besides default): each is
                                          // a node every pass walks.
  // Requests of one tenant being handled at once; more wait their turn (up to 8 per running
  // one and at least 64, then 429). Keeps a flooding tenant from holding every worker and
  // every core, so the others are still served.
  int tenant_max_in_flight = 8;
  // A request refused by the rate limit or a full queue is answered (429) only after this delay,
  // and its connection is not read meanwhile: a client that retries at once, ignoring
  // Retry-After, costs the server one refusal per delay per connection instead of a core.
  std::chrono::milliseconds reject_delay{100};
  // Finished workloads are deleted this long after they finish, unless the tenant sets its
  // own `workload_retention_seconds` (0: kept); their names may be used again.
  int64_t default_workload_retention_s = 86400;
  // Bytes a tenant may keep in the store (TenantUsage), unless it sets its own `max_bytes`.
  int64_t default_max_bytes = int64_t{1} << 30;
  // Writes other than deletes are refused (507) while a filesystem in `disk_paths` (the store's,
  // the audit log's) has less free than this; 0: never. The room left keeps reads (and their
  // audit records) and deletes going.
  int64_t min_free_disk_bytes = int64_t{100} << 20;
  std::vector<std::string> disk_paths;
  // Nodes named in the config (nodes { agents }): they never join with a join token, and are
  // taken out of service by changing the config, not by `tessera node remove`.
  std::vector<std::string> declared_nodes;
  // How long a joined node's credential lives; its agent has it renewed (rotated) at half.
  core::Duration node_token_ttl = std::chrono::hours(1);
  // What heartbeats tell agents their lease is (the driver's DriverOptions::lease_ttl).
  std::chrono::milliseconds node_lease_ttl{15000};
  // The audit file a tenant's view (GET audit) is read from; empty: no view.
  std::string audit_file;
  // Which answers wait until their audit records are on stable storage. false
  // (`audit_durable_answers = "secrets"`): one that reveals secrets, or answers under a grant;
  // any other is sent once its records are appended, and they are flushed soon after. true
  // ("all"): every answer. Either way a change is made only once its request record is on
  // stable storage (docs/server.md, the request path).
  bool durable_every_answer = false;
  // The budget of the records of refused requests (server/refusal_log.h).
  RefusalLogOptions refusals;
  // How long the scheduler's status write of a pass may take (store::Txn::deadline; 0: the
  // store's own timeout). Shorter than a pass, so a store member whose leader just died does
  // not hold the pass: it is written again next pass, elsewhere. Each failure in a row doubles
  // it (up to 16 times), so a store that is merely slow still takes it.
  std::chrono::milliseconds status_write_deadline{0};
};

// What a Kubernetes watch streams (server/kube/kube_watch.cc).
// Nodes are not workloads: their watches compare the nodes each second (kubeWatchTimer).
// kNodes, kSecrets and kConfigMaps are polled (each second, compared with what was shown), the
// others fed by the workload registry's change stream.
enum class KubeWatchKind { kPods, kJobs, kEvents, kNodes, kSecrets, kConfigMaps };

class ControlPlane {
 public:
  static core::Result<std::unique_ptr<ControlPlane>> open(
      store::Store& store, audit::Auditor& auditor, SchedulerDriver& driver,
      const model::GpuCatalogue& catalogue, const core::Clock& clock, ControlPlaneOptions options,
      secrets::Secrets* secrets = nullptr);

  // Runs on an I/O thread before the request waits for a worker (HttpServer's admitter): whom
  // the request counts against (its token's tenant) and that tenant's rate limit (429 beyond
  // it). Cheap: a token hash and a map lookup. `listeners` as for handle(). A read of a
  // workload's status in the token's own tenant is marked to run on the I/O thread
  // (Admission::run_now): it is answered from memory, and its audit records are appended
  // without waiting for a flush (a read that must wait goes on from the flusher thread).
  Admission admit(const HttpRequest& req, const std::vector<ListenerConfig>& listeners);
  // The request handler (on a worker). `listeners` are the server's listener configs (for the
  // chroot). Rate and concurrency are admit's and the pool's business, not checked here. Most
  // answers go to `reply` before it returns; a read's answer waits for its audit records to be
  // durable, and goes from the audit sink's flusher thread, so the worker does not wait.
  void handle(const HttpRequest& req, const std::vector<ListenerConfig>& listeners, Reply reply);
  // The same, waiting for the answer.
  HttpResponse handle(const HttpRequest& req, const std::vector<ListenerConfig>& listeners);
  // Records a request refused before the pipeline records it (the HTTP layer's 413, 431, 400
  // and full queues; admit's 429; a failed authentication; a path or body that does not
  // parse): one response record, in the token's tenant's stream if its token authenticates,
  // else the operator's with the presented token HMAC'd, within the refusals' budget
  // (RefusalLog). `credential`: one the body presented instead (a join token), HMAC'd too.
  // Never blocks on a disk flush; any thread.
  void recordRefusal(const HttpRequest& req, const HttpResponse& resp,
                     const std::vector<ListenerConfig>& listeners,
                     const std::string& credential = "");
  RefusalCounts refusalCounts() const { return refusals_->counts(); }

  // Creates the bootstrap root token if none exists (first start).
  core::Result<CreatedToken> bootstrapRootToken() { return tokens_->bootstrapRoot(); }
  bool rootTokenExists() const { return tokens_->rootTokenExists(); }
  // Creates a tenant and a token for it, as the API would (for `tessera dev`'s demo tenant).
  core::Result<CreatedToken> createTenantWithToken(const std::string& tenant,
                                                   const nlohmann::json& config,
                                                   const TokenInfo& parent);
  TokenManager& tokens() { return *tokens_; }
  // A credential for the agent of node `node` (declared in the config or joined): a token whose
  // policy (node-<node>) allows that node's own calls and nothing else, as a joined node gets
  // (for `tessera dev`'s agents: never the root token).
  core::Result<CreatedToken> createNodeCredential(const std::string& node);
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;
  // Persists status changes reported by the driver (its listener).
  // Stores the driver's status changes (an error: none is stored; the driver tells them again).
  core::Status onDriverChanges(const std::map<std::string, WorkloadStatus>& changed);
  // Revokes expired tokens and grants, sweeps task credentials, and drops the store's copies of
  // audit records the sinks have flushed (dropDurableAuditNotes); call about once a second.
  void housekeeping();
  // Drops the store's copies of submissions' audit records (Request::audit_notes) that their
  // sinks hold on disk now. Also call it once after closing the auditor, which flushes every
  // sink: then none is left for the next start to look at.
  void dropDurableAuditNotes();
  // Stores the scheduler's workload profile (/scheduler/profile) if it changed: from
  // housekeeping at most once a minute, and with `force` at once (a shutdown).
  void storeProfile(bool force);
  // Answers every agent's watch that waits (before the listeners stop: none then holds up the
  // shutdown); later watches answer at once.
  void stopWatches();

  struct Request;  // One request in flight (internal).

 private:
  ControlPlane(store::Store& store, audit::Auditor& auditor, SchedulerDriver& driver,
               const model::GpuCatalogue& catalogue, const core::Clock& clock,
               ControlPlaneOptions options, secrets::Secrets* secrets)
      : store_(store),
        auditor_(auditor),
        driver_(driver),
        catalogue_(catalogue),
        clock_(clock),
        options_(std::move(options)),
        secrets_(secrets),
        refusals_(std::make_unique<RefusalLog>(auditor, clock, options_.refusals)),
        audit_sinks_(auditor.sinkNames()) {}
  core::Status load();
  // Before issue #36 a stored GPU limit of 0 meant none; it is zero now, and none is -1.
  // Rewrites once (a marker key says it is done) every tenant's and team queue's record whose
  // limit is 0 or missing to -1, so each keeps the meaning it was written with. Before load()
  // reads them.
  core::Status migrateGpuLimits();

  // The store's notes that hold copies of the audit sink `i`'s records (Request::audit_notes).
  std::string auditNoteTopic(size_t i) const { return "audit/" + audit_sinks_[i]; }
  // At start: the records a sink lost (its file's tail, in a crash of the machine before a
  // flush) that the store holds copies of go back into the sink; then the copies are dropped.
  core::Status recoverAuditNotes();

  // The scheduler's feed: new workloads and cancel requests as the store's watch reports them.
  void onStoreEvents(const store::WatchResponse& w);
  core::Status resumeFeed();  // Reads /tenants/, catches the registry up, watches again.
  store::WatchCallback feedCallback();
  core::Result<SubmitCommand> commandFromRecord(const std::string& tenant,
                                                const WorkloadRecord& record) const;
  // A new stored workload to the scheduler (refused: the driver marks it failed).
  void handOver(const std::string& tenant, const WorkloadRecord& record);
  // Whether `r` is a change whose one effect is a store txn that can store a copy of its request's
  // audit record (Request::audit_notes), so that it need not wait for the log's disk flush.
  static bool preparedWhileRecorded(const Request& r);
  // Whether an agent's call is routine and not audited: from a token allowed to make it, a
  // node's watch for news (a read that changes nothing and reveals only a version), or a
  // heartbeat that carries no report and the same discovery as the node's last answered one,
  // within an hour of its last audited one. Everything else is audited: a registration, a
  // changed node (its GPUs, their MIG modes), what happened to its tasks, every refusal, and an
  // hourly trace that the node is alive. An idle fleet's audit log stays small.
  bool routineNodeCall(Request& r);
  // Heartbeat `r` of `node` was answered (audited or not): its discovery is the node's latest.
  void noteBeat(const std::string& node, const Request& r);
  // The handler of a request's route (server/route_table.h). The handlers live by family in
  // api/: tenants.cc (putTenant, tenantsApi), auth.cc (policies, tokens), workloads.cc,
  // nodes.cc (the agents' protocol too), queues.cc, audit_metrics.cc, seal.cc (the seal, the
  // identity issuer, sys/doctor, audit HMAC pointers), secrets.cc (KV, database credentials),
  // grants_leases.cc.
  HttpResponse route(Request& r);
  HttpResponse tenantsApi(Request& r);
  HttpResponse policiesApi(Request& r);
  HttpResponse tokensApi(Request& r);
  // Token roles (auth.cc): auth/token/roles[/<name>] and auth/token/create/<role>.
  HttpResponse tokenRolesApi(Request& r);
  HttpResponse createFromRole(Request& r, const std::string& role);
  // Whether the calling token may create an orphan token (no_parent): root, or sudo on the
  // create path, as in Vault.
  bool mayCreateOrphan(Request& r);
  // OK when the calling token has at least the power that policy `name` of `scope` gives
  // (`checkChildPower` in tokens.h).
  core::Status holdsPowerOf(const Request& r, const std::string& scope,
                            const std::string& name) const;
  // What the tokens' power rule reads: policies_ (under mu_) and the live grants to a tenant.
  PowerSource powerSource() const;
  HttpResponse workloadsApi(Request& r);
  // Admits and stores a new workload `name` of `tenant` with spec `body` (Tessera's workload
  // spec; `kube`: what the Kubernetes API keeps of the object, WorkloadRecord::kube): 202 once
  // the registry has it, or why not (400, 404, 409, 429, ...). Both APIs submit through here.
  // `seal`: env values sealed whatever their names (those read from Secrets).
  // Suspends or resumes workload `name` (WorkloadRecord::suspended; `also` may change more of
  // the record in the same write): the record as stored after, or why not (not found, finished,
  // cancelled).
  core::Result<WorkloadPtr> setSuspended(const std::string& tenant, const std::string& name,
                                         bool suspended,
                                         const std::function<void(WorkloadRecord&)>& also = {});
  HttpResponse submitWorkload(Request& r, const std::string& tenant, const std::string& name,
                              const nlohmann::json& body, nlohmann::json kube,
                              const std::set<std::string>& seal = {});
  // The Kubernetes API (server/kube/kube_api.cc; docs/kubernetes.md).
  HttpResponse kubeApi(Request& r);
  // Kubernetes watches (kube/kube_watch.cc): each a stream fed from the registry's changes,
  // after the list revision or the resourceVersion it names; ended at its timeoutSeconds, when
  // the client goes, or when the server stops.
  struct KubeWatch;
  HttpResponse kubeWatch(Request& r, kube::PodFilter filter, bool table, KubeWatchKind kind);
  std::string kubeEvent(const KubeWatch& w, const char* type, nlohmann::json object) const;
  // The events one change makes on a watch: none, or lines of ADDED, MODIFIED, DELETED.
  std::string kubeChangeEvents(const KubeWatch& w, const WorkloadChange& c) const;
  // Events by (revision, watch key), shared by the watches of one notification.
  using KubeEventCache = std::map<std::pair<int64_t, std::string>, std::string>;
  void kubeWatchDeliver(KubeWatch& w, KubeEventCache* cache = nullptr);
  void kubeWatchNotify(const std::set<std::string>& tenants);
  void kubeWatchTimer();  // Deadlines and bookmarks, once a second.
  void stopKubeWatches();
  // `logs -f`: a thread that reads `task_id`'s log (task `index` of workload `name`) on `node`
  // from `offset` every half second into `stream`, until the task ends, the client goes or the
  // server stops. False: too many are followed at once.
  bool followKubeLog(const std::string& tenant, const std::string& name, int index,
                     const std::string& node, const std::string& task_id, int64_t offset,
                     std::shared_ptr<ResponseStream> stream);
  // Secrets and ConfigMaps (kube/kube_secrets.cc): create, get, list, delete over the tenant's
  // KV; `table`: kubectl's human output.
  HttpResponse kubeKvObjects(Request& r, const kube::KubeTarget& t, bool table);
  // The namespaces that hold any of the tenant's Secrets, ConfigMaps or created namespaces (its
  // KV folders under kube/).
  core::Result<std::vector<std::string>> kubeKvNamespaces(const std::string& tenant) const;
  // The Secrets or ConfigMaps (`resource`) in `filter`'s namespace (every one, if it names none)
  // that `r`'s token may read and `filter` selects, by "<namespace>/<name>": a list's items, and
  // what a watch sees at each look.
  core::Result<std::map<std::string, nlohmann::json>> kubeKvSelected(
      const Request& r, const std::string& tenant, const std::string& resource,
      const kube::PodFilter& filter) const;
  // PUT and PATCH (kube/kube_change.cc): `current` with the request's change applied, into
  // `next`, and `managed` (the object's field managers) updated; or why not (409 for a stale
  // resourceVersion or a server-side apply conflict, 415, 422).
  std::optional<HttpResponse> kubeNextObject(Request& r, const kube::KubeTarget& t,
                                             const nlohmann::json& current, nlohmann::json& managed,
                                             nlohmann::json& next);
  // A pod's or Job's labels and annotations changed (nothing else of a workload may change).
  HttpResponse kubeChangeWorkload(Request& r, const kube::KubeTarget& t, const WorkloadRecord& w);
  // Namespaces (kube/kube_namespaces.cc): list, get, create, change and delete.
  HttpResponse kubeNamespaces(Request& r, const kube::KubeTarget& t, bool table);
  // Events and Nodes (kube/kube_cluster.cc): get and list, read-only.
  HttpResponse kubeClusterObjects(Request& r, const kube::KubeTarget& t, bool table);
  // The nodes `tenant` may use, as Node objects, by name.
  std::map<std::string, nlohmann::json> kubeNodes(const std::string& tenant) const;
  // A nodes watch's events since it last looked: what changed, came or went.
  // A polled watch (nodes, Secrets, ConfigMaps): what changed since it last looked. Ends one
  // whose token (or grant) is no longer valid.
  void kubePolledDeliver(KubeWatch& w);
  // What a polled watch selects now, by name ("<namespace>/<name>" for Secrets and ConfigMaps:
  // only those its token may read).
  core::Result<std::map<std::string, nlohmann::json>> kubePolledObjects(const KubeWatch& w) const;
  // A pod's env read from Secrets and ConfigMaps of namespace `ns` (sub.env_refs) into
  // sub.spec's env, as the submitter may read them; the names of those from Secrets into `seal`.
  // Its volumes' Secrets and ConfigMaps are checked the same way (readable, there, with the keys
  // they name), and read when each task starts. An answer: why not (403, 422 naming the field).
  std::optional<HttpResponse> kubeResolveEnv(Request& r, const std::string& tenant,
                                             const std::string& ns, kube::PodSubmission& sub,
                                             std::set<std::string>& seal);
  // POST of a pod or a Job (`submission` read from its body, or why not): admitted and stored as
  // Tessera's own workloads are (submitWorkload), answered 201 with the object.
  HttpResponse kubeCreate(Request& r, const std::string& tenant, const kube::KubeTarget& t,
                          core::Result<kube::PodSubmission> submission);
  // DELETE of a pod or a Job: a finished one is gone at once; one that runs or waits is stopped,
  // marked with its deletionTimestamp, and collected once it has stopped
  // (collectFinishedWorkloads).
  HttpResponse kubeDelete(const std::string& tenant, const WorkloadRecord& w);
  // GET pods/<name>/log (?tailLines=&limitBytes=): task `index`'s stdout, from its agent.
  HttpResponse kubeLogs(Request& r, const std::string& tenant, const WorkloadRecord& w, int index,
                        const std::string& pod);
  // A workload as GET workloads/<name> shows it: its record, with the scheduler's live status.
  nlohmann::json workloadData(const std::string& tenant, const WorkloadRecord& record) const;
  // LIST workloads?detail=true: every workload of `tenant` the token may read, with `index`.
  HttpResponse workloadListAnswer(const Request& r, const std::string& tenant);
  // A long poll (`?index=N&wait=30s`, at most 300 s): when the tenant's workloads are still at
  // index N, sets r.defer so that `answer` runs once any of them changes or the wait is up, and
  // returns true; false (answer now) without those parameters or once they changed.
  bool deferUntilWorkloadsChange(Request& r, const std::string& tenant,
                                 std::function<HttpResponse(const Request&)> answer);
  int64_t workloadIndex(const std::string& tenant) const;
  HttpResponse nodesApi(Request& r);
  // PUT sys/nodes/<node>/heartbeat: an agent's lease, reports and task list.
  HttpResponse heartbeatApi(Request& r, const std::string& node);
  // GET sys/nodes/<node>/tasks?index=N&wait_ms=W: waits for the node's task list to change or
  // a request for its agent (log pieces) to arrive.
  HttpResponse watchNodeApi(Request& r, const std::string& node);
  // The answer to a node's watch: its task list's version now, and the requests for its agent.
  HttpResponse watchAnswer(const std::string& node, const std::string& request_id, bool waited);
  // Nodes while the server runs (api/node_admin.cc; docs/server.md "Nodes join").
  // sys/nodes/join-tokens[/<accessor>]: create (POST {"ttl", "labels"}), list, revoke.
  HttpResponse joinTokensApi(Request& r);
  // POST sys/nodes/join (no token; the join token in the body): a new node and its credential.
  HttpResponse nodeJoinApi(Request& r);
  // The stored join token that a join's body names, or why it does not authenticate the join:
  // the body's fields or the token's type (invalid argument), an unknown or expired token
  // (permission denied), or the store (unavailable). Reads only.
  core::Result<nlohmann::json> joinTokenOf(const Request& r);
  // POST sys/nodes/<node>/credential: a joined node's new credential (the old one is revoked).
  HttpResponse nodeCredentialApi(Request& r, const std::string& node);
  // nodes/<node> (GET, DELETE: remove) and nodes/<node>/<op> (POST: cordon, uncordon, drain).
  HttpResponse nodeAdminApi(Request& r, const std::string& node, const std::string& op);
  // sys/pools[/<pool>]: pools dedicated to one tenant (POST {"tenant"}, DELETE, GET).
  HttpResponse poolsApi(Request& r);
  core::Result<CreatedToken> issueNodeToken(const std::string& node);
  // Stores node-<node>, the policy of a node's credential, and caches it.
  core::Status putNodePolicy(const std::string& node);
  core::Status putNodeRecord(const NodeRecord& rec);
  core::Result<std::optional<NodeRecord>> nodeRecord(const std::string& node);
  // At start: the stored cordons and dedicated pools, into the driver.
  core::Status loadNodeState();
  // Deletes expired join tokens from the store (housekeeping).
  void sweepJoinTokens();
  // Deletes the finished workloads whose tenant's retention has passed since they finished, as
  // Kubernetes' ttlSecondsAfterFinished or Nomad's job GC do (housekeeping); each deletion is
  // in the tenant's audit stream.
  void collectFinishedWorkloads();
  // A node as the API shows it, each GPU with the tasks on it; a tenant's view (`tenant_view`:
  // that tenant) shows its own tasks only, and leaves out its agent's health and whose pool it is.
  nlohmann::json nodeJson(const NodeState& s, const std::optional<std::string>& tenant_view) const;
  // PUT sys/nodes/<node>/logs/<id>: the agent's answer to a log request.
  HttpResponse logAnswerApi(Request& r, const std::string& node, const std::string& id);
  // GET workloads/<name>/logs?task=&stream=&offset=&limit=: a piece of a task's log, from its
  // node's agent.
  HttpResponse workloadLogs(Request& r, const std::string& tenant, const std::string& name);
  HttpResponse queuesApi(Request& r);
  // A team's queue inside the tenant: GET, or POST to create or change it.
  HttpResponse teamQueueApi(Request& r, const std::string& name);
  // Each team queue's quota (milli-GPU) of `tenant`, from the store.
  core::Result<std::map<std::string, int64_t>> teamQuotas(const std::string& tenant);
  HttpResponse deleteTeamQueue(const std::string& tenant, const std::string& name,
                               const std::string& key);
  HttpResponse auditApi(Request& r);
  // GET sys/metrics (tenant: nullopt), or GET tenants/<t>/metrics: that tenant's own numbers
  // only, under the same family names (docs/metrics.md).
  HttpResponse metrics(const std::optional<std::string>& tenant = std::nullopt);
  // The seal's unauthenticated routes (sys/seal-status, sys/init, sys/unseal,
  // sys/generate-root), answered before authentication.
  std::optional<HttpResponse> unauthenticatedSecretsApi(const HttpRequest& http,
                                                        const ScopedPath& scope,
                                                        const nlohmann::json& body);
  HttpResponse sealApi(Request& r);
  HttpResponse secretsApi(Request& r);
  HttpResponse kvApi(Request& r, const std::vector<std::string>& parts);
  // The lock that a tenant's changes which read before they write take in turn: a tenant create
  // or update (it reads the config it changes), a queue change, a creation of a capped object
  // (policies, KV keys; from the check of the cap to the write, so that two cannot take the last
  // place), and the tenant's deletion (so none of those writes lands after it). One per tenant:
  // no tenant's changes wait for another's. Taken before mu_.
  std::mutex& tenantLock(const std::string& tenant);
  // A tenant's numeric setting (a cap), or `fallback` if it has none. Takes mu_ (shared).
  int64_t tenantSetting(const std::string& tenant, const char* field, int64_t fallback) const;
  HttpResponse dbApi(Request& r, const std::vector<std::string>& parts);
  // secrets/aws/{config,roles/NAME,creds/ROLE}: STS sessions (secrets/aws_sts.h).
  HttpResponse awsApi(Request& r, const std::vector<std::string>& parts);
  // grants, grants/<id>: time-bound grants of this tenant's secrets to another tenant.
  HttpResponse grantsApi(Request& r);
  // GET sys/doctor?threshold=24h: tokens, grants and leases that live long or forever.
  HttpResponse doctorApi(Request& r);
  HttpResponse schedulerApi(Request& r);  // GET sys/scheduler: the workload profile.
  // Writes a grant event (given, used, expired, revoked) into a tenant's audit stream.
  core::Status auditGrant(const std::string& tenant, const Grant& g, const std::string& what,
                          const std::string& method, const std::string& path, int status,
                          const std::string& accessor);
  HttpResponse leasesApi(Request& r);
  // lookup, renew or revoke of a token's lease ("auth/token/create/<accessor>").
  HttpResponse tokenLeaseApi(Request& r, const std::string& op, const std::string& accessor);
  HttpResponse adminLeasesApi(Request& r);
  // The identity token of a task on an agent's node ("" when there is no issuer or it cannot
  // sign now): minted once per generation and again after half its life.
  std::string identityToken(const NodeTask& t, const std::string& node);
  // GET /.well-known/openid-configuration and /.well-known/jwks.json (public, unaudited).
  std::optional<HttpResponse> wellKnownApi(const HttpRequest& http);
  // JSON pointers of an audit record to HMAC for a request to `scope` (secret values in bodies).
  static std::vector<std::string> sensitivePointers(const ScopedPath& scope);

  core::Status putTenant(const std::string& name, const nlohmann::json& config, bool create);
  // Whether `http` reads a workload's status in `token`'s own tenant (or is an operator's such
  // read): admit's test for a request that never blocks.
  static bool isOwnStatusRead(const HttpRequest& http, const std::vector<ListenerConfig>& listeners,
                              const TokenInfo& token);
  // The pipeline's authorization of `r` by its route's Access (server/route_table.h): nullopt
  // when it may go on to its handler, else the answer (403, or why existence is unknown). Also
  // sets r.sudo where the route asks. Routes the table does not have, or whose method it does
  // not list, go on (the handler answers 404 or 405). In api/authorize.cc.
  std::optional<HttpResponse> authorize(Request& r);
  // For Access::kWrite: whether the object the request writes is there already (update) or not
  // (create). An error the pipeline answers (the barrier is sealed ...).
  core::Result<bool> objectExists(const Request& r);
  // Whether the request's token (or its grant) may do `needed` on `path` (inside the request's
  // tenant): authorize()'s test, and a handler's for paths other than the request's own (each
  // workload a list shows, the secrets a workload asks for).
  bool authorizedOn(const Request& r, const std::string& path, Capability needed) const;
  // A workload's `secrets`, checked against what the submitting token may read.
  core::Status checkWorkloadSecrets(const Request& r, const WorkloadSecrets& wanted,
                                    const std::vector<WorkloadVolume>& volumes) const;
  // Env values of workload `name` whose names look secret (audit::looksSecret), and those named
  // in `also`: sealed by the barrier into `sealed` (NAME -> hex) and moved out of cmd.env, their
  // spec value replaced by "(sealed)"; and opened again for an agent. Unavailable while the
  // barrier is sealed.
  core::Status sealEnv(const std::string& tenant, const std::string& name, SubmitCommand& cmd,
                       nlohmann::json& spec, nlohmann::json& sealed,
                       const std::set<std::string>& also = {});
  core::Result<std::string> openEnv(const NodeTask& t, const std::string& var,
                                    const std::string& hex) const;
  // 405 with `Allow`, for a request whose route does not take its method.
  static HttpResponse methodNotAllowed(const Request& r);
  HttpResponse health();
  // The 503 for a change that was made but whose response record the audit log refused.
  static HttpResponse appliedButUnrecorded(unsigned status);
  // What the pipeline needs after the handler: the request's audit record and how it went in,
  // to record the response; who asked, for a grant's record and the metrics.
  struct Finish {
    audit::AuditEvent ev;
    audit::Auditor::Appended appended;
    bool read_only = false;
    std::optional<Grant> grant;
    std::string token_tenant;
    std::string accessor;
    std::string method;
    std::string route;
    std::string tenant;
    std::chrono::steady_clock::time_point t0;
    bool reveals_secrets = false;  // The route says its answers do (RouteSpec).
  };
  // The pipeline after the handler: the response record, the grant's, the metrics. The answer,
  // or nullopt when it goes to `later` (moved from) once the audit log has it on disk.
  std::optional<HttpResponse> finish(Finish& f, HttpResponse resp, Reply& later);
  // handle's work: the answer, or nullopt when it goes to `later` (moved from) afterwards.
  // `recorded` is the request's id once its request record is in the audit log.
  std::optional<HttpResponse> serve(const HttpRequest& req,
                                    const std::vector<ListenerConfig>& listeners, Reply& later,
                                    std::string& recorded);
  // The answer to a request whose pipeline threw (`recorded`: as serve left it): 400 for a JSON
  // type error, else 500; its response record pairs with its request record if it has one.
  HttpResponse failed(const HttpRequest& req, const std::vector<ListenerConfig>& listeners,
                      const std::string& recorded, const std::exception& e);
  // The response record of `resp` to a request that the pipeline did not record (or whose
  // pipeline threw), and the source it counts against (RefusalLog::sourceOf).
  audit::AuditEvent refusalEvent(const HttpRequest& req, const HttpResponse& resp,
                                 const std::vector<ListenerConfig>& listeners, std::string& source);
  void recordMetric(const std::string& route, const std::string& tenant, unsigned status,
                    double seconds);

  store::Store& store_;
  audit::Auditor& auditor_;
  SchedulerDriver& driver_;
  const model::GpuCatalogue& catalogue_;
  const core::Clock& clock_;
  ControlPlaneOptions options_;
  secrets::Secrets* secrets_;  // Null: the server has no secrets (answers 503 there).
  std::unique_ptr<RefusalLog> refusals_;
  std::unique_ptr<TokenManager> tokens_;
  std::unique_ptr<GrantTable> grants_;
  // Changes sent with an Idempotency-Key: applied once (server/idempotency.h). Takes effect
  // when the store given to open() is an IdempotentStore (the server's is).
  std::unique_ptr<Idempotency> idempotency_;
  // Headers a 5xx carries to say what the client may do (docs/server.md, "High availability"):
  // X-Tessera-Applied: unknown, X-Tessera-Standby for a deposed leader, X-Tessera-Leader: none
  // when etcd has no quorum.
  static void markUnavailable(HttpResponse& resp);
  // Whether `http` is for the Kubernetes API (under k8s/, or a Kubernetes root on a listener
  // chrooted to a tenant): its errors are then Status objects (kube::asStatus).
  static bool isKubeTarget(const HttpRequest& http, const std::vector<ListenerConfig>& listeners);
  // route(r) for a change with `key`: once per key, else the first answer again.
  HttpResponse routeOnce(Request& r, const HttpRequest& http, const std::string& key,
                         const std::vector<std::string>& sensitive);
  std::unique_ptr<TaskSecrets> task_secrets_;  // Null without secrets_.
  std::unique_ptr<TenantUsage> usage_;
  // Why a write must be refused before it is routed: its tenant is over its byte quota (429), or
  // the disk is nearly full (507); nullopt: it may go on.
  std::optional<HttpResponse> storageRefusal(const Request& r, const std::string& tenant);
  // The least free space on `options_.disk_paths`, read at most every 500 ms, and where.
  std::pair<int64_t, std::string> freeDisk();
  std::mutex disk_mu_;
  std::chrono::steady_clock::time_point disk_checked_{};
  std::pair<int64_t, std::string> disk_free_{INT64_MAX, ""};

  int64_t loaded_revision_ = 0;  // The store revision load() read.
  // Every workload, as the store holds it (fed by the watch on /tenants/): the only copy in
  // memory. Handlers write the store, then waitForOwnWrite.
  WorkloadRegistry registry_;
  // Waits until the registry has reached a write's `revision`, so the writer reads its own
  // write (and the next status write starts from it); logs if the watch lags past a bound.
  void waitForOwnWrite(int64_t revision) const;
  const std::vector<std::string> audit_sinks_;  // The auditor's sinks' names, in its order.
  // The store's watch on /tenants/ that feeds the registry. When the store ends it (an etcd
  // backend whose history was compacted while the server was cut off), `feed_again_` reads the
  // workloads again, catches the registry up and watches on from there (resumeFeed).
  std::mutex feed_mu_;  // Guards watch_ and watching_.
  store::WatchId watch_{};
  bool watching_ = false;
  Resumer feed_again_{"the store's watch of the workloads", [this] { return resumeFeed(); }};
  NodeMailbox mailbox_;       // Log requests for agents.
  std::mutex node_admin_mu_;  // Joins, credentials and operators' node changes take turns.
  std::chrono::steady_clock::time_point join_tokens_swept_{};
  std::chrono::steady_clock::time_point workloads_collected_{};
  // The scheduler's workload profile as last stored (/scheduler/profile): its version, and when.
  uint64_t profile_stored_version_ = 0;
  std::chrono::steady_clock::time_point profile_stored_{};
  core::Status loadProfile();
  // Held from reading a workload's record to writing it back. A pass takes it inside the
  // driver's lock (onDriverChanges): never call the driver while holding it.
  std::mutex status_write_mu_;
  int status_failures_ = 0;  // Status writes failed in a row (guarded by status_write_mu_).
  // Guards the caches below. Reads (most requests) share it; writes take it alone.
  mutable std::shared_mutex mu_;
  std::map<std::string, nlohmann::json> tenants_;                  // name -> config
  std::map<std::string, std::map<std::string, Policy>> policies_;  // scope ("" admin) -> name
  // A tenant's request rate ("/admin" for admin tokens): a token bucket, and how many of its
  // requests may be handled at once, from the tenant's config (or the server's defaults).
  struct Bucket {
    double rate = 0;  // Requests per second, sustained.
    double burst = 0;
    int max_in_flight = 0;
    double tokens = 0;
    core::TimePoint last{};
  };
  // The key's bucket, created on first use. Requires mu_ (shared) and buckets_mu_.
  Bucket& bucketLocked(const std::string& key);
  // Re-reads the tenant's limits into its bucket, if it has one. Requires mu_ (shared) and
  // buckets_mu_.
  void applyLimitsLocked(const std::string& key);
  std::mutex buckets_mu_;  // Guards buckets_ (and their contents); taken after mu_, if both.
  std::map<std::string, std::unique_ptr<Bucket>> buckets_;
  // Guarded by mu_: new workloads onStoreEvents passed over because their tenant was out of
  // the caches, being deleted (by tenant): if that deletion fails, they go to the scheduler.
  std::map<std::string, std::set<std::string>> passed_over_;
  struct CachedToken {
    std::string token;
    core::WallTime refresh{};  // Minted again from here on.
    core::WallTime expires{};
  };
  std::mutex tenant_locks_mu_;                                       // Guards tenant_locks_.
  std::map<std::string, std::unique_ptr<std::mutex>> tenant_locks_;  // tenant -> tenantLock
  std::mutex identity_mu_;                                           // Guards identity_cache_.
  std::map<std::string, CachedToken> identity_cache_;                // "<task id>@<generation>"
  std::mutex beats_mu_;                                              // Guards beats_.
  // Per node: the digest of the discovery its last answered heartbeat carried, and when one was
  // last audited.
  std::map<std::string, std::pair<std::string, core::TimePoint>> beats_;
  RequestMetrics request_metrics_;  // Requests by route and code, evictions by reason.
  // Agents' watches waiting for news. Last: destroyed first, answering those still waiting
  // while everything they read is alive.
  std::unique_ptr<NodeWatchers> watchers_ = std::make_unique<NodeWatchers>();
  // Kubernetes watches, by tenant, and the thread that ends them at their deadlines.
  std::mutex kube_watch_mu_;
  std::condition_variable kube_watch_cv_;
  std::map<std::string, std::vector<std::shared_ptr<KubeWatch>>> kube_watches_;
  bool kube_watch_stop_ = false;
  std::thread kube_watch_thread_;
  struct KubeFollower {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<KubeFollower> kube_followers_;  // Guarded by kube_watch_mu_.
  // Long polls of a tenant's workloads (`?index=N&wait=30s`: the console), by tenant; a tenant
  // holds at most 64 waiting at once (more are answered at once).
  std::unique_ptr<NodeWatchers> workload_watchers_ = std::make_unique<NodeWatchers>(64);
};

}  // namespace tessera::server
