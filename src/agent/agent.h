// The agent's loop, apart from how it talks to the server: each `tick` sends what happened to
// tasks since the last one and renews the node's lease, gets back the tasks the node should run
// (each with its generation), and makes the runtime match:
//   - a task assigned and not running (at that generation) is started;
//   - a running task no longer assigned, or assigned at a newer generation (it was placed again
//     after this node was thought lost), is stopped with its grace period;
//   - a task that ended is reported once, with its generation, and not started again for that
//     generation.
// Fencing: when no heartbeat has succeeded for `fence_after` (shorter than the server's lease),
// the agent stops every task itself, before the server can place them elsewhere, so a task
// never runs on two nodes at once. Unless the servers say that no leader can act (etcd without
// quorum): then no one can place the tasks elsewhere, and they run on up to `no_leader_bound`;
// a new leader gives every node a full lease before it moves anything.
//
// `ControlPlaneClient` is what this loop needs from the server; `tessera agent run` implements
// it over HTTPS (cli/agent_command.cc, docs/agent.md "The node protocol").
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/credentials.h"
#include "agent/gpu_discovery.h"
#include "agent/mig_manager.h"
#include "agent/runtime.h"
#include "core/clock.h"
#include "core/status.h"
#include "protocol/node_protocol.h"

namespace tessera::agent {

// One task the server wants on this node.
struct TaskAssignment {
  TaskSpec spec;                           // spec.id is the task's id on the node.
  uint32_t generation = 0;                 // Raised each time the task is placed anew.
  std::chrono::milliseconds grace{10000};  // SIGTERM to SIGKILL when it is stopped.
  // Set: the task cannot run on this node, and why (the agent reports it as failed to start).
  std::string invalid;
  // Credential files for the task (name -> content, e.g. "identity-token"): kept in its
  // credentials folder while it is assigned here, rewritten when the server sends a new version.
  std::map<std::string, std::string> credentials;
  // Folders in its container (docs/agent.md "Volumes"): those with files are kept in its
  // credentials folder as `volume-<i>` (CredentialFiles::writeVolume) and rewritten when the
  // server sends new files; tmpfs ones are made by the container's runtime.
  std::vector<protocol::TaskVolume> volumes;
  // A MIG slice: the GPU (its index here) and the instance (catalogue profile of the GPU's
  // model, start slice) the scheduler chose. The agent makes the instance before the task
  // starts and pins the task to its MIG device (spec.gpus.uuids). gpu -1: no MIG slice.
  struct Mig {
    int gpu = -1;
    model::MigInstance instance;
  } mig;
};

struct TaskReport {
  // kStarting: not yet running, and what it waits for (`progress`: its image's download).
  enum class State { kRunning, kExited, kFailedToStart, kStarting };
  std::string id;
  uint32_t generation = 0;
  State state = State::kRunning;
  TaskExit exit;         // kExited.
  std::string error;     // kFailedToStart.
  std::string progress;  // kStarting: "pulling image (312 MB of 1.2 GB)".
};

class ControlPlaneClient {
 public:
  virtual ~ControlPlaneClient() = default;
  // Renews the node's lease (registering it the first time) with the reports since the last
  // call, and returns the tasks the node should run now. An error means the server was not
  // reached or refused: the reports are sent again next time.
  virtual core::Result<std::vector<TaskAssignment>> heartbeat(
      const std::string& node, const NodeGpus& gpus, const std::vector<TaskReport>& reports) = 0;
  // After a failed heartbeat: whether the replica that answered knows that no leader can act now
  // (etcd has no quorum, or no replica holds the leader key), so nobody can place this node's
  // tasks elsewhere meanwhile (X-Tessera-Leader: none).
  virtual bool noLeaderCanAct() const { return false; }
};

struct AgentOptions {
  // No successful heartbeat for this long: stop every task (the server's lease is longer).
  std::chrono::milliseconds fence_after{10000};
  std::chrono::milliseconds fence_grace{2000};  // SIGTERM to SIGKILL when fencing.
  // While the servers answer that no leader can act (noLeaderCanAct), tasks keep running up to
  // this long after the last successful heartbeat, not only `fence_after`: no one can place them
  // elsewhere meanwhile (a control plane whose etcd lost quorum, as kubelets keep pods).
  std::chrono::milliseconds no_leader_bound{600'000};
  // SIGTERM to SIGKILL for a task the server no longer assigns here, when it was not started by
  // this agent (adopted); otherwise the grace it was assigned with.
  std::chrono::milliseconds unassigned_grace{10000};
  // Tasks started at once (each start mostly waits: fork, exec, joining cgroups).
  int parallel_starts = 8;
  // Called after each successful heartbeat, before the tasks are reconciled, with how long the
  // tasks may run on from now without another (the agent renews the lease file its tasks' shims
  // watch, ProcessRuntimeOptions::lease_file): `fence_after`; and after a failed one while no
  // leader can act, with what is left of `no_leader_bound` (at most `fence_after`).
  std::function<void(std::chrono::milliseconds)> renewed;
  // Where tasks' credential files go; null: credentials are not delivered.
  const CredentialFiles* credentials = nullptr;
  // Makes the MIG instances of MIG tasks (NVML, or recorded on simulated GPUs); null: MIG tasks
  // fail to start, saying so.
  MigManager* mig = nullptr;
  // The agent turns MIG mode on and off itself (`gpus { mig_mode = "managed" }`): its
  // MIG-capable GPUs are reported as switchable, and a GPU is switched, while idle, to the mode
  // the task placed on it needs.
  bool mig_managed = false;
  // Where the MIG capability device nodes are ("/dev/nvidia-caps" on a machine that has them;
  // "": none, simulated GPUs), and the driver's table of their minors: a MIG task may open
  // its own GPU and compute instance's nodes (nvidia-cap<minor>) and no other instance's.
  std::string mig_caps_dir;
  std::string mig_minors = "/proc/driver/nvidia-caps/mig-minors";
  // Called when the loop should tick soon (an image pulled, its progress): the loop's wakeup.
  std::function<void()> wake;
  // A pull that failed for a cause that may pass (the registry unreachable, a 5xx or 429, its
  // token service down: kUnavailable) is tried again this many times, `pull_backoff` after the
  // first failure and doubling (10 s, 20 s ... 160 s: about 5 minutes), the task waiting in
  // ImagePullBackOff with its GPUs, as a kubelet does; then, or at once for a refusal or an image
  // that is not there, the task fails to start.
  int pull_retries = 5;
  std::chrono::milliseconds pull_backoff{10000};
};

// The MIG capability device nodes a process of MIG device `device` opens (its GPU instance's
// and compute instance's access nodes, <caps_dir>/nvidia-cap<minor>), from the driver's table
// of their minors (/proc/driver/nvidia-caps/mig-minors: "gpu0/gi1/access 12" lines, the GPU by
// its minor). None when the table is unreadable or the ids unknown.
std::vector<std::string> migCapabilityNodes(const std::string& minors_file,
                                            const std::string& caps_dir, int gpu_minor,
                                            const MigDevice& device);

class Agent {
 public:
  // `runtime`'s exits must be passed to onExit (the runtime's OnExit callback).
  Agent(std::string node, NodeGpus gpus, ControlPlaneClient& server, Runtime& runtime,
        const core::Clock& clock, AgentOptions options = {});
  ~Agent();  // Stops the image pulls under way, and waits for them.
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Tasks a restarted agent found still running (or ended meanwhile) from before
  // (ProcessRuntime::adopt; each tag is the generation the task was started at): running ones
  // count as started here, and the server's next answer keeps or stops them; ended ones are
  // reported. Call before the first tick.
  void adopt(const std::vector<AdoptedTask>& tasks);
  // One round with the server; returns its error when it could not be reached (after fencing,
  // if it has been unreachable too long).
  core::Status tick();
  // The runtime reports that a task ended.
  void onExit(const std::string& id, const TaskExit& exit);

