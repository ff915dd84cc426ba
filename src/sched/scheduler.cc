#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <unordered_map>

#include "sched/fair_share.h"
#include "sched/scheduler_internal.h"

namespace tessera::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): exact share ratios.

std::string_view taskStateName(TaskState s) {
  switch (s) {
    case TaskState::kPending:
      return "pending";
    case TaskState::kRunning:
      return "running";
    case TaskState::kTerminating:
      return "terminating";
    case TaskState::kFinished:
      return "finished";
  }
  return "unknown";
}

std::string_view waitReasonName(WaitReason r) {
  switch (r) {
    case WaitReason::kNone:
      return "none";
    case WaitReason::kNotReached:
      return "not-reached";
    case WaitReason::kQueueLimit:
      return "queue-limit";
    case WaitReason::kOverQuota:
      return "over-quota";
    case WaitReason::kNoCapacity:
      return "no-capacity";
    case WaitReason::kWaitingForEvictions:
      return "waiting-for-evictions";
    case WaitReason::kTerminating:
      return "terminating";
  }
  return "unknown";
}

Scheduler::Scheduler(const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes,
                     QueueTree tree, SchedulerOptions options, const core::Clock& clock)
    : catalogue_(catalogue),
      state_(catalogue, std::move(nodes)),
      tree_(std::move(tree)),
      options_(std::move(options)),
      clock_(clock) {}

Scheduler::~Scheduler() = default;

core::Result<std::unique_ptr<Scheduler>> Scheduler::create(
    const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes, QueueTree tree,
    std::vector<PodShape> typical, SchedulerOptions options, const core::Clock& clock) {
  for (const model::Node& n : nodes) {
    TESSERA_RETURN_IF_ERROR(model::validateNode(n));
  }
  if (options.max_evictions_per_pass < 0 || options.max_moves_per_pass < 0) {
    return core::invalidArgument("max evictions and moves per pass must not be negative");
  }
  if (options.cpu_per_free_gpu_milli < 0) {
    return core::invalidArgument("the CPU held per free GPU must not be negative");
  }
  std::unique_ptr<Scheduler> s(
      new Scheduler(catalogue, std::move(nodes), std::move(tree), std::move(options), clock));
  s->state_.setCpuPerFreeGpu(s->options_.cpu_per_free_gpu_milli);
  s->frag_ = std::make_unique<FragModel>(typicalPods(typical), catalogue.size());
  s->rng_ = std::make_unique<core::Rng>(1);
  TESSERA_ASSIGN_OR_RETURN(
      s->policy_, makePolicy(s->options_.policy, {s->frag_.get(), s->rng_.get()}, s->state_));
  s->placer_ = std::make_unique<Placer>(s->state_, *s->policy_);
  const ResourceSpace& space = s->tree_.space();
  s->capacity_ = space.zeros();
  for (NodeIndex n = 0; n < s->state_.nodeCount(); ++n) {
    const model::Node& node = s->state_.node(n);
    s->addCapacity(n, +1);
    if (node.nvlink_domain >= 0) {
      const auto d = static_cast<size_t>(node.nvlink_domain);
      if (s->domain_nodes_.size() <= d) {
        s->domain_nodes_.resize(d + 1);
      }
      s->domain_nodes_[d].push_back(n);
    }
  }
  s->queue_workloads_.resize(s->tree_.size());
  s->finished_in_queue_.assign(s->tree_.size(), 0);
  s->running_priorities_.resize(s->tree_.size());
  s->running_workloads_.resize(s->tree_.size());
  s->buckets_.resize(s->tree_.size());
  s->reserved_mask_.assign(s->state_.nodeCount(), 0);
  s->np_allocated_.assign(s->tree_.size(), space.zeros());
  s->preference_.assign(s->state_.nodeCount(), 0);
  if (s->options_.usage_half_life.count() > 0) {
    s->usage_ = std::make_unique<UsageHistory>(s->tree_.size(), s->options_.usage_half_life);
  }
  s->node_tasks_.resize(s->state_.nodeCount());
  s->node_ends_.resize(s->state_.nodeCount());
  s->node_unknown_.assign(s->state_.nodeCount(), 0);
  s->drain_key_.assign(s->state_.nodeCount(), {});
  for (NodeIndex n = 0; n < s->state_.nodeCount(); ++n) {
    s->reindexDrain(n);
  }
  s->moving_.assign(s->tree_.size(), space.zeros());
  s->below_since_.assign(s->tree_.size(), core::TimePoint::max());
  s->over_share_.assign(s->tree_.size(), 0);
  s->trial_credit_ = space.zeros();
  return s;
}

core::Status Scheduler::setTypical(std::vector<TypicalPod> typical) {
  if (options_.policy != "fgd" && options_.policy != "tessera") {
    return core::Status::ok();
  }
  auto frag = std::make_unique<FragModel>(std::move(typical), catalogue_.size());
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Policy> policy,
                           makePolicy(options_.policy, {frag.get(), rng_.get()}, state_));
  // The placer refers to the policy and the policy to the model: replaced in that order.
  placer_ = std::make_unique<Placer>(state_, *policy);
  policy_ = std::move(policy);
  frag_ = std::move(frag);
  return core::Status::ok();
}

