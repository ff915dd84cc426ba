#include "agent/agent.h"

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "core/log.h"

namespace tessera::agent {

Agent::Agent(std::string node, NodeGpus gpus, ControlPlaneClient& server, Runtime& runtime,
             const core::Clock& clock, AgentOptions options)
    : node_(std::move(node)),
      gpus_(std::move(gpus)),
      server_(server),
      runtime_(runtime),
      clock_(clock),
      options_(std::move(options)),
      last_ok_(clock.now()) {}

Agent::~Agent() {
  cancel_pulls_ = true;
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, p] : pulls_) {
      threads.push_back(std::move(p.thread));
    }
  }
  for (std::thread& t : threads) {
    if (t.joinable()) {
      t.join();
    }
  }
}

namespace {

// The folder of a task's volume `i` in its credentials folder.
std::string volumeFolder(size_t i) { return "volume-" + std::to_string(i); }

// "312 MB", "1.2 GB": what `tessera show` says of a download.
std::string byteSize(int64_t n) {
  if (n >= 1'000'000'000) {
    return fmt::format("{:.1f} GB", static_cast<double>(n) / 1e9);
  }
  if (n >= 100'000'000) {
    return fmt::format("{} MB", n / 1'000'000);
  }
  if (n >= 1'000'000) {
    return fmt::format("{:.1f} MB", static_cast<double>(n) / 1e6);
  }
  return fmt::format("{} kB", (n + 999) / 1000);
}

}  // namespace

void Agent::startPullLocked(const TaskAssignment& a, int failures) {
  const std::string id = a.spec.id;
  const uint32_t generation = a.generation;
  Pull& p = pulls_[id];
  if (p.thread.joinable()) {
    p.thread.join();  // An older generation's, or this one's that failed: only its wake() is left.
  }
  p = Pull{};
  p.generation = generation;
  p.failures = failures;
  p.progress = "pulling image";
  p.progress_sent = false;
  TaskSpec spec = a.spec;
  spec.container.pull_cancel = &cancel_pulls_;
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  spec.container.pull_progress = [this, id, generation, last](int64_t done, int64_t total) {
    // At most once a second: the next heartbeat takes the newest.
    const auto now = std::chrono::steady_clock::now();
    if (done != 0 && done < total && now - *last < std::chrono::seconds(1)) {
      return;
    }
    *last = now;
    {
      std::lock_guard lock(mu_);
      auto it = pulls_.find(id);
      if (it == pulls_.end() || it->second.generation != generation) {
        return;
      }
      it->second.progress =
          total > 0 ? "pulling image (" + byteSize(done) + " of " + byteSize(total) + ")"
                    : "pulling image";
      it->second.progress_sent = false;
    }
    if (options_.wake) {
      options_.wake();
    }
  };
  p.thread = std::thread([this, spec = std::move(spec), id, generation]() mutable {
    core::Status st;
    try {
      st = runtime_.pull(spec);
    } catch (const std::exception& e) {
      st = core::internalError(std::string("pulling its image: ") + e.what());
    }
    OPENSSL_cleanse(spec.container.pull_credentials.password.data(),
                    spec.container.pull_credentials.password.size());
    {
      std::lock_guard lock(mu_);
      auto it = pulls_.find(id);
      if (it != pulls_.end() && it->second.generation == generation) {
        it->second.done = true;
        it->second.result = std::move(st);
      }
    }
    if (options_.wake) {
      options_.wake();
    }
  });
}

void Agent::onExit(const std::string& id, const TaskExit& exit) {
  std::lock_guard lock(mu_);
  auto it = running_.find(id);
  if (it == running_.end()) {
    return;
  }
  TaskReport r;
  r.id = id;
  r.generation = it->second;
  r.state = TaskReport::State::kExited;
  r.exit = exit;
  outbox_.push_back(std::move(r));
  done_.insert({id, it->second});
  running_.erase(it);
  stopping_.erase(id);
  graces_.erase(id);
  mig_live_.erase(id);  // Its instance may go in the GPU's next layout.
  credentials_stale_.insert(id);
}

void Agent::adopt(const std::vector<AdoptedTask>& tasks) {
  std::lock_guard lock(mu_);
  for (const AdoptedTask& t : tasks) {
    uint32_t generation = 0;
    try {
      generation = static_cast<uint32_t>(std::stoul(t.tag));
    } catch (const std::exception&) {
      // Not one of ours (no generation): reported as generation 0, which the server ignores.
    }
    if (!t.ended) {
      running_[t.id] = generation;
      continue;
    }
    TaskReport r;
    r.id = t.id;
    r.generation = generation;
    r.state = TaskReport::State::kExited;
    r.exit = *t.ended;
    outbox_.push_back(std::move(r));
    done_.insert({t.id, generation});
  }
}

