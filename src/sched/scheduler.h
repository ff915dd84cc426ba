// The scheduler: queues, workloads and the actions of a scheduling pass.
//
//   auto s = Scheduler::create(catalogue, nodes, std::move(tree), shapes, options, clock);
//   WorkloadId w = *s->submit(spec);
//   PassResult r = s->schedule();      // starts and evictions to carry out
//   s->taskFinished(t);                // a task ran to completion
//   s->taskStopped(t);                 // an evicted task has stopped: it is pending again
//
// A pass runs, in order:
//   1. fair share (docs/fairness.md), recomputed when demand or capacity changed;
//   2. allocate: leaf queues in KAI's queue order (hierarchically: at each level the child
//      that goes first, judged with its next job added; docs/fairness.md); inside a queue,
//      workloads by priority then age. A gang places `min_available` tasks all or
//      nothing (a transaction on the cluster state), then elastic tasks one by one, preferring
//      the nodes and NVLink domain the gang already uses. A workload that cannot be placed is
//      passed over (backfill), with its reason recorded. Work whose victims are stopping and
//      the reserved gang go first. Incremental: pending work sits in buckets of interchangeable
//      requests, and a failed try leaves a "no room" verdict that keeps its whole bucket out of
//      later passes until a node that could hold such a task frees resources;
//   3. consolidate: a blocked workload that the free room would hold in one piece may move
//      preemptible tasks that can restart elsewhere at once (`max_moves_per_pass`);
//   4. reclaim: a blocked workload whose queue is within its fair share may evict preemptible
//      tasks of queues above theirs, only if that strictly lowers the lexicographic unfairness
//      vector and leaves the victims' side at or above its own share (the rules and the proof
//      are in docs/fairness.md); only tasks that ran at least `min_runtime` (doubled for each
//      earlier eviction of the task) and whose unsaved work is below their queue's bound; on
//      the nodes where freeing room destroys the least unsaved work, the fewest victims there;
//      at most `max_evictions_per_pass` in all;
//   5. preempt: inside one leaf queue, a blocked workload may evict preemptible tasks of
//      strictly lower priority (also when it waits on its queue's limit).
// Evicted tasks keep their resources until the driver calls `taskStopped` (their grace
// period), then wait as pending tasks again; the room they free is held for the workload they
// were evicted for until all of them have stopped and it has been tried. Pure library: no threads,
// time from `Clock`.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "sched/cluster_state.h"
#include "sched/filter.h"
#include "sched/frag.h"
#include "sched/placer.h"
#include "sched/policy.h"
#include "sched/queue_tree.h"
#include "sched/usage_history.h"
#include "sched/workload.h"

