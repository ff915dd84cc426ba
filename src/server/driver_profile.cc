// The workload profile: the typical task shapes the scheduler learns from what tenants submit
// (docs/placement.md, "In the live server").
#include <fmt/format.h>

#include "sched/tessera_policy.h"
#include "server/driver.h"

namespace tessera::server {

void SchedulerDriver::learnShape(const SubmitCommand& c, core::TimePoint now) {
  const model::TaskRequest& r = c.spec.request;
  // MIG slices are placed by their own rules (a profile on a partitioned GPU), not FGD's.
  if (!options_.typical.empty() || c.replayed || r.isMig() || c.spec.tasks <= 0) {
    return;
  }
  const sched::PodShape shape{r.cpu.value(),
                              static_cast<int32_t>(r.gpu_count > 0 ? r.gpu_milli.value() : 0),
                              r.gpu_count, r.models};
  profile_.add(shape, c.spec.tasks, now);
  profile_added_ += c.spec.tasks;
}

void SchedulerDriver::refreshTypical(core::TimePoint now) {
  if (!options_.typical.empty() || profile_.version() == profile_applied_version_) {
    return;
  }
  const double seen = profile_.seen(now);
  if (seen < options_.profile_min_tasks) {
    return;
  }
  // Often while it is young (each 10 % more), then at most every 10 minutes: each new profile
  // costs the policy its caches (and tessera's an LP).
  const bool due = !profile_active_ || profile_added_ >= 0.1 * profile_applied_seen_ ||
                   now - profile_applied_at_ >= std::chrono::minutes(10);
  if (!due) {
    return;
  }
  if (core::Status st = scheduler_->setTypical(profile_.typical()); !st.isOk()) {
    // Kept as it was; tried again after the next change.
    profile_applied_version_ = profile_.version();
    return;
  }
  profile_applied_version_ = profile_.version();
  profile_active_ = true;
  profile_added_ = 0;
  profile_applied_seen_ = seen;
  profile_applied_at_ = now;
  ++profile_rebuilds_;
}

ProfileStatus SchedulerDriver::profileStatus() const {
  std::lock_guard pass_lock(pass_mu_);
  ProfileStatus s;
  s.learned = options_.typical.empty();
  s.tasks_seen = profile_.seen(clock_.now());
  s.min_tasks = options_.profile_min_tasks;
  s.shapes = profile_.size();
  s.active = !s.learned || profile_active_;
  s.rebuilds = profile_rebuilds_;
  const sched::FragModel& frag = scheduler_->fragModel();
  s.typical = frag.typical();
  const std::string& policy = scheduler_->options().policy;
  s.policy = policy;
  const bool fgd = policy == "fgd" || policy == "tessera";
  const bool ours = policy == "tessera";
  bool gpu = false;
  bool shares = false;
  bool models = false;
  for (const sched::TypicalPod& t : s.typical) {
    gpu = gpu || t.shape.gpu_count > 0;
    shares = shares || (t.shape.gpu_count == 1 && t.shape.milli > 0 && t.shape.milli < 1000);
    models = models || (t.shape.gpu_count > 0 && !t.shape.models.empty());
  }
  const std::string young =
      fmt::format("inactive: {:.0f} of the {:.0f} tasks the profile needs are counted",
                  s.tasks_seen, s.min_tasks);
  auto term = [&](const std::string& name, bool used, bool holds, const std::string& none) {
    std::string why = "active";
    if (!used) {
      why = "inactive: the " + policy + " policy does not use it";
    } else if (!s.active) {
      why = young;
    } else if (!holds) {
      why = "inactive: " + none;
    }
    s.terms.emplace_back(name, why);
  };
  term("fragmentation", fgd, gpu, "no typical task asks for a GPU");
  // When CPU runs out before GPUs, the GPU-packing terms give way to FGD's rule.
  const bool cpu_binds = sched::cpuBinds(frag, scheduler_->cluster());
  const std::string binds =
      cpu_binds ? fmt::format(
                      "CPU runs out before GPUs for the typical mix (it asks for {:.2f} x "
                      "the cluster's CPU by the time its GPU requests fill every GPU), so "
                      "FGD's rule places",
                      sched::cpuBinding(frag, scheduler_->cluster()))
                : "";
  term("cpu_stranding", ours, frag.cpuPerGpuMilli() > 0 && !cpu_binds,
       cpu_binds ? binds : "no typical task asks for CPU with a GPU share");
  term("share_prices", ours, shares && !cpu_binds,
       cpu_binds && shares ? binds : "no typical task asks for part of one GPU");
  term("model_prices", ours, models, "no typical GPU task is restricted to GPU models");
  return s;
}

std::vector<sched::ShapeProfile::Entry> SchedulerDriver::profileEntries() const {
  std::lock_guard pass_lock(pass_mu_);
  return profile_.entries(clock_.now());
}

void SchedulerDriver::restoreProfile(const std::vector<sched::ShapeProfile::Entry>& entries) {
  std::lock_guard pass_lock(pass_mu_);
  profile_.restore(entries, clock_.now());
  profile_added_ = 0;
}

uint64_t SchedulerDriver::profileVersion() const {
  std::lock_guard pass_lock(pass_mu_);
  return profile_.version();
}

}  // namespace tessera::server
