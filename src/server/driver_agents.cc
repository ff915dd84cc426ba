// The driver's side of the agents' protocol: heartbeats and leases, task reports, the task lists
// agents watch, and when a stopped or never-started task gives its GPUs back (docs/agent.md).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <random>

#include "core/log.h"
#include "server/driver.h"

namespace tessera::server {

SchedulerDriver::AgentNode SchedulerDriver::freshAgentNode() {
  static std::mutex mu;
  static std::mt19937_64 next = [] {
    std::random_device os;
    return std::mt19937_64((uint64_t{os()} << 32) ^ os());
  }();
  AgentNode a;
  std::lock_guard lock(mu);
  a.version = next() >> 12;  // Below 2^52: exact in every JSON reader.
  return a;
}

std::vector<NodeState> SchedulerDriver::nodeStates() const {
  const core::TimePoint now = clock_.now();
  std::lock_guard lock(mu_);
  std::vector<sched::NodeIndex> in_service;
  in_service.reserve(node_index_.size());
  for (const auto& [name, i] : node_index_) {
    in_service.push_back(i);
  }
  std::sort(in_service.begin(), in_service.end());
  std::vector<NodeState> out;
  out.reserve(in_service.size());
  for (const sched::NodeIndex i : in_service) {
    NodeState s;
    s.name = nodes_[i].name;
    s.node = nodes_[i];
    s.cordoned = cordoned_.contains(i);
    s.dedicated_to = poolTenant(s.node);
    if (auto g = gpu_map_.find(i); g != gpu_map_.end()) {
      s.gpus = g->second;
    }
    auto it = agents_.find(i);
    if (it == agents_.end()) {
      s.state = "simulated";
    } else {
      const AgentNode& a = it->second;
      s.agent = true;
      s.state = a.up ? (a.registered ? "ready" : "waiting")
                     : (a.registered || a.restored ? "lost" : "waiting");
      if (a.registered) {
        s.seconds_since_heartbeat =
            std::chrono::duration_cast<std::chrono::seconds>(now - a.last_heartbeat).count();
      }
      s.tasks = static_cast<int>(a.tasks.size());
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string SchedulerDriver::poolTenant(const model::Node& node) const {
  auto pool = node.labels.find(std::string(model::kPoolLabel));
  if (pool == node.labels.end()) {
    return "";
  }
  auto it = pool_tenants_.find(pool->second);
  return it == pool_tenants_.end() ? "" : it->second;
}

bool SchedulerDriver::admits(const model::Node& node, const std::string& tenant) const {
  const std::string dedicated = poolTenant(node);
  return dedicated.empty() || dedicated == tenant;
}

core::Result<sched::NodeIndex> SchedulerDriver::indexOf(const std::string& node) const {
  auto it = node_index_.find(node);
  if (it == node_index_.end()) {
    return core::notFound("no node '" + node + "'");
  }
  return it->second;
}

core::Status SchedulerDriver::addAgentNode(model::Node node) {
  TESSERA_RETURN_IF_ERROR(model::validateNode(node));
  for (model::GpuDevice& g : node.gpus) {
    g.mig = model::MigMode::kOff;  // Until its agent reports the GPUs' modes.
  }
  std::lock_guard pass_lock(pass_mu_);
  std::string dedicated;
  {
    std::lock_guard lock(mu_);
    if (node_index_.contains(node.name)) {
      return core::alreadyExists("node '" + node.name + "' is in service already");
    }
    dedicated = poolTenant(node);
  }
  TESSERA_ASSIGN_OR_RETURN(sched::NodeIndex n, scheduler_->addNode(node));  // Down until heard.
  if (!dedicated.empty()) {
    scheduler_->setDedicated(n, tenantId(dedicated));
  }
  std::lock_guard lock(mu_);
  ++nodes_generation_;
  node_index_[node.name] = n;
  agent_index_[node.name] = n;
  agents_[n] = freshAgentNode();
  nodes_.push_back(std::move(node));
  return core::Status::ok();
}

core::Status SchedulerDriver::setCordoned(const std::string& node, bool cordoned) {
  std::lock_guard pass_lock(pass_mu_);
  sched::NodeIndex n = 0;
  {
    std::lock_guard lock(mu_);
    TESSERA_ASSIGN_OR_RETURN(n, indexOf(node));
    if (cordoned) {
      cordoned_.insert(n);
    } else {
      cordoned_.erase(n);
    }
  }
  scheduler_->setCordoned(n, cordoned);
  wake_.notify_one();
  return core::Status::ok();
}

core::Status SchedulerDriver::drain(const std::string& node) {
  TESSERA_RETURN_IF_ERROR(setCordoned(node, true));
  std::lock_guard lock(mu_);
  drains_.push_back(node);
  wake_.notify_one();
  return core::Status::ok();
}

core::Status SchedulerDriver::removeNode(const std::string& node) {
  std::lock_guard pass_lock(pass_mu_);
  sched::NodeIndex n = 0;
  {
    std::lock_guard lock(mu_);
    TESSERA_ASSIGN_OR_RETURN(n, indexOf(node));
    if (!agents_.contains(n)) {
      return core::failedPrecondition("node '" + node + "' is simulated by the server");
    }
  }
  const bool unconfirmed = std::any_of(unconfirmed_.begin(), unconfirmed_.end(),
                                       [&](const auto& u) { return u.second.node == n; });
  if (!scheduler_->tasksOn(n).empty() || !node_tasks_[n].empty() || unconfirmed) {
    return core::failedPrecondition("node '" + node + "' still has " +
                                    std::to_string(scheduler_->tasksOn(n).size()) +
                                    " task(s); drain it first (tessera node drain " + node + ")");
  }
  scheduler_->setCordoned(n, true);
  (void)scheduler_->nodeLost(n);  // Down for good: its capacity leaves the fair shares.
  scheduler_->removeNode(n);      // And no longer counted in waiting workloads' reasons.
  node_tasks_.erase(n);
  std::lock_guard lock(mu_);
  ++nodes_generation_;
  node_index_.erase(node);
  agent_index_.erase(node);
  agents_.erase(n);
  cordoned_.erase(n);
  drains_.erase(std::remove(drains_.begin(), drains_.end(), node), drains_.end());
  return core::Status::ok();
}

void SchedulerDriver::dedicatePool(const std::string& pool, const std::string& tenant) {
  std::lock_guard pass_lock(pass_mu_);
  std::vector<sched::NodeIndex> members;
  {
    std::lock_guard lock(mu_);
    ++nodes_generation_;
    if (tenant.empty()) {
      pool_tenants_.erase(pool);
    } else {
      pool_tenants_[pool] = tenant;
    }
    for (const auto& [name, n] : node_index_) {
      auto label = nodes_[n].labels.find(std::string(model::kPoolLabel));
      if (label != nodes_[n].labels.end() && label->second == pool) {
        members.push_back(n);
      }
    }
  }
  const std::optional<model::TenantId> id =
      tenant.empty() ? std::nullopt : std::optional(tenantId(tenant));
  for (sched::NodeIndex n : members) {
    scheduler_->setDedicated(n, id);
  }
  wake_.notify_one();
}

std::map<std::string, std::string> SchedulerDriver::dedicatedPools() const {
  std::lock_guard lock(mu_);
  return pool_tenants_;
}

void SchedulerDriver::applyDrains(const std::vector<std::string>& drains, core::TimePoint now,
                                  std::vector<sched::WorkloadId>& touched,
                                  std::map<sched::WorkloadId, std::vector<std::string>>& events) {
  for (const std::string& name : drains) {
    sched::NodeIndex n = 0;
    {
      std::lock_guard lock(mu_);
      auto found = indexOf(name);
      if (!found.isOk()) {
        continue;  // Removed since.
      }
      n = *found;
    }
    const std::vector<sched::TaskId> on = scheduler_->tasksOn(n);  // evictTask edits nothing
    for (sched::TaskId t : on) {                                   // there, but stop may.
      if (!scheduler_->evictTask(t)) {
        continue;  // Terminating already.
      }
      const sched::WorkloadId w = scheduler_->task(t).workload;
      touched.push_back(w);
      events[w].push_back(fmt::format(
          "drained: node {} is being drained (task {} on node {}); it is placed again elsewhere",
          name, scheduler_->task(t).index, name));
      ends_.erase(t);
      if (!agents_.contains(n)) {
        stopSimulated(t, w, now);
      }
    }
  }
}

core::Result<HeartbeatAnswer> SchedulerDriver::heartbeat(
    const std::string& node, const std::vector<std::string>& gpu_models,
    std::vector<NodeTaskReport> reports, const std::vector<model::MigMode>& mig_modes,
    const std::string& address, const std::vector<std::vector<model::MigInstance>>& mig_idle) {
  std::lock_guard lock(mu_);
  auto found = agent_index_.find(node);
  if (found == agent_index_.end()) {
    if (node_index_.contains(node)) {
      return core::failedPrecondition("node '" + node +
                                      "' is simulated by the server, not run by an agent "
                                      "(list it in nodes { agents = ... })");
    }
    return core::notFound("no node '" + node +
                          "': an agent registers under a name in the server's nodes { agents = "
                          "... } or joins with a join token (tessera node join-token create)");
  }
  const model::Node& n = nodes_[found->second];
  std::vector<std::string> declared;
  declared.reserve(n.gpus.size());
  for (const model::GpuDevice& g : n.gpus) {
    declared.push_back(catalogue_->model(g.model).name);
  }
  if (gpu_models != declared) {
    auto describe = [](const std::vector<std::string>& models) {
      std::map<std::string, int> count;
      for (const std::string& m : models) {
        ++count[m];
      }
      std::string out;
      for (const auto& [m, c] : count) {
        out += (out.empty() ? "" : ", ") + std::to_string(c) + " x " + (m.empty() ? "?" : m);
      }
      return out.empty() ? std::string("no GPUs") : out;
    };
    return core::failedPrecondition("node '" + node + "' is declared with " + describe(declared) +
                                    " but its agent found " + describe(gpu_models));
  }
  if (unpublished_restores_ > 0) {
    return core::unavailable(
        "the server has just started and has not yet placed the tasks that ran before; try "
        "again shortly");
  }
  AgentNode& a = agents_.at(found->second);
  const core::TimePoint now = clock_.now();
  a.registered = true;
  if (!address.empty()) {
    a.address = address;
  }
  ++a.heartbeats;
  a.last_heartbeat = now;
  a.expires = now + options_.lease_ttl;
  bool wake = !reports.empty();
  // Per GPU: on, off, or switched by its agent as work needs (kAny: a managed node).
  std::vector<model::MigMode> mig(n.gpus.size(), model::MigMode::kOff);
  for (size_t g = 0; g < mig.size() && g < mig_modes.size(); ++g) {
    if (!catalogue_->model(n.gpus[g].model).mig_profiles.empty()) {
      mig[g] = mig_modes[g];
    }
  }
  if (mig != a.mig_modes) {
    std::string on;
    std::string managed;
    for (size_t g = 0; g < mig.size(); ++g) {
      std::string& list = mig[g] == model::MigMode::kAny ? managed : on;
      if (mig[g] != model::MigMode::kOff) {
        list += (list.empty() ? "" : ", ") + std::to_string(g);
      }
    }
    if (!a.mig_modes.empty() || !on.empty() || !managed.empty()) {
      // Not for a node registering without MIG.
      core::logInfo("node {}: MIG mode on for GPUs: {}{}", node, on.empty() ? "none" : on,
                    managed.empty() ? "" : "; switched by the agent for GPUs: " + managed);
    }
    a.mig_modes = std::move(mig);
    a.mig_changed = true;
    wake = true;
  }
  if (mig_idle != a.mig_idle) {
    a.mig_idle = mig_idle;
    a.mig_idle_changed = true;
  }
  if (!a.up) {
    a.up = true;
    a.back = true;
    wake = true;
  }
  for (NodeTaskReport& r : reports) {
    a.reports.push_back(std::move(r));
  }
  if (wake) {
    wake_.notify_one();
  }
  return HeartbeatAnswer{a.version, a.tasks};
}

core::Result<uint64_t> SchedulerDriver::watchNode(const std::string& node, uint64_t known_version,
                                                  std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  auto found = agent_index_.find(node);
  if (found == agent_index_.end()) {
    return core::notFound("no node '" + node + "' run by an agent");
  }
  const AgentNode& a = agents_.at(found->second);
  node_changed_.wait_for(lock, wait, [&] { return a.version != known_version || stopping_; });
  return a.version;
}

void SchedulerDriver::applyNodeEvents(core::TimePoint now,
                                      std::vector<sched::WorkloadId>& touched) {
  if (agents_.empty()) {
    return;
  }
  std::vector<sched::NodeIndex> back;
  std::vector<sched::NodeIndex> lost;
  std::vector<std::pair<sched::NodeIndex, std::vector<model::MigMode>>> modes;
  std::vector<std::pair<sched::NodeIndex, std::vector<std::vector<model::MigInstance>>>> idle;
  std::vector<std::pair<sched::NodeIndex, std::vector<NodeTaskReport>>> reports;
  std::map<sched::NodeIndex, uint64_t> answered;
  {
    std::lock_guard lock(mu_);
    for (auto& [n, a] : agents_) {
      answered[n] = a.heartbeats;
      if (a.back) {
        back.push_back(n);
        a.back = false;
      }
      if (a.mig_changed) {
        modes.emplace_back(n, a.mig_modes);
        a.mig_changed = false;
      }
      if (a.mig_idle_changed) {
        idle.emplace_back(n, a.mig_idle);
        a.mig_idle_changed = false;
      }
      if (!a.reports.empty()) {
        reports.emplace_back(n, std::move(a.reports));
        a.reports.clear();
      }
      if (a.up && a.expires <= now) {
        a.up = false;
        lost.push_back(n);
      }
    }
  }
  for (const auto& [n, mig] : modes) {
    for (size_t g = 0; g < mig.size(); ++g) {
      (void)scheduler_->setGpuMigMode(n, static_cast<int>(g), mig[g]);
    }
  }
  for (const auto& [n, gpus] : idle) {
    for (size_t g = 0; g < gpus.size() && g < nodes_[n].gpus.size(); ++g) {
      (void)scheduler_->setMigIdle(n, static_cast<int>(g), gpus[g]);
    }
  }
  for (sched::NodeIndex n : back) {
    scheduler_->nodeBack(n);
  }
  for (const auto& [n, list] : reports) {
    for (const NodeTaskReport& r : list) {
      applyReport(n, r, touched);
    }
  }
  releaseUnconfirmed(answered, touched);
  for (sched::NodeIndex n : lost) {
    core::logWarn("node {} lost: no heartbeat from its agent for {} ms", nodes_[n].name,
                  options_.lease_ttl.count());
    for (sched::TaskId t : scheduler_->nodeLost(n)) {
      const sched::WorkloadId w = scheduler_->task(t).workload;
      touched.push_back(w);
      agent_started_.erase(t);
      start_progress_.erase(t);
      restartGang(w);
    }
    node_tasks_[n].clear();
  }
}

void SchedulerDriver::restartGang(sched::WorkloadId w) {
  // A gang's ranks know each other's addresses and ports: one placed again alone would look for
  // peers that wait at the old rendezvous. So all of them stop and start over together (no
  // attempt counted: nothing failed).
  if (scheduler_->workload(w).spec.min_available > 1) {
    scheduler_->restart(w, stopsOnAgent());
  }
}

void SchedulerDriver::applyReport(sched::NodeIndex n, const NodeTaskReport& r,
                                  std::vector<sched::WorkloadId>& touched) {
  auto it = task_ids_.find(r.task);
  if (it == task_ids_.end()) {
    return;  // Not a task of ours (a stray the agent will stop).
  }
  const sched::TaskId t = it->second;
  const sched::TaskInfo& task = scheduler_->task(t);
  const bool placed =
      task.state == sched::TaskState::kRunning || task.state == sched::TaskState::kTerminating;
  if (!placed || task.assignment.placement.node != n || generationOf(t) != r.generation) {
    return;  // An older generation, or a task already cancelled or finished: nothing to do.
  }
  const sched::WorkloadId w = task.workload;
  touched.push_back(w);  // Its status changes (a progress too: at most one a second a task).
  if (r.state == NodeTaskReport::State::kStarting) {
    start_progress_[t] = {r.generation, r.progress};  // Shown while it is starting.
    return;
  }
  start_progress_.erase(t);
  const std::string who = "task " + std::to_string(task.index) + " on node " + nodes_[n].name;
  switch (r.state) {
    case NodeTaskReport::State::kStarting:
      return;
    case NodeTaskReport::State::kRunning:
      agent_started_[t] = true;
      return;
    case NodeTaskReport::State::kFailedToStart:
      node_tasks_[n].erase(t);
      agent_started_.erase(t);
      start_progress_.erase(t);
      if (auto ran = ran_.find(t); ran != ran_.end()) {
        ran->second.finished_at = clock_.wallNow();
        ran->second.start_failed = true;
      }
      scheduler_->taskFinished(t);  // Gives its GPUs back; pending again if retried.
      taskFailed(w, t, who + " could not start: " + r.error);
      return;
    case NodeTaskReport::State::kExited:
      break;
  }
  node_tasks_[n].erase(t);
  agent_started_.erase(t);
  start_progress_.erase(t);
  if (auto ran = ran_.find(t); ran != ran_.end()) {
    ran->second.finished_at = clock_.wallNow();
    ran->second.exit_code = r.exit_code;
    ran->second.signal = r.exit_code >= 0 ? 0 : r.signal;
  }
  if (task.state == sched::TaskState::kTerminating) {
    scheduler_->taskStopped(t);  // Evicted, and now gone: it waits to be placed again.
  } else if (r.stopped) {
    scheduler_->taskInterrupted(t);  // Its agent stopped it (fenced): placed again.
    restartGang(w);
  } else if (r.exit_code == 0 && !r.oom_killed) {
    scheduler_->taskFinished(t);
  } else {
    std::string how = r.exit_code >= 0 ? "exited with code " + std::to_string(r.exit_code)
                                       : "was killed by signal " + std::to_string(r.signal);
    if (r.oom_killed) {
      how += " (out of memory: over its memoryMiB)";
    }
    scheduler_->taskFinished(t);
    taskFailed(w, t, who + " " + how);
  }
}

void SchedulerDriver::releaseUnconfirmed(const std::map<sched::NodeIndex, uint64_t>& answered,
                                         std::vector<sched::WorkloadId>& touched) {
  for (auto it = unconfirmed_.begin(); it != unconfirmed_.end();) {
    const sched::TaskId t = it->first;
    const sched::TaskInfo& task = scheduler_->task(t);
    auto started = agent_started_.find(t);
    if (task.state != sched::TaskState::kTerminating ||
        task.assignment.placement.node != it->second.node ||
        (started != agent_started_.end() && started->second)) {
      // Stopped, lost with its node, or placed anew; or the agent did start it, and its exit
      // report will release it.
      it = unconfirmed_.erase(it);
      continue;
    }
    // The agent answers heartbeats one at a time, and each carries what it made of the answer
    // before: a heartbeat after the last answer that listed the task, with no report that it
    // started, proves the agent never started it.
    auto a = answered.find(it->second.node);
    if (a == answered.end() || a->second <= it->second.answered) {
      ++it;
      continue;
    }
    agent_started_.erase(t);
    start_progress_.erase(t);
    touched.push_back(task.workload);
    scheduler_->taskStopped(t);
    it = unconfirmed_.erase(it);
  }
}

std::function<bool(sched::TaskId)> SchedulerDriver::stopsOnAgent() {
  return [this](sched::TaskId t) {
    const sched::NodeIndex n = scheduler_->task(t).assignment.placement.node;
    auto it = node_tasks_.find(n);
    return it != node_tasks_.end() && it->second.contains(t);
  };
}

std::map<sched::NodeIndex, std::vector<GpuState>> SchedulerDriver::gpuMap() const {
  std::map<sched::NodeIndex, std::vector<GpuState>> out;
  for (const auto& [name, n] : node_index_) {
    out[n] = gpusOf(n);
  }
  return out;
}

std::vector<GpuState> SchedulerDriver::gpusOf(sched::NodeIndex n) const {
  std::vector<GpuState> gpus;
  {
    const model::Node& node = scheduler_->cluster().node(n);  // With its GPUs' MIG modes.
    for (const model::GpuDevice& g : node.gpus) {
      gpus.push_back({catalogue_->model(g.model).name, g.mig == model::MigMode::kOn, {}});
    }
    for (sched::TaskId t : scheduler_->tasksOn(n)) {
      const sched::TaskInfo& task = scheduler_->task(t);
      const sched::Placement& p = task.assignment.placement;
      const SubmitCommand& c = specs_[task.workload];
      for (uint64_t bits = p.gpus; bits != 0; bits &= bits - 1) {
        const auto g = static_cast<size_t>(std::countr_zero(bits));
        if (g >= gpus.size()) {
          continue;
        }
        GpuUse use;
        use.tenant = c.tenant;
        use.workload = c.name;
        use.task = static_cast<int>(task.index);
        use.milli = task.assignment.milli_per_gpu;
        if (p.mig_profile >= 0) {
          const model::GpuModelInfo& info = catalogue_->model(node.gpus[g].model);
          use.mig_profile = static_cast<size_t>(p.mig_profile) < info.mig_profiles.size()
                                ? info.mig_profiles[static_cast<size_t>(p.mig_profile)].name
                                : std::to_string(p.mig_profile);
          use.mig_slot = p.mig_start;
        }
        use.terminating = task.state == sched::TaskState::kTerminating;
        gpus[g].uses.push_back(std::move(use));
      }
    }
    // A GPU whose mode follows its work (managed by its agent, or simulated) is in MIG mode
    // while it holds MIG slices.
    for (size_t g = 0; g < gpus.size(); ++g) {
      if (node.gpus[g].mig == model::MigMode::kAny) {
        gpus[g].mig = std::any_of(gpus[g].uses.begin(), gpus[g].uses.end(),
                                  [](const GpuUse& u) { return !u.mig_profile.empty(); });
      }
    }
  }
  return gpus;
}

uint32_t SchedulerDriver::generationOf(sched::TaskId t) const {
  const uint32_t starts = scheduler_->task(t).starts;
  if (auto r = restored_.find(t); r != restored_.end() && r->second.starts == starts) {
    return r->second.generation;  // Still where it ran before this start of the server.
  }
  const uint32_t offset = start_offset_[scheduler_->task(t).workload];
  return (options_.epoch << 16) | ((starts + offset) & 0xffffU);
}

void SchedulerDriver::restoreTasks(sched::WorkloadId w, const std::vector<RestoredTask>& tasks,
                                   core::TimePoint now) {
  const sched::WorkloadInfo& info = scheduler_->workload(w);
  const std::string& key = keys_[w];
  for (const RestoredTask& rt : tasks) {
    if (rt.index < 0 || static_cast<size_t>(rt.index) >= info.tasks.size()) {
      continue;
    }
    const sched::TaskId t = info.tasks[static_cast<size_t>(rt.index)];
    auto where = [&] {
      return fmt::format("task {} of {} on node {} (generation {})", rt.index, key, rt.node,
                         rt.generation);
    };
    if (rt.finished) {
      if (core::Status st = scheduler_->restoreFinished(t); !st.isOk()) {
        core::logWarn("finished task {} of {} not kept: {}; it runs again", rt.index, key,
                      st.message());
        continue;
      }
      if (auto n = node_index_.find(rt.node); n != node_index_.end()) {  // Where its logs are.
        ran_[t] = {.node = n->second,
                   .gpus = rt.gpus,
                   .started_at = rt.started_at,
                   .finished_at = rt.finished_at,
                   .exit_code = rt.exit_code,
                   .signal = 0};
      }
      continue;
    }
    auto found = agent_index_.find(rt.node);
    if (found == agent_index_.end()) {
      core::logWarn("{} not kept: no agent node of that name now; it is placed anew", where());
      continue;
    }
    const sched::NodeIndex n = found->second;
    sched::Placement p;
    p.node = n;
    for (int g : rt.gpus) {
      if (g >= 0 && g < 64) {
        p.gpus |= uint64_t{1} << g;
      }
    }
    if (!rt.mig_profile.empty() && !rt.gpus.empty() &&
        static_cast<size_t>(rt.gpus[0]) < nodes_[n].gpus.size()) {
      p.mig_profile = catalogue_->model(nodes_[n].gpus[static_cast<size_t>(rt.gpus[0])].model)
                          .findMigProfile(rt.mig_profile);
      p.mig_start = rt.mig_start;
      // Its GPU was in MIG mode when it was placed; its agent's heartbeat says so again.
      (void)scheduler_->setGpuMigMode(n, rt.gpus[0], model::MigMode::kOn);
    }
    // The node's agent has not been heard from since this start: its lease starts now, as a
    // restarted etcd gives its leases a full ttl. If it lapses, the task is fenced and moved.
    {
      std::lock_guard lock(mu_);
      AgentNode& a = agents_.at(n);
      if (!a.up) {
        a.up = true;
        a.restored = true;
        a.expires = now + options_.lease_ttl;
      }
      if (p.mig_profile >= 0) {
        a.mig_modes.resize(nodes_[n].gpus.size(), model::MigMode::kOff);
        a.mig_modes[static_cast<size_t>(rt.gpus[0])] = model::MigMode::kOn;
      }
    }
    scheduler_->nodeBack(n);
    // Its monotonic start time, from the wall time it was stored with.
    const core::Duration ran = std::max(core::Duration::zero(), clock_.wallNow() - rt.started_at);
    if (core::Status st = scheduler_->restoreTask(t, p, now - ran, rt.starts); !st.isOk()) {
      core::logWarn("{} not kept: {}; it is placed anew", where(), st.message());
      continue;
    }
    restored_[t] = {rt.starts, rt.generation};
    task_ports_[t] = rt.ports;
    node_tasks_[n].insert(t);
    agent_started_[t] = rt.confirmed;
    noteStarted(t);
  }
}

void SchedulerDriver::allocatePorts(sched::TaskId t) {
  const sched::TaskInfo& task = scheduler_->task(t);
  const SubmitCommand& c = specs_[task.workload];
  std::vector<std::string> names = c.ports;
  if (sched::runsTogether(c.spec) &&
      std::find(names.begin(), names.end(), "master") == names.end()) {
    // MASTER_PORT, for every workload of several tasks that run together.
    names.insert(names.begin(), "master");
  }
  std::map<std::string, int>& mine = task_ports_[t];
  mine.clear();
  if (names.empty()) {
    return;
  }
  // Free: held by no other task placed on the node (running, or still stopping there).
  const sched::NodeIndex n = task.assignment.placement.node;
  std::set<int> used;
  for (sched::TaskId other : scheduler_->tasksOn(n)) {
    if (auto it = task_ports_.find(other); other != t && it != task_ports_.end()) {
      for (const auto& [name, port] : it->second) {
        used.insert(port);
      }
    }
  }
  const int first = options_.port_first;
  const int span = options_.port_last - first + 1;
  int& cursor = port_cursor_.try_emplace(n, first).first->second;
  for (const std::string& name : names) {
    for (int k = 0; k < span; ++k) {
      const int port = first + (cursor - first + k) % span;
      if (!used.contains(port)) {
        mine[name] = port;
        used.insert(port);
        cursor = first + (port - first + 1) % span;  // The next task looks past it.
        break;
      }
    }
    if (!mine.contains(name)) {
      core::logError("node {}: no free port in {}-{} for task {} of {}", nodes_[n].name, first,
                     options_.port_last, task.index, keys_[task.workload]);
    }
  }
}

NodeTask SchedulerDriver::nodeTask(sched::TaskId t,
                                   const std::map<sched::NodeIndex, std::string>& addresses) const {
  const sched::TaskInfo& task = scheduler_->task(t);
  const SubmitCommand& c = specs_[task.workload];
  NodeTask nt;
  nt.id = c.tenant + "." + c.name + "." + std::to_string(task.index);
  nt.generation = generationOf(t);
  nt.tenant = c.tenant;
  nt.workload = c.name;
  nt.index = static_cast<int>(task.index);
  nt.command = c.command;
  nt.image = c.image;  // Container options (docs/agent.md "Containers").
  nt.shm_mib = c.shm_mib;
  nt.read_only_rootfs = c.read_only_rootfs;
  nt.env = c.env;
  for (const std::string& var : c.index_env) {
    nt.env[var] = std::to_string(task.index);
  }
  nt.sealed_env = c.sealed_env;
  const sched::Placement& p = task.assignment.placement;
  for (uint64_t g = p.gpus; g != 0; g &= g - 1) {
    nt.gpus.push_back(std::countr_zero(g));
  }
  nt.milli_per_gpu = task.assignment.milli_per_gpu;
  nt.isolation = std::string(model::isolationName(c.spec.request.isolation));
  nt.gpu_memory_mib = c.spec.request.gpu_memory.value();
  nt.milli_limit_per_gpu = c.spec.request.gpu_milli_limit.value();
  nt.mig_profile = p.gpus != 0 ? p.mig_profile : -1;
  nt.mig_start = p.gpus != 0 ? p.mig_start : -1;
  nt.cpu_milli = c.spec.request.cpu.value();
  nt.memory_mib = c.spec.request.memory.value();
  if (nt.cpu_milli == 0 || nt.memory_mib == 0) {
    // Never unlimited on a shared node: a task that asks for no CPU or memory is held to its
    // GPUs' share of its node (a MIG slice's by its compute slices), or to the defaults.
    const model::Node& node = nodes_[p.node];
    int64_t share_milli = 0;  // Of the node's GPUs, in milli-GPU.
    const int gpus = std::popcount(p.gpus);
    if (gpus > 0 && p.mig_profile >= 0 && !node.gpus.empty()) {
      const model::GpuModelInfo& m = catalogue_->model(node.gpus[std::countr_zero(p.gpus)].model);
      if (static_cast<size_t>(p.mig_profile) < m.mig_profiles.size()) {
        share_milli = m.mig_profiles[static_cast<size_t>(p.mig_profile)].computeShare().value();
      }
    } else if (gpus > 0) {
      share_milli = int64_t{gpus} *
                    (task.assignment.milli_per_gpu > 0 ? task.assignment.milli_per_gpu : 1000);
    }
    const auto node_gpus = static_cast<int64_t>(node.gpus.size());
    auto share = [&](int64_t total, int64_t fallback) {
      return share_milli > 0 && node_gpus > 0 && total > 0
                 ? std::max<int64_t>(1, total * share_milli / (node_gpus * 1000))
                 : fallback;
    };
    if (nt.cpu_milli == 0) {
      nt.cpu_milli = share(node.cpu.value(), options_.task_default_cpu_milli);
    }
    if (nt.memory_mib == 0) {
      nt.memory_mib = share(node.memory.value(), options_.task_default_memory_mib);
    }
  }
  nt.duration_s = std::chrono::duration_cast<std::chrono::seconds>(c.duration).count();
  // Rendezvous: each task's node address as it is placed now (a gang's are all placed in the
  // pass that starts it), this task's ports, and task 0's "master" port.
  const sched::WorkloadInfo& info = scheduler_->workload(task.workload);
  // Tasks that run a few at a time (parallelism below tasks) do not run together: no
  // rendezvous, as a Kubernetes Job's pods have none.
  nt.task_count = sched::runsTogether(info.spec) ? info.spec.tasks : 1;
  if (auto it = task_ports_.find(t); it != task_ports_.end()) {
    nt.ports = it->second;
  }
  if (nt.task_count > 1) {
    for (sched::TaskId peer : info.tasks) {
      const sched::TaskInfo& pt = scheduler_->task(peer);
      std::string host;
      if (pt.state == sched::TaskState::kRunning) {
        auto a = addresses.find(pt.assignment.placement.node);
        host = a != addresses.end() && !a->second.empty()
                   ? a->second
                   : nodes_[pt.assignment.placement.node].name;
      }
      nt.hosts.push_back(std::move(host));
    }
    const sched::TaskId zero = info.tasks.front();
    auto it = task_ports_.find(zero);
    if (scheduler_->task(zero).state == sched::TaskState::kRunning && it != task_ports_.end()) {
      if (auto m = it->second.find("master"); m != it->second.end()) {
        nt.master_port = m->second;
      }
    }
  }
  nt.grace_ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.grace).count();
  nt.identity_audiences = c.identity_audiences;
  nt.secrets = c.secrets;
  nt.volumes = c.volumes;
  return nt;
}

void SchedulerDriver::publishNodeTasks() {
  std::vector<std::pair<sched::NodeIndex, sched::TaskId>> unconfirmed;
  for (auto& [node, tasks] : node_tasks_) {
    // Whatever is no longer running here at its generation (finished, cancelled, evicted,
    // lost) leaves the list.
    const sched::NodeIndex n = node;
    std::erase_if(tasks, [&](sched::TaskId t) {
      const sched::TaskInfo& task = scheduler_->task(t);
      if (task.state == sched::TaskState::kRunning && task.assignment.placement.node == n) {
        return false;
      }
      if (task.state == sched::TaskState::kTerminating && task.assignment.placement.node == n) {
        auto started = agent_started_.find(t);
        if (started == agent_started_.end() || !started->second) {
          unconfirmed.emplace_back(n, t);  // Evicted before its agent said it started it.
        }
      }
      return true;
    });
  }
  std::map<sched::NodeIndex, std::string> addresses;
  {
    std::lock_guard lock(mu_);
    for (const auto& [n, a] : agents_) {
      addresses[n] = a.address;
    }
  }
  std::map<sched::NodeIndex, std::vector<NodeTask>> lists;
  for (const auto& [n, a] : agents_) {
    std::vector<NodeTask>& list = lists[n];
    for (sched::TaskId t : node_tasks_[n]) {
      list.push_back(nodeTask(t, addresses));
    }
    std::sort(list.begin(), list.end(),
              [](const NodeTask& x, const NodeTask& y) { return x.id < y.id; });
  }
  std::vector<std::string> changed;
  {
    std::lock_guard lock(mu_);
    unpublished_restores_ -= restores_taken_;
    restores_taken_ = 0;
    // Every answer from now on leaves these tasks out; those given so far may have listed them.
    for (const auto& [n, t] : unconfirmed) {
      unconfirmed_[t] = {n, agents_.at(n).heartbeats};
    }
    for (auto& [n, list] : lists) {
      AgentNode& a = agents_.at(n);
      const bool same = std::equal(list.begin(), list.end(), a.tasks.begin(), a.tasks.end(),
                                   [](const NodeTask& x, const NodeTask& y) {
                                     return x.id == y.id && x.generation == y.generation;
                                   });
      if (!same) {
        a.tasks = std::move(list);
        ++a.version;
        changed.push_back(nodes_[n].name);
      }
    }
  }
  if (!changed.empty()) {
    node_changed_.notify_all();
    if (node_listener_) {
      for (const std::string& node : changed) {
        node_listener_(node);
      }
    }
  }
}

}  // namespace tessera::server