namespace tessera::sched {

namespace internal {
struct QueueOrderKey;  // scheduler_internal.h
}  // namespace internal

// What reclaim restores: each queue's fair share (quota plus its part of the surplus), or only
// its deserved quota (docs/fairness.md). The surplus is then shared by allocation order alone.
enum class ReclaimTo : uint8_t { kFairShare, kQuota };

struct SchedulerOptions {
  std::string policy = "tessera";  // Placement policy (policy.h).
  bool fair_share = true;          // false: one FIFO over all queues, no reclaim.
  // Before a task may be reclaimed or preempted; doubled for each eviction it already had.
  core::Duration min_runtime{0};
  int max_evictions_per_pass = 64;
  ReclaimTo reclaim_to = ReclaimTo::kFairShare;
  // Usage history tilting the surplus split (docs/fairness.md); 0 = off.
  core::Duration usage_half_life{0};
  double usage_k = 1.0;
  // Reclaim takes a unit only while its unsaved GPU-time (run since its last checkpoint, times
  // its GPUs) is below this; a queue may set its own (QueueSpec::max_unsaved_gpu_s).
  core::Duration max_unsaved_gpu_time = std::chrono::hours(1);
  // A workload may reclaim only once it has waited this long while its queue was at or below
  // its fair share.
  core::Duration reclaim_patience{0};
  // Consolidation: tasks moved per pass to make room for blocked work (0: never move).
  int max_moves_per_pass = 8;
  // CPU each node holds back for GPU tasks, in milli-CPU per free GPU
  // (ClusterState::setCpuPerFreeGpu); 0: none.
  int64_t cpu_per_free_gpu_milli = 0;
};

// Why a workload is still pending.
enum class WaitReason : uint8_t {
  kNone,                 // Running (or finished).
  kNotReached,           // Submitted after the last pass.
  kQueueLimit,           // A queue on its path is at its limit.
  kOverQuota,            // Non-preemptible work must fit in its queue's quota.
  kNoCapacity,           // No placement: the filters' verdicts say why.
  kWaitingForEvictions,  // Victims evicted for it are stopping.
  kTerminating,          // Some of its own tasks are stopping.
};

std::string_view waitReasonName(WaitReason r);

struct Explanation {
  WaitReason reason = WaitReason::kNotReached;
  std::string message;
};

struct StartDecision {
  TaskId task = kNoTask;
  WorkloadId workload = 0;
  Placement placement;
};

struct EvictDecision {
  TaskId task = kNoTask;
  WorkloadId victim = 0;
  WorkloadId preemptor = 0;
  bool reclaim = true;  // false: preemption inside the queue, or a move.
  bool moved = false;   // Consolidation: evicted to restart on another node at once.
  std::string detail;   // Who, why, and the fair-share numbers before and after.
};

struct PassResult {
  std::vector<StartDecision> started;
  std::vector<EvictDecision> evicted;
  size_t tried = 0;  // Workloads the pass tried to place (the rest were known not to fit).
};

inline constexpr WorkloadId kNoWorkload = UINT32_MAX;

struct TaskInfo {
  WorkloadId workload = 0;
  WorkloadId evicted_for = kNoWorkload;  // While terminating: the workload it made room for.
  uint32_t index = 0;                    // In its workload.
  TaskState state = TaskState::kPending;
  Assignment assignment;  // Valid while running or terminating.
  core::TimePoint started{};
  uint32_t starts = 0;
};

struct WorkloadInfo {
  WorkloadSpec spec;
  std::vector<TaskId> tasks;
  int running = 0;
  int pending = 0;  // Placeable: within its parallelism.
  // Pending beyond its parallelism: neither placed nor counted as its queue's demand until a
  // running task finishes.
  int deferred = 0;
  int terminating = 0;
  int finished = 0;
  core::TimePoint submitted{};
  uint64_t seq = 0;  // Submission order.
  Explanation why;   // From its last try; see Scheduler::explain.
  // Why reclaim, the last time it was considered for this workload, made no room ("" if never
  // considered or it did); see Scheduler::explain.
  std::string reclaim_refused;
  int awaited_victims = 0;  // Tasks evicted for it that have not stopped yet.
  bool cancelled = false;   // Its tasks that stop are finished, never pending again.
  // Suspended (Scheduler::suspend): its pending tasks are all deferred, and stay so.
  bool suspended = false;
  uint32_t shape = 0;       // Its request's shape, tenant included (`shapeOf`).
  int32_t bucket = -1;      // Index in its leaf queue's buckets; -1 = none.
  uint64_t tried_pass = 0;  // The last pass that tried it.
  // While its victims stop: what it will take when it starts, counted on its queue's path so
  // that later reclaims see the move as made; and the room of the victims that have stopped,
  // held for it (victim workload, placement) until it is tried.
  Amounts promised;
  std::vector<std::pair<WorkloadId, Assignment>> held;
};

class Scheduler {
 public:
  // `typical` are the task shapes the cluster expects (for the fgd and tessera policies' view of
  // fragmentation); may be empty. `catalogue` and `clock` must outlive the scheduler.
  static core::Result<std::unique_ptr<Scheduler>> create(
      const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes, QueueTree tree,
      std::vector<PodShape> typical, SchedulerOptions options, const core::Clock& clock);

  ~Scheduler();

  // Replaces the task shapes the cluster expects (a live server learns them: ShapeProfile). The
  // policy starts afresh from the cluster as it is: nothing placed moves. Only the fgd and
  // tessera policies look at them; for the others it does nothing.
  core::Status setTypical(std::vector<TypicalPod> typical);
  const FragModel& fragModel() const { return *frag_; }
  const SchedulerOptions& options() const { return options_; }