core::Status Agent::tick() {
  std::vector<TaskReport> reports;
  std::map<std::string, std::string> progress;  // Sent with this heartbeat.
  {
    std::lock_guard lock(mu_);
    reports = outbox_;
    for (const auto& [id, p] : pulls_) {
      if (!p.progress_sent && (!p.done || p.retry_at)) {  // Pulling, or backing off.
        TaskReport r;
        r.id = id;
        r.generation = p.generation;
        r.state = TaskReport::State::kStarting;
        r.progress = p.progress;
        reports.push_back(std::move(r));
        progress[id] = p.progress;
      }
    }
  }
  auto wanted = server_.heartbeat(node_, withIdleMig(), reports);
  if (!wanted.isOk()) {
    const core::TimePoint now = clock_.now();
    const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_ok_);
    if (server_.noLeaderCanAct() && since < options_.no_leader_bound) {
      last_none_ = now;
      // No one can place these tasks elsewhere: they run on, and the shims' lease with them.
      if (!holding_on_) {
        core::logWarn(
            "agent {}: no leader can act now ({}): the tasks keep running, up to {} s without one",
            node_, wanted.status().message(), options_.no_leader_bound.count() / 1000);
      }
      holding_on_ = true;
      if (options_.renewed) {
        options_.renewed(std::min(options_.fence_after, options_.no_leader_bound - since));
      }
    } else if (since >= options_.no_leader_bound ||
               (holding_on_
                    ? now - last_none_
                    : std::chrono::duration_cast<core::Duration>(since)) >= options_.fence_after) {
      // Fenced fence_after after the last sign that nobody could move the tasks: a heartbeat,
      // or an answer that no leader can act (the shims' lease was renewed for it). A failure
      // without that answer in between (a replica restarting, a connection cut) is no such
      // sign, nor a reason to stop early.
      if (holding_on_ && since >= options_.no_leader_bound) {
        core::logWarn("agent {}: no leader for {} s, the agent's bound: the tasks are stopped",
                      node_, since.count() / 1000);
      }
      holding_on_ = false;
      fence();
    }
    return wanted.status();
  }
  holding_on_ = false;
  {
    std::lock_guard lock(mu_);
    // What was sent is acknowledged; what came in meanwhile stays for the next round.
    const size_t sent = reports.size() - progress.size();
    outbox_.erase(outbox_.begin(),
                  outbox_.begin() + static_cast<std::ptrdiff_t>(std::min(sent, outbox_.size())));
    for (const auto& [id, text] : progress) {
      if (auto it = pulls_.find(id); it != pulls_.end() && it->second.progress == text) {
        it->second.progress_sent = true;
      }
    }
    last_ok_ = clock_.now();
    fenced_ = false;
  }
  if (options_.renewed) {
    options_.renewed(options_.fence_after);
  }
  reconcile(*wanted);
  return core::Status::ok();
}

std::map<std::string, std::string> Agent::syncCredentials(
    const std::vector<TaskAssignment>& wanted) {
  std::map<std::string, std::string> errors;
  if (options_.credentials == nullptr) {
    return errors;
  }
  {
    std::lock_guard lock(mu_);
    for (const std::string& id : credentials_stale_) {
      written_.erase(id);
    }
    credentials_stale_.clear();
  }
  // Folders this agent does not track (an earlier agent's, left when it was restarted or died
  // with its tasks fenced) are tracked from now on: rewritten if their task is wanted here, else
  // removed once it is not running.
  for (const std::string& task : options_.credentials->list()) {
    written_.try_emplace(task);
  }
  std::set<std::string> keep;
  for (const TaskAssignment& a : wanted) {
    if (!a.invalid.empty()) {
      continue;
    }
    keep.insert(a.spec.id);
    std::map<std::string, std::string>& have = written_[a.spec.id];
    for (const auto& [name, content] : a.credentials) {
      auto it = have.find(name);
      if (it != have.end() && it->second == content) {
        continue;
      }
      const core::Status s = options_.credentials->write(a.spec.id, name, content, a.spec.user);
      if (s.isOk()) {
        have[name] = content;
      } else {
        errors[a.spec.id] = s.message();
      }
    }
    for (size_t i = 0; i < a.volumes.size(); ++i) {
      if (a.volumes[i].tmpfs) {
        continue;
      }
      const std::string name = volumeFolder(i);
      const std::string content = nlohmann::json(a.volumes[i].files).dump();
      auto it = have.find(name);
      if (it != have.end() && it->second == content) {
        continue;
      }
      const core::Status s =
          options_.credentials->writeVolume(a.spec.id, name, a.volumes[i].files, a.spec.user);
      if (s.isOk()) {
        have[name] = content;
      } else {
        errors[a.spec.id] = s.message();
      }
    }
  }
  std::lock_guard lock(mu_);
  for (auto it = written_.begin(); it != written_.end();) {
    if (!keep.contains(it->first) && !running_.contains(it->first)) {
      options_.credentials->remove(it->first);
      it = written_.erase(it);
    } else {
      ++it;
    }
  }
  return errors;
}

