#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <unordered_map>

#include "sched/fair_share.h"

namespace tessera::sched {
namespace {

__extension__ typedef __int128 Int128;  // NOLINT(modernize-use-using)

// allocated / fair share as an exact fraction; den == 0 with num > 0 is "infinitely over".
struct Ratio {
  Int128 num = 0;
  Int128 den = 1;
};

bool lessThan(const Ratio& a, const Ratio& b) {
  if (a.den == 0 || b.den == 0) {
    return a.den != 0 && b.den == 0;  // Finite < infinite; infinite is not < anything.
  }
  return a.num * b.den < b.num * a.den;
}

bool greaterThanOne(const Ratio& r) { return r.den == 0 ? r.num > 0 : r.num > r.den; }

// The dominant share of a queue: the largest allocated / fair share over its dimensions.
Ratio dominantShare(const Amounts& allocated, const Amounts& fair) {
  Ratio best{0, 1};
  for (size_t d = 0; d < allocated.size(); ++d) {
    if (allocated[d] <= 0) {
      continue;
    }
    if (fair[d] <= 0) {
      return Ratio{1, 0};
    }
    const Ratio r{allocated[d], fair[d]};
    if (lessThan(best, r)) {
      best = r;
    }
  }
  return best;
}

std::string shareText(const Queue& q, const Amounts& allocated) {
  return fmt::format("{} gpu {}/{}", q.name, allocated[kGpuDim], q.fair_share[kGpuDim]);
}

}  // namespace

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

struct Scheduler::Unit {
  WorkloadId workload = 0;
  std::vector<TaskId> tasks;  // Running tasks to evict.
  bool elastic = false;
  core::TimePoint started{};  // Latest start among them.
};

Scheduler::Scheduler(const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes,
                     QueueTree tree, SchedulerOptions options, const core::Clock& clock)
    : catalogue_(catalogue),
      state_(catalogue, std::move(nodes)),
      tree_(std::move(tree)),
      options_(std::move(options)),
      clock_(clock) {}

core::Result<std::unique_ptr<Scheduler>> Scheduler::create(
    const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes, QueueTree tree,
    std::vector<PodShape> typical, SchedulerOptions options, const core::Clock& clock) {
  for (const model::Node& n : nodes) {
    TESSERA_RETURN_IF_ERROR(model::validateNode(n));
  }
  if (options.max_evictions_per_pass < 0) {
    return core::invalidArgument("max evictions per pass must not be negative");
  }
  std::unique_ptr<Scheduler> s(
      new Scheduler(catalogue, std::move(nodes), std::move(tree), std::move(options), clock));
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
  s->buckets_.resize(s->tree_.size());
  s->reserved_mask_.assign(s->state_.nodeCount(), 0);
  s->np_allocated_.assign(s->tree_.size(), space.zeros());
  s->preference_.assign(s->state_.nodeCount(), 0);
  if (s->options_.usage_half_life.count() > 0) {
    s->usage_ = std::make_unique<UsageHistory>(s->tree_.size(), s->options_.usage_half_life);
  }
  s->node_tasks_.resize(s->state_.nodeCount());
  return s;
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
  core::Status st = model::validateTaskRequest(spec.request);
  if (!st.isOk()) {
    return st.withContext("workload '" + n + "'");
  }
  const auto w = static_cast<WorkloadId>(workloads_.size());
  WorkloadInfo info;
  info.spec = std::move(spec);
  info.submitted = clock_.now();
  info.seq = next_seq_++;
  info.pending = info.spec.tasks;
  for (int i = 0; i < info.spec.tasks; ++i) {
    info.tasks.push_back(static_cast<TaskId>(tasks_.size()));
    TaskInfo t;
    t.workload = w;
    t.index = static_cast<uint32_t>(i);
    tasks_.push_back(t);
  }
  info.shape = placer_->classId(info.spec.request);
  workloads_.push_back(std::move(info));
  const Amounts one = pendingAmounts(w);
  for (int i = 0; i < workloads_[w].spec.tasks; ++i) {
    tree_.addPending(workloads_[w].spec.queue, one, +1);
  }
  // Kept in allocation order inside the queue: priority, then submission.
  auto& ws = queue_workloads_[workloads_[w].spec.queue];
  ws.insert(std::upper_bound(ws.begin(), ws.end(), w,
                             [&](WorkloadId a, WorkloadId b) {
                               if (workloads_[a].spec.priority != workloads_[b].spec.priority) {
                                 return workloads_[a].spec.priority > workloads_[b].spec.priority;
                               }
                               return workloads_[a].seq < workloads_[b].seq;
                             }),
            w);
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
  if (before == after || !info.spec.preemptible) {
    return;
  }
  std::map<int32_t, int>& counts = running_priorities_[info.spec.queue];
  if (after) {
    ++counts[info.spec.priority];
  } else if (--counts[info.spec.priority] == 0) {
    counts.erase(info.spec.priority);
  }
}

Scheduler::OrderKey Scheduler::orderOf(WorkloadId w) const {
  return {-static_cast<int64_t>(workloads_[w].spec.priority), workloads_[w].seq};
}

int32_t Scheduler::needOf(WorkloadId w) const {
  const WorkloadInfo& info = workloads_[w];
  return std::max(1, info.spec.min_available - info.running);
}

void Scheduler::refile(WorkloadId w) {
  WorkloadInfo& info = workloads_[w];
  std::vector<Bucket>& buckets = buckets_[info.spec.queue];
  const bool wanted = info.pending > 0;
  const BucketKey key{info.shape, needOf(w), info.spec.preemptible,
                      info.spec.max_runtime.count() > 0};
  if (info.bucket >= 0) {
    Bucket& b = buckets[static_cast<size_t>(info.bucket)];
    if (wanted && b.key == key) {
      return;
    }
    b.members.erase(orderOf(w));
    info.bucket = -1;
  }
  if (!wanted) {
    return;
  }
  auto it =
      std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) { return b.key == key; });
  if (it == buckets.end()) {
    it = buckets.insert(buckets.end(), Bucket{});
    it->key = key;
  }
  it->members.emplace(orderOf(w), w);
  info.bucket = static_cast<int32_t>(it - buckets.begin());
  if (info.why.reason == WaitReason::kNotReached && it->last.reason != WaitReason::kNotReached) {
    info.why = it->last;  // Like its peers, until it is tried itself.
  }
}

