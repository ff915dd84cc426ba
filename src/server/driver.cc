#include "server/driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "core/log.h"
#include "core/rfc3339.h"
#include "sched/filter.h"
#include "sched/tenant_queues.h"

namespace tessera::server {

core::Result<std::unique_ptr<SchedulerDriver>> SchedulerDriver::create(
    const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes, const core::Clock& clock,
    DriverOptions options, Listener listener) {
  std::unique_ptr<SchedulerDriver> d(
      new SchedulerDriver(clock, std::move(options), std::move(listener)));
  d->nodes_ = nodes;
  d->catalogue_ = &catalogue;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!d->node_index_.try_emplace(nodes[i].name, static_cast<sched::NodeIndex>(i)).second) {
      return core::invalidArgument("two nodes are named '" + nodes[i].name + "'");
    }
  }
  for (const std::string& name : d->options_.agent_nodes) {
    auto it = std::find_if(nodes.begin(), nodes.end(),
                           [&](const model::Node& n) { return n.name == name; });
    if (it == nodes.end()) {
      return core::invalidArgument("agent node '" + name + "' is not one of the nodes");
    }
    const auto n = static_cast<sched::NodeIndex>(it - nodes.begin());
    d->agent_index_[name] = n;
    d->agents_[n] = freshAgentNode();
    // A real GPU's MIG mode is what its agent reports; until then, off (no MIG slice goes
    // there, and nothing runs there before its agent registers anyway).
    for (model::GpuDevice& g : it->gpus) {
      g.mig = model::MigMode::kOff;
    }
    d->nodes_[n].gpus = it->gpus;
  }
  sched::ResourceSpace space = sched::ResourceSpace::withModels(catalogue, {});
  TESSERA_ASSIGN_OR_RETURN(sched::QueueTree tree,
                           sched::QueueTree::create(space, {sched::rootQueueSpec()}));
  sched::SchedulerOptions so;
  so.policy = d->options_.policy;
  so.min_runtime = std::chrono::seconds(0);
  TESSERA_ASSIGN_OR_RETURN(
      d->scheduler_,
      sched::Scheduler::create(catalogue, std::move(nodes), std::move(tree), d->options_.typical,
                               d->options_.scheduler.value_or(so), clock));
  for (const auto& [name, n] : d->agent_index_) {
    d->scheduler_->nodeLost(n);  // Down until its agent is heard from.
  }
  d->profile_ = sched::ShapeProfile({.half_life = d->options_.profile_half_life});
  return d;
}

SchedulerDriver::~SchedulerDriver() { stop(); }

core::Status SchedulerDriver::addTenantQueue(const std::string& tenant, int64_t quota_milli_gpu,
                                             int64_t limit_milli_gpu, int64_t weight,
                                             int32_t priority, int64_t max_unsaved_gpu_s) {
  bool exists = false;
  {
    std::lock_guard lock(mu_);
    exists = leaves_.contains(tenant + "/default");
  }
  if (exists) {
    // A tenant created again under a deleted one's name (or loaded twice): its queue stays in
    // the tree, with the new numbers, not the old tenant's limit.
    return updateTenantQueue(tenant, quota_milli_gpu, limit_milli_gpu, weight, priority,
                             max_unsaved_gpu_s);
  }
  std::lock_guard pass_lock(pass_mu_);
  const sched::ResourceSpace& space = scheduler_->queues().space();
  const sched::GpuQueueNumbers numbers{quota_milli_gpu, limit_milli_gpu, weight, priority,
                                       max_unsaved_gpu_s};
  // Adding queues changes the scheduler: the driver thread must not run a pass meanwhile, which
  // holding `pass_mu_` guarantees.
  TESSERA_RETURN_IF_ERROR(
      scheduler_->addQueue(sched::tenantQueueSpec(space, tenant, numbers)).status());
  TESSERA_ASSIGN_OR_RETURN(sched::QueueId leaf, scheduler_->addQueue(sched::tenantDefaultQueueSpec(
                                                    space, tenant, numbers)));
  (void)tenantId(tenant);
  std::lock_guard lock(mu_);
  leaves_[tenant + "/default"] = leaf;
  gpu_limits_[tenant] = limit_milli_gpu;
  return core::Status::ok();
}

model::TenantId SchedulerDriver::tenantId(const std::string& tenant) {
  auto [it, added] = tenant_ids_.try_emplace(
      tenant, model::TenantId{static_cast<uint32_t>(tenant_ids_.size() + 1)});
  return it->second;
}

void SchedulerDriver::setTrustGroup(const std::string& tenant, const std::string& group) {
  std::lock_guard pass_lock(pass_mu_);
  uint32_t id = 0;
  if (!group.empty()) {
    id = trust_group_ids_.try_emplace(group, static_cast<uint32_t>(trust_group_ids_.size() + 1))
             .first->second;
  }
  scheduler_->setTrustGroup(tenantId(tenant), id);
}