  // Validates and queues a workload; errors name the field.
  core::Result<WorkloadId> submit(WorkloadSpec spec);
  // A running task completed: its resources are released.
  void taskFinished(TaskId t);
  // An evicted task has stopped: its resources are released and it is pending again.
  void taskStopped(TaskId t);
  // A running task ended through no fault of its own (its node's agent stopped it while cut off
  // from the server): its resources are released and it is pending again.
  void taskInterrupted(TaskId t);
  // Removes a workload: pending tasks are dropped, running ones end now, except those for which
  // `stops_later` is true (a process an agent must still stop): they are terminating, holding
  // their resources until taskStopped (or taskInterrupted, or their node's loss), which then
  // finishes them instead of queueing them again.
  void cancel(WorkloadId w, const std::function<bool(TaskId)>& stops_later = {});
  // Starts a workload over (a retry after a task failed, or a gang that lost a task): every task
  // is pending again, and is placed anew (a new start, so a new generation) with all the others.
  // Running tasks for which `stops_later` is true become terminating, holding their resources
  // until taskStopped queues them; other running tasks are queued now; finished ones are pending
  // again. A gang is placed again only once all of its core is pending. Nothing for a cancelled
  // workload.
  void restart(WorkloadId w, const std::function<bool(TaskId)>& stops_later = {});
  // Suspends workload `w` (a Kubernetes Job's `suspend: true`): its pending tasks are held
  // (deferred: neither placed nor its queue's demand) until `resume`; returns its running tasks,
  // for the caller to stop (evictTask, then taskStopped holds them too). Finished tasks stay
  // finished. Nothing for a cancelled workload.
  std::vector<TaskId> suspend(WorkloadId w);
  // Its held tasks are placeable again, as its parallelism allows.
  void resume(WorkloadId w);
  // Makes finished task `t` pending again, alone (a retry of one task of a workload whose tasks
  // do not run together), placed as its parallelism allows. Nothing for a cancelled workload or
  // a task that has not finished.
  void retryTask(TaskId t);
  // Node `n`'s agent is lost. No task goes there until `nodeBack`; its running and terminating
  // tasks are pending again (the next start of each raises TaskInfo::starts, the generation
  // its assignment carries, so the lost node's copy is known stale); its capacity leaves the
  // fair shares; a reservation that held it ends. Returns the tasks that were on it; none if it
  // was down already.
  std::vector<TaskId> nodeLost(NodeIndex n);
  // Node `n` is back (its agent registered again with nothing running): it takes tasks again.
  void nodeBack(NodeIndex n);
  // Node `n`, lost and holding nothing, was removed for good: waiting workloads' reasons no
  // longer count it among the nodes. Its index is never reused.
  void removeNode(NodeIndex n);
  // GPU `gpu` of node `n` is in MIG mode `mode` now (its agent reports the mode it found):
  // MIG slices go only where it is on, other work only where it is off. Work waiting for it is
  // tried again. Errors: no such node or GPU.
  core::Status setGpuMigMode(NodeIndex n, int gpu, model::MigMode mode);
  // The MIG instances on GPU `gpu` of node `n` that run nothing, as its agent reports them: the
  // next task of their profile goes into one (no re-layout). Those that are no instance of the
  // GPU's model, or overlap one in use, are left out. Errors: no such node or GPU.
  core::Status setMigIdle(NodeIndex n, int gpu, std::vector<model::MigInstance> idle);
  // Puts pending task `t` back where it already runs, as its driver knew it before a restart
  // (docs/server.md, "Restarts keep running work"): on placement `p`, running since `started`,
  // with `starts` starts so far (so the next start's generation is new). Fails, changing nothing,
  // if the task is not pending or `p` does not fit now (node down, GPUs, MIG slot or room
  // taken, another tenant's softly shared GPU outside its trust group): the error says why.
  core::Status restoreTask(TaskId t, const Placement& p, core::TimePoint started, uint32_t starts);
  // Marks pending task `t` finished, as it had before a restart (a Job's completion done): it is
  // not placed again, the tasks its workload's parallelism deferred are placeable in its stead,
  // and a gang needs at once only the tasks left. Fails, changing nothing, if the task is not
  // pending.
  core::Status restoreFinished(TaskId t);

  // Adds a node (a machine that joined while the scheduler runs), down until nodeBack; returns
  // its index, the next one. Errors: it fails model::validateNode.
  core::Result<NodeIndex> addNode(model::Node node);
  // A cordoned node takes no new task; what runs there stays (FilterReason::kCordoned). Its
  // capacity leaves the fair shares until it is uncordoned.
  void setCordoned(NodeIndex n, bool cordoned);
  // Dedicates node `n` to `tenant`'s tasks (nullopt: any tenant's); what runs there stays.
  void setDedicated(NodeIndex n, std::optional<model::TenantId> tenant);
  // Evicts running task `t` on its own (a node being drained): it is terminating, holding its
  // resources until taskStopped (then pending again, for another node) or taskFinished. False
  // if it is not running.
  bool evictTask(TaskId t);
  // The running and terminating tasks on node `n`.
  const std::vector<TaskId>& tasksOn(NodeIndex n) const { return node_tasks_[n]; }

