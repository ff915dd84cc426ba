// The scheduler inside the server: a single-writer component that owns `sched::Scheduler`.
//
// Request threads never touch the scheduler. They post commands (a tenant's queue to add, a
// workload to submit or cancel) and read workload status from a snapshot the driver publishes
// after every pass. One thread runs passes: at most every `pass_interval`, and at once when a
// command arrives. Starts and evictions are reported through `Listener` so the control plane
// can persist them.
//
// A node is either simulated or run by an agent (`tessera agent`, docs/agent.md):
//   - simulated: a started task "runs" for the workload's `duration` (or until cancelled when it
//     has none) and an evicted one stops at once;
//   - agent-run: the node is down until its agent's first heartbeat; each heartbeat renews its
//     lease, carries what happened to its tasks and answers with the tasks it should run, each
//     with its generation (raised each time a task is placed anew). An evicted task holds its
//     GPUs until its agent reports it stopped. A lease that lapses makes the node lost: its
//     tasks are placed elsewhere at a higher generation, and reports of the old one are ignored.
//
//   SchedulerDriver driver(catalogue, nodes, clock, options, listener);
//   driver.addTenantQueue("team-1", quota);
//   driver.submit({"team-1", "train", spec, duration});
//   driver.start(); ... driver.stop();
#pragma once

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "protocol/node_protocol.h"
#include "sched/scheduler.h"
#include "sched/shape_profile.h"
#include "sched/tenant_queues.h"
#include "server/metrics.h"
#include "server/workload_phase.h"