Amounts Scheduler::taskAmounts(WorkloadId w, const Placement* placed) const {
  const model::TaskRequest& r = workloads_[w].spec.request;
  const ResourceSpace& space = tree_.space();
  Amounts a = space.zeros();
  a[kCpuDim] = r.cpu.value();
  a[kMemoryDim] = r.memory.value();
  int64_t milli = r.gpu_count * (r.isMig() ? 0 : r.gpu_milli.value());
  if (placed != nullptr && placed->gpus != 0) {
    const GpuState& g = state_.gpus(placed->node)[std::countr_zero(placed->gpus)];
    if (r.isMig()) {
      milli = catalogue_.model(g.model).mig_profiles[placed->mig_profile].computeShare().value();
    }
    a[kGpuDim] = milli;
    const size_t dim = space.modelDim(g.model);
    if (dim != SIZE_MAX) {
      a[dim] = milli;
    }
    return a;
  }
  if (r.isMig()) {
    // Pending: the profile's compute share on the first model that offers it.
    for (size_t m = 0; m < catalogue_.size() && milli == 0; ++m) {
      const model::GpuModelInfo& info =
          catalogue_.model(model::GpuModelId{static_cast<uint16_t>(m)});
      const int p = info.findMigProfile(r.mig_profile);
      if (p >= 0) {
        milli = info.mig_profiles[p].computeShare().value();
      }
    }
  }
  a[kGpuDim] = milli;
  // Pending demand counts in every constrained model the task accepts.
  for (model::GpuModelId m : space.models()) {
    if (r.models.empty() || std::find(r.models.begin(), r.models.end(), m) != r.models.end()) {
      a[space.modelDim(m)] = milli;
    }
  }
  return a;
}

Amounts Scheduler::pendingAmounts(WorkloadId w) const { return taskAmounts(w, nullptr); }

core::Result<WorkloadId> Scheduler::submit(WorkloadSpec spec) {
  if (spec.name.empty()) {
    return core::invalidArgument("workload has an empty name");
  }
  const std::string& n = spec.name;
  if (spec.queue >= tree_.size()) {
    return core::invalidArgument("workload '" + n + "': unknown queue");
  }
  if (!tree_.queue(spec.queue).isLeaf()) {
    return core::invalidArgument("workload '" + n + "': queue '" + tree_.queue(spec.queue).name +
                                 "' has child queues; submit to a leaf queue");
  }
  if (spec.tasks < 1) {
    return core::invalidArgument("workload '" + n + "': tasks must be at least 1");
  }
  if (spec.min_available < 1 || spec.min_available > spec.tasks) {
    return core::invalidArgument("workload '" + n + "': minAvailable " +
                                 std::to_string(spec.min_available) + " is outside 1.." +
                                 std::to_string(spec.tasks));
  }
  if (spec.parallelism != 0 &&
      (spec.parallelism < spec.min_available || spec.parallelism > spec.tasks)) {
    return core::invalidArgument(fmt::format(
        "workload '{}': parallelism {} is outside {}..{} (its minAvailable to its tasks)", n,
        spec.parallelism, spec.min_available, spec.tasks));
  }
  core::Status st = model::validateTaskRequest(spec.request);
  if (!st.isOk()) {
    return st.withContext("workload '" + n + "'");
  }
  const auto w = static_cast<WorkloadId>(workloads_.size());
  WorkloadInfo info;
  info.spec = std::move(spec);
  info.submitted = clock_.now();
  info.seq = next_seq_++;
  if (info.spec.parallelism == 0) {
    info.spec.parallelism = info.spec.tasks;
  }
  info.pending = info.spec.parallelism;
  info.deferred = info.spec.tasks - info.pending;
  for (int i = 0; i < info.spec.tasks; ++i) {
    info.tasks.push_back(static_cast<TaskId>(tasks_.size()));
    TaskInfo t;
    t.workload = w;
    t.index = static_cast<uint32_t>(i);
    tasks_.push_back(t);
  }
  info.shape = shapeOf(info.spec.request);
  info.promised = tree_.space().zeros();
  workloads_.push_back(std::move(info));
  running_slot_.push_back(0);
  const Amounts one = pendingAmounts(w);
  for (int i = 0; i < workloads_[w].pending; ++i) {
    tree_.addPending(workloads_[w].spec.queue, one, +1);
  }
  listInQueue(w);
  unfinished_.push_back(w);
  refile(w);
  fair_share_dirty_ = true;
  return w;
}