void Scheduler::setRunning(TaskId t, const Assignment& a, PassResult& out) {
  TaskInfo& task = tasks_[t];
  WorkloadInfo& w = workloads_[task.workload];
  task.state = TaskState::kRunning;
  task.assignment = a;
  task.started = clock_.now();
  ++task.starts;
  trackNodeTask(t, true);
  --w.pending;
  addRunning(task.workload, +1);
  refile(task.workload);
  const QueueId q = w.spec.queue;
  tree_.addPending(q, pendingAmounts(task.workload), -1);
  const Amounts used = taskAmounts(task.workload, &a.placement);
  tree_.addAllocated(q, used, +1);
  if (!w.spec.preemptible) {
    for (QueueId p = q; p != kNoQueue; p = tree_.queue(p).parent) {
      addTo(np_allocated_[p], used);
    }
  }
  out.started.push_back({t, task.workload, a.placement});
}

void Scheduler::releaseTask(TaskId t) {
  TaskInfo& task = tasks_[t];
  WorkloadInfo& w = workloads_[task.workload];
  const Amounts used = taskAmounts(task.workload, &task.assignment.placement);
  placer_->release(w.spec.request, task.assignment);
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
  }
  released_nodes_.push_back(task.assignment.placement.node);
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
  fair_share_dirty_ = true;
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
      tree_.addPending(info.spec.queue, pendingAmounts(w), -1);
      task.state = TaskState::kFinished;
      --info.pending;
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
  fair_share_dirty_ = true;
}

void Scheduler::taskStopped(TaskId t) {
  if (tasks_[t].state == TaskState::kTerminating) {
    requeue(t);
  }
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
  addCapacity(n, -1);
  return lost;
}