  bool fenced() const;
  // Reports not yet delivered (tasks the last tick started, say): the loop sends them at once
  // rather than at the next renewal, so a task shows as running as soon as it runs.
  bool hasReports() const;
  // Tasks running and the generation each runs at.
  std::map<std::string, uint32_t> running() const;

 private:
  void reconcile(const std::vector<TaskAssignment>& wanted);
  // Writes the wanted tasks' new credential files and removes the folders of tasks gone from
  // here; returns, per task, why its files could not be written.
  std::map<std::string, std::string> syncCredentials(const std::vector<TaskAssignment>& wanted);
  void startOne(const TaskAssignment& a);
  // Starts the download of `a`'s image on a thread of its own (Runtime::pull); the task starts
  // at the first reconcile after it ended. Called with mu_ held.
  // `failures`: how many times this generation's pull failed already (ImagePullBackOff).
  void startPullLocked(const TaskAssignment& a, int failures = 0);
  // Makes the MIG instances of the MIG tasks in `starts` (one layout per GPU: the instances of
  // its tasks still running and of those starting) and points each at a copy in `prepared`
  // that names its MIG device, or says why it cannot start.
  void prepareMig(const std::vector<TaskAssignment>& wanted,
                  std::vector<const TaskAssignment*>& starts, std::deque<TaskAssignment>& prepared);
  // On a managed node (AgentOptions::mig_managed), before prepareMig: turns each GPU that
  // starting tasks use to the MIG mode they need (on for a MIG slice, off for a whole GPU or a
  // share). A task whose GPU could not be switched gets a copy in `prepared` that says why.
  void switchMigModes(std::vector<const TaskAssignment*>& starts,
                      std::deque<TaskAssignment>& prepared);
  void fence();