  PassResult schedule();
  // Adds a queue to the tree (a tenant or team created while running); see QueueTree::add.
  core::Result<QueueId> addQueue(QueueSpec spec);
  // Changes a queue's quota, limit, weight and priority (see QueueTree::update). Fair shares are
  // recomputed and standing verdicts dropped, since a higher limit may make room. A lower limit
  // stops new starts; running tasks are not evicted for it.
  core::Status updateQueue(QueueId q, const Amounts& quota, const Amounts& limit, int64_t weight,
                           int32_t priority);
  // Sets a queue's bound on the unsaved work of a unit reclaim may take, in GPU-seconds (-1: the
  // nearest ancestor's, else SchedulerOptions::max_unsaved_gpu_time); see QueueSpec.
  core::Status setMaxUnsaved(QueueId q, int64_t gpu_seconds);
  // Renames a queue (see QueueTree::rename) that now stands for another team: its usage history
  // is dropped. For a server that reuses a queue's slot in the tree instead of growing it.
  core::Status renameQueue(QueueId q, std::string name);
  // Puts a tenant in a trust group (0: alone; ClusterState::setTrustGroup) and drops the standing
  // "no room" verdicts, which a wider group may overturn. Tasks already sharing a GPU stay; a
  // new task joins a softly shared GPU only if it may share with every tenant already there.
  void setTrustGroup(model::TenantId tenant, uint32_t group);
  // Drops every standing "no room" verdict, so the next pass tries all pending work again, as
  // the first pass after a restart does. A cheap safety net for a driver to run now and then.
  void forgetVerdicts();

  const QueueTree& queues() const { return tree_; }
  const ClusterState& cluster() const { return state_; }
  const WorkloadInfo& workload(WorkloadId w) const { return workloads_[w]; }
  const TaskInfo& task(TaskId t) const { return tasks_[t]; }
  size_t workloadCount() const { return workloads_.size(); }
  // Why the workload is still pending (kNone once nothing is): its last try's reason, or the
  // verdict that has kept its whole bucket from being tried since. A workload waiting for room
  // also says what reclaim made of it: "reclaim not considered: queue 'a' holds more than its
  // share", or "reclaim considered: the only victims would take 'b' below its quota".
  Explanation explain(WorkloadId w) const;
  // The resources a task of `w` is charged in queue accounting (its placement's model
  // dimension included when placed).
  Amounts taskAmounts(WorkloadId w, const Placement* placed) const;
  // The capacity fair shares divide, by dimension: nodes that are up and not cordoned.
  const Amounts& capacity() const { return capacity_; }
  // The workload nodes are being kept for, and those nodes (empty when none).
  WorkloadId reservedFor() const { return reserved_for_; }
  const std::vector<NodeIndex>& reservedNodes() const { return reserved_nodes_; }

 private:
  Scheduler(const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes, QueueTree tree,
            SchedulerOptions options, const core::Clock& clock);

  struct Unit;  // A victim: one elastic task, or all running tasks of a gang.
  struct EvictionPlan;

  // Allocation order inside a leaf queue: priority (higher first), then submission.
  using OrderKey = std::pair<int64_t, uint64_t>;  // (-priority, seq)
  // Pending workloads of one leaf queue that are interchangeable for "is there room?": same
  // request class, same number of tasks to place together, same preemptibility (quota rule)
  // and, if they declare a maximum runtime, a bucket apart (backfill access differs per
  // workload). One failed try answers for all members, so a pass skips whole buckets.
  struct BucketKey {
    uint32_t shape = 0;
    int32_t need = 1;  // Gang remainder, or 1 for elastic tasks.
    bool preemptible = true;
    bool timed = false;
    auto operator<=>(const BucketKey&) const = default;
  };
  struct Bucket {
    BucketKey key;
    std::map<OrderKey, WorkloadId> members;
    uint64_t pass = 0;  // The pass in which `next` is valid.
    OrderKey next{};    // Members before it were tried or passed over in that pass.
    Explanation last;   // Why its last try failed; given to members that join while it holds.
  };
  // "No room for `need` tasks of class `shape`" (`restricted`: without the reserved nodes),
  // true until a node that could hold one such task gains free resources.
  struct BlockKey {
    uint32_t shape = 0;
    bool restricted = false;
    int32_t need = 1;
    auto operator<=>(const BlockKey&) const = default;
  };
  struct Blocked {
    ResolvedRequest resolved;  // To test released nodes against.
    std::string message;
  };