namespace tessera::server {

// Where a task is, as the API shows it.
struct TaskStatus {
  // `node` is also set for a finished task that ran on an agent's node (where its logs are).
  // pending, starting (placed on an agent's node, not yet started there), running, terminating,
  // finished.
  std::string state = "pending";
  std::string node;
  std::vector<int> gpus;  // Device indexes on the node.
  std::string mig_profile;
  int64_t milli_per_gpu = 0;
  // Placed on an agent's node (starting, running, terminating): what a restarted server needs to
  // keep it there (docs/server.md, "Restarts keep running work").
  int mig_start = -1;       // Its MIG slot.
  uint32_t generation = 0;  // As its agent runs it.
  uint32_t starts = 0;      // Times it was placed.
  core::WallTime started_at{};
  // A finished task: when, and how it exited (on an agent's node; -1 and 0: not known).
  core::WallTime finished_at{};
  int exit_code = -1;
  int signal = 0;
  // Finished without having run: its node could not start it (an image it could not pull, a
  // runtime missing). A failure, though it has no exit code.
  bool start_failed = false;
  std::map<std::string, int> ports;  // Allocated on its node while it runs there, by name.
  // Starting: what it waits for on its node, as its agent last said ("pulling image (312 MB of
  // 1.2 GB)"); "" : nothing said.
  std::string progress;
};

// A task an agent should run: the node protocol's answer (docs/agent.md).
// What a workload's `secrets` asks for its tasks (docs/secrets.md "Secrets into workloads"): KV
// paths and database roles of its own tenant.
struct WorkloadSecrets {
  std::vector<std::string> kv;  // KV v2 paths (under secrets/kv/data/).
  std::vector<std::string> db;  // Database roles (secrets/db/creds/<role>).
  // `pullSecret`: the KV path of the login its registry image is pulled with ("" : none). Not
  // in the task's secrets.json: only the agent sees it, for the pull.
  std::string pull;
  // Whether the tasks get a secrets.json.
  bool empty() const { return kv.empty() && db.empty(); }
};

// A folder in each of a workload's containers (`volumes`, docs/agent.md "Volumes"; a
// Kubernetes pod's secret, configMap and emptyDir volumes): the data of a KV secret of its
// tenant as files, read when a task is handed to its agent and again as the secret changes; or
// an empty tmpfs.
struct WorkloadVolume {
  std::string path;  // Absolute, in the container.
  std::string kv;    // "" : a tmpfs.
  // Key -> file (relative to `path`); empty: every key whose name is a file name, as itself.
  std::map<std::string, std::string> items;
  bool optional = false;  // No such secret (or key): an empty folder (or no such file).
  int64_t size_mib = 0;   // A tmpfs's limit; 0: the task's memory.
  bool operator==(const WorkloadVolume&) const = default;
};

// A task assigned to an agent-run node: the node protocol's message (what the agent is told;
// its credentials are added when the answer is written), and what the server keeps beside it.
struct NodeTask : protocol::AssignedTask {
  // Variables whose names look secret (audit::looksSecret), as the barrier sealed them (hex);
  // opened into the environment only in the answer to the node's agent.
  std::map<std::string, std::string> sealed_env;
  // Audiences of the task's identity token (docs/secrets.md); empty: the issuer's default.
  std::vector<std::string> identity_audiences;
  WorkloadSecrets secrets;
  std::vector<WorkloadVolume> volumes;  // Made into the message's `volumes` when it is sent.
};

// What an agent says happened to one of its tasks (the node protocol's message).
using NodeTaskReport = protocol::TaskReport;

struct HeartbeatAnswer {
  uint64_t version = 0;  // Of the node's task list; send it back to wait for a change.
  std::vector<NodeTask> tasks;
};

// What holds (part of) one GPU: a task, with its share of the GPU.
struct GpuUse {
  std::string tenant;
  std::string workload;
  int task = 0;             // Its index in the workload.
  int64_t milli = 1000;     // Of this GPU (1000: whole; less: a fractional share).
  std::string mig_profile;  // MIG: the instance's profile ("3g.40gb") and first slot.
  int mig_slot = -1;
  bool terminating = false;  // Evicted or cancelled, still stopping.
};

// One GPU of a node, as the last pass left it.
struct GpuState {
  std::string model;  // The catalogue's name ("H100-80GB").
  bool mig = false;   // In MIG mode.
  std::vector<GpuUse> uses;
  // Milli-GPU held by its uses, every tenant's, terminating ones included (at most 1000).
  int64_t allocatedMilli() const {
    int64_t milli = 0;
    for (const GpuUse& u : uses) {
      milli += u.milli;
    }
    return std::min<int64_t>(milli, 1000);
  }
};

// A node as operators see it.
struct NodeState {
  std::string name;
  model::Node node;  // Its capacity and labels.
  bool agent = false;
  std::string state;                     // simulated, waiting (no agent yet), ready, lost.
  int64_t seconds_since_heartbeat = -1;  // -1: never.
  int tasks = 0;                         // Assigned to it now (agent-run nodes).
  bool cordoned = false;                 // Takes no new tasks (cordoned or drained).
  std::string dedicated_to;              // The tenant its pool is dedicated to ("": none).
  std::vector<GpuState> gpus;            // By GPU index: model, MIG mode, who uses it.
};

inline constexpr size_t kMaxAttemptsKept = 20;  // How the last attempts ended, in a status.

struct WorkloadStatus {
  WorkloadPhase phase = WorkloadPhase::kPending;
  std::string reason;  // Why it waits, while pending (never empty then).
  std::vector<TaskStatus> tasks = {};
  // What happened to it in the pass that published this status, beyond its phase: each
  // eviction of one of its tasks, with who took the GPUs and why. Given to the listener once.
  std::vector<std::string> events = {};
  // Its attempt now (1: its first run; more after retries, SubmitCommand::restart), and how the
  // last attempts that failed ended ("attempt 1: task 0 on node gpu-a exited with code 3").
  int attempt = 1;
  std::vector<std::string> attempts = {};
  // Retries decided in that pass ("attempt 1 failed: ...; attempt 2 starts in 5 s"). Told once.
  std::vector<std::string> restarts = {};
};

struct QueueStatus {
  std::string name;
  int64_t allocated_milli_gpu = 0;
  int64_t fair_share_milli_gpu = 0;
  int64_t quota_milli_gpu = 0;
  int64_t pending_milli_gpu = 0;
};

// A task of a workload that ran on an agent's node when the server stopped, as its stored status
// says (TaskStatus): submitted with it, it goes back to that node, GPUs and generation before any
// pass, so that its agent keeps running it.
struct RestoredTask {
  int index = 0;
  std::string node;
  std::vector<int> gpus;
  std::string mig_profile;
  int mig_start = -1;
  uint32_t generation = 0;
  uint32_t starts = 0;
  core::WallTime started_at{};
  bool confirmed = false;  // Its agent had said it runs (not "starting").
  std::map<std::string, int> ports;
  // It had finished, successfully: it stays done (a Job's completion is not run again), shown
  // as it ended (`node`, `gpus`, `started_at` and these).
  bool finished = false;
  core::WallTime finished_at{};
  int exit_code = -1;
};

struct SubmitCommand {
  std::string tenant;
  std::string name;
  std::string queue = "default";     // The tenant's queue ("default", or a team's).
  sched::WorkloadSpec spec;          // spec.queue is ignored: `queue` names it.
  core::Duration duration{0};        // Simulated run time; 0 = until cancelled.
  std::vector<std::string> command;  // What an agent runs (argv).
  // Its container (docs/agent.md "Containers"): image reference ("" : a plain process), /dev/shm
  // size in MiB (0: the runtime's default) and whether its root filesystem is read-only.
  std::string image;
  int64_t shm_mib = 0;
  bool read_only_rootfs = false;
  std::map<std::string, std::string> env;  // Its own environment variables.
  // Variables that each task gets its own index in, as TESSERA_TASK_INDEX (`indexEnv`; an Indexed
  // Job's JOB_COMPLETION_INDEX).
  std::vector<std::string> index_env;
  // Ports each task gets on its node, by name (`ports`; a workload of several tasks also gets
  // "master", its MASTER_PORT): docs/agent.md "Distributed training".
  std::vector<std::string> ports;
  std::map<std::string, std::string> sealed_env;  // Secret-looking ones, sealed (hex).
  // SIGTERM to SIGKILL when an agent stops a task (preemption, cancel); on a simulated node, the
  // time an evicted task takes to stop.
  std::chrono::seconds grace{30};
  // Simulated nodes: a task evicted and placed again resumes from its last checkpoint (a multiple
  // of this since its first start); 0: from zero.
  core::Duration checkpoint_every{0};
  std::vector<std::string> identity_audiences;  // The workload's `identity.audiences`.
  WorkloadSecrets secrets;                      // The workload's `secrets`.
  std::vector<WorkloadVolume> volumes;          // Its `volumes`.
  std::vector<RestoredTask> restore;            // After a restart: where its tasks run.
  // When a task fails (exits non-zero, is killed, cannot start): the whole workload is started
  // over, every task anew with a new rendezvous, up to `attempts` times, each `delay` after the
  // failure (`restart` in the spec, `--retries` on tessera run; Nomad's restart block). Then it
  // fails, unless `keep_trying` (mode "delay"): it is tried on, the delay doubling each time
  // from at least 10 s up to 5 minutes, as Kubernetes' crash-loop back-off. With `max_delay`
  // (`maxDelay`) above `delay` the delay doubles after each failure up to it, as the Job
  // controller backs off (10 s doubling to 6 minutes, for a Kubernetes Job).
  struct Restart {
    int attempts = 0;
    std::chrono::seconds delay{0};
    std::chrono::seconds max_delay{0};
    bool keep_trying = false;
  } restart;
  // Suspended (WorkloadRecord::suspended): submitted with its tasks held, placed once resumed.
  bool suspended = false;
  // Handed over again at a restart: its shape was counted in the workload profile already.
  bool replayed = false;
  // After a server restart: the attempt it was at, and how the earlier ones ended.
  int attempt = 1;
  std::vector<std::string> attempts_ended;
};

struct DriverOptions {
  std::string policy = "tessera";
  std::chrono::milliseconds pass_interval{200};
  // Nodes run by agents (by name); the others are simulated.
  std::vector<std::string> agent_nodes;
  // An agent-run node whose agent has not renewed its lease for this long is lost.
  std::chrono::milliseconds lease_ttl{15000};
  // Counts the server's starts (kept in the store). A task's generation, as agents see it, is
  // epoch << 16 | its start count, so a task placed anew after a server restart never has the
  // generation of the process an agent still runs for it (which might hold other GPUs).
  uint32_t epoch = 0;
  // Set: the scheduler's options, whole (`policy` is then ignored); the simulator's parity
  // harness runs the server with a scenario's. Unset: `policy`, no minimum runtime.
  std::optional<sched::SchedulerOptions> scheduler;
  // The task shapes the cluster expects (the fgd and tessera policies' view of fragmentation).
  // Empty: learned from what tenants submit (sched::ShapeProfile, docs/placement.md "In the
  // live server"): each task counts, half as much after `profile_half_life`; the scheduler
  // uses the profile once `profile_min_tasks` tasks are counted.
  std::vector<sched::PodShape> typical;
  core::Duration profile_half_life = std::chrono::hours(24);
  double profile_min_tasks = 100;
  // Simulated nodes: an evicted task stops after its workload's grace period, as in `tessera
  // sim`; false: at once (`tessera dev --simulated`, where nobody waits for the simulated
  // process).
  bool simulate_grace = false;
  // What a task's agent holds it to when it asks for no CPU or memory (docs/server.md "Limits
  // on the node"): a task with GPUs gets its GPUs' share of its node's CPU and memory, one
  // without these.
  int64_t task_default_cpu_milli = 1000;
  int64_t task_default_memory_mib = 2048;
  // The ports tasks on agents' nodes are given (rendezvous; `ports` of a workload), inclusive;
  // Nomad's default dynamic range.
  int port_first = 20000;
  int port_last = 32000;
};

// The workload profile the scheduler places by (GET sys/scheduler).
struct ProfileStatus {
  std::string policy;     // The placement policy.
  bool learned = true;    // False: the typical shapes were given (DriverOptions::typical).
  double tasks_seen = 0;  // Tasks counted, decayed.
  double min_tasks = 0;   // Counted before the scheduler uses the profile.
  size_t shapes = 0;      // Distinct shapes kept.
  bool active = false;    // The scheduler places by it.
  int64_t rebuilds = 0;   // Times the scheduler was given a new profile.
  std::vector<sched::TypicalPod> typical;  // What the scheduler uses now.
  // Each placement term that works from the profile: "active", or why it is not.
  std::vector<std::pair<std::string, std::string>> terms;
};

class SchedulerDriver {
 public:
  // Called on the driver thread after each pass that changed something, with the workloads
  // whose status changed ("tenant/name" -> status). It stores them; an error keeps them for
  // the next pass, and no agent hears of the pass's starts until they are stored.
  using Listener = std::function<core::Status(const std::map<std::string, WorkloadStatus>&)>;