void Agent::reconcile(const std::vector<TaskAssignment>& wanted) {
  // Credentials first: a task about to start finds its files, a running one its new token.
  const std::map<std::string, std::string> credential_errors = syncCredentials(wanted);
  std::map<std::string, const TaskAssignment*> by_id;
  for (const TaskAssignment& a : wanted) {
    by_id[a.spec.id] = &a;
  }
  // Stop what is no longer ours, or ours at an older generation.
  std::vector<std::pair<std::string, std::chrono::milliseconds>> stops;
  {
    std::lock_guard lock(mu_);
    // What ended and is no longer assigned is forgotten (the server has its report).
    std::erase_if(done_, [&](const auto& d) { return !by_id.contains(d.first); });
    for (const auto& [id, generation] : running_) {
      auto it = by_id.find(id);
      if ((it == by_id.end() || it->second->generation != generation) && !stopping_.contains(id)) {
        // Taken off this node (cancelled, preempted): the grace it was started with.
        auto started = graces_.find(id);
        const std::chrono::milliseconds grace = it != by_id.end() ? it->second->grace
                                                : started != graces_.end()
                                                    ? started->second
                                                    : options_.unassigned_grace;
        stops.emplace_back(id, grace);
        stopping_.insert(id);
      }
    }
  }
  for (const auto& [id, grace] : stops) {
    (void)runtime_.stop(id, grace);  // Not found: it ended meanwhile, and onExit reports it.
  }
  // Start what is ours and not running (a new generation waits for the old one's exit).
  std::vector<const TaskAssignment*> starts;
  std::vector<TaskAssignment> unstartable;  // Their credentials could not be written.
  unstartable.reserve(credential_errors.size());
  std::vector<std::thread> ended_pulls;  // Joined below, without the lock.
  {
    std::lock_guard lock(mu_);
    // Pulls of tasks no longer here (cancelled while their image came) are forgotten once done.
    for (auto it = pulls_.begin(); it != pulls_.end();) {
      auto w = by_id.find(it->first);
      if (it->second.done && (w == by_id.end() || w->second->generation != it->second.generation)) {
        ended_pulls.push_back(std::move(it->second.thread));
        it = pulls_.erase(it);
      } else {
        ++it;
      }
    }
    for (const TaskAssignment& a : wanted) {
      if (running_.contains(a.spec.id) || done_.contains({a.spec.id, a.generation})) {
        continue;
      }
      if (a.invalid.empty() && !credential_errors.contains(a.spec.id) &&
          runtime_.needsPull(a.spec)) {
        // Its image first, off this loop: a download may take minutes, and the heartbeats go on.
        auto p = pulls_.find(a.spec.id);
        if (p == pulls_.end() || p->second.generation != a.generation) {
          if (p == pulls_.end() || p->second.done) {
            startPullLocked(a);
          }
          continue;
        }
        if (!p->second.done) {
          continue;
        }
        const core::Status result = p->second.result;
        if (result.code() == core::StatusCode::kUnavailable &&
            p->second.failures < options_.pull_retries) {
          // ImagePullBackOff: a cause that may pass; the task waits, and says why.
          Pull& pull = p->second;
          const core::TimePoint now = clock_.now();
          if (!pull.retry_at) {
            const auto wait = options_.pull_backoff * (int64_t{1} << std::min(pull.failures, 20));
            pull.retry_at = now + wait;
            pull.progress = fmt::format(
                "ImagePullBackOff (retry {} of {} in {} s): {}", pull.failures + 1,
                options_.pull_retries,
                std::chrono::duration_cast<std::chrono::seconds>(wait).count(), result.message());
            pull.progress_sent = false;
          }
          if (now >= *pull.retry_at) {
            startPullLocked(a, pull.failures + 1);
          }
          continue;
        }
        const int failures = p->second.failures;
        ended_pulls.push_back(std::move(p->second.thread));
        pulls_.erase(p);
        if (!result.isOk()) {
          done_.insert({a.spec.id, a.generation});
          TaskReport r;
          r.id = a.spec.id;
          r.generation = a.generation;
          r.state = TaskReport::State::kFailedToStart;
          r.error = result.message();
          if (failures > 0) {
            r.error += fmt::format(" (the pull was tried {} times)", failures + 1);
          }
          outbox_.push_back(std::move(r));
          continue;
        }
        // Pulled: it starts now (its manifest is asked again with its credentials, its layers
        // are here).
      }
      running_[a.spec.id] = a.generation;  // Before start: an exit may come at once.
      if (auto e = credential_errors.find(a.spec.id); e != credential_errors.end()) {
        unstartable.push_back(a);
        unstartable.back().invalid = e->second;
        continue;
      }
      starts.push_back(&a);
    }
  }
  for (std::thread& t : ended_pulls) {
    if (t.joinable()) {
      t.join();  // It has set its result: done, or about to return.
    }
  }
  for (const TaskAssignment& a : unstartable) {
    starts.push_back(&a);
  }
  std::deque<TaskAssignment> prepared;  // MIG tasks pinned to their instances.
  switchMigModes(starts, prepared);
  prepareMig(wanted, starts, prepared);
  // Several at once: a start mostly waits (on cgroup v1 joining a group waits for an RCU grace
  // period), and overlapping the waits starts a burst several times faster.
  std::atomic<size_t> next{0};
  auto start_some = [&] {
    for (size_t i = next++; i < starts.size(); i = next++) {
      startOne(*starts[i]);
    }
  };
  if (starts.empty()) {
    return;
  }
  const size_t helpers =
      std::min(starts.size(), static_cast<size_t>(std::max(1, options_.parallel_starts))) - 1;
  std::vector<std::thread> threads;
  threads.reserve(helpers);
  for (size_t i = 0; i < helpers; ++i) {
    threads.emplace_back(start_some);
  }
  start_some();
  for (std::thread& t : threads) {
    t.join();
  }
}