void Scheduler::addRunning(WorkloadId w, int delta) {
  WorkloadInfo& info = workloads_[w];
  const bool before = info.running > 0;
  info.running += delta;
  const bool after = info.running > 0;
  if (!info.spec.preemptible) {
    return;
  }
  std::vector<RunningWorkload>& list = running_workloads_[info.spec.queue];
  if (before == after) {
    if (after) {
      list[running_slot_[w]].no_victims_bound = -1;  // Its victim units changed.
    }
    return;
  }
  std::map<int32_t, int>& counts = running_priorities_[info.spec.queue];
  if (after) {
    ++counts[info.spec.priority];
    running_slot_[w] = static_cast<uint32_t>(list.size());
    list.push_back({w});
  } else {
    if (--counts[info.spec.priority] == 0) {
      counts.erase(info.spec.priority);
    }
    const uint32_t slot = running_slot_[w];
    list[slot] = list.back();
    running_slot_[list[slot].workload] = slot;
    list.pop_back();
  }
}

void Scheduler::setRunning(TaskId t, const Assignment& a, PassResult& out,
                           std::optional<core::TimePoint> started) {
  TaskInfo& task = tasks_[t];
  WorkloadInfo& w = workloads_[task.workload];
  task.state = TaskState::kRunning;
  task.assignment = a;
  task.started = started.value_or(clock_.now());
  ++task.starts;
  trackNodeTask(t, true);
  --w.pending;
  addRunning(task.workload, +1);
  refile(task.workload);
  const QueueId q = w.spec.queue;
  tree_.addPending(q, pendingAmounts(task.workload), -1);
  const Amounts used = taskAmounts(task.workload, &a.placement);
  tree_.addAllocated(q, used, +1);
  for (QueueId p = q; p != kNoQueue && p < order_epoch_.size(); p = tree_.queue(p).parent) {
    order_epoch_[p] = 0;  // Its place in the queue order moved.
  }
  if (!w.spec.preemptible) {
    for (QueueId p = q; p != kNoQueue; p = tree_.queue(p).parent) {
      addTo(np_allocated_[p], used);
    }
  }
  out.started.push_back({t, task.workload, a.placement});
}

void Scheduler::releaseTask(TaskId t, WorkloadId hold_for) {
  TaskInfo& task = tasks_[t];
  WorkloadInfo& w = workloads_[task.workload];
  const Amounts used = taskAmounts(task.workload, &task.assignment.placement);
  if (hold_for == kNoWorkload) {
    placer_->release(w.spec.request, task.assignment);
    released_nodes_.push_back(task.assignment.placement.node);
  } else {
    workloads_[hold_for].held.emplace_back(task.workload, task.assignment);
  }
  trackNodeTask(t, false);
  tree_.addAllocated(w.spec.queue, used, -1);
  if (!w.spec.preemptible) {
    for (QueueId p = w.spec.queue; p != kNoQueue; p = tree_.queue(p).parent) {
      subtractFrom(np_allocated_[p], used);
    }
  }
  if (task.state == TaskState::kRunning) {
    addRunning(task.workload, -1);
  } else {
    --w.terminating;
  }
  if (task.evicted_for != kNoWorkload) {
    --workloads_[task.evicted_for].awaited_victims;
    task.evicted_for = kNoWorkload;
    addMoving(w.spec.queue, used, +1);  // Its release was counted in advance.
  }
  refile(task.workload);
}

void Scheduler::taskFinished(TaskId t) {
  TaskInfo& task = tasks_[t];
  if (task.state != TaskState::kRunning && task.state != TaskState::kTerminating) {
    return;
  }
  releaseTask(t);
  task.state = TaskState::kFinished;
  WorkloadInfo& w = workloads_[task.workload];
  if (++w.finished == w.spec.tasks) {
    ++finished_in_queue_[w.spec.queue];
  }
  releaseDeferred(task.workload);
  fair_share_dirty_ = true;
}

std::vector<TaskId> Scheduler::suspend(WorkloadId w) {
  WorkloadInfo& info = workloads_[w];
  std::vector<TaskId> running;
  if (info.cancelled) {
    return running;
  }
  info.suspended = true;
  const Amounts one = pendingAmounts(w);
  for (; info.pending > 0; --info.pending) {
    tree_.addPending(info.spec.queue, one, -1);
    ++info.deferred;
  }
  refile(w);
  if (reserved_for_ == w) {
    setReservation(kNoWorkload, {});
  }
  for (TaskId t : info.tasks) {
    if (tasks_[t].state == TaskState::kRunning) {
      running.push_back(t);
    }
  }
  fair_share_dirty_ = true;
  return running;
}

void Scheduler::resume(WorkloadId w) {
  WorkloadInfo& info = workloads_[w];
  if (!info.suspended) {
    return;
  }
  info.suspended = false;
  releaseDeferred(w);
  fair_share_dirty_ = true;
}

void Scheduler::releaseDeferred(WorkloadId w) {
  WorkloadInfo& info = workloads_[w];
  if (info.deferred == 0 || info.cancelled || info.suspended) {
    return;
  }
  const int room = info.spec.parallelism - info.running - info.terminating - info.pending;
  const int n = std::min(room, info.deferred);
  if (n <= 0) {
    return;
  }
  info.deferred -= n;
  info.pending += n;
  const Amounts one = pendingAmounts(w);
  for (int i = 0; i < n; ++i) {
    tree_.addPending(info.spec.queue, one, +1);
  }
  refile(w);
}