  static core::Result<std::unique_ptr<SchedulerDriver>> create(const model::GpuCatalogue& catalogue,
                                                               std::vector<model::Node> nodes,
                                                               const core::Clock& clock,
                                                               DriverOptions options,
                                                               Listener listener);
  ~SchedulerDriver();

  // A tenant's queue subtree: "<tenant>" under the root, with one leaf "<tenant>/default" (teams
  // add theirs with putTeamQueue). A tenant's queue that exists already (a tenant created again
  // under a deleted one's name) takes these numbers. Here and below a GPU limit is milli-GPU,
  // 0 included (no GPU at all), or sched::kNoGpuLimit for none.
  // `max_unsaved_gpu_s`: reclaim's bound on a unit's unsaved work in the tenant's queues
  // (GPU-seconds; -1: the scheduler's default).
  core::Status addTenantQueue(const std::string& tenant, int64_t quota_milli_gpu,
                              int64_t limit_milli_gpu, int64_t weight, int32_t priority,
                              int64_t max_unsaved_gpu_s = -1);
  // Adds queue "<tenant>/<queue>" under the tenant's (a team's), or changes it if it exists. A
  // new queue takes the node of one of the tenant's retired queues if there is one (the same
  // name's first, with its usage history; another's without), so a tenant's subtree never holds
  // more team queues than it had in service at once.
  core::Status putTeamQueue(const std::string& tenant, const std::string& queue,
                            int64_t quota_milli_gpu, int64_t limit_milli_gpu, int64_t weight,
                            int32_t priority, int64_t max_unsaved_gpu_s = -1);
  bool hasQueue(const std::string& tenant, const std::string& queue) const;
  // The names of the tenant's team queues in service (not "default", not retired ones).
  std::vector<std::string> teamQueues(const std::string& tenant) const;
  // The tenant's team-queue nodes in the scheduler's tree, retired ones included.
  size_t teamQueueNodeCount(const std::string& tenant);
  // Takes a team's queue out of service: no workload may be submitted to it any more. Refused
  // (failed precondition) while it has pending or running work. Its node stays in the
  // scheduler's tree, with no demand and so no share, until the tenant's next new queue takes
  // it (putTeamQueue) or the server restarts. Retiring a queue that is not in service is a
  // no-op.
  core::Status retireTeamQueue(const std::string& tenant, const std::string& queue);
  // Puts the tenant in a trust group ("": alone). Its fractional tasks share a GPU only with
  // tenants of the same group (docs/server.md, "Trust groups"); what already shares a GPU stays.
  void setTrustGroup(const std::string& tenant, const std::string& group);
  // Changes a tenant's queue (and its default leaf) to these numbers.
  core::Status updateTenantQueue(const std::string& tenant, int64_t quota_milli_gpu,
                                 int64_t limit_milli_gpu, int64_t weight, int32_t priority,
                                 int64_t max_unsaved_gpu_s = -1);
  // Whether `cmd` could ever run: a valid request, a node that can hold one task, the queue.
  core::Status check(const SubmitCommand& cmd) const;
  // Whether `cmd`'s gang (minAvailable tasks at once) fits under the GPU limit of each queue on
  // its path, its team's and its tenant's: a workload that needs more GPUs at once than a limit
  // allows could never start (a limit of 0 allows none: a frozen tenant). For new submissions
  // only: a limit lowered later leaves admitted work waiting, and work restored at a restart is
  // never refused for it. The error carries the arithmetic.
  core::Status checkLimits(const SubmitCommand& cmd) const;
  // Queues `cmd` for the next pass, after check(). Submitting a workload the driver already
  // has changes nothing (a replay or a retry).
  core::Status submit(SubmitCommand cmd);
  // A stored workload that cannot be handed over (its stored spec does not parse, or submit()
  // refused it): published as failed with `reason`, and told to the listener at the next pass
  // like any status change (so it is stored by the pass, not by the caller).
  void reject(const std::string& tenant, const std::string& name, std::string reason);
  void cancel(const std::string& tenant, const std::string& name);
  // Suspends a workload (its running tasks stop, with their grace period; none is placed) or
  // resumes it, at the next pass. Nothing for one that has finished.
  void setSuspended(const std::string& tenant, const std::string& name, bool suspended);
  // Forgets the workloads of a deleted tenant (all finished), so that a tenant created again
  // under the same name can reuse their names.
  void forgetTenant(const std::string& tenant);
  // Forgets a finished workload (collected after its retention), so that its name can be used
  // again; a workload not finished is kept. Tasks of a workload submitted again under the name
  // get generations past the old ones'.
  void forgetWorkload(const std::string& tenant, const std::string& name);
  // The last published status of a workload (nullopt if the driver has never seen it).
  std::optional<WorkloadStatus> status(const std::string& tenant, const std::string& name) const;
  std::vector<QueueStatus> queues(const std::string& tenant) const;
  // Every node in service (removed ones are not), in index order.
  std::vector<NodeState> nodeStates() const;