core::Status SchedulerDriver::putTeamQueue(const std::string& tenant, const std::string& queue,
                                           int64_t quota_milli_gpu, int64_t limit_milli_gpu,
                                           int64_t weight, int32_t priority,
                                           int64_t max_unsaved_gpu_s) {
  std::lock_guard pass_lock(pass_mu_);
  const sched::QueueTree& tree = scheduler_->queues();
  if (!tree.find(tenant)) {
    return core::notFound("tenant '" + tenant + "' has no queue");
  }
  const std::string name = tenant + "/" + queue;
  const auto [quota, limit] = sched::gpuAmounts(tree.space(), quota_milli_gpu, limit_milli_gpu);
  if (const std::optional<sched::QueueId> q = tree.find(name)) {
    TESSERA_RETURN_IF_ERROR(scheduler_->updateQueue(*q, quota, limit, weight, priority));
    TESSERA_RETURN_IF_ERROR(scheduler_->setMaxUnsaved(*q, max_unsaved_gpu_s));
    std::lock_guard lock(mu_);
    leaves_[name] = *q;  // In service again if it was retired.
    gpu_limits_[name] = limit_milli_gpu;
    return core::Status::ok();
  }
  // A retired queue's node, if the tenant has one: it holds no work (retireTeamQueue) and none
  // can reach it (it is not in leaves_), so it can be renamed.
  std::optional<sched::QueueId> retired;
  {
    std::lock_guard lock(mu_);
    const std::string prefix = tenant + "/";
    for (const sched::QueueId c : tree.queue(*tree.find(tenant)).children) {
      const std::string& n = tree.queue(c).name;
      if (n.starts_with(prefix) && n != prefix + "default" && !leaves_.contains(n)) {
        retired = c;
        break;
      }
    }
  }
  if (retired) {
    // The numbers first: if they are refused, the retired node keeps its name.
    TESSERA_RETURN_IF_ERROR(scheduler_->updateQueue(*retired, quota, limit, weight, priority));
    TESSERA_RETURN_IF_ERROR(scheduler_->setMaxUnsaved(*retired, max_unsaved_gpu_s));
    TESSERA_RETURN_IF_ERROR(scheduler_->renameQueue(*retired, name));
    std::lock_guard lock(mu_);
    leaves_[name] = *retired;
    gpu_limits_[name] = limit_milli_gpu;
    return core::Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(
      sched::QueueId leaf,
      scheduler_->addQueue(sched::teamQueueSpec(
          tree.space(), tenant, queue,
          {quota_milli_gpu, limit_milli_gpu, weight, priority, max_unsaved_gpu_s})));
  std::lock_guard lock(mu_);
  leaves_[name] = leaf;
  gpu_limits_[name] = limit_milli_gpu;
  return core::Status::ok();
}

bool SchedulerDriver::hasQueue(const std::string& tenant, const std::string& queue) const {
  std::lock_guard lock(mu_);
  return leaves_.contains(tenant + "/" + queue);
}

std::vector<std::string> SchedulerDriver::teamQueues(const std::string& tenant) const {
  const std::string prefix = tenant + "/";
  std::vector<std::string> names;
  std::lock_guard lock(mu_);
  for (auto it = leaves_.lower_bound(prefix); it != leaves_.end() && it->first.starts_with(prefix);
       ++it) {
    if (it->first != prefix + "default") {
      names.push_back(it->first.substr(prefix.size()));
    }
  }
  return names;
}

size_t SchedulerDriver::teamQueueNodeCount(const std::string& tenant) {
  std::lock_guard pass_lock(pass_mu_);
  const sched::QueueTree& tree = scheduler_->queues();
  const std::optional<sched::QueueId> t = tree.find(tenant);
  const size_t children = t ? tree.queue(*t).children.size() : 0;
  return children > 0 ? children - 1 : 0;  // Less its default.
}

core::Status SchedulerDriver::retireTeamQueue(const std::string& tenant, const std::string& queue) {
  const std::string name = tenant + "/" + queue;
  std::lock_guard pass_lock(pass_mu_);  // No pass changes the totals while they are read.
  {
    std::lock_guard lock(mu_);
    if (!leaves_.contains(name)) {
      return core::Status::ok();
    }
  }
  const std::optional<sched::QueueId> q = scheduler_->queues().find(name);
  if (q) {
    const sched::Queue& info = scheduler_->queues().queue(*q);
    auto busy = [](const sched::Amounts& a) {
      return std::any_of(a.begin(), a.end(), [](int64_t v) { return v != 0; });
    };
    if (busy(info.allocated) || busy(info.pending)) {
      return core::failedPrecondition("queue '" + queue +
                                      "' has pending or running workloads; cancel them (or "
                                      "let them finish) first");
    }
  }
  std::lock_guard lock(mu_);
  // A submission already accepted into it but not yet handed to a pass also counts.
  for (const SubmitCommand& s : submits_) {
    if (s.tenant == tenant && s.queue == queue) {
      return core::failedPrecondition("queue '" + queue +
                                      "' has a workload being submitted; try again");
    }
  }
  leaves_.erase(name);
  return core::Status::ok();
}

core::Status SchedulerDriver::updateTenantQueue(const std::string& tenant, int64_t quota_milli_gpu,
                                                int64_t limit_milli_gpu, int64_t weight,
                                                int32_t priority, int64_t max_unsaved_gpu_s) {
  std::lock_guard pass_lock(pass_mu_);
  const sched::QueueTree& tree = scheduler_->queues();
  const std::optional<sched::QueueId> q = tree.find(tenant);
  const std::optional<sched::QueueId> leaf = tree.find(tenant + "/default");
  if (!q || !leaf) {
    return core::notFound("tenant '" + tenant + "' has no queue");
  }
  const auto [quota, limit] = sched::gpuAmounts(tree.space(), quota_milli_gpu, limit_milli_gpu);
  // Both are checked the same way (quota within limit), so the second cannot fail alone.
  TESSERA_RETURN_IF_ERROR(scheduler_->updateQueue(*q, quota, limit, weight, priority));
  TESSERA_RETURN_IF_ERROR(scheduler_->setMaxUnsaved(*q, max_unsaved_gpu_s));
  TESSERA_RETURN_IF_ERROR(scheduler_->updateQueue(*leaf, quota, limit, 1, 100));
  std::lock_guard lock(mu_);
  gpu_limits_[tenant] = limit_milli_gpu;
  return core::Status::ok();
}

core::Status SchedulerDriver::submit(SubmitCommand cmd) {
  TESSERA_RETURN_IF_ERROR(check(cmd));
  std::lock_guard lock(mu_);
  WorkloadStatus first;
  first.reason = "not scheduled yet";
  first.tasks.resize(static_cast<size_t>(cmd.spec.tasks));
  published_.try_emplace(cmd.tenant + "/" + cmd.name, std::move(first));
  if (!cmd.restore.empty()) {
    ++unpublished_restores_;
  }
  submits_.push_back(std::move(cmd));
  wake_.notify_one();
  return core::Status::ok();
}

void SchedulerDriver::reject(const std::string& tenant, const std::string& name,
                             std::string reason) {
  std::lock_guard lock(mu_);
  WorkloadStatus failed;
  failed.phase = WorkloadPhase::kFailed;
  failed.reason = std::move(reason);
  published_[tenant + "/" + name] = failed;
  rejected_[tenant + "/" + name] = std::move(failed);
  wake_.notify_one();
}

void SchedulerDriver::cancel(const std::string& tenant, const std::string& name) {
  std::lock_guard lock(mu_);
  cancels_.emplace_back(tenant, name);
  wake_.notify_one();
}

void SchedulerDriver::setSuspended(const std::string& tenant, const std::string& name,
                                   bool suspended) {
  std::lock_guard lock(mu_);
  suspends_.push_back({tenant + "/" + name, suspended});
  wake_.notify_one();
}

void SchedulerDriver::applySuspend(sched::WorkloadId w, bool suspended, core::TimePoint now,
                                   std::map<sched::WorkloadId, std::vector<std::string>>& events) {
  if (cancelled_[w]) {
    return;
  }
  if (!suspended) {
    scheduler_->resume(w);
    return;
  }
  for (sched::TaskId t : scheduler_->suspend(w)) {
    if (!scheduler_->evictTask(t)) {
      continue;
    }
    events[w].push_back(
        fmt::format("suspended: task {} is stopped; it runs again when the workload is resumed",
                    scheduler_->task(t).index));
    ends_.erase(t);
    if (!agents_.contains(scheduler_->task(t).assignment.placement.node)) {
      stopSimulated(t, w, now);
    }
  }
}

void SchedulerDriver::retire(const std::string& key, sched::WorkloadId w) {
  uint32_t most = 0;
  for (sched::TaskId t : scheduler_->workload(w).tasks) {
    most = std::max(most, scheduler_->task(t).starts + start_offset_[w]);
    task_ports_.erase(t);  // Its tasks are done: their last ports are nobody's.
  }
  retired_starts_[key] = most;
  waiting_.erase(w);
  unplaceable_.erase(w);
}

void SchedulerDriver::forgetWorkload(const std::string& tenant, const std::string& name) {
  const std::string key = tenant + "/" + name;
  std::lock_guard pass_lock(pass_mu_);
  auto it = ids_.find(key);
  if (it != ids_.end()) {
    const sched::WorkloadInfo& info = scheduler_->workload(it->second);
    if (info.finished != info.spec.tasks) {
      return;  // Not done with: kept.
    }
    retire(key, it->second);
    for (sched::TaskId t : info.tasks) {
      task_ids_.erase(tenant + "." + name + "." + std::to_string(scheduler_->task(t).index));
      ran_.erase(t);
    }
    ids_.erase(it);
  }
  std::lock_guard lock(mu_);
  published_.erase(key);
}

void SchedulerDriver::forgetTenant(const std::string& tenant) {
  const std::string prefix = tenant + "/";
  auto starts = [&](const std::string& key) { return key.rfind(prefix, 0) == 0; };
  std::lock_guard pass_lock(pass_mu_);
  for (const auto& [key, w] : ids_) {
    if (starts(key)) {
      retire(key, w);
      for (sched::TaskId t : scheduler_->workload(w).tasks) {
        ran_.erase(t);
      }
    }
  }
  std::erase_if(ids_, [&](const auto& kv) { return starts(kv.first); });
  std::erase_if(task_ids_, [&](const auto& kv) { return kv.first.rfind(tenant + ".", 0) == 0; });
  std::lock_guard lock(mu_);
  std::erase_if(published_, [&](const auto& kv) { return starts(kv.first); });
}

std::optional<WorkloadStatus> SchedulerDriver::status(const std::string& tenant,
                                                      const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = published_.find(tenant + "/" + name);
  if (it == published_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<QueueStatus> SchedulerDriver::queues(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  std::vector<QueueStatus> out;
  for (const QueueStatus& q : queue_status_) {
    if (q.name.find('/') != std::string::npos && !leaves_.contains(q.name)) {
      continue;  // A deleted team queue's node, kept for the next new one.
    }
    if (tenant.empty() || q.name == tenant || q.name.rfind(tenant + "/", 0) == 0) {
      out.push_back(q);
    }
  }
  return out;
}

double SchedulerDriver::lastPassMs() const {
  std::lock_guard lock(mu_);
  return last_pass_ms_;
}

int64_t SchedulerDriver::passes() const {
  std::lock_guard lock(mu_);
  return passes_;
}

void SchedulerDriver::start() {
  runOnce();
  thread_ = std::thread([this] { loop(); });
}

void SchedulerDriver::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  node_changed_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void SchedulerDriver::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, options_.pass_interval);
    if (stopping_) {
      break;
    }
    lock.unlock();
    runOnce();
    lock.lock();
  }
}