void Scheduler::cancel(WorkloadId w, const std::function<bool(TaskId)>& stops_later) {
  WorkloadInfo& info = workloads_[w];
  info.cancelled = true;
  for (TaskId t : info.tasks) {
    TaskInfo& task = tasks_[t];
    const bool running = task.state == TaskState::kRunning;
    if ((running || task.state == TaskState::kTerminating) && stops_later && stops_later(t)) {
      if (running) {
        task.state = TaskState::kTerminating;
        addRunning(w, -1);
        ++info.terminating;
        refile(w);
      }
      continue;
    }
    if (task.state == TaskState::kPending) {
      task.state = TaskState::kFinished;
      if (info.deferred > 0) {
        --info.deferred;  // Which of its pending tasks are deferred does not matter: all end.
      } else {
        tree_.addPending(info.spec.queue, pendingAmounts(w), -1);
        --info.pending;
      }
      if (++info.finished == info.spec.tasks) {
        ++finished_in_queue_[info.spec.queue];
      }
      refile(w);
    } else if (task.state == TaskState::kRunning || task.state == TaskState::kTerminating) {
      taskFinished(t);
    }
  }
  if (reserved_for_ == w) {
    setReservation(kNoWorkload, {});
  }
  endHold(w);
  fair_share_dirty_ = true;
}

void Scheduler::listInQueue(WorkloadId w) {
  // Kept in allocation order inside the queue: priority, then submission.
  auto& ws = queue_workloads_[workloads_[w].spec.queue];
  auto before = [&](WorkloadId a, WorkloadId b) {
    if (workloads_[a].spec.priority != workloads_[b].spec.priority) {
      return workloads_[a].spec.priority > workloads_[b].spec.priority;
    }
    return workloads_[a].seq < workloads_[b].seq;
  };
  auto at = std::lower_bound(ws.begin(), ws.end(), w, before);
  if (at == ws.end() || *at != w) {
    ws.insert(at, w);
  }
}

void Scheduler::restart(WorkloadId w, const std::function<bool(TaskId)>& stops_later) {
  WorkloadInfo& info = workloads_[w];
  if (info.cancelled) {
    return;
  }
  if (info.finished == info.spec.tasks) {
    reopen(w);
  }
  for (TaskId t : info.tasks) {
    TaskInfo& task = tasks_[t];
    switch (task.state) {
      case TaskState::kPending:
      case TaskState::kTerminating:  // Queued when it stops.
        break;
      case TaskState::kRunning:
        if (stops_later && stops_later(t)) {
          task.state = TaskState::kTerminating;
          addRunning(w, -1);
          ++info.terminating;
          refile(w);
        } else {
          requeue(t);
        }
        break;
      case TaskState::kFinished:
        if (info.finished-- == info.spec.tasks) {
          --finished_in_queue_[info.spec.queue];
        }
        task.state = TaskState::kPending;
        ++info.deferred;  // Placeable as its parallelism allows, below.
        break;
    }
  }
  releaseDeferred(w);
  fair_share_dirty_ = true;
}

void Scheduler::reopen(WorkloadId w) {
  // Finished, it may have left its queue's list and the FIFO list.
  listInQueue(w);
  auto at = std::lower_bound(
      unfinished_.begin(), unfinished_.end(), w,
      [&](WorkloadId a, WorkloadId b) { return workloads_[a].seq < workloads_[b].seq; });
  if (at == unfinished_.end() || *at != w) {
    unfinished_.insert(at, w);
  }
}

void Scheduler::retryTask(TaskId t) {
  TaskInfo& task = tasks_[t];
  const WorkloadId w = task.workload;
  WorkloadInfo& info = workloads_[w];
  if (task.state != TaskState::kFinished || info.cancelled) {
    return;
  }
  if (info.finished == info.spec.tasks) {
    reopen(w);
    uint32_t& finished = finished_in_queue_[info.spec.queue];
    finished -= finished > 0 ? 1 : 0;  // 0: its queue's list has dropped it since.
  }
  --info.finished;
  task.state = TaskState::kPending;
  ++info.deferred;  // Placeable as its parallelism allows, below.
  releaseDeferred(w);
  fair_share_dirty_ = true;
}

void Scheduler::taskStopped(TaskId t) {
  TaskInfo& task = tasks_[t];
  if (task.state != TaskState::kTerminating) {
    return;
  }
  // An evicted task's room waits for the workload it was evicted for: nobody else, the victim
  // included, takes it before that workload has been tried with all its victims gone.
  const WorkloadId w = task.evicted_for;
  requeue(t, w != kNoWorkload && !workloads_[w].cancelled && workloads_[w].pending > 0
                 ? w
                 : kNoWorkload);
}

void Scheduler::taskInterrupted(TaskId t) {
  if (tasks_[t].state == TaskState::kRunning || tasks_[t].state == TaskState::kTerminating) {
    requeue(t);
  }
}

std::vector<TaskId> Scheduler::nodeLost(NodeIndex n) {
  if (!state_.up(n)) {
    return {};
  }
  state_.setUp(n, false);
  std::vector<TaskId> lost = node_tasks_[n];  // requeue() edits node_tasks_[n].
  for (TaskId t : lost) {
    requeue(t);
  }
  if (reserved_mask_[n] != 0) {
    setReservation(kNoWorkload, {});
  }
  if (!state_.cordoned(n)) {
    addCapacity(n, -1);  // A cordoned node's capacity left when it was cordoned.
  }
  return lost;
}