void Scheduler::nodeBack(NodeIndex n) {
  if (state_.up(n)) {
    return;
  }
  state_.setUp(n, true);
  addCapacity(n, +1);
  released_nodes_.push_back(n);  // Room grew there: "no room" verdicts are tried again.
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

void Scheduler::requeue(TaskId t) {
  TaskInfo& task = tasks_[t];
  if (workloads_[task.workload].cancelled) {
    taskFinished(t);  // Stopped, and nothing more to run.
    return;
  }
  releaseTask(t);
  WorkloadInfo& w = workloads_[task.workload];
  tree_.addPending(w.spec.queue, pendingAmounts(task.workload), +1);
  task.state = TaskState::kPending;
  ++w.pending;
  refile(task.workload);
}

bool Scheduler::withinLimits(QueueId leaf, const Amounts& add, Explanation* why) const {
  const ResourceSpace& space = tree_.space();
  for (QueueId q = leaf; q != kNoQueue; q = tree_.queue(q).parent) {
    const Queue& queue = tree_.queue(q);
    for (size_t d = 0; d < add.size(); ++d) {
      if (add[d] > 0 && queue.allocated[d] + add[d] > queue.limit[d]) {
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
  // queue that is below its fair share (a guarantee outranks another queue's reservation).
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

QueueId Scheduler::pickQueue(const std::vector<int>& untried) const {
  const std::vector<QueueId>* level = &tree_.roots();
  QueueId chosen = kNoQueue;
  while (true) {
    QueueId best = kNoQueue;
    Ratio best_share;
    for (QueueId q : *level) {
      if (untried[q] == 0) {
        continue;
      }
      const Queue& queue = tree_.queue(q);
      const Ratio share = dominantShare(queue.allocated, queue.fair_share);
      if (best == kNoQueue || lessThan(share, best_share) ||
          (!lessThan(best_share, share) && queue.priority > tree_.queue(best).priority)) {
        best = q;
        best_share = share;
      }
    }
    if (best == kNoQueue) {
      return chosen;
    }
    chosen = best;
    if (tree_.queue(best).isLeaf()) {
      return best;
    }
    level = &tree_.queue(best).children;
  }
}

bool Scheduler::restricted(WorkloadId w) const {
  if (reserved_for_ == kNoWorkload || w == reserved_for_ || mayBackfill(w)) {
    return false;
  }
  // A guarantee outranks another queue's reservation: a queue below its fair share may use them.
  const QueueId leaf = workloads_[w].spec.queue;
  if (leaf == workloads_[reserved_for_].spec.queue) {
    return true;
  }
  const Queue& q = tree_.queue(leaf);
  return !lessThan(dominantShare(q.allocated, q.fair_share), Ratio{1, 1});
}

const Scheduler::Blocked* Scheduler::findBlocked(uint32_t shape, int32_t need,
                                                 bool restricted) const {
  // No room for fewer tasks of the class means no room for more; no room with every node open
  // means no room without the reserved ones.
  for (const bool r : {false, true}) {
    if (r && !restricted) {
      break;
    }
    auto it = blocked_.lower_bound(BlockKey{shape, r, 0});
    if (it != blocked_.end() && it->first.shape == shape && it->first.restricted == r &&
        it->first.need <= need) {
      return &it->second;
    }
  }
  return nullptr;
}

Explanation Scheduler::explain(WorkloadId w) const {
  const WorkloadInfo& info = workloads_[w];
  if (info.pending == 0) {
    return {WaitReason::kNone, ""};
  }
  if (info.terminating > 0) {
    return {WaitReason::kTerminating,
            fmt::format("{} of its tasks are stopping", info.terminating)};
  }
  if (info.awaited_victims > 0) {
    return {WaitReason::kWaitingForEvictions,
            fmt::format("waiting for {} evicted task(s) to stop", info.awaited_victims)};
  }
  if (info.why.reason == WaitReason::kNotReached || info.why.reason == WaitReason::kNoCapacity) {
    if (const Blocked* b = findBlocked(info.shape, needOf(w), restricted(w))) {
      return {WaitReason::kNoCapacity, b->message};
    }
  }
  if (info.why.reason == WaitReason::kNotReached && info.bucket >= 0) {
    // Passed over with its bucket: its peers' reason is its own.
    const Bucket& b = buckets_[info.spec.queue][static_cast<size_t>(info.bucket)];
    if (b.last.reason != WaitReason::kNotReached) {
      return b.last;
    }
  }
  return info.why;
}

void Scheduler::unblock() {
  if (released_nodes_.empty()) {
    return;
  }
  std::sort(released_nodes_.begin(), released_nodes_.end());
  released_nodes_.erase(std::unique(released_nodes_.begin(), released_nodes_.end()),
                        released_nodes_.end());
  // A verdict stands while no node that could hold one task of the class gained resources.
  std::erase_if(blocked_, [&](const auto& entry) {
    for (NodeIndex n : released_nodes_) {
      if ((!entry.first.restricted || reserved_mask_[n] == 0) &&
          checkNode(state_, n, entry.second.resolved).fits()) {
        return true;
      }
    }
    return false;
  });
  released_nodes_.clear();
}

void Scheduler::noteFailure(WorkloadId w, bool capacity, bool restricted, int32_t need) {
  WorkloadInfo& info = workloads_[w];
  if (capacity) {
    blocked_.try_emplace(BlockKey{info.shape, restricted, need},
                         Blocked{resolveRequest(state_, info.spec.request), info.why.message});
  }
  if (info.bucket < 0) {
    return;
  }
  Bucket& b = buckets_[info.spec.queue][static_cast<size_t>(info.bucket)];
  b.last = info.why;
  if (info.why.reason == WaitReason::kQueueLimit || info.why.reason == WaitReason::kOverQuota) {
    // Its peers ask the same of the same queue: none of them fits this pass either.
    b.pass = pass_;
    b.next = {INT64_MAX, UINT64_MAX};
  }
}

void Scheduler::tryWorkload(WorkloadId w, PassResult& out) {
  WorkloadInfo& info = workloads_[w];
  info.tried_pass = pass_;
  const int core_needed = std::max(0, info.spec.min_available - info.running);
  // Victims stopping for it may have made room that no verdict knows of yet.
  if (info.awaited_victims == 0 && isBlocked(info.shape, std::max(1, core_needed), restricted(w))) {
    info.why = explain(w);
    return;
  }
  ++out.tried;
  info.why = {WaitReason::kNone, ""};
  if (core_needed > 0) {
    const bool closed = restricted(w);
    if (!placeTasks(w, core_needed, false, &out, &info.why)) {
      if (info.awaited_victims > 0) {
        info.why = {WaitReason::kWaitingForEvictions,
                    fmt::format("waiting for {} evicted task(s) to stop", info.awaited_victims)};
        return;
      }
      const bool capacity = info.why.reason == WaitReason::kNoCapacity;
      // Reservations are for large work: a gang, or tasks of several GPUs each. Small tasks find
      // room as the cluster turns over. Not for a queue that is borrowing: it would hold nodes
      // others deserve.
      if (capacity && reserved_for_ == kNoWorkload &&
          (core_needed > 1 || info.spec.request.gpu_count > 1)) {
        const Queue& q = tree_.queue(info.spec.queue);
        if (!options_.fair_share || !greaterThanOne(dominantShare(q.allocated, q.fair_share))) {
          reserveFor(w);
        }
      }
      noteFailure(w, capacity, closed, core_needed);
      return;
    }
  }
  // Elastic tasks beyond the gang minimum, one at a time.
  while (info.pending > 0) {
    const bool closed = restricted(w);
    if (isBlocked(info.shape, 1, closed)) {
      if (info.why.reason != WaitReason::kNoCapacity) {
        info.why = {WaitReason::kNoCapacity, "no room for one more task of this shape"};
      }
      break;
    }
    Explanation why;
    if (!placeTasks(w, 1, false, &out, &why)) {
      info.why = why;  // Elastic tasks wait too, and may reclaim.
      noteFailure(w, why.reason == WaitReason::kNoCapacity, closed, 1);
      break;
    }
  }
}

WorkloadId Scheduler::nextInQueue(QueueId q) {
  // Non-timed members share the queue's access to reserved nodes; timed ones may backfill.
  bool queue_closed = false;
  if (reserved_for_ != kNoWorkload) {
    const Queue& queue = tree_.queue(q);
    queue_closed = q == workloads_[reserved_for_].spec.queue ||
                   !lessThan(dominantShare(queue.allocated, queue.fair_share), Ratio{1, 1});
  }
  WorkloadId best = kNoWorkload;
  OrderKey best_key;
  Bucket* best_bucket = nullptr;
  for (Bucket& b : buckets_[q]) {
    if (b.members.empty()) {
      continue;
    }
    if (b.pass != pass_) {
      b.pass = pass_;
      b.next = {INT64_MIN, 0};
    }
    if (!b.key.timed && isBlocked(b.key.shape, b.key.need, queue_closed)) {
      continue;  // A whole bucket of work with no room: not touched.
    }
    for (auto it = b.members.lower_bound(b.next); it != b.members.end(); ++it) {
      const WorkloadId w = it->second;
      WorkloadInfo& info = workloads_[w];
      bool skip = info.tried_pass == pass_ ||
                  (b.key.timed && isBlocked(b.key.shape, b.key.need, restricted(w)));
      if (info.terminating > 0) {
        info.why = {WaitReason::kTerminating,
                    fmt::format("{} of its tasks are stopping", info.terminating)};
        skip = true;
      }
      if (skip) {
        b.next = {it->first.first, it->first.second + 1};
        continue;
      }
      if (best == kNoWorkload || it->first < best_key) {
        best = w;
        best_key = it->first;
        best_bucket = &b;
      }
      break;
    }
  }
  if (best_bucket != nullptr) {
    best_bucket->next = {best_key.first, best_key.second + 1};
  }
  return best;
}

void Scheduler::allocate(PassResult& out) {
  ++pass_;
  // A reservation ends when its workload runs (or is gone); while it lasts its nodes are chosen
  // again as the cluster drains.
  if (reserved_for_ != kNoWorkload) {
    const WorkloadInfo& r = workloads_[reserved_for_];
    if (r.running >= r.spec.min_available || r.pending == 0) {
      setReservation(kNoWorkload, {});
    } else {
      reserveFor(reserved_for_);
    }
  }
  unblock();
  // First the work whose victims are stopping (the room was made for it), and the reserved one.
  std::vector<WorkloadId> first;
  first.swap(awaiting_);
  if (reserved_for_ != kNoWorkload) {
    first.push_back(reserved_for_);
  }
  for (WorkloadId w : first) {
    WorkloadInfo& info = workloads_[w];
    if (info.tried_pass != pass_ && info.pending > 0 && info.terminating == 0) {
      tryWorkload(w, out);
    }
  }
  for (WorkloadId w : first) {
    if (workloads_[w].awaited_victims > 0 &&
        std::find(awaiting_.begin(), awaiting_.end(), w) == awaiting_.end()) {
      awaiting_.push_back(w);
    }
  }
  if (!options_.fair_share) {
    // FIFO: every unfinished workload in submission order (the baseline; not incremental).
    std::erase_if(unfinished_,
                  [&](WorkloadId w) { return workloads_[w].finished == workloads_[w].spec.tasks; });
    for (WorkloadId w : unfinished_) {
      WorkloadInfo& info = workloads_[w];
      if (info.pending == 0 || info.tried_pass == pass_) {
        continue;
      }
      if (info.terminating > 0) {
        info.why = {WaitReason::kTerminating,
                    fmt::format("{} of its tasks are stopping", info.terminating)};
        continue;
      }
      tryWorkload(w, out);
    }
    return;
  }
  // Leaf queues with pending work; the count of such leaves per subtree.
  std::vector<int> open(tree_.size(), 0);
  for (QueueId q = 0; q < tree_.size(); ++q) {
    if (size_t{finished_in_queue_[q]} * 2 > queue_workloads_[q].size()) {
      std::erase_if(queue_workloads_[q], [&](WorkloadId w) {
        return workloads_[w].finished == workloads_[w].spec.tasks;
      });
      finished_in_queue_[q] = 0;
    }
    const bool pending = std::any_of(buckets_[q].begin(), buckets_[q].end(),
                                     [](const Bucket& b) { return !b.members.empty(); });
    if (pending) {
      for (QueueId p = q; p != kNoQueue; p = tree_.queue(p).parent) {
        ++open[p];
      }
    }
  }
  // The queue to serve is re-chosen only after a placement: a failure changes no share.
  QueueId current = kNoQueue;
  while (true) {
    if (current == kNoQueue || open[current] == 0) {
      current = pickQueue(open);
    }
    if (current == kNoQueue) {
      break;
    }
    const WorkloadId w = nextInQueue(current);
    if (w == kNoWorkload) {
      for (QueueId p = current; p != kNoQueue; p = tree_.queue(p).parent) {
        --open[p];
      }
      continue;
    }
    const size_t started_before = out.started.size();
    tryWorkload(w, out);
    if (out.started.size() != started_before) {
      current = kNoQueue;  // A placement changes shares: choose the queue again.
    }
  }
}

void Scheduler::trackNodeTask(TaskId t, bool add) {
  std::vector<TaskId>& v = node_tasks_[tasks_[t].assignment.placement.node];
  if (add) {
    v.push_back(t);
    return;
  }
  auto it = std::find(v.begin(), v.end(), t);
  if (it != v.end()) {
    *it = v.back();
    v.pop_back();
  }
}

bool Scheduler::mayBackfill(WorkloadId w) const {
  const core::Duration max_runtime = workloads_[w].spec.max_runtime;
  return max_runtime.count() > 0 && reservation_start_ != core::TimePoint::max() &&
         clock_.now() + max_runtime <= reservation_start_;
}

void Scheduler::reserveFor(WorkloadId w) {
  const WorkloadInfo& info = workloads_[w];
  const model::TaskRequest& r = info.spec.request;
  const int needed = std::max(1, info.spec.min_available - info.running);
  const core::TimePoint now = clock_.now();
  struct Candidate {
    core::TimePoint drained;  // When its known tasks have all ended; max() = unknown.
    int64_t used_milli;
    NodeIndex node;
    int holds;  // Tasks of `w` the node holds when empty.
  };
  std::vector<Candidate> candidates;
  for (NodeIndex n = 0; n < state_.nodeCount(); ++n) {
    const model::Node& node = state_.node(n);
    if (static_cast<int>(node.gpus.size()) < r.gpu_count ||
        (r.gpu_count > 0 && !r.models.empty() &&
         std::find(r.models.begin(), r.models.end(), node.gpus[0].model) == r.models.end())) {
      continue;
    }
    int holds = INT32_MAX;
    if (r.gpu_count > 0) {
      const int64_t per_gpu =
          r.isFractional() ? 1000 / std::max<int64_t>(1, r.gpu_milli.value()) : 1;
      holds = static_cast<int>(static_cast<int64_t>(node.gpus.size()) / r.gpu_count * per_gpu);
    }
    if (r.cpu.value() > 0) {
      holds = std::min<int64_t>(holds, node.cpu.value() / r.cpu.value());
    }
    if (r.memory.value() > 0) {
      holds = std::min<int64_t>(holds, node.memory.value() / r.memory.value());
    }
    if (holds <= 0 || holds == INT32_MAX) {
      continue;
    }
    core::TimePoint drained = now;
    for (TaskId t : node_tasks_[n]) {
      const core::Duration max_runtime = workloads_[tasks_[t].workload].spec.max_runtime;
      if (max_runtime.count() <= 0) {
        drained = core::TimePoint::max();
        break;
      }
      drained = std::max(drained, tasks_[t].started + max_runtime);
    }
    candidates.push_back(
        {drained,
         1000LL * static_cast<int64_t>(node.gpus.size()) - state_.nodeState(n).free_gpu_milli, n,
         holds});
  }
  // Each candidate holds at least one task: the first `needed` in order are all that can be used.
  const auto used = static_cast<ptrdiff_t>(std::min<size_t>(candidates.size(), needed));
  std::partial_sort(candidates.begin(), candidates.begin() + used, candidates.end(),
                    [](const Candidate& a, const Candidate& b) {
                      if (a.drained != b.drained) {
                        return a.drained < b.drained;
                      }
                      if (a.used_milli != b.used_milli) {
                        return a.used_milli < b.used_milli;
                      }
                      return a.node < b.node;
                    });
  std::vector<NodeIndex> nodes;
  reservation_start_ = now;
  int covered = 0;
  for (auto c = candidates.begin(); c != candidates.begin() + used && covered < needed; ++c) {
    nodes.push_back(c->node);
    reservation_start_ = std::max(reservation_start_, c->drained);
    covered += c->holds;
  }
  setReservation(w, std::move(nodes));
}

void Scheduler::setReservation(WorkloadId w, std::vector<NodeIndex> nodes) {
  if (w == reserved_for_ && nodes == reserved_nodes_) {
    return;
  }
  for (NodeIndex n : reserved_nodes_) {
    reserved_mask_[n] = 0;
  }
  reserved_for_ = w;
  reserved_nodes_ = std::move(nodes);
  for (NodeIndex n : reserved_nodes_) {
    reserved_mask_[n] = 1;
  }
  // The nodes closed to most work moved: verdicts taken without them no longer hold.
  std::erase_if(blocked_, [](const auto& entry) { return entry.first.restricted; });
}

const Amounts& Scheduler::reclaimBasis(const Queue& q) const {
  return options_.reclaim_to == ReclaimTo::kQuota ? q.deserved : q.fair_share;
}

core::Duration Scheduler::protectedFor(TaskId t) const {
  // Doubles with every eviction the task has had: it cannot be evicted more than about
  // log2(runtime / min_runtime) times, and the work all its evictions lose is less than
  // min_runtime * 2^k <= twice its own runtime (docs/fairness.md).
  const uint32_t evictions = tasks_[t].starts > 0 ? tasks_[t].starts - 1 : 0;
  return options_.min_runtime * (int64_t{1} << std::min<uint32_t>(evictions, 30));
}

std::vector<Scheduler::Unit> Scheduler::victimUnits(WorkloadId w) const {
  const WorkloadInfo& info = workloads_[w];
  std::vector<Unit> units;
  if (!info.spec.preemptible || info.running == 0) {
    return units;
  }
  const core::TimePoint now = clock_.now();
  auto young = [&](TaskId t) { return now - tasks_[t].started < protectedFor(t); };
  std::vector<TaskId> running;
  for (TaskId t : info.tasks) {
    if (tasks_[t].state == TaskState::kRunning) {
      running.push_back(t);
    }
  }
  // Latest started first: least work lost.
  std::sort(running.begin(), running.end(), [&](TaskId a, TaskId b) {
    return tasks_[a].started != tasks_[b].started ? tasks_[a].started > tasks_[b].started : a < b;
  });
  // Elastic units from the tasks old enough to go; the rest are the gang's core, which goes
  // whole or not at all.
  const int elastic = info.running - info.spec.min_available;
  int taken = 0;
  std::vector<TaskId> core;
  for (TaskId t : running) {
    if (taken < elastic && !young(t)) {
      units.push_back({w, {t}, true, tasks_[t].started});
      ++taken;
    } else {
      core.push_back(t);
    }
  }
  if (!core.empty() && std::none_of(core.begin(), core.end(), young)) {
    units.push_back({w, core, false, tasks_[core.front()].started});
  }
  return units;
}

void Scheduler::evictFor(bool reclaim, PassResult& out, int& evictions) {
  // Blocked workloads that could evict: for reclaim those of queues below their fair share, for
  // preemption those above the lowest priority running in their queue; a bounded number per
  // queue and per pass, most deprived queue first. Only the most deprived queues are looked at.
  constexpr size_t kPerQueue = 16;
  constexpr size_t kPerPass = 16;
  std::vector<std::pair<Ratio, QueueId>> leaves;
  for (QueueId q = 0; q < tree_.size(); ++q) {
    const Queue& queue = tree_.queue(q);
    if (!queue.isLeaf() || queue_workloads_[q].empty() ||
        queue.pending[kGpuDim] + queue.pending[kCpuDim] + queue.pending[kMemoryDim] == 0) {
      continue;
    }
    const Ratio share =
        dominantShare(queue.allocated, (reclaim ? reclaimBasis(queue) : queue.fair_share));
    if (reclaim ? !lessThan(share, Ratio{1, 1}) : running_priorities_[q].empty()) {
      continue;
    }
    leaves.emplace_back(share, q);
  }
  std::stable_sort(leaves.begin(), leaves.end(),
                   [](const auto& a, const auto& b) { return lessThan(a.first, b.first); });
  std::vector<std::pair<Ratio, WorkloadId>> blocked;
  for (size_t i = 0; i < leaves.size(); ++i) {
    // Past the first kPerPass, only queues as deprived as the last one taken can still rank.
    if (blocked.size() >= kPerPass && lessThan(leaves[i - 1].first, leaves[i].first)) {
      break;
    }
    const QueueId q = leaves[i].second;
    const int32_t lowest = reclaim ? INT32_MIN : running_priorities_[q].begin()->first;
    size_t taken = 0;
    for (WorkloadId w : queue_workloads_[q]) {
      const WorkloadInfo& info = workloads_[w];
      if (!reclaim && info.spec.priority <= lowest) {
        break;  // The rest of the queue is of no higher priority.
      }
      if (info.pending > 0 && info.awaited_victims == 0 && info.terminating == 0 &&
          explain(w).reason == WaitReason::kNoCapacity) {
        blocked.emplace_back(leaves[i].first, w);
        if (++taken == kPerQueue) {
          break;
        }
      }
    }
  }
  std::stable_sort(blocked.begin(), blocked.end(), [&](const auto& a, const auto& b) {
    if (lessThan(a.first, b.first) || lessThan(b.first, a.first)) {
      return lessThan(a.first, b.first);
    }
    const WorkloadInfo& wa = workloads_[a.second];
    const WorkloadInfo& wb = workloads_[b.second];
    if (wa.spec.priority != wb.spec.priority) {
      return wa.spec.priority > wb.spec.priority;
    }
    return wa.seq < wb.seq;
  });
  if (blocked.size() > kPerPass) {
    blocked.resize(kPerPass);
  }
  // Victim units per workload, computed once per call (and again after its tasks were evicted).
  std::unordered_map<WorkloadId, std::vector<Unit>> units_of;
  auto units = [&](WorkloadId v) -> const std::vector<Unit>& {
    auto it = units_of.find(v);
    if (it == units_of.end()) {
      it = units_of.emplace(v, victimUnits(v)).first;
    }
    return it->second;
  };
  for (const auto& entry : blocked) {
    const WorkloadId w = entry.second;
    if (evictions >= options_.max_evictions_per_pass) {
      return;
    }
    WorkloadInfo& info = workloads_[w];
    const QueueId r_leaf = info.spec.queue;
    // What to make room for: the rest of the gang minimum, or for elastic tasks as many as the
    // queue's fair share has room for (all at once, so a borrower gives back in one pass).
    const Amounts one = pendingAmounts(w);
    const int core_needed = std::max(0, info.spec.min_available - info.running);
    int64_t room = info.pending;
    if (reclaim) {
      const Queue& rq = tree_.queue(r_leaf);
      for (size_t d = 0; d < one.size(); ++d) {
        if (one[d] > 0) {
          room =
              std::min(room, std::max<int64_t>(0, reclaimBasis(rq)[d] - rq.allocated[d]) / one[d]);
        }
      }
    }
    room = std::min<int64_t>(room, options_.max_evictions_per_pass + core_needed);
    const int target = static_cast<int>(std::max<int64_t>(core_needed, room));
    if (target == 0) {
      continue;
    }
    // Try the whole target first; if it cannot be made to fit, fall back to fewer tasks (never
    // fewer than the gang minimum).
    for (int needed = target; needed >= std::max(1, core_needed);
         needed = needed > std::max(1, core_needed) ? std::max(std::max(1, core_needed), needed / 2)
                                                    : 0) {
      Amounts need = one;
      for (size_t d = 0; d < need.size(); ++d) {
        need[d] *= needed;
      }
      struct Candidate {
        Unit unit;
        Ratio victim_share;  // Of the victim's ancestor where the two paths split.
        QueueId split_victim = kNoQueue;
        QueueId split_reclaimer = kNoQueue;
      };
      // Victim leaves grouped in levels of equal victim share, most over first: candidates are
      // drawn level by level, and a level is expanded into units only when reached.
      struct Source {
        Ratio victim_share;
        QueueId leaf;
        QueueId split_victim;
        QueueId split_reclaimer;
      };
      std::vector<Source> sources;
      if (reclaim) {
        // The reclaimer must stay within its fair share with the work added.
        Amounts after = tree_.queue(r_leaf).allocated;
        addTo(after, need);
        if (greaterThanOne(dominantShare(after, reclaimBasis(tree_.queue(r_leaf))))) {
          continue;
        }
        for (QueueId v = 0; v < tree_.size(); ++v) {
          if (v == r_leaf || running_priorities_[v].empty()) {
            continue;
          }
          // Where the paths split: the children of the lowest common ancestor.
          QueueId a_v = v;
          QueueId a_r = r_leaf;
          while (tree_.queue(a_v).depth > tree_.queue(a_r).depth) {
            a_v = tree_.queue(a_v).parent;
          }
          while (tree_.queue(a_r).depth > tree_.queue(a_v).depth) {
            a_r = tree_.queue(a_r).parent;
          }
          while (tree_.queue(a_v).parent != tree_.queue(a_r).parent) {
            a_v = tree_.queue(a_v).parent;
            a_r = tree_.queue(a_r).parent;
          }
          const Queue& av = tree_.queue(a_v);
          const Ratio s_v = dominantShare(av.allocated, reclaimBasis(av));
          if (!greaterThanOne(s_v)) {
            continue;  // Only queues above their fair share give back.
          }
          // The move must leave the reclaimer's side strictly below where the victim's is:
          // if it cannot for this pair of sides, none of these victims qualifies.
          const Queue& ar = tree_.queue(a_r);
          Amounts ar_after = ar.allocated;
          addTo(ar_after, need);
          if (!lessThan(dominantShare(ar_after, reclaimBasis(ar)), s_v)) {
            continue;
          }
          sources.push_back({s_v, v, a_v, a_r});
        }
        std::stable_sort(sources.begin(), sources.end(), [](const Source& a, const Source& b) {
          return lessThan(b.victim_share, a.victim_share);
        });
      } else if (!running_priorities_[r_leaf].empty()) {
        sources.push_back({Ratio{}, r_leaf, r_leaf, r_leaf});
      }
      if (sources.empty()) {
        continue;
      }
      // Candidates in eviction order, drawn lazily from a heap: usually only a few are needed.
      auto first = [&](const Candidate& a, const Candidate& b) {
        if (lessThan(a.victim_share, b.victim_share) || lessThan(b.victim_share, a.victim_share)) {
          return lessThan(b.victim_share, a.victim_share);  // Most over first.
        }
        const int pa = workloads_[a.unit.workload].spec.priority;
        const int pb = workloads_[b.unit.workload].spec.priority;
        if (pa != pb) {
          return pa < pb;
        }
        // Victims node by node, nodes closest to empty first, so a gang that
        // needs whole nodes frees them with as few evictions as possible.
        const NodeIndex na = tasks_[a.unit.tasks.front()].assignment.placement.node;
        const NodeIndex nb = tasks_[b.unit.tasks.front()].assignment.placement.node;
        if (na != nb) {
          const int64_t fa = state_.nodeState(na).free_gpu_milli;
          const int64_t fb = state_.nodeState(nb).free_gpu_milli;
          return fa != fb ? fa > fb : na < nb;
        }
        if (a.unit.elastic != b.unit.elastic) {
          return a.unit.elastic;
        }
        if (a.unit.started != b.unit.started) {
          return a.unit.started > b.unit.started;
        }
        return a.unit.tasks.front() < b.unit.tasks.front();
      };
      auto later = [&](const Candidate& a, const Candidate& b) { return first(b, a); };
      std::vector<Candidate> candidates;
      size_t next_source = 0;
      // Refills the heap with the next level of sources; false when none is left.
      auto next_level = [&]() {
        while (candidates.empty() && next_source < sources.size()) {
          const Ratio level = sources[next_source].victim_share;
          while (next_source < sources.size() &&
                 !lessThan(sources[next_source].victim_share, level) &&
                 !lessThan(level, sources[next_source].victim_share)) {
            const Source& src = sources[next_source++];
            for (WorkloadId vw : queue_workloads_[src.leaf]) {
              if (!reclaim && (vw == w || workloads_[vw].spec.priority >= info.spec.priority)) {
                continue;
              }
              for (const Unit& u : units(vw)) {
                candidates.push_back({u, src.victim_share, src.split_victim, src.split_reclaimer});
              }
            }
          }
          std::make_heap(candidates.begin(), candidates.end(), later);
        }
        return !candidates.empty();
      };
      // Release victims one unit at a time (virtually: on the cluster state, restored below) until
      // the blocked work fits.
      std::vector<Candidate> chosen;
      std::vector<std::pair<TaskId, Assignment>> released;
      std::unordered_map<QueueId, Amounts> freed;  // Per split ancestor of the victims.
      bool fits = false;
      int chosen_tasks = 0;
      while (next_level()) {
        std::pop_heap(candidates.begin(), candidates.end(), later);
        const Candidate c = std::move(candidates.back());
        candidates.pop_back();
        // The cap stops new reclaims once reached; the first of a pass may exceed it, or a gang
        // needing more victims than the cap could never be served.
        if (evictions > 0 && evictions + chosen_tasks + static_cast<int>(c.unit.tasks.size()) >
                                 options_.max_evictions_per_pass) {
          continue;
        }
        Amounts unit_amounts = tree_.space().zeros();
        for (TaskId t : c.unit.tasks) {
          addTo(unit_amounts, taskAmounts(c.unit.workload, &tasks_[t].assignment.placement));
        }
        if (reclaim) {
          // The victim side gives back only while it is still above its fair share, and the
          // move must leave the reclaimer's side strictly below where the victim's was.
          const Queue& av = tree_.queue(c.split_victim);
          Amounts av_alloc = av.allocated;
          auto it = freed.find(c.split_victim);
          if (it != freed.end()) {
            subtractFrom(av_alloc, it->second);
          }
          if (!greaterThanOne(dominantShare(av_alloc, reclaimBasis(av)))) {
            continue;
          }
          const Queue& ar = tree_.queue(c.split_reclaimer);
          Amounts ar_after = ar.allocated;
          addTo(ar_after, need);
          if (!lessThan(dominantShare(ar_after, reclaimBasis(ar)), c.victim_share)) {
            continue;
          }
          auto [slot, inserted] = freed.emplace(c.split_victim, tree_.space().zeros());
          addTo(slot->second, unit_amounts);
        }
        chosen.push_back(c);
        chosen_tasks += static_cast<int>(c.unit.tasks.size());
        for (TaskId t : c.unit.tasks) {
          released.emplace_back(t, tasks_[t].assignment);
          placer_->release(workloads_[c.unit.workload].spec.request, tasks_[t].assignment);
        }
        // Only try placing once the cluster has at least the GPU share the work needs.
        const int64_t free_milli = 1000 * state_.totalGpus() - state_.usedGpuMilli();
        if (free_milli < need[kGpuDim]) {
          continue;
        }
        if (placeTasks(w, needed, /*trial=*/true, nullptr, nullptr)) {
          fits = true;
          break;
        }
      }
      // Restore the victims exactly where they were.
      for (auto it = released.rbegin(); it != released.rend(); ++it) {
        const model::TaskRequest& req = workloads_[tasks_[it->first].workload].spec.request;
        tasks_[it->first].assignment = placer_->applyAt(req, it->second.placement);
      }
      if (!fits) {
        continue;
      }
      // Commit: victims terminate and keep their resources until they stop.
      std::string before_after;
      if (reclaim) {
        const Queue& rq = tree_.queue(r_leaf);
        Amounts r_after = rq.allocated;
        addTo(r_after, need);
        before_after = fmt::format("{} -> {}", shareText(rq, rq.allocated),
                                   fmt::format("{}", r_after[kGpuDim]));
        for (const auto& [split, amounts] : freed) {
          const Queue& vq = tree_.queue(split);
          Amounts v_after = vq.allocated;
          subtractFrom(v_after, amounts);
          before_after += fmt::format("; {} -> {}", shareText(vq, vq.allocated), v_after[kGpuDim]);
        }
      }
      for (const Candidate& c : chosen) {
        units_of.erase(c.unit.workload);
        WorkloadInfo& victim = workloads_[c.unit.workload];
        for (TaskId t : c.unit.tasks) {
          tasks_[t].state = TaskState::kTerminating;
          tasks_[t].evicted_for = w;
          addRunning(c.unit.workload, -1);
          ++victim.terminating;
          refile(c.unit.workload);
          out.evicted.push_back(
              {t, c.unit.workload, w, reclaim,
               fmt::format("{} by '{}' (queue '{}'): {}{} (allocated/fair share, milli-GPU)",
                           reclaim ? "reclaimed" : "preempted", info.spec.name,
                           tree_.queue(r_leaf).name, c.unit.elastic ? "elastic task; " : "gang; ",
                           before_after)});
          ++evictions;
        }
      }
      info.awaited_victims += chosen_tasks;
      if (std::find(awaiting_.begin(), awaiting_.end(), w) == awaiting_.end()) {
        awaiting_.push_back(w);
      }
      info.why = {WaitReason::kWaitingForEvictions,
                  fmt::format("waiting for {} evicted task(s) to stop", chosen_tasks)};
      break;
    }
  }
}

core::Result<QueueId> Scheduler::addQueue(QueueSpec spec) {
  TESSERA_ASSIGN_OR_RETURN(QueueId q, tree_.add(std::move(spec)));
  const size_t n = tree_.size();
  queue_workloads_.resize(n);
  finished_in_queue_.resize(n, 0);
  running_priorities_.resize(n);
  buckets_.resize(n);
  np_allocated_.resize(n, tree_.space().zeros());
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
    evictFor(/*reclaim=*/true, out, evictions);
    evictFor(/*reclaim=*/false, out, evictions);
  }
  return out;
}

}  // namespace tessera::sched