  const std::string node_;
  const NodeGpus gpus_;
  ControlPlaneClient& server_;
  Runtime& runtime_;
  const core::Clock& clock_;
  const AgentOptions options_;

  mutable std::mutex mu_;
  std::map<std::string, uint32_t> running_;  // Started and not yet ended.
  std::set<std::string> stopping_;           // Asked to stop; their exit is pending.
  std::map<std::string, std::chrono::milliseconds> graces_;  // Of the tasks started here.
  std::set<std::pair<std::string, uint32_t>> done_;          // Ended at that generation: not again.
  std::map<std::string, TaskAssignment::Mig> mig_live_;      // MIG slices of tasks not yet ended.
  // Each GPU's MIG instances after its last layout: those tasks use and those left idle.
  std::map<int, std::set<model::MigInstance>> mig_layout_;
  // Managed nodes: GPUs whose MIG mode the agent switched (index -> on), over gpus_' modes.
  std::map<int, bool> mig_switched_;
  // gpus_ with each GPU's idle MIG instances (the layout's not in use), as heartbeats send it.
  NodeGpus withIdleMig() const;
  std::vector<TaskReport> outbox_;  // Not yet acknowledged by the server.
  core::TimePoint last_ok_{};       // The last successful heartbeat (or the agent's start).
  core::TimePoint last_none_{};     // The last answer that no leader can act (while holding on).
  // Credential files written, per task (name -> content). Only the agent loop's thread
  // (reconcile, and fence from tick) touches it.
  std::map<std::string, std::map<std::string, std::string>> written_;
  // Tasks that ended since the last sync (guarded by mu_): their shim may have removed their
  // credentials (it does when the agent is not its parent), so they are written again if the
  // task is assigned here again.
  std::set<std::string> credentials_stale_;
  bool fenced_ = false;
  bool holding_on_ = false;  // Heartbeats fail, and no leader can act: tasks run on.
  // Image pulls (Runtime::needsPull), by task: under way, or ended with `result`; the task
  // starts (or fails to) at the next reconcile. `progress` is reported while it is new.
  struct Pull {
    uint32_t generation = 0;
    bool done = false;
    core::Status result;
    std::string progress;
    bool progress_sent = true;
    std::thread thread;
    int failures = 0;  // Transient failures of this generation's pull so far.
    std::optional<core::TimePoint> retry_at;  // Backing off after one: when it is tried again.
  };
  std::map<std::string, Pull> pulls_;
  std::atomic<bool> cancel_pulls_{false};  // The agent is going: pulls stop.
};

}  // namespace tessera::agent