void Scheduler::nodeBack(NodeIndex n) {
  if (state_.up(n)) {
    return;
  }
  state_.setUp(n, true);
  if (!state_.cordoned(n)) {
    addCapacity(n, +1);
  }
  released_nodes_.push_back(n);  // Room grew there: "no room" verdicts are tried again.
}

core::Result<NodeIndex> Scheduler::addNode(model::Node node) {
  TESSERA_RETURN_IF_ERROR(model::validateNode(node));
  const int domain = node.nvlink_domain;
  const NodeIndex n = state_.addNode(std::move(node));  // Down: no capacity yet (nodeBack).
  if (domain >= 0) {
    const auto d = static_cast<size_t>(domain);
    if (domain_nodes_.size() <= d) {
      domain_nodes_.resize(d + 1);
    }
    domain_nodes_[d].push_back(n);
  }
  reserved_mask_.push_back(0);
  preference_.push_back(0);
  node_tasks_.emplace_back();
  node_ends_.emplace_back();
  node_unknown_.push_back(0);
  drain_key_.emplace_back();
  reindexDrain(n);
  placer_->nodesAdded();
  // Verdicts hold requests resolved for the old node count (their node selectors): all go, and
  // every waiting class is tried again.
  blocked_.clear();
  return n;
}

void Scheduler::removeNode(NodeIndex n) {
  state_.setRemoved(n);
  blocked_.clear();  // Verdicts counted it.
}

void Scheduler::setCordoned(NodeIndex n, bool cordoned) {
  if (state_.cordoned(n) == cordoned) {
    return;
  }
  state_.setCordoned(n, cordoned);
  // Like a down node, a cordoned one takes no new work, so its capacity leaves the fair shares
  // (as in KAI, whose proportion plugin counts only ready, schedulable nodes); what runs there
  // is still charged to its queues.
  if (state_.up(n)) {
    addCapacity(n, cordoned ? -1 : +1);
  }
  // An operator's rare act: every verdict goes, so each waiting workload says why anew.
  blocked_.clear();
  if (cordoned && reserved_mask_[n] != 0) {
    setReservation(kNoWorkload, {});
  }
}

void Scheduler::setDedicated(NodeIndex n, std::optional<model::TenantId> tenant) {
  state_.setDedicated(n, tenant);
  blocked_.clear();  // As setCordoned.
  if (reserved_mask_[n] != 0) {
    setReservation(kNoWorkload, {});  // The gang it held for may no longer be allowed there.
  }
}

bool Scheduler::evictTask(TaskId t) {
  TaskInfo& task = tasks_[t];
  if (task.state != TaskState::kRunning) {
    return false;
  }
  task.state = TaskState::kTerminating;
  task.evicted_for = kNoWorkload;
  addRunning(task.workload, -1);
  ++workloads_[task.workload].terminating;
  refile(task.workload);
  fair_share_dirty_ = true;
  return true;
}

core::Status Scheduler::setGpuMigMode(NodeIndex n, int gpu, model::MigMode mode) {
  if (n >= state_.nodeCount() || gpu < 0 ||
      static_cast<size_t>(gpu) >= state_.node(n).gpus.size()) {
    return core::invalidArgument("no GPU " + std::to_string(gpu) + " on node " + std::to_string(n));
  }
  if (state_.node(n).gpus[static_cast<size_t>(gpu)].mig != mode) {
    state_.setMigMode(n, gpu, mode);
    released_nodes_.push_back(n);  // Work refused there for its mode is tried again.
  }
  return core::Status::ok();
}

core::Status Scheduler::setMigIdle(NodeIndex n, int gpu, std::vector<model::MigInstance> idle) {
  if (n >= state_.nodeCount() || gpu < 0 ||
      static_cast<size_t>(gpu) >= state_.node(n).gpus.size()) {
    return core::invalidArgument("no GPU " + std::to_string(gpu) + " on node " + std::to_string(n));
  }
  const model::GpuModelInfo& info =
      catalogue_.model(state_.gpus(n)[static_cast<size_t>(gpu)].model);
  std::erase_if(idle, [&](const model::MigInstance& i) {
    if (i.profile < 0 || static_cast<size_t>(i.profile) >= info.mig_profiles.size()) {
      return true;
    }
    const std::vector<int>& starts = info.mig_profiles[static_cast<size_t>(i.profile)].starts;
    return std::find(starts.begin(), starts.end(), i.start) == starts.end();
  });
  state_.setMigIdle(n, gpu, std::move(idle));
  return core::Status::ok();
}