std::vector<std::string> migCapabilityNodes(const std::string& minors_file,
                                            const std::string& caps_dir, int gpu_minor,
                                            const MigDevice& device) {
  std::vector<std::string> out;
  if (device.gpu_instance_id < 0) {
    return out;
  }
  const std::string gi =
      "gpu" + std::to_string(gpu_minor) + "/gi" + std::to_string(device.gpu_instance_id);
  const std::string wanted[] = {
      gi + "/access",
      gi + "/ci" + std::to_string(std::max(0, device.compute_instance_id)) + "/access"};
  std::FILE* f = std::fopen(minors_file.c_str(), "re");
  if (f == nullptr) {
    return out;
  }
  char name[128];
  unsigned minor = 0;
  while (std::fscanf(f, "%127s %u", name, &minor) == 2) {
    if (std::find(std::begin(wanted), std::end(wanted), name) != std::end(wanted)) {
      out.push_back(caps_dir + "/nvidia-cap" + std::to_string(minor));
    }
  }
  std::fclose(f);
  return out;
}

NodeGpus Agent::withIdleMig() const {
  NodeGpus out = gpus_;
  std::lock_guard lock(mu_);
  for (Gpu& g : out.gpus) {
    g.mig_managed = options_.mig_managed && g.mig_capable;
    if (auto it = mig_switched_.find(g.index); it != mig_switched_.end()) {
      g.mig_enabled = it->second;
      g.mig_pending = it->second;
    }
  }
  for (const auto& [gpu, layout] : mig_layout_) {
    if (gpu < 0 || static_cast<size_t>(gpu) >= out.gpus.size()) {
      continue;
    }
    std::set<model::MigInstance> idle = layout;
    for (const auto& [id, m] : mig_live_) {
      if (m.gpu == gpu) {
        idle.erase(m.instance);
      }
    }
    out.gpus[static_cast<size_t>(gpu)].mig_idle.assign(idle.begin(), idle.end());
  }
  return out;
}