WorkloadStatus SchedulerDriver::phaseOf(sched::WorkloadId w) const {
  const sched::WorkloadInfo& info = scheduler_->workload(w);
  WorkloadStatus s;
  const Attempts& a = attempts_[w];
  s.attempt = a.attempt;
  s.attempts = a.ended;
  if (cancelled_[w]) {
    s.phase = WorkloadPhase::kCancelled;
  } else if (!failed_[w].empty()) {
    s.phase = WorkloadPhase::kFailed;
    s.reason = failed_[w];
  } else if (a.next_at) {
    s.phase = info.running > 0 ? WorkloadPhase::kRunning : WorkloadPhase::kPending;
    s.reason = fmt::format("restarting: attempt {} starts at {} ({})", a.attempt + 1,
                           core::formatRfc3339(a.next_wall),
                           a.ended.empty() ? "the last one failed" : a.ended.back());
    return s;
  } else if (info.finished == info.spec.tasks) {
    s.phase = WorkloadPhase::kSucceeded;
  } else if (info.suspended) {
    s.phase = info.running > 0 || info.terminating > 0 ? WorkloadPhase::kRunning
                                                       : WorkloadPhase::kPending;
    s.reason = fmt::format("suspended: {} of its {} tasks left to run once it is resumed",
                           info.spec.tasks - info.finished, info.spec.tasks);
    return s;
  } else if (info.running > 0) {
    s.phase = WorkloadPhase::kRunning;
  } else {
    s.phase = WorkloadPhase::kPending;
  }
  if (info.pending > 0 && !cancelled_[w] && failed_[w].empty()) {
    const sched::Explanation why = scheduler_->explain(w);
    s.reason = std::string(sched::waitReasonName(why.reason)) + ": " + why.message;
    // A wait that nothing but a new node can end (the only node its selector matched was
    // removed, the only pool open to it dedicated elsewhere) says so before a passing one.
    if (why.reason == sched::WaitReason::kNoCapacity ||
        why.reason == sched::WaitReason::kQueueLimit ||
        why.reason == sched::WaitReason::kOverQuota) {
      const std::string& key = keys_[w];
      const bool gang = info.running == 0;
      std::lock_guard lock(mu_);
      Verdict& v = unplaceable_[w];
      if (v.generation != nodes_generation_ || v.gang != gang) {
        v.generation = nodes_generation_;
        v.gang = gang;
        const core::Status never = checkCapacity(key.substr(0, key.find('/')), info.spec.request,
                                                 gang ? info.spec.min_available : 1);
        v.problem = never.isOk() ? "" : never.message();
      }
      if (!v.problem.empty()) {
        s.reason = "unplaceable: no node in service could ever hold it (" + v.problem +
                   "); it waits for one that can to join";
      }
    }
  } else if (s.phase == WorkloadPhase::kCancelled && info.terminating > 0) {
    s.reason = "stopping: " + std::to_string(info.terminating) +
               " task(s) hold their GPUs until their agents have stopped them";
  } else if (s.phase == WorkloadPhase::kPending && info.terminating > 0) {
    s.reason = "terminating: " + std::to_string(info.terminating) +
               " evicted task(s) stopping; then it waits to be placed again";
  }
  return s;
}