core::Status Scheduler::restoreTask(TaskId t, const Placement& p, core::TimePoint started,
                                    uint32_t starts) {
  if (t >= tasks_.size() || tasks_[t].state != TaskState::kPending) {
    return core::failedPrecondition("task " + std::to_string(t) + " is not pending");
  }
  TaskInfo& task = tasks_[t];
  const WorkloadInfo& w = workloads_[task.workload];
  const model::TaskRequest& req = w.spec.request;
  if (p.node >= state_.nodeCount()) {
    return core::invalidArgument("no node " + std::to_string(p.node));
  }
  const int count = std::popcount(p.gpus);
  if (count != req.gpu_count || (p.gpus >> state_.gpus(p.node).size()) != 0) {
    return core::invalidArgument(fmt::format("{} GPUs (mask {:#x}) on node {}, for a task of {}",
                                             count, p.gpus, state_.node(p.node).name,
                                             req.gpu_count));
  }
  // The rules for new placements (cordons, dedicated pools, selectors) do not apply: it runs there.
  const NodeFit fit = checkNodeResources(state_, p.node, resolveRequest(state_, req));
  if (!fit.fits()) {
    return core::failedPrecondition("node " + state_.node(p.node).name + " does not fit it now (" +
                                    std::string(filterReasonName(fit.reason)) + ")");
  }
  if ((p.gpus & ~fit.eligible) != 0) {
    return core::failedPrecondition(fmt::format("its GPUs (mask {:#x}) on node {} are taken",
                                                p.gpus & ~fit.eligible, state_.node(p.node).name));
  }
  if (req.isMig()) {
    const GpuState& g = state_.gpus(p.node)[static_cast<size_t>(std::countr_zero(p.gpus))];
    const model::GpuModelInfo& info = catalogue_.model(g.model);
    if (p.mig_profile < 0 || static_cast<size_t>(p.mig_profile) >= info.mig_profiles.size() ||
        !model::migSlotFree(info, g.mig, p.mig_profile, p.mig_start)) {
      return core::failedPrecondition(
          fmt::format("MIG slot {} of profile {} is not free", p.mig_start, p.mig_profile));
    }
  }
  if (w.pending == 0) {
    return core::failedPrecondition(fmt::format(
        "workload '{}' runs {} tasks already, its parallelism", w.spec.name, w.spec.parallelism));
  }
  const Assignment a = placer_->applyAt(req, p);
  PassResult ignored;  // Not a decision of a pass: nobody is told to start it.
  setRunning(t, a, ignored, started);
  task.starts = starts;
  return core::Status::ok();
}

core::Status Scheduler::restoreFinished(TaskId t) {
  if (t >= tasks_.size() || tasks_[t].state != TaskState::kPending) {
    return core::failedPrecondition("task " + std::to_string(t) + " is not pending");
  }
  TaskInfo& task = tasks_[t];
  WorkloadInfo& w = workloads_[task.workload];
  // Which of its pending tasks are deferred does not matter: one fewer is left to run.
  if (w.deferred > 0) {
    --w.deferred;
  } else {
    --w.pending;
    tree_.addPending(w.spec.queue, pendingAmounts(task.workload), -1);
  }
  task.state = TaskState::kFinished;
  if (++w.finished == w.spec.tasks) {
    ++finished_in_queue_[w.spec.queue];
  }
  // A gang needs at once only those of its tasks that are left to run.
  w.spec.min_available = std::max(1, std::min(w.spec.min_available, w.spec.tasks - w.finished));
  releaseDeferred(task.workload);
  refile(task.workload);
  fair_share_dirty_ = true;
  return core::Status::ok();
}

uint32_t Scheduler::shapeOf(const model::TaskRequest& req) {
  // The tenant always counts here, unlike in the placer's classes (which tenants share while
  // none of them has a pool): a verdict of "no room" for one tenant's shape must not hold back
  // another's that a pool given since lets in.
  std::string key = std::to_string(req.tenant.value());
  Placer::appendShapeKey(req, key);
  return shape_ids_.try_emplace(std::move(key), static_cast<uint32_t>(shape_ids_.size()))
      .first->second;
}

void Scheduler::addCapacity(NodeIndex n, int sign) {
  const model::Node& node = state_.node(n);
  const ResourceSpace& space = tree_.space();
  const int64_t gpu = int64_t{1000} * sign;
  capacity_[kCpuDim] += sign * node.cpu.value();
  capacity_[kMemoryDim] += sign * node.memory.value();
  for (const model::GpuDevice& g : node.gpus) {
    capacity_[kGpuDim] += gpu;
    const size_t dim = space.modelDim(g.model);
    if (dim != SIZE_MAX) {
      capacity_[dim] += gpu;
    }
  }
  fair_share_dirty_ = true;
}

void Scheduler::requeue(TaskId t, WorkloadId hold_for) {
  TaskInfo& task = tasks_[t];
  if (workloads_[task.workload].cancelled) {
    taskFinished(t);  // Stopped, and nothing more to run.
    return;
  }
  releaseTask(t, hold_for);
  WorkloadInfo& w = workloads_[task.workload];
  task.state = TaskState::kPending;
  if (w.suspended) {
    ++w.deferred;  // Held until it is resumed.
    return;
  }
  tree_.addPending(w.spec.queue, pendingAmounts(task.workload), +1);
  ++w.pending;
  refile(task.workload);
}