  // Nodes while the driver runs (docs/server.md, "Nodes join"). A name is that of one node in
  // service; a removed node's name may join again (as a new node).
  // A node run by an agent that joined (or that joined before a restart): down until its agent's
  // first heartbeat. Errors: a node of that name is in service; an invalid node.
  core::Status addAgentNode(model::Node node);
  // A cordoned node takes no new tasks; what runs there stays. Not found: no such node.
  core::Status setCordoned(const std::string& node, bool cordoned);
  // Cordons the node and, at the next pass, evicts every task on it (each with its grace
  // period), to be placed again elsewhere; each evicted workload gets an event saying so.
  core::Status drain(const std::string& node);
  // Takes an agent-run node out of service: its agent's heartbeats are refused from now on.
  // Failed precondition while tasks are assigned to it (drain it first) or for a simulated
  // node; not found: no such node.
  core::Status removeNode(const std::string& node);
  // Dedicates the pool `pool` (the nodes labelled pool=<pool>, now and when they join) to
  // `tenant`'s tasks; "" opens it to every tenant again. What runs there stays.
  void dedicatePool(const std::string& pool, const std::string& tenant);
  std::map<std::string, std::string> dedicatedPools() const;
  // An agent's heartbeat for `node`: renews its lease (bringing it back if it was lost or
  // waiting), queues its reports for the next pass, and answers with the tasks it should run.
  // `gpu_models` are the catalogue names of the GPUs the agent found, in index order: they must
  // be the node's; `mig_modes` says which of them have MIG mode on (missing: off), and MIG
  // slices go only to those (other work only to the rest), except GPUs whose agent switches
  // their mode itself (kAny: either kind of work while idle). Not found: no such node; failed
  // precondition: a simulated node, or other GPUs.
  // `address`: what its tasks' peers reach the node at (the rendezvous' hosts); "" leaves the
  // one known.
  // `mig_idle`: per GPU, the MIG instances the agent left from tasks that ended (the next task
  // of their profile is placed in one: no re-layout).
  core::Result<HeartbeatAnswer> heartbeat(
      const std::string& node, const std::vector<std::string>& gpu_models,
      std::vector<NodeTaskReport> reports, const std::vector<model::MigMode>& mig_modes = {},
      const std::string& address = "",
      const std::vector<std::vector<model::MigInstance>>& mig_idle = {});
  // Waits up to `wait` for the agent-run `node`'s task list to move past `known_version`, and
  // returns its version then (at once if it already has). Not found: not an agent-run node.
  core::Result<uint64_t> watchNode(const std::string& node, uint64_t known_version,
                                   std::chrono::milliseconds wait);
  // Every task now assigned to an agent-run node, as "<task id>@<generation>": a task's
  // credentials live as long as it is in this set.
  std::set<std::string> liveTasks() const;
  // Called on the pass thread with the name of each agent-run node whose task list changed (a
  // watch of it can be answered). Set before start().
  void setNodeListener(std::function<void(const std::string& node)> listener) {
    node_listener_ = std::move(listener);
  }
  // Whether `node` is run by an agent (its heartbeats then count against their own key).
  bool isAgentNode(const std::string& node) const {
    std::lock_guard lock(mu_);
    return agent_index_.contains(node);
  }
  // The workload profile and what the scheduler does with it. Waits for a pass in progress.
  ProfileStatus profileStatus() const;
  // The profile's shapes and weights (to store it), and back (before start(): a restart).
  std::vector<sched::ShapeProfile::Entry> profileEntries() const;
  void restoreProfile(const std::vector<sched::ShapeProfile::Entry>& entries);
  // Raised whenever the profile changes.
  uint64_t profileVersion() const;
  // Milliseconds the last pass took, for metrics.
  double lastPassMs() const;
  int64_t passes() const;
  // Every pass's duration so far, as a histogram (kPassSecondsBounds). Thread-safe.
  HistogramData passSeconds() const { return pass_seconds_.snapshot(); }