WorkloadStatus SchedulerDriver::statusOf(sched::WorkloadId w) const {
  WorkloadStatus s = phaseOf(w);
  const sched::WorkloadInfo& info = scheduler_->workload(w);
  for (sched::TaskId t : info.tasks) {
    const sched::TaskInfo& task = scheduler_->task(t);
    TaskStatus ts;
    ts.state = std::string(sched::taskStateName(task.state));
    if (task.state == sched::TaskState::kRunning || task.state == sched::TaskState::kTerminating) {
      const sched::Placement& p = task.assignment.placement;
      ts.node = nodes_[p.node].name;
      for (uint64_t g = p.gpus; g != 0; g &= g - 1) {
        ts.gpus.push_back(std::countr_zero(g));
      }
      ts.milli_per_gpu = task.assignment.milli_per_gpu;
      if (agents_.contains(p.node)) {
        ts.mig_start = p.mig_profile >= 0 ? p.mig_start : -1;
        ts.generation = generationOf(t);
        ts.starts = task.starts;
        // To the millisecond it is stored with, rounded: a restored task's start reads the same.
        ts.started_at = std::chrono::round<std::chrono::milliseconds>(
            clock_.wallNow() - (clock_.now() - task.started));
        if (auto ports = task_ports_.find(t); ports != task_ports_.end()) {
          ts.ports = ports->second;
        }
      }
      if (auto started = agent_started_.find(t); started != agent_started_.end() &&
                                                 !started->second &&
                                                 task.state == sched::TaskState::kRunning) {
        ts.state = "starting";
        if (auto p = start_progress_.find(t);
            p != start_progress_.end() && p->second.first == generationOf(t)) {
          ts.progress = p->second.second;
        }
      }
      if (p.mig_profile >= 0 && p.gpus != 0) {
        const model::GpuModelInfo& info = catalogue_->model(
            nodes_[p.node].gpus[static_cast<size_t>(std::countr_zero(p.gpus))].model);
        ts.mig_profile = static_cast<size_t>(p.mig_profile) < info.mig_profiles.size()
                             ? info.mig_profiles[static_cast<size_t>(p.mig_profile)].name
                             : std::to_string(p.mig_profile);
      }
    }
    if (auto ran = ran_.find(t); ran != ran_.end() && task.state == sched::TaskState::kFinished) {
      ts.node = nodes_[ran->second.node].name;
      ts.gpus = ran->second.gpus;
      ts.started_at = ran->second.started_at;
      ts.finished_at = ran->second.finished_at;
      ts.exit_code = ran->second.exit_code;
      ts.signal = ran->second.signal;
      ts.start_failed = ran->second.start_failed;
    }
    s.tasks.push_back(std::move(ts));
  }
  return s;
}

