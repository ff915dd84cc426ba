#include "server/driver.h"

#include <bit>

namespace tessera::server {

namespace {
constexpr const char* kRoot = "tessera";
}

core::Result<std::unique_ptr<SchedulerDriver>> SchedulerDriver::create(
    const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes, const core::Clock& clock,
    DriverOptions options, Listener listener) {
  std::unique_ptr<SchedulerDriver> d(
      new SchedulerDriver(clock, std::move(options), std::move(listener)));
  d->nodes_ = nodes;
  sched::ResourceSpace space = sched::ResourceSpace::withModels(catalogue, {});
  TESSERA_ASSIGN_OR_RETURN(sched::QueueTree tree,
                           sched::QueueTree::create(space, {{kRoot, "", {}, {}, 1, 100}}));
  sched::SchedulerOptions so;
  so.policy = d->options_.policy;
  so.min_runtime = std::chrono::seconds(0);
  TESSERA_ASSIGN_OR_RETURN(d->scheduler_, sched::Scheduler::create(catalogue, std::move(nodes),
                                                                   std::move(tree), {}, so, clock));
  return d;
}

SchedulerDriver::~SchedulerDriver() { stop(); }

namespace {

// A tenant's GPU quota and limit (milli-GPU; a limit of 0 is none) as scheduler amounts.
std::pair<sched::Amounts, sched::Amounts> gpuAmounts(const sched::ResourceSpace& space,
                                                     int64_t quota_milli_gpu,
                                                     int64_t limit_milli_gpu) {
  sched::Amounts quota = space.zeros();
  quota[sched::kGpuDim] = quota_milli_gpu;
  sched::Amounts limit = space.unlimited();
  if (limit_milli_gpu > 0) {
    limit[sched::kGpuDim] = limit_milli_gpu;
  }
  return {quota, limit};
}

}  // namespace

core::Status SchedulerDriver::addTenantQueue(const std::string& tenant, int64_t quota_milli_gpu,
                                             int64_t limit_milli_gpu, int64_t weight,
                                             int32_t priority) {
  std::lock_guard pass_lock(pass_mu_);
  {
    std::lock_guard lock(mu_);
    if (leaves_.contains(tenant + "/default")) {
      return core::Status::ok();
    }
  }
  const auto [quota, limit] =
      gpuAmounts(scheduler_->queues().space(), quota_milli_gpu, limit_milli_gpu);
  // Adding queues changes the scheduler: the driver thread must not run a pass meanwhile, which
  // holding `pass_mu_` guarantees.
  TESSERA_RETURN_IF_ERROR(
      scheduler_->addQueue({tenant, kRoot, quota, limit, weight, priority}).status());
  TESSERA_ASSIGN_OR_RETURN(sched::QueueId leaf, scheduler_->addQueue({tenant + "/default", tenant,
                                                                      quota, limit, 1, 100}));
  std::lock_guard lock(mu_);
  leaves_[tenant + "/default"] = leaf;
  return core::Status::ok();
}

core::Status SchedulerDriver::putTeamQueue(const std::string& tenant, const std::string& queue,
                                           int64_t quota_milli_gpu, int64_t limit_milli_gpu,
                                           int64_t weight, int32_t priority) {
  std::lock_guard pass_lock(pass_mu_);
  const sched::QueueTree& tree = scheduler_->queues();
  if (!tree.find(tenant)) {
    return core::notFound("tenant '" + tenant + "' has no queue");
  }
  const std::string name = tenant + "/" + queue;
  const auto [quota, limit] = gpuAmounts(tree.space(), quota_milli_gpu, limit_milli_gpu);
  if (const std::optional<sched::QueueId> q = tree.find(name)) {
    TESSERA_RETURN_IF_ERROR(scheduler_->updateQueue(*q, quota, limit, weight, priority));
    std::lock_guard lock(mu_);
    leaves_[name] = *q;  // In service again if it was retired.
    return core::Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(sched::QueueId leaf,
                           scheduler_->addQueue({name, tenant, quota, limit, weight, priority}));
  std::lock_guard lock(mu_);
  leaves_[name] = leaf;
  return core::Status::ok();
}

bool SchedulerDriver::hasQueue(const std::string& tenant, const std::string& queue) const {
  std::lock_guard lock(mu_);
  return leaves_.contains(tenant + "/" + queue);
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
                                                int32_t priority) {
  std::lock_guard pass_lock(pass_mu_);
  const sched::QueueTree& tree = scheduler_->queues();
  const std::optional<sched::QueueId> q = tree.find(tenant);
  const std::optional<sched::QueueId> leaf = tree.find(tenant + "/default");
  if (!q || !leaf) {
    return core::notFound("tenant '" + tenant + "' has no queue");
  }
  const auto [quota, limit] = gpuAmounts(tree.space(), quota_milli_gpu, limit_milli_gpu);
  // Both are checked the same way (quota within limit), so the second cannot fail alone.
  TESSERA_RETURN_IF_ERROR(scheduler_->updateQueue(*q, quota, limit, weight, priority));
  return scheduler_->updateQueue(*leaf, quota, limit, 1, 100);
}

core::Status SchedulerDriver::submit(SubmitCommand cmd) {
  TESSERA_RETURN_IF_ERROR(check(cmd));
  std::lock_guard lock(mu_);
  published_.try_emplace(
      cmd.tenant + "/" + cmd.name,
      WorkloadStatus{"pending", "not scheduled yet",
                     std::vector<TaskStatus>(static_cast<size_t>(cmd.spec.tasks))});
  submits_.push_back(std::move(cmd));
  wake_.notify_one();
  return core::Status::ok();
}

core::Status SchedulerDriver::check(const SubmitCommand& cmd) const {
  core::Status valid = model::validateTaskRequest(cmd.spec.request);
  if (!valid.isOk()) {
    return valid;
  }
  // Something in the pool must be able to hold one task, or it would wait forever.
  bool fits_somewhere = false;
  for (const model::Node& n : nodes_) {
    const model::TaskRequest& r = cmd.spec.request;
    if (n.cpu.value() < r.cpu.value() || n.memory.value() < r.memory.value() ||
        static_cast<int>(n.gpus.size()) < r.gpu_count) {
      continue;
    }
    if (r.gpu_count > 0 && !r.models.empty() &&
        std::find(r.models.begin(), r.models.end(), n.gpus[0].model) == r.models.end()) {
      continue;
    }
    fits_somewhere = true;
    break;
  }
  if (!fits_somewhere) {
    return core::invalidArgument("no node in the pool can hold one task of this workload");
  }
  std::lock_guard lock(mu_);
  if (!leaves_.contains(cmd.tenant + "/" + cmd.queue)) {
    return core::invalidArgument("tenant '" + cmd.tenant + "' has no queue '" + cmd.queue + "'");
  }
  return core::Status::ok();
}

void SchedulerDriver::cancel(const std::string& tenant, const std::string& name) {
  std::lock_guard lock(mu_);
  cancels_.emplace_back(tenant, name);
  wake_.notify_one();
}

void SchedulerDriver::forgetTenant(const std::string& tenant) {
  const std::string prefix = tenant + "/";
  auto starts = [&](const std::string& key) { return key.rfind(prefix, 0) == 0; };
  std::lock_guard pass_lock(pass_mu_);
  std::erase_if(ids_, [&](const auto& kv) { return starts(kv.first); });
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
  thread_ = std::thread([this] { loop(); });
}

void SchedulerDriver::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
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

WorkloadStatus SchedulerDriver::statusOf(sched::WorkloadId w) const {
  const sched::WorkloadInfo& info = scheduler_->workload(w);
  WorkloadStatus s;
  if (cancelled_[w]) {
    s.phase = "cancelled";
  } else if (info.finished == info.spec.tasks) {
    s.phase = "succeeded";
  } else if (info.running > 0) {
    s.phase = "running";
  } else {
    s.phase = "pending";
  }
  if (info.pending > 0 && !cancelled_[w]) {
    s.reason = std::string(sched::waitReasonName(scheduler_->explain(w).reason)) + ": " +
               scheduler_->explain(w).message;
  }
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
      if (p.mig_profile >= 0 && p.gpus != 0) {
        ts.mig_profile = std::to_string(p.mig_profile);
      }
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
  {
    std::lock_guard lock(mu_);
    submits.swap(submits_);
    cancels.swap(cancels_);
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
    auto id = scheduler_->submit(c.spec);
    if (!id.isOk()) {
      WorkloadStatus s;
      s.phase = "failed";
      s.reason = id.status().message();
      changed[key] = s;
      continue;
    }
    ids_[key] = *id;
    keys_.push_back(key);
    durations_.push_back(c.duration);
    cancelled_.push_back(false);
    touched.push_back(*id);
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
    scheduler_->cancel(it->second);
    touched.push_back(it->second);
  }
  // Simulated tasks that have run their duration.
  for (auto it = ends_.begin(); it != ends_.end();) {
    if (it->second <= now) {
      touched.push_back(scheduler_->task(it->first).workload);
      scheduler_->taskFinished(it->first);
      it = ends_.erase(it);
    } else {
      ++it;
    }
  }
  sched::PassResult r = scheduler_->schedule();
  for (const sched::StartDecision& s : r.started) {
    touched.push_back(s.workload);
    const core::Duration d = durations_[s.workload];
    if (d > core::Duration::zero()) {
      ends_[s.task] = now + d;
    }
  }
  for (const sched::EvictDecision& e : r.evicted) {
    touched.push_back(e.victim);
    ends_.erase(e.task);
    scheduler_->taskStopped(e.task);  // Simulated nodes stop at once.
  }
  for (sched::WorkloadId w : touched) {
    changed[keys_[w]] = statusOf(w);
  }
  // Pending workloads' reasons change without a start: refresh them every pass.
  std::vector<QueueStatus> queue_status;
  const sched::QueueTree& tree = scheduler_->queues();
  for (sched::QueueId q = 0; q < tree.size(); ++q) {
    const sched::Queue& queue = tree.queue(q);
    queue_status.push_back({queue.name, queue.allocated[sched::kGpuDim],
                            queue.fair_share[sched::kGpuDim], queue.quota[sched::kGpuDim],
                            queue.pending[sched::kGpuDim]});
  }
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, status] : changed) {
      published_[key] = status;
    }
    queue_status_ = std::move(queue_status);
    ++passes_;
    last_pass_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  if (!changed.empty() && listener_) {
    listener_(changed);
  }
}

}  // namespace tessera::server