  Amounts pendingAmounts(WorkloadId w) const;
  // Gives back a running or terminating task's resources and updates every account. With
  // `hold_for` set, its room on the node stays taken, held for that workload (endHold).
  void releaseTask(TaskId t, WorkloadId hold_for = kNoWorkload);
  // `started`: when it started (a restored task's past start); unset: now.
  void setRunning(TaskId t, const Assignment& a, PassResult& out,
                  std::optional<core::TimePoint> started = std::nullopt);
  // The next leaf queue to serve: at each level of the tree the first child in KAI's queue order
  // (docs/fairness.md), judged with the child's next job (`head_job_`) added.
  QueueId pickQueue(const std::vector<int>& untried) const;
  // Whether queue `x` goes before its sibling `y` in that order.
  bool servedBefore(QueueId x, QueueId y) const;
  const internal::QueueOrderKey& orderKey(QueueId q) const;
  // Fills `head_job_` for `q`'s subtree: a leaf's is one task of its first pending workload, a
  // parent's that of its child served first. Returns it.
  const Amounts& computeHeadJob(QueueId q, const std::vector<int>& untried);
  // Whether adding `add` to `leaf` keeps every queue on its path within its limit; if not,
  // fills `why`.
  bool withinLimits(QueueId leaf, const Amounts& add, Explanation* why) const;
  // Places `count` pending tasks of `w` all or nothing. On success applies them (and, unless
  // `trial`, commits them into `out`); on a trial, rolls them back again.
  bool placeTasks(WorkloadId w, int count, bool trial, PassResult* out, Explanation* why);
  void allocate(PassResult& out);
  // Tries the workload once: its gang minimum, then elastic tasks; records why it stopped.
  void tryWorkload(WorkloadId w, PassResult& out);
  // The next workload of leaf `q` to try this pass (kNoWorkload when none).
  WorkloadId nextInQueue(QueueId q);
  // Files the workload in the bucket its state calls for (or in none once nothing is pending).
  void refile(WorkloadId w);
  // Releases a running or terminating task and makes it pending again (see releaseTask).
  void requeue(TaskId t, WorkloadId hold_for = kNoWorkload);
  // Makes deferred tasks of `w` placeable while it is below its parallelism.
  void releaseDeferred(WorkloadId w);
  // A finished workload about to have pending tasks again: back in its queue's list and the
  // FIFO list, in order.
  void reopen(WorkloadId w);
  // Adds (sign +1) or removes (-1) node `n`'s capacity from what the fair shares divide.
  void addCapacity(NodeIndex n, int sign);
  OrderKey orderOf(WorkloadId w) const;
  // Changes `running` of `w` by `delta`, keeping `running_priorities_` and
  // `running_workloads_` up to date.
  void addRunning(WorkloadId w, int delta);
  int32_t needOf(WorkloadId w) const;
  // Whether the reserved nodes are closed to `w` (not its own, no backfill, its queue not
  // further below its share than the holder's).
  bool restricted(WorkloadId w) const;
  // Whether leaf `leaf` may use the reserved nodes: below its fair share, and further below it
  // than the queue they are held for. Only while a reservation exists.
  bool openToReserved(QueueId leaf) const;
  // The "no room" verdict that covers `need` tasks of class `shape`, or nullptr.
  const Blocked* findBlocked(uint32_t shape, int32_t need, bool restricted) const;
  bool isBlocked(uint32_t shape, int32_t need, bool restricted) const {
    return findBlocked(shape, need, restricted) != nullptr;
  }
  // Forgets the "no room" verdicts that resources released since the last pass may overturn.
  void unblock();
  // explain() without what reclaim made of it: the verdicts passes record and compare.
  Explanation waitOf(WorkloadId w) const;
  // Records a failed try: a "no room" verdict when `capacity`, and the bucket's explanation.
  void noteFailure(WorkloadId w, bool capacity, bool restricted, int32_t need);
  enum class Eviction : uint8_t { kReclaim, kPreempt, kConsolidate };
  void evictFor(Eviction kind, PassResult& out, int& evictions);
  // Victim units per workload, and per leaf the units of its running workloads, computed once
  // per evictFor call (again after an eviction there).
  struct UnitCache {
    std::unordered_map<WorkloadId, std::vector<Unit>> of_workload;
    std::unordered_map<QueueId, std::vector<const Unit*>> of_leaf;
  };
  // Milli-GPU-seconds of unsaved work above which reclaim leaves a unit of `leaf` alone.
  int64_t unsavedBound(QueueId leaf) const;
  // The units of `leaf`'s running workloads (only those under its bound on unsaved work when
  // `bounded`), from `units` or computed into it.
  const std::vector<const Unit*>& leafUnits(QueueId leaf, bool bounded, UnitCache& units);
  // Chooses victims for `needed` tasks of `w` (evictFor's search); false if none will do.
  bool planEvictions(WorkloadId w, Eviction kind, int needed, int evictions, UnitCache& units,
                     EvictionPlan& plan);
  // What unit `u` holds, in queue accounting (computed once).
  const Amounts& unitAmounts(const Unit& u) const;
  // The victim units of `w`: each elastic task old enough to go, then the rest (the gang's
  // core) as one unit, least unsaved first; only units with less than `bound` unsaved work.
  // A cache (UnitCache) holds units of one bound only: one evictFor call uses one per leaf.
  // `quiet_until`, if given, is set to the first time the answer may differ while the running
  // tasks stay the same (TimePoint::max() for never; now where that is not known).
  std::vector<Unit> victimUnits(WorkloadId w, int64_t bound,
                                core::TimePoint* quiet_until = nullptr) const;
  // Unsaved GPU-milli-seconds of task `t`, which holds `milli` milli-GPU: its run since its last
  // checkpoint, times its GPUs.
  int64_t unsavedOf(TaskId t, int64_t milli) const;
  // What `q`'s subtree holds once the evictions under way are done: allocated, less what its
  // stopping victims will free, plus what the workloads they stop for will take.
  Amounts settled(QueueId q) const;
  // Adds `a` (times `sign`) to `moving_` along the path from `leaf` to the root.
  void addMoving(QueueId leaf, const Amounts& a, int sign);
  // Ends what `w` was promised and gives the room held for it back to all.
  void endHold(WorkloadId w);
  // How long task `t` must run before it may be evicted: min_runtime * 2^(its evictions).
  core::Duration protectedFor(TaskId t) const;
  // The per-queue amounts reclaim measures shares against (`SchedulerOptions::reclaim_to`).
  const Amounts& reclaimBasis(const Queue& q) const;