void SchedulerDriver::runOnce() {
  std::lock_guard pass_lock(pass_mu_);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<SubmitCommand> submits;
  std::vector<std::pair<std::string, std::string>> cancels;
  std::vector<Suspend> suspends;
  std::vector<std::string> drains;
  {
    std::lock_guard lock(mu_);
    submits.swap(submits_);
    restores_taken_ += static_cast<int>(std::count_if(
        submits.begin(), submits.end(), [](const SubmitCommand& c) { return !c.restore.empty(); }));
    cancels.swap(cancels_);
    suspends.swap(suspends_);
    drains.swap(drains_);
    for (SubmitCommand& c : submits) {
      c.spec.queue = leaves_.at(c.tenant + "/" + c.queue);  // submit() checked that it exists.
    }
  }
  std::map<std::string, WorkloadStatus> changed;
  std::vector<sched::WorkloadId> touched;
  for (SubmitCommand& c : submits) {
    const std::string key = c.tenant + "/" + c.name;
    if (ids_.contains(key)) {
      continue;  // Replayed after a restart, or a retry: already known.
    }
    c.spec.name = key;
    c.spec.request.tenant = tenantId(c.tenant);    // The trust rule compares tenants.
    c.spec.checkpoint_every = c.checkpoint_every;  // What an eviction would lose.
    auto id = scheduler_->submit(c.spec);
    if (!id.isOk()) {
      WorkloadStatus s;
      s.phase = WorkloadPhase::kFailed;
      s.reason = id.status().message();
      changed[key] = s;
      continue;
    }
    ids_[key] = *id;
    keys_.push_back(key);
    // A name used before (its workload collected): its tasks' generations go on past the old
    // ones', so no agent takes the new for the old.
    auto retired = retired_starts_.find(key);
    start_offset_.push_back(retired == retired_starts_.end() ? 0 : retired->second);
    cancelled_.push_back(false);
    failed_.emplace_back();
    attempts_.emplace_back().attempt = c.attempt;
    attempts_.back().ended = c.attempts_ended;
    for (sched::TaskId t : scheduler_->workload(*id).tasks) {
      task_ids_[c.tenant + "." + c.name + "." + std::to_string(scheduler_->task(t).index)] = t;
    }
    learnShape(c, clock_.now());
    std::vector<RestoredTask> restore = std::move(c.restore);
    if (c.suspended) {
      // Held before the pass (first: a resume queued since comes after it).
      suspends.insert(suspends.begin(), Suspend{key, true});
    }
    specs_.push_back(std::move(c));
    touched.push_back(*id);
    if (!restore.empty()) {
      restoreTasks(*id, restore, clock_.now());
    }
  }
  const core::TimePoint now = clock_.now();
  for (const auto& [tenant, name] : cancels) {
    auto it = ids_.find(tenant + "/" + name);
    if (it == ids_.end() || cancelled_[it->second]) {
      continue;
    }
    for (sched::TaskId t : scheduler_->workload(it->second).tasks) {
      ends_.erase(t);
    }
    cancelled_[it->second] = true;
    scheduler_->cancel(it->second, stopsOnAgent());
    touched.push_back(it->second);
  }
  // Simulated tasks that have run their duration, and evicted ones whose grace period is over.
  for (auto it = ends_.begin(); it != ends_.end();) {
    if (it->second <= now) {
      touched.push_back(scheduler_->task(it->first).workload);
      scheduler_->taskFinished(it->first);
      if (auto ran = ran_.find(it->first); ran != ran_.end()) {
        ran->second.finished_at = clock_.wallNow();
      }
      kept_.erase(it->first);
      it = ends_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = stops_.begin(); it != stops_.end();) {
    if (it->second <= now) {
      touched.push_back(scheduler_->task(it->first).workload);
      scheduler_->taskStopped(it->first);  // Pending again (or finished, if cancelled since).
      it = stops_.erase(it);
    } else {
      ++it;
    }
  }
  applyNodeEvents(now, touched);
  startRetries(now, touched);
  std::map<sched::WorkloadId, std::vector<std::string>> events;
  for (const Suspend& s : suspends) {
    if (auto it = ids_.find(s.key); it != ids_.end()) {
      applySuspend(it->second, s.suspended, now, events);
      touched.push_back(it->second);
    }
  }
  applyDrains(drains, now, touched, events);
  refreshTypical(now);
  sched::PassResult r = scheduler_->schedule();
  for (const sched::StartDecision& s : r.started) {
    touched.push_back(s.workload);
    const sched::NodeIndex node = scheduler_->task(s.task).assignment.placement.node;
    noteStarted(s.task);
    if (agents_.contains(node)) {  // Changed only under pass_mu_ too: no lock needed to look.
      allocatePorts(s.task);
      node_tasks_[node].insert(s.task);
      agent_started_[s.task] = false;
      continue;
    }
    const core::Duration d = specs_[s.workload].duration;
    if (d > core::Duration::zero()) {
      ends_[s.task] = now + std::max(core::Duration::zero(), d - kept_[s.task]);
    }
  }
  for (const sched::EvictDecision& e : r.evicted) {
    touched.push_back(e.victim);
    std::vector<std::string>& said = events[e.victim];
    if (std::string text = evictionEvent(e);
        std::find(said.begin(), said.end(), text) == said.end()) {
      said.push_back(std::move(text));
    }
    ends_.erase(e.task);
    if (!agents_.contains(scheduler_->task(e.task).assignment.placement.node)) {
      stopSimulated(e.task, e.victim, now);
    }
    // An agent's node: the task leaves its list below, and it holds its GPUs until the agent
    // reports it stopped, or proves by a later heartbeat that it never started it (or the node
    // is lost).
  }
  for (sched::WorkloadId w : touched) {
    WorkloadStatus& st = changed[keys_[w]];
    st = statusOf(w);
    if (st.phase == WorkloadPhase::kPending) {
      waiting_.insert(w);
    } else {
      waiting_.erase(w);
    }
  }
  // A waiting workload's reason changes without anything happening to it (room freed beside an
  // untrusted tenant, a node back after a restart): compare, and publish the new one. With many
  // waiting, at most once a second: a submission wakes a pass, and 10,000 pending workloads'
  // reasons each pass made a tenant's submissions slower the more it had.
  constexpr size_t kWaitingEachPass = 256;
  if (waiting_.size() <= kWaitingEachPass || now - waiting_checked_ >= std::chrono::seconds(1)) {
    waiting_checked_ = now;
    std::vector<std::pair<sched::WorkloadId, WorkloadStatus>> now;  // Phase and reason only.
    for (sched::WorkloadId w : waiting_) {
      if (!changed.contains(keys_[w])) {
        now.emplace_back(w, phaseOf(w));
      }
    }
    std::vector<sched::WorkloadId> moved;
    {
      std::lock_guard lock(mu_);
      for (const auto& [w, status] : now) {
        auto p = published_.find(keys_[w]);
        if (p == published_.end() || p->second.reason != status.reason ||
            p->second.phase != status.phase) {
          moved.push_back(w);
        }
      }
    }
    for (sched::WorkloadId w : moved) {
      changed[keys_[w]] = statusOf(w);
    }
  }
  for (auto& [w, list] : events) {
    changed[keys_[w]].events = std::move(list);
  }
  for (sched::WorkloadId w : touched) {
    if (!attempts_[w].untold.empty()) {
      changed[keys_[w]].restarts = std::move(attempts_[w].untold);
      attempts_[w].untold.clear();
    }
  }
  // Queues' numbers change without a start: refresh them every pass.
  std::vector<QueueStatus> queue_status;
  const sched::QueueTree& tree = scheduler_->queues();
  for (sched::QueueId q = 0; q < tree.size(); ++q) {
    const sched::Queue& queue = tree.queue(q);
    queue_status.push_back({queue.name, queue.allocated[sched::kGpuDim],
                            queue.fair_share[sched::kGpuDim], queue.quota[sched::kGpuDim],
                            queue.pending[sched::kGpuDim]});
  }
  // Who holds which GPU, for the console's map and the metrics: for each node that changed (a
  // placement, a release, a MIG mode: each is a change in the cluster's journal) or holds a
  // task of a workload that did (a task stopping). Only those: at 5,000 nodes the whole map
  // is 40,000 GPUs' worth of strings, and a pass runs for every few submissions.
  std::optional<std::map<sched::NodeIndex, std::vector<GpuState>>> gpu_map;  // All of it.
  std::vector<std::pair<sched::NodeIndex, std::vector<GpuState>>> gpu_updates;
  {
    const sched::ClusterState& cluster = scheduler_->cluster();
    std::optional<std::span<const sched::NodeIndex>> moved;
    if (gpu_map_journal_ <= cluster.journalEnd()) {
      moved = cluster.changesSince(gpu_map_journal_);
    }
    std::lock_guard lock(mu_);  // node_index_ (changed under both locks).
    if (!moved) {
      gpu_map = gpuMap();
    } else {
      std::set<sched::NodeIndex> stale(moved->begin(), moved->end());
      for (sched::WorkloadId w : touched) {
        for (sched::TaskId t : scheduler_->workload(w).tasks) {
          const sched::TaskInfo& task = scheduler_->task(t);
          if (task.state == sched::TaskState::kRunning ||
              task.state == sched::TaskState::kTerminating) {
            stale.insert(task.assignment.placement.node);
          }
        }
      }
      for (sched::NodeIndex n : stale) {
        gpu_updates.emplace_back(n, gpusOf(n));
      }
    }
    gpu_map_journal_ = cluster.journalEnd();
  }
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, status] : changed) {
      WorkloadStatus& p = published_[key];
      p = status;
      p.events.clear();  // Told once, to the listener.
    }
    queue_status_ = std::move(queue_status);
    if (gpu_map) {
      gpu_map_ = std::move(*gpu_map);
    }
    for (auto& [n, gpus] : gpu_updates) {
      gpu_map_[n] = std::move(gpus);
    }
    ++passes_;
    last_pass_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    pass_seconds_.observe(last_pass_ms_ / 1000);
  }
  // Stored before any agent hears of it: a task an agent starts is one a restarted server
  // finds where it runs (docs/server.md, "Restarts keep running work"). What could not be
  // stored is told again next pass, and until it is stored the agents' lists stay as they
  // were.
  // (The listener keeps the events it was told, stored or not: they are not told twice.)
  for (auto& [key, status] : unsaved_) {
    status.events.clear();
    changed.try_emplace(key, std::move(status));  // A newer status wins.
  }
  unsaved_.clear();
  {
    std::lock_guard lock(mu_);
    for (auto& [key, status] : rejected_) {
      changed.try_emplace(key, std::move(status));
    }
    rejected_.clear();
  }
  if (!changed.empty() && listener_) {
    if (core::Status st = listener_(changed); !st.isOk()) {
      if (unsaved_passes_++ == 0) {  // Once: passes come every few hundred ms.
        core::logWarn(
            "workload status not stored ({}); tried again each pass, and agents hear of "
            "nothing new until then",
            st.message());
      }
      unsaved_ = std::move(changed);
      return;
    }
  }
  if (unsaved_passes_ > 0) {
    core::logInfo("workload status stored again, after {} pass(es) that could not store it",
                  unsaved_passes_);
    unsaved_passes_ = 0;
  }
  publishNodeTasks();
}