  // Runs the first pass on the calling thread (what was restored is placed and published
  // before the caller starts answering agents), then the others on the driver's own thread.
  void start();
  void stop();
  // Runs one pass on the calling thread (tests; the driver thread must not be running).
  void runOnce();
  // For a harness that runs passes itself on a virtual clock (the simulator's parity harness):
  // submissions queued for the next pass, and the earliest time a simulated task finishes or an
  // evicted one stops (none: nothing will happen on simulated nodes without a pass).
  size_t queuedSubmits() const;
  std::optional<core::TimePoint> nextSimulatedEvent() const;

 private:
  SchedulerDriver(const core::Clock& clock, DriverOptions options, Listener listener)
      : clock_(clock), options_(std::move(options)), listener_(std::move(listener)) {}
  void loop();
  void pass();
  WorkloadStatus statusOf(sched::WorkloadId w) const;
  // statusOf's phase and reason, without the tasks (the pass compares waiting workloads' often).
  WorkloadStatus phaseOf(sched::WorkloadId w) const;
  // Whether any node in service could ever hold `min_available` tasks of `r` of `tenant`'s at
  // once (an empty pool: yes, nodes join later); else why not. Caller holds mu_.
  // Verdicts are kept by request shape until the nodes change (judgeCapacity walks them all).
  core::Status checkCapacity(const std::string& tenant, const model::TaskRequest& r,
                             int64_t min_available) const;
  core::Status judgeCapacity(const std::string& tenant, const model::TaskRequest& r,
                             int64_t min_available) const;
  // Agent-run nodes: apply reports and lapsed leases (in a pass), then republish task lists.
  void applyNodeEvents(core::TimePoint now, std::vector<sched::WorkloadId>& touched);
  void applyReport(sched::NodeIndex n, const NodeTaskReport& r,
                   std::vector<sched::WorkloadId>& touched);
  void failWorkload(sched::WorkloadId w, const std::string& reason);
  // Task `t` of `w` failed (`what` says how): after its restart policy's delay the workload is
  // started over, or, when its tasks do not run together (parallelism below tasks), that task
  // alone is run again; it fails once its attempts are used (each failed task uses one then).
  void taskFailed(sched::WorkloadId w, sched::TaskId t, const std::string& what);
  // A task of `w` was interrupted (its node lost, its agent fenced): if `w` is a gang, all of
  // its tasks start over together.
  void restartGang(sched::WorkloadId w);
  // Starts over the workloads whose retry delay is over (each pass).
  void startRetries(core::TimePoint now, std::vector<sched::WorkloadId>& touched);
  // Per workload: its attempt now, how earlier ones ended, when the next starts (while one is
  // due), and the retries to tell the listener.
  struct Attempts {
    int attempt = 1;
    std::vector<std::string> ended;
    std::optional<core::TimePoint> next_at;
    core::WallTime next_wall{};
    std::vector<std::string> untold;
    std::vector<sched::TaskId> retry_tasks;  // Set: those alone run again at next_at.
  };
  std::vector<Attempts> attempts_;
  std::set<sched::WorkloadId> retrying_;  // Those whose next attempt is due (next_at).
  // Releases the unconfirmed tasks that the agents' heartbeats since have proved not running;
  // `answered` is each agent node's count of heartbeats whose reports have been applied.
  void releaseUnconfirmed(const std::map<sched::NodeIndex, uint64_t>& answered,
                          std::vector<sched::WorkloadId>& touched);
  // The victim's event for an eviction: who took its GPUs and why.
  std::string evictionEvent(const sched::EvictDecision& e) const;
  void publishNodeTasks();
  // Evicts the tasks on the nodes being drained (a pass, before its decisions).
  void applyDrains(const std::vector<std::string>& drains, core::TimePoint now,
                   std::vector<sched::WorkloadId>& touched,
                   std::map<sched::WorkloadId, std::vector<std::string>>& events);
  // An evicted task on a simulated node: it keeps the work of its last checkpoint and stops at
  // once or after its grace period.
  void stopSimulated(sched::TaskId t, sched::WorkloadId w, core::TimePoint now);
  // The tenant `node`'s pool is dedicated to ("": none). Caller holds mu_.
  std::string poolTenant(const model::Node& node) const;
  // Whether `node`'s pool admits `tenant`'s tasks. Caller holds mu_.
  bool admits(const model::Node& node, const std::string& tenant) const;
  // The index of the node in service named `node`. Caller holds mu_.
  core::Result<sched::NodeIndex> indexOf(const std::string& node) const;
  // What task `t`'s agent is told; `addresses`: the agent nodes' addresses (its peers').
  NodeTask nodeTask(sched::TaskId t,
                    const std::map<sched::NodeIndex, std::string>& addresses) const;
  // For Scheduler::cancel: whether a task is one an agent was given (its process must stop
  // before its GPUs are free).
  std::function<bool(sched::TaskId)> stopsOnAgent();
  uint32_t generationOf(sched::TaskId t) const;
  // Every node's GPUs with the tasks on them, from the scheduler (on the driver thread).
  std::map<sched::NodeIndex, std::vector<GpuState>> gpuMap() const;
  std::vector<GpuState> gpusOf(sched::NodeIndex n) const;  // One node's entry of gpuMap().
  uint64_t gpu_map_journal_ = ~uint64_t{0};  // The cluster journal's end at the last gpuMap().