  // Sets the reserved workload and nodes (kNoWorkload, {} to end the reservation).
  void setReservation(WorkloadId w, std::vector<NodeIndex> nodes);
  // Keeps nodes for the first blocked workload whose queue is within its fair share, so a big
  // gang is not starved by a stream of small ones. Sticky until it starts.
  void reserveFor(WorkloadId w);
  bool mayBackfill(WorkloadId w) const;
  // "; N node(s) held for it (...)" and when they drain by the tasks' declared runtimes, or that
  // this is unknown.
  std::string reservationNote() const;
  void trackNodeTask(TaskId t, bool add);
  // Moves node `n` to its place in `drain_order_` after its tasks or free resources changed.
  void reindexDrain(NodeIndex n);

  std::vector<uint8_t> preference_;           // Scratch for gang placement, one entry per node.
  std::vector<WorkloadId> unfinished_;        // In submission order (FIFO mode).
  std::vector<std::vector<Bucket>> buckets_;  // Per leaf queue.
  std::map<BlockKey, Blocked> blocked_;
  std::vector<NodeIndex> released_nodes_;     // Since the last pass: free resources grew there.
  std::vector<uint8_t> reserved_mask_;        // Per node: 1 if reserved.
  std::vector<WorkloadId> awaiting_;          // Workloads waiting for their victims to stop.
  std::vector<Amounts> moving_;               // Per queue: settled(q) - allocated (see settled).
  std::vector<core::TimePoint> below_since_;  // Per leaf: since when it is within its share.
  // Per leaf: 1 if at the last reclaim it had pending work and held its share or more (so it
  // reclaimed nothing).
  std::vector<uint8_t> over_share_;
  Amounts trial_credit_;  // Subtracted from allocations in limit checks of a trial placement.
  std::vector<Amounts> head_job_;  // Per queue, for the queue order; set at the start of a pass.
  // planEvictions' candidates filed by node: each node's slot in `plan_lists_` (UINT32_MAX for
  // none) and the lists, the first `plan_lists_used_` in use. Kept between plans, so that filing
  // allocates nothing once warm.
  std::vector<uint32_t> plan_slot_;
  std::vector<std::pair<NodeIndex, std::vector<size_t>>> plan_lists_;
  size_t plan_lists_used_ = 0;
  // victimUnits' scratch: (unsaved, task) of one workload's running tasks.
  mutable std::vector<std::pair<int64_t, TaskId>> victim_order_;
  std::vector<NodeIndex> roomiest_;  // Consolidation's nodes with the most free room, ...
  uint64_t roomiest_pass_ = 0;       // ... as of this pass.
  // Per queue: what the queue order compares, computed when first needed in a pass and again
  // after a placement under the queue (`order_epoch_[q] != pass_` marks it stale).
  mutable std::vector<internal::QueueOrderKey> order_key_;
  mutable std::vector<uint64_t> order_epoch_;
  uint64_t pass_ = 0;
  WorkloadId reserved_for_ = kNoWorkload;
  std::vector<NodeIndex> reserved_nodes_;
  core::TimePoint reservation_start_ = core::TimePoint::max();  // max() = unknown.
  std::vector<std::vector<TaskId>> node_tasks_;  // Running or terminating tasks per node.
  // For reservations, kept as tasks come and go: per node, when its tasks with a declared
  // runtime end and how many have none; and every node in the order reservations take them
  // (when it drains: min() = empty, max() = unknown; then used milli-GPU; then index).
  using DrainKey = std::tuple<core::TimePoint, int64_t, NodeIndex>;
  std::vector<std::multiset<core::TimePoint>> node_ends_;
  std::vector<uint32_t> node_unknown_;
  std::set<DrainKey> drain_order_;
  std::vector<DrainKey> drain_key_;
  std::vector<std::vector<NodeIndex>> domain_nodes_;  // NVLink domain -> nodes.