size_t SchedulerDriver::queuedSubmits() const {
  std::lock_guard lock(mu_);
  return submits_.size();
}

std::optional<core::TimePoint> SchedulerDriver::nextSimulatedEvent() const {
  std::lock_guard pass_lock(pass_mu_);
  std::optional<core::TimePoint> next;
  for (const auto* m : {&ends_, &stops_}) {
    for (const auto& [task, at] : *m) {
      if (!next || at < *next) {
        next = at;
      }
    }
  }
  return next;
}

std::set<std::string> SchedulerDriver::liveTasks() const {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& [node, agent] : agents_) {
    for (const NodeTask& t : agent.tasks) {
      out.insert(t.id + "@" + std::to_string(t.generation));
    }
  }
  return out;
}

void SchedulerDriver::noteStarted(sched::TaskId t) {
  const sched::TaskInfo& task = scheduler_->task(t);
  const sched::Placement& p = task.assignment.placement;
  LastRun run;
  run.node = p.node;
  for (uint64_t g = p.gpus; g != 0; g &= g - 1) {
    run.gpus.push_back(std::countr_zero(g));
  }
  // To the millisecond, as a running task's start is shown and stored.
  run.started_at = std::chrono::round<std::chrono::milliseconds>(clock_.wallNow() -
                                                                 (clock_.now() - task.started));
  ran_[t] = std::move(run);
}