void Agent::switchMigModes(std::vector<const TaskAssignment*>& starts,
                           std::deque<TaskAssignment>& prepared) {
  if (!options_.mig_managed || options_.mig == nullptr) {
    return;
  }
  // Per MIG-capable GPU: the mode its starting tasks need, and which of them need it.
  std::map<int, bool> need;
  std::map<int, std::vector<size_t>> users;
  for (size_t i = 0; i < starts.size(); ++i) {
    const TaskAssignment& a = *starts[i];
    if (!a.invalid.empty()) {
      continue;
    }
    if (a.mig.gpu >= 0) {
      need[a.mig.gpu] = true;
      users[a.mig.gpu].push_back(i);
      continue;
    }
    for (const std::string& uuid : a.spec.gpus.uuids) {
      for (const Gpu& g : gpus_.gpus) {
        if (g.uuid == uuid && g.mig_capable) {
          need[g.index] = false;
          users[g.index].push_back(i);
        }
      }
    }
  }
  for (const auto& [gpu, on] : need) {
    if (gpu < 0 || static_cast<size_t>(gpu) >= gpus_.gpus.size()) {
      continue;
    }
    const Gpu& g = gpus_.gpus[static_cast<size_t>(gpu)];
    bool busy = false;
    {
      std::lock_guard lock(mu_);
      auto it = mig_switched_.find(gpu);
      if ((it != mig_switched_.end() ? it->second : g.mig_enabled) == on) {
        continue;
      }
      busy = std::any_of(mig_live_.begin(), mig_live_.end(),
                         [&](const auto& live) { return live.second.gpu == gpu; });
    }
    core::Status st = busy ? core::failedPrecondition(
                                 "MIG mode stays on: tasks of this node run in its MIG "
                                 "instances")
                           : options_.mig->setMigMode(gpu, g.model, on);
    if (st.isOk()) {
      core::logInfo("GPU {}: MIG mode turned {} for the work placed there", gpu, on ? "on" : "off");
      std::lock_guard lock(mu_);
      mig_switched_[gpu] = on;
      if (!on) {
        mig_layout_.erase(gpu);  // Its instances went with MIG mode.
      }
      continue;
    }
    for (size_t i : users[gpu]) {
      TaskAssignment& a = prepared.emplace_back(*starts[i]);
      starts[i] = &a;
      a.invalid = "GPU " + std::to_string(gpu) + ": " + st.message();
    }
  }
}

void Agent::prepareMig(const std::vector<TaskAssignment>& wanted,
                       std::vector<const TaskAssignment*>& starts,
                       std::deque<TaskAssignment>& prepared) {
  std::map<int, std::vector<size_t>> by_gpu;  // GPU -> its MIG tasks in `starts`.
  for (size_t i = 0; i < starts.size(); ++i) {
    if (starts[i]->mig.gpu >= 0 && starts[i]->invalid.empty()) {
      by_gpu[starts[i]->mig.gpu].push_back(i);
    }
  }
  if (by_gpu.empty()) {
    return;
  }
  std::map<int, std::set<model::MigInstance>> layouts;
  {
    std::lock_guard lock(mu_);
    // Tasks adopted after a restart run in instances this agent did not make: the server's
    // list says which.
    for (const TaskAssignment& a : wanted) {
      if (a.mig.gpu >= 0 && running_.contains(a.spec.id) && !mig_live_.contains(a.spec.id) &&
          std::none_of(starts.begin(), starts.end(),
                       [&](const TaskAssignment* s) { return s->spec.id == a.spec.id; })) {
        mig_live_[a.spec.id] = a.mig;
      }
    }
    for (const auto& [id, m] : mig_live_) {
      layouts[m.gpu].insert(m.instance);
    }
  }
  for (const auto& [gpu, list] : by_gpu) {
    std::set<model::MigInstance>& layout = layouts[gpu];
    for (size_t i : list) {
      layout.insert(starts[i]->mig.instance);
    }
    const std::string& model = gpus_.gpus[static_cast<size_t>(gpu)].model;
    const core::Result<MigUuids> uuids =
        options_.mig == nullptr
            ? core::Result<MigUuids>(core::failedPrecondition("this agent makes no MIG instances"))
            : options_.mig->apply(gpu, model, {layout.begin(), layout.end()});
    if (uuids.isOk()) {
      std::lock_guard lock(mu_);
      std::set<model::MigInstance>& now = mig_layout_[gpu];
      now.clear();
      for (const auto& [instance, device] : *uuids) {
        now.insert(instance);
      }
    }
    for (size_t i : list) {
      TaskAssignment& a = prepared.emplace_back(*starts[i]);
      starts[i] = &a;
      auto uuid = uuids.isOk() ? uuids->find(a.mig.instance) : MigUuids::const_iterator{};
      if (!uuids.isOk() || uuid == uuids->end()) {
        a.invalid =
            "its MIG slice on GPU " + std::to_string(gpu) + ": " +
            (uuids.isOk() ? std::string("no MIG device made for it") : uuids.status().message());
        continue;
      }
      a.spec.gpus.uuids = {uuid->second.uuid};
      if (!options_.mig_caps_dir.empty()) {
        for (const std::string& node :
             migCapabilityNodes(options_.mig_minors, options_.mig_caps_dir,
                                gpus_.gpus[static_cast<size_t>(gpu)].minor, uuid->second)) {
          a.spec.device_nodes.push_back(node);
        }
      }
      std::lock_guard lock(mu_);
      mig_live_[a.spec.id] = a.mig;
    }
  }
}