  const model::GpuCatalogue& catalogue_;
  ClusterState state_;
  QueueTree tree_;
  SchedulerOptions options_;
  const core::Clock& clock_;
  std::unique_ptr<FragModel> frag_;
  std::unique_ptr<core::Rng> rng_;
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<Placer> placer_;
  // Workload shapes (`WorkloadInfo::shape`): a request's tenant and `Placer::appendShapeKey`,
  // interned for the life of the scheduler.
  std::unordered_map<std::string, uint32_t> shape_ids_;
  uint32_t shapeOf(const model::TaskRequest& req);
  Amounts capacity_;
  std::vector<WorkloadInfo> workloads_;
  std::vector<TaskInfo> tasks_;
  std::vector<std::vector<WorkloadId>> queue_workloads_;  // Per leaf: unfinished workloads.
  void listInQueue(WorkloadId w);                         // In queue_workloads_, if not yet.
  std::vector<uint32_t> finished_in_queue_;  // Per leaf: finished ones not yet dropped.
  // A preemptible workload with running tasks, in its leaf's list.
  struct RunningWorkload {
    WorkloadId workload = 0;
    // Reclaim found none of its running tasks a victim under the bound `no_victims_bound`, and
    // none can become one before `no_victims_until` (a young task coming of age, a checkpoint):
    // the search skips it until then, or until its running tasks change (addRunning). Kept here,
    // next to the id, so that skipping reads the list alone.
    int64_t no_victims_bound = -1;
    core::TimePoint no_victims_until{};
  };
  // Per leaf: how many preemptible workloads with running tasks there are, by priority; and
  // those workloads (in no order; `running_slot_` is each one's place there).
  std::vector<std::map<int32_t, int>> running_priorities_;
  std::vector<std::vector<RunningWorkload>> running_workloads_;
  std::vector<uint32_t> running_slot_;   // Per workload.
  std::vector<Amounts> np_allocated_;    // Non-preemptible, per queue.
  std::unique_ptr<UsageHistory> usage_;  // When usage_half_life > 0.
  bool fair_share_dirty_ = true;
  uint64_t next_seq_ = 0;
};

}  // namespace tessera::sched