void SchedulerDriver::stopSimulated(sched::TaskId t, sched::WorkloadId w, core::TimePoint now) {
  // As in `tessera sim` (sim/scenario_run.h): the task keeps the work of its last checkpoint,
  // and stops at once or after its grace period.
  const SubmitCommand& c = specs_[w];
  const core::Duration ran = kept_[t] + (now - scheduler_->task(t).started);
  kept_[t] = c.checkpoint_every > core::Duration::zero()
                 ? (ran / c.checkpoint_every) * c.checkpoint_every
                 : core::Duration::zero();
  if (options_.simulate_grace) {
    stops_[t] = now + c.grace;
  } else {
    scheduler_->taskStopped(t);
  }
}

std::string SchedulerDriver::evictionEvent(const sched::EvictDecision& e) const {
  return sched::evictionEvent(*scheduler_, e, specs_[e.preemptor].name);
}

void SchedulerDriver::taskFailed(sched::WorkloadId w, sched::TaskId t, const std::string& what) {
  if (cancelled_[w] || !failed_[w].empty()) {
    return;
  }
  Attempts& a = attempts_[w];
  const sched::WorkloadSpec& spec = scheduler_->workload(w).spec;
  // Tasks that do not run together are retried one by one, as a Kubernetes Job's pods are: the
  // others run on, and those that succeeded stay done.
  const bool alone = spec.tasks > 1 && !sched::runsTogether(spec);
  if (a.next_at && !alone) {
    return;  // Another task of the attempt that already failed (its peers lost it, say).
  }
  const SubmitCommand::Restart& policy = specs_[w].restart;
  const int retries = a.attempt - 1 + static_cast<int>(a.retry_tasks.size());
  a.ended.push_back(fmt::format("attempt {}: {}", a.attempt, what.substr(0, 300)));
  if (a.ended.size() > kMaxAttemptsKept) {
    a.ended.erase(a.ended.begin());  // The last ones say enough.
  }
  if (retries >= policy.attempts && !policy.keep_trying) {
    failWorkload(w,
                 a.attempt > 1 ? what + " after " + std::to_string(a.attempt) + " attempts" : what);
    return;
  }
  std::chrono::seconds delay = policy.delay;
  if (policy.max_delay > policy.delay) {  // Backing off: doubling after each failure.
    delay = std::min(policy.delay * (int64_t{1} << std::min(retries, 20)), policy.max_delay);
  }
  if (retries >= policy.attempts) {  // Crash-looping: back off.
    const int beyond = std::min(retries - policy.attempts, 5);
    delay = std::min<std::chrono::seconds>(
        std::max<std::chrono::seconds>(policy.delay, std::chrono::seconds(10)) * (1 << beyond),
        std::chrono::minutes(5));
  }
  if (alone) {
    a.retry_tasks.push_back(t);
    if (a.next_at) {
      return;  // Run again with the one that failed before it, when that one's delay is over.
    }
  }
  a.next_at = clock_.now() + delay;
  a.next_wall = clock_.wallNow() + delay;
  retrying_.insert(w);
  a.untold.push_back(fmt::format("attempt {} failed: {}; attempt {} starts in {} s", a.attempt,
                                 what, a.attempt + 1, delay.count()));
}