void Agent::startOne(const TaskAssignment& a) {
  TaskSpec spec = a.spec;
  spec.tag = std::to_string(a.generation);  // Given back on adoption after a restart.
  const bool volume_files = std::any_of(a.volumes.begin(), a.volumes.end(),
                                        [](const protocol::TaskVolume& v) { return !v.tmpfs; });
  std::string invalid = a.invalid;
  if (invalid.empty() && volume_files && options_.credentials == nullptr) {
    invalid = "its volumes' files are kept in a credentials folder, and this agent has none";
  }
  for (size_t i = 0; i < a.volumes.size() && invalid.empty(); ++i) {
    const protocol::TaskVolume& v = a.volumes[i];
    spec.container.volumes.push_back(
        {.path = v.path,
         .source = v.tmpfs ? "" : options_.credentials->dir(a.spec.id) + "/" + volumeFolder(i),
         .size_mib = v.size_mib});
  }
  if (options_.credentials != nullptr && (!a.credentials.empty() || volume_files)) {
    const std::string dir = options_.credentials->dir(a.spec.id);
    spec.credentials_dir = dir;
    spec.env["TESSERA_CREDENTIALS_DIR"] = dir;
    if (a.credentials.contains("identity-token")) {
      spec.env["TESSERA_IDENTITY_TOKEN_FILE"] = dir + "/identity-token";
      // AWS SDKs assume AWS_ROLE_ARN with the token in this file by themselves.
      if (spec.env.contains("AWS_ROLE_ARN")) {
        spec.env.try_emplace("AWS_WEB_IDENTITY_TOKEN_FILE", dir + "/identity-token");
      }
    }
    if (a.credentials.contains("secrets.json")) {
      spec.env["TESSERA_SECRETS_FILE"] = dir + "/secrets.json";
    }
  }
  const core::Status s = invalid.empty() ? runtime_.start(spec) : core::failedPrecondition(invalid);
  OPENSSL_cleanse(spec.container.pull_credentials.password.data(),
                  spec.container.pull_credentials.password.size());
  std::lock_guard lock(mu_);
  TaskReport r;
  r.id = a.spec.id;
  r.generation = a.generation;
  if (!s.isOk()) {
    running_.erase(a.spec.id);
    mig_live_.erase(a.spec.id);
    done_.insert({a.spec.id, a.generation});
    r.state = TaskReport::State::kFailedToStart;
    r.error = s.message();
  } else {
    r.state = TaskReport::State::kRunning;
    if (running_.contains(a.spec.id)) {  // Unless it has ended already.
      graces_[a.spec.id] = a.grace;
    }
  }
  outbox_.push_back(std::move(r));
}

void Agent::fence() {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    fenced_ = true;
    for (const auto& [id, generation] : running_) {
      if (!stopping_.contains(id)) {
        ids.push_back(id);
        stopping_.insert(id);
      }
    }
  }
  for (const std::string& id : ids) {
    (void)runtime_.stop(id, options_.fence_grace);
  }
  // Their credentials go with them: a fenced task is placed elsewhere, and nothing here may
  // still hand out its identity token or secrets (the server may not be reached again to say
  // the task is gone). They are written again if the server gives the task back.
  if (options_.credentials != nullptr) {
    for (const std::string& task : options_.credentials->list()) {
      options_.credentials->remove(task);
    }
    written_.clear();
  }
}

bool Agent::hasReports() const {
  std::lock_guard lock(mu_);
  return !outbox_.empty();
}

bool Agent::fenced() const {
  std::lock_guard lock(mu_);
  return fenced_;
}

std::map<std::string, uint32_t> Agent::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

}  // namespace tessera::agent