  const core::Clock& clock_;
  const model::GpuCatalogue* catalogue_ = nullptr;
  DriverOptions options_;
  Listener listener_;
  std::map<std::string, WorkloadStatus> unsaved_;  // The listener failed: told again next pass.
  int unsaved_passes_ = 0;                         // Passes in a row whose listener failed.
  std::function<void(const std::string& node)> node_listener_;
  // Every node the scheduler has, by index (removed ones too: indexes never move). Grows when
  // a node joins, under both pass_mu_ and mu_: either lock is enough to read it.
  std::vector<model::Node> nodes_;
  // Held for a whole pass, and to change the scheduler (queues). Taken before `mu_`, never
  // while holding it.
  mutable std::mutex pass_mu_;
  std::unique_ptr<sched::Scheduler> scheduler_;  // Guarded by pass_mu_.

  // Guards everything below; held only briefly, so a request thread reading a status never
  // waits for a pass.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<SubmitCommand> submits_;
  std::map<std::string, WorkloadStatus> rejected_;  // Guarded by mu_: told at the next pass.
  std::vector<std::pair<std::string, std::string>> cancels_;
  struct Suspend {
    std::string key;  // tenant/name
    bool suspended = false;
  };
  std::vector<Suspend> suspends_;
  // Suspends (or resumes) `w`: its running tasks are evicted, each with an event.
  void applySuspend(sched::WorkloadId w, bool suspended, core::TimePoint now,
                    std::map<sched::WorkloadId, std::vector<std::string>>& events);
  std::map<std::string, WorkloadStatus> published_;
  std::map<sched::NodeIndex, std::vector<GpuState>> gpu_map_;  // As the last pass left it.
  // Submissions carrying tasks that ran before this start (SubmitCommand::restore) whose
  // nodes' task lists are not yet published: until then a heartbeat is refused, not answered
  // with a list that leaves those tasks out (their agent would stop them).
  int unpublished_restores_ = 0;
  int restores_taken_ = 0;  // Of those, taken by passes: published with the next lists.
  std::vector<QueueStatus> queue_status_;
  std::map<std::string, sched::QueueId> leaves_;  // "tenant/queue" -> leaf.
  // GPU limit by queue ("tenant", "tenant/queue"; sched::kNoGpuLimit: none), for checkLimits
  // without the scheduler's lock.
  std::map<std::string, int64_t> gpu_limits_;
  // Agent-run nodes, by node index.
  struct AgentNode {
    bool registered = false;  // An agent has been heard from.
    bool up = false;          // Its lease holds.
    bool restored = false;    // Given a lease at start for the tasks it ran (restoreTasks).
    core::TimePoint expires{};
    core::TimePoint last_heartbeat{};
    bool back = false;        // Came (back) since the last pass: the scheduler must learn it.
    uint64_t heartbeats = 0;  // Answered so far.
    std::vector<NodeTaskReport> reports;    // Since the last pass.
    std::vector<model::MigMode> mig_modes;  // Per GPU, as its agent last reported.
    bool mig_changed = false;               // Since the last pass: the scheduler must learn it.
    std::vector<std::vector<model::MigInstance>> mig_idle;  // Per GPU, as last reported.
    bool mig_idle_changed = false;
    // Of its task list: starts at a random value (freshAgentNode), so a version an agent got
    // from an earlier leader is never taken for this one's (a watch would wait on a list that
    // changed).
    uint64_t version = 0;
    std::vector<NodeTask> tasks;  // Published.
    std::string address;          // Its tasks' peers reach it there; "" : not known yet.
  };
  // A new agent node's entry, its version at a random start.
  static AgentNode freshAgentNode();
  // Ports allocated to tasks on agents' nodes, by name, while they run there; and per node where
  // the search for a free port goes on, so that a task placed again gets new ones. Pass only.
  std::map<sched::TaskId, std::map<std::string, int>> task_ports_;
  std::map<sched::NodeIndex, int> port_cursor_;
  // Gives task `t`, just placed on an agent's node, its workload's ports there.
  void allocatePorts(sched::TaskId t);
  // Changed (nodes joining, removed) under both pass_mu_ and mu_: either lock is enough to read.
  std::map<sched::NodeIndex, AgentNode> agents_;
  std::map<std::string, sched::NodeIndex> agent_index_;  // Name -> index.
  std::map<std::string, sched::NodeIndex> node_index_;   // Every node in service: name -> index.
  std::set<sched::NodeIndex> cordoned_;
  std::map<std::string, std::string> pool_tenants_;  // Dedicated pools: pool -> tenant.
  // Changes whenever what admission judges by changes (a node added or removed, a pool
  // dedicated): a waiting workload's "unplaceable" verdict is computed again only then.
  uint64_t nodes_generation_ = 0;  // Guarded by mu_.
  // checkCapacity's verdicts by request shape, for nodes_generation_ capacity_generation_.
  mutable std::map<std::string, core::Status> capacity_verdicts_;  // Guarded by mu_.
  mutable uint64_t capacity_generation_ = UINT64_MAX;
  struct Verdict {
    uint64_t generation = UINT64_MAX;
    bool gang = true;     // Judged for its gang minimum (nothing of it running), or for one task.
    std::string problem;  // "": some node could hold it.
  };
  mutable std::map<sched::WorkloadId, Verdict> unplaceable_;  // Guarded by pass_mu_.
  std::vector<std::string> drains_;                           // Nodes to drain at the next pass.
  std::condition_variable node_changed_;
  double last_pass_ms_ = 0;
  int64_t passes_ = 0;
  Histogram pass_seconds_{kPassSecondsBounds};  // Its own lock: observed at the end of a pass.
  bool stopping_ = false;
  std::thread thread_;