bool Scheduler::withinLimits(QueueId leaf, const Amounts& add, Explanation* why) const {
  const ResourceSpace& space = tree_.space();
  for (QueueId q = leaf; q != kNoQueue; q = tree_.queue(q).parent) {
    const Queue& queue = tree_.queue(q);
    for (size_t d = 0; d < add.size(); ++d) {
      if (add[d] > 0 && queue.allocated[d] - trial_credit_[d] + add[d] > queue.limit[d]) {
        if (why != nullptr) {
          why->reason = WaitReason::kQueueLimit;
          why->message = fmt::format("queue '{}' at its limit for {}: {} + {} > {} {}", queue.name,
                                     space.name(d), queue.allocated[d], add[d], queue.limit[d],
                                     ResourceSpace::unit(d));
        }
        return false;
      }
    }
  }
  return true;
}

bool Scheduler::placeTasks(WorkloadId w, int count, bool trial, PassResult* out, Explanation* why) {
  WorkloadInfo& info = workloads_[w];
  const model::TaskRequest& req = info.spec.request;
  const QueueId leaf = info.spec.queue;
  std::vector<std::pair<TaskId, Assignment>> placed;
  // Every node whose `preference_` is not 0 (repeats possible): the placer's `marked`, so it
  // answers from its index instead of scanning the span.
  std::vector<NodeIndex> touched;
  Amounts added = tree_.space().zeros();
  bool ok = true;
  size_t next = 0;
  // Reserved nodes: preferred by the workload they are kept for, closed to others unless they
  // are sure to end before the reservation is needed (backfill), or they belong to another
  // queue further below its fair share than the holder's (openToReserved).
  if (reserved_for_ != kNoWorkload) {
    const bool mine = reserved_for_ == w;
    if (mine || restricted(w)) {
      for (NodeIndex n : reserved_nodes_) {
        preference_[n] = mine ? 1 : Placer::kForbidden;
        touched.push_back(n);
      }
    }
  }

  // A gang of several whole-GPU or CPU-only tasks first looks for one node that holds it all:
  // the same request with everything multiplied, and then each task prefers that node.
  if (count > 1 && !req.isFractional() && !req.isMig() &&
      req.gpu_count * count <= model::kMaxGpusPerNode) {
    model::TaskRequest all = req;
    all.cpu = req.cpu * count;
    all.memory = req.memory * count;
    all.gpu_count = req.gpu_count * count;
    Placer::Decision one = placer_->decide(
        all, touched.empty() ? std::span<const uint8_t>{} : std::span<const uint8_t>(preference_),
        touched);
    if (one.placed) {
      preference_[one.placement.node] = 3;
      touched.push_back(one.placement.node);
    }
  }
  for (int k = 0; k < count; ++k) {
    while (next < info.tasks.size() && tasks_[info.tasks[next]].state != TaskState::kPending) {
      ++next;
    }
    if (next == info.tasks.size()) {
      ok = false;
      break;
    }
    const TaskId t = info.tasks[next++];
    Placer::Decision d = placer_->place(
        req, touched.empty() ? std::span<const uint8_t>{} : std::span<const uint8_t>(preference_),
        touched);
    if (!d.placed) {
      if (why != nullptr) {
        why->reason = WaitReason::kNoCapacity;
        why->message = fmt::format("no placement for task {} of {}: {}", k + 1, count,
                                   d.explain(state_.nodeCount()));
      }
      ok = false;
      break;
    }
    const Amounts used = taskAmounts(w, &d.placement);
    Amounts total = added;
    addTo(total, used);
    if (!withinLimits(leaf, total, why)) {
      placer_->release(req, d.assignment);
      ok = false;
      break;
    }
    if (!info.spec.preemptible) {
      const Queue& q = tree_.queue(leaf);
      Amounts np = np_allocated_[leaf];
      addTo(np, total);
      // GPU dimensions always; CPU and memory only where the queue sets a quota for them.
      bool within = true;
      for (size_t d = 0; d < np.size(); ++d) {
        const bool gpu_dim = d == kGpuDim || d >= kFixedDims;
        if ((gpu_dim || q.quota[d] > 0) && np[d] > q.quota[d]) {
          within = false;
        }
      }
      if (!within) {
        if (why != nullptr) {
          why->reason = WaitReason::kOverQuota;
          why->message = fmt::format(
              "non-preemptible work must fit in queue '{}' quota (gpu {} + {} > {} milli-GPU)",
              q.name, np_allocated_[leaf][kGpuDim], total[kGpuDim], q.quota[kGpuDim]);
        }
        placer_->release(req, d.assignment);
        ok = false;
        break;
      }
    }
    added = std::move(total);
    placed.emplace_back(t, d.assignment);
    // Prefer the gang's nodes, then their NVLink domains.
    const NodeIndex n = d.placement.node;
    const int domain = state_.node(n).nvlink_domain;
    if (domain >= 0) {
      for (NodeIndex m : domain_nodes_[static_cast<size_t>(domain)]) {
        if (preference_[m] == 0) {  // Not forbidden, not already preferred.
          preference_[m] = 1;
          touched.push_back(m);
        }
      }
    }
    if (preference_[n] < 2 || preference_[n] == Placer::kForbidden) {
      preference_[n] = 2;
      touched.push_back(n);
    }
  }
  for (NodeIndex m : touched) {
    preference_[m] = 0;
  }
  if (!ok || trial) {
    for (auto it = placed.rbegin(); it != placed.rend(); ++it) {
      placer_->release(req, it->second);
    }
    return ok;
  }
  for (const auto& [t, a] : placed) {
    setRunning(t, a, *out);
  }
  if (w == reserved_for_ && info.running >= info.spec.min_available) {
    setReservation(kNoWorkload, {});
  }
  return true;
}

