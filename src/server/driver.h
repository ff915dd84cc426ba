// The scheduler inside the server: a single-writer component that owns `sched::Scheduler`.
//
// Request threads never touch the scheduler. They post commands (a tenant's queue to add, a
// workload to submit or cancel) and read workload status from a snapshot the driver publishes
// after every pass. One thread runs passes: at most every `pass_interval`, and at once when a
// command arrives. Starts and evictions are reported through `Listener` so the control plane
// can persist them.
//
// Nodes are simulated until agents exist (issue #5): a started task "runs" for the workload's
// `duration` (or until cancelled when it has none) and an evicted one stops at once.
//
//   SchedulerDriver driver(catalogue, nodes, clock, options, listener);
//   driver.addTenantQueue("team-1", quota);
//   driver.submit({"team-1", "train", spec, duration});
//   driver.start(); ... driver.stop();
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "sched/scheduler.h"

namespace tessera::server {

// Where a task is, as the API shows it.
struct TaskStatus {
  std::string state = "pending";  // pending, running, terminating, finished.
  std::string node;
  std::vector<int> gpus;  // Device indexes on the node.
  std::string mig_profile;
  int64_t milli_per_gpu = 0;
};

struct WorkloadStatus {
  std::string phase = "pending";  // pending, running, succeeded, cancelled, failed.
  std::string reason;             // Why it waits, while pending.
  std::vector<TaskStatus> tasks;
};

struct QueueStatus {
  std::string name;
  int64_t allocated_milli_gpu = 0;
  int64_t fair_share_milli_gpu = 0;
  int64_t quota_milli_gpu = 0;
  int64_t pending_milli_gpu = 0;
};

struct SubmitCommand {
  std::string tenant;
  std::string name;
  std::string queue = "default";  // The tenant's queue ("default", or a team's).
  sched::WorkloadSpec spec;       // spec.queue is ignored: `queue` names it.
  core::Duration duration{0};     // Simulated run time; 0 = until cancelled.
};

struct DriverOptions {
  std::string policy = "tessera";
  std::chrono::milliseconds pass_interval{200};
};

class SchedulerDriver {
 public:
  // Called on the driver thread after each pass that changed something, with the workloads
  // whose status changed ("tenant/name" -> status).
  using Listener = std::function<void(const std::map<std::string, WorkloadStatus>&)>;

  static core::Result<std::unique_ptr<SchedulerDriver>> create(const model::GpuCatalogue& catalogue,
                                                               std::vector<model::Node> nodes,
                                                               const core::Clock& clock,
                                                               DriverOptions options,
                                                               Listener listener);
  ~SchedulerDriver();

  // A tenant's queue subtree: "<tenant>" under the root, with one leaf "<tenant>/default" (teams
  // add theirs with putTeamQueue).
  core::Status addTenantQueue(const std::string& tenant, int64_t quota_milli_gpu,
                              int64_t limit_milli_gpu, int64_t weight, int32_t priority);
  // Adds queue "<tenant>/<queue>" under the tenant's (a team's), or changes it if it exists.
  core::Status putTeamQueue(const std::string& tenant, const std::string& queue,
                            int64_t quota_milli_gpu, int64_t limit_milli_gpu, int64_t weight,
                            int32_t priority);
  bool hasQueue(const std::string& tenant, const std::string& queue) const;
  // Takes a team's queue out of service: no workload may be submitted to it any more. Refused
  // (failed precondition) while it has pending or running work. Its node stays in the
  // scheduler's tree until restart, with no demand and so no share; created again, it is
  // reused. Retiring a queue that is not in service is a no-op.
  core::Status retireTeamQueue(const std::string& tenant, const std::string& queue);
  // Changes a tenant's queue (and its default leaf) to these numbers.
  core::Status updateTenantQueue(const std::string& tenant, int64_t quota_milli_gpu,
                                 int64_t limit_milli_gpu, int64_t weight, int32_t priority);
  // Whether `cmd` could ever run: a valid request, a node that can hold one task, the queue.
  core::Status check(const SubmitCommand& cmd) const;
  // Queues `cmd` for the next pass, after check(). Submitting a workload the driver already
  // has changes nothing (a replay or a retry).
  core::Status submit(SubmitCommand cmd);
  void cancel(const std::string& tenant, const std::string& name);
  // Forgets the workloads of a deleted tenant (all finished), so that a tenant created again
  // under the same name can reuse their names.
  void forgetTenant(const std::string& tenant);
  // The last published status of a workload (nullopt if the driver has never seen it).
  std::optional<WorkloadStatus> status(const std::string& tenant, const std::string& name) const;
  std::vector<QueueStatus> queues(const std::string& tenant) const;
  const std::vector<model::Node>& nodes() const { return nodes_; }
  // Milliseconds the last pass took, for metrics.
  double lastPassMs() const;
  int64_t passes() const;

  void start();
  void stop();
  // Runs one pass on the calling thread (tests; the driver thread must not be running).
  void runOnce();

 private:
  SchedulerDriver(const core::Clock& clock, DriverOptions options, Listener listener)
      : clock_(clock), options_(std::move(options)), listener_(std::move(listener)) {}
  void loop();
  void pass();
  WorkloadStatus statusOf(sched::WorkloadId w) const;

  const core::Clock& clock_;
  DriverOptions options_;
  Listener listener_;
  std::vector<model::Node> nodes_;
  // Held for a whole pass, and to change the scheduler (queues). Taken before `mu_`, never
  // while holding it.
  std::mutex pass_mu_;
  std::unique_ptr<sched::Scheduler> scheduler_;  // Guarded by pass_mu_.

  // Guards everything below; held only briefly, so a request thread reading a status never
  // waits for a pass.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<SubmitCommand> submits_;
  std::vector<std::pair<std::string, std::string>> cancels_;
  std::map<std::string, WorkloadStatus> published_;
  std::vector<QueueStatus> queue_status_;
  std::map<std::string, sched::QueueId> leaves_;  // "tenant/queue" -> leaf.
  double last_pass_ms_ = 0;
  int64_t passes_ = 0;
  bool stopping_ = false;
  std::thread thread_;

  // Driver-thread state, guarded by pass_mu_.
  std::map<std::string, sched::WorkloadId> ids_;
  std::vector<std::string> keys_;  // WorkloadId -> "tenant/name".
  std::vector<core::Duration> durations_;
  std::map<sched::TaskId, core::TimePoint> ends_;  // Running simulated tasks.
  std::vector<bool> cancelled_;
};

}  // namespace tessera::server