  // Driver-thread state, guarded by pass_mu_.
  // The workload profile (learned when options_.typical is empty): counts a new submission's
  // tasks; gives the scheduler the typical shapes once enough are counted, then again after
  // 10 % more, or 10 minutes after a change.
  sched::ShapeProfile profile_{{}};
  void learnShape(const SubmitCommand& c, core::TimePoint now);
  void refreshTypical(core::TimePoint now);
  uint64_t profile_applied_version_ = 0;
  bool profile_active_ = false;
  double profile_added_ = 0;  // Tasks counted since the scheduler was last given the profile.
  double profile_applied_seen_ = 0;
  core::TimePoint profile_applied_at_{};
  int64_t profile_rebuilds_ = 0;
  // Tenants as the scheduler knows them (its trust rule compares these), from 1, and trust
  // groups by name, from 1 (0: none).
  std::map<std::string, model::TenantId> tenant_ids_;
  std::map<std::string, uint32_t> trust_group_ids_;
  model::TenantId tenantId(const std::string& tenant);
  // Tasks evicted or cancelled on an agent's node that the agent never said it started, with the
  // number of heartbeats it had been answered when the task left its list: a later heartbeat
  // that does not report it started proves it is not running (docs/agent.md, "Tasks that never
  // started"), and its resources are released.
  struct Unconfirmed {
    sched::NodeIndex node = 0;
    uint64_t answered = 0;
  };
  std::map<sched::TaskId, Unconfirmed> unconfirmed_;
  std::map<std::string, sched::WorkloadId> ids_;
  std::vector<std::string> keys_;                   // WorkloadId -> "tenant/name".
  std::map<sched::TaskId, core::TimePoint> ends_;   // Running simulated tasks.
  std::map<sched::TaskId, core::TimePoint> stops_;  // Evicted simulated tasks, stopping.
  std::set<sched::WorkloadId> waiting_;  // Pending, as last published: their reasons may change.
  // When their reasons were last compared (each pass while there are few; at most once a second
  // when there are many, so a pass is not O(every pending workload)).
  core::TimePoint waiting_checked_{};
  std::map<sched::TaskId, core::Duration> kept_;  // Simulated tasks' work kept by checkpoints.
  std::vector<bool> cancelled_;
  std::vector<std::string> failed_;   // Why a workload failed ("" : it did not).
  std::vector<SubmitCommand> specs_;  // Command, env, duration of each workload, for agents.
  // Per workload: added to its tasks' start counts in their generations (generationOf); the
  // highest start count of the forgotten workload of the same name, if there was one.
  std::vector<uint32_t> start_offset_;
  std::map<std::string, uint32_t> retired_starts_;  // "tenant/name" of forgotten workloads.
  // Notes a forgotten workload's highest start count (forgetWorkload, forgetTenant).
  void retire(const std::string& key, sched::WorkloadId w);
  std::map<std::string, sched::TaskId> task_ids_;  // NodeTask id -> task.
  std::map<sched::TaskId, bool> agent_started_;    // Placed on an agent's node: started there?
  // What a task placed on an agent's node and not yet started waits for (its image's download),
  // at that generation, as its agent last reported.
  std::map<sched::TaskId, std::pair<uint32_t, std::string>> start_progress_;
  // Where and how a task last ran, kept once it finishes (the API shows a finished task's node,
  // GPU indexes, times and exit code: an Xid error in a node's log is traced back to the work).
  struct LastRun {
    sched::NodeIndex node = 0;
    std::vector<int> gpus;
    core::WallTime started_at{};
    core::WallTime finished_at{};  // {} while it runs.
    int exit_code = -1;            // As its agent reported it; -1: none (killed, or simulated).
    int signal = 0;
    bool start_failed = false;  // Its node could not start it (TaskStatus::start_failed).
  };
  std::map<sched::TaskId, LastRun> ran_;
  // Notes that `t` started now where the scheduler placed it (ran_).
  void noteStarted(sched::TaskId t);
  // Tasks assigned to each agent-run node (running there at their current generation).
  std::map<sched::NodeIndex, std::set<sched::TaskId>> node_tasks_;
  // Tasks put back where they ran before this start: their generation, which they keep until
  // they are placed anew (TaskInfo::starts moves past `starts`).
  struct Restored {
    uint32_t starts = 0;
    uint32_t generation = 0;
  };
  std::map<sched::TaskId, Restored> restored_;
  // Puts a just-submitted workload's restored tasks back (runOnce, before the pass).
  void restoreTasks(sched::WorkloadId w, const std::vector<RestoredTask>& tasks,
                    core::TimePoint now);
};

}  // namespace tessera::server