void Scheduler::trackNodeTask(TaskId t, bool add) {
  const NodeIndex n = tasks_[t].assignment.placement.node;
  std::vector<TaskId>& v = node_tasks_[n];
  const core::Duration max_runtime = workloads_[tasks_[t].workload].spec.max_runtime;
  if (add) {
    v.push_back(t);
    if (max_runtime.count() > 0) {
      node_ends_[n].insert(tasks_[t].started + max_runtime);
    } else {
      ++node_unknown_[n];
    }
  } else if (auto it = std::find(v.begin(), v.end(), t); it != v.end()) {
    *it = v.back();
    v.pop_back();
    if (max_runtime.count() > 0) {
      if (auto e = node_ends_[n].find(tasks_[t].started + max_runtime); e != node_ends_[n].end()) {
        node_ends_[n].erase(e);
      }
    } else {
      --node_unknown_[n];
    }
  }
  reindexDrain(n);
}

void Scheduler::reindexDrain(NodeIndex n) {
  drain_order_.erase(drain_key_[n]);
  core::TimePoint drained = core::TimePoint::min();  // Empty: drained now.
  if (node_unknown_[n] > 0) {
    drained = core::TimePoint::max();
  } else if (!node_ends_[n].empty()) {
    drained = *node_ends_[n].rbegin();
  }
  const int64_t used = 1000LL * static_cast<int64_t>(state_.node(n).gpus.size()) -
                       state_.nodeState(n).free_gpu_milli;
  drain_key_[n] = {drained, used, n};
  drain_order_.insert(drain_key_[n]);
}

core::Result<QueueId> Scheduler::addQueue(QueueSpec spec) {
  TESSERA_ASSIGN_OR_RETURN(QueueId q, tree_.add(std::move(spec)));
  const size_t n = tree_.size();
  queue_workloads_.resize(n);
  finished_in_queue_.resize(n, 0);
  running_priorities_.resize(n);
  running_workloads_.resize(n);
  buckets_.resize(n);
  np_allocated_.resize(n, tree_.space().zeros());
  moving_.resize(n, tree_.space().zeros());
  below_since_.resize(n, core::TimePoint::max());
  over_share_.resize(n, 0);
  if (usage_ != nullptr) {
    usage_->resize(n);
  }
  fair_share_dirty_ = true;
  return q;
}

core::Status Scheduler::updateQueue(QueueId q, const Amounts& quota, const Amounts& limit,
                                    int64_t weight, int32_t priority) {
  TESSERA_RETURN_IF_ERROR(tree_.update(q, quota, limit, weight, priority));
  fair_share_dirty_ = true;
  forgetVerdicts();
  return core::Status::ok();
}

core::Status Scheduler::setMaxUnsaved(QueueId q, int64_t gpu_seconds) {
  return tree_.setMaxUnsaved(q, gpu_seconds);
}

core::Status Scheduler::renameQueue(QueueId q, std::string name) {
  TESSERA_RETURN_IF_ERROR(tree_.rename(q, std::move(name)));
  if (usage_ != nullptr) {
    usage_->forget(q);
  }
  fair_share_dirty_ = true;
  return core::Status::ok();
}

void Scheduler::setTrustGroup(model::TenantId tenant, uint32_t group) {
  state_.setTrustGroup(tenant, group);
  forgetVerdicts();
}

void Scheduler::forgetVerdicts() {
  blocked_.clear();
  for (std::vector<Bucket>& buckets : buckets_) {
    for (Bucket& b : buckets) {
      b.pass = 0;
    }
  }
}

PassResult Scheduler::schedule() {
  PassResult out;
  if (usage_ != nullptr) {
    // Usage moves with time: the split is recomputed every pass.
    usage_->advance(tree_, clock_.now());
    fair_share_dirty_ = true;
  }
  if (fair_share_dirty_) {
    if (usage_ != nullptr) {
      computeFairShare(tree_, capacity_, usage_->tiltedWeights(tree_, options_.usage_k));
    } else {
      computeFairShare(tree_, capacity_);
    }
    fair_share_dirty_ = false;
  }
  allocate(out);
  if (options_.fair_share) {
    int evictions = 0;
    evictFor(Eviction::kConsolidate, out, evictions);
    evictFor(Eviction::kReclaim, out, evictions);
    evictFor(Eviction::kPreempt, out, evictions);
  }
  return out;
}

}  // namespace tessera::sched