void SchedulerDriver::startRetries(core::TimePoint now, std::vector<sched::WorkloadId>& touched) {
  for (auto it = retrying_.begin(); it != retrying_.end();) {
    const sched::WorkloadId w = *it;
    Attempts& a = attempts_[w];
    if (a.next_at && *a.next_at > now) {
      ++it;
      continue;
    }
    it = retrying_.erase(it);
    a.next_at.reset();
    if (cancelled_[w] || !failed_[w].empty()) {
      continue;
    }
    if (!a.retry_tasks.empty()) {
      // The tasks that failed, alone: the others run on.
      for (sched::TaskId t : a.retry_tasks) {
        ++a.attempt;
        ends_.erase(t);
        kept_.erase(t);
        scheduler_->retryTask(t);
      }
      a.retry_tasks.clear();
      touched.push_back(w);
      continue;
    }
    ++a.attempt;
    for (sched::TaskId t : scheduler_->workload(w).tasks) {
      ends_.erase(t);
      kept_.erase(t);
    }
    // Every task anew, with the others: its peers stop first (their agents stop them), then the
    // whole workload is placed again, with new ports (a new rendezvous).
    scheduler_->restart(w, stopsOnAgent());
    touched.push_back(w);
  }
}

void SchedulerDriver::failWorkload(sched::WorkloadId w, const std::string& reason) {
  if (cancelled_[w] || !failed_[w].empty()) {
    return;
  }
  failed_[w] = reason;
  for (sched::TaskId t : scheduler_->workload(w).tasks) {
    ends_.erase(t);
  }
  // Its other tasks leave their nodes' lists: their agents stop them, and they hold their GPUs
  // until then.
  scheduler_->cancel(w, stopsOnAgent());
}

}  // namespace tessera::server
