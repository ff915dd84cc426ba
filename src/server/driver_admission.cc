// What a submission is checked against before it is stored (SchedulerDriver::check,
// checkCapacity, checkLimits): the pool's capacity, its nodes' labels and pools, and the
// tenant's GPU limit, each refusal saying which part of the request nothing meets.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "sched/filter.h"
#include "sched/tenant_queues.h"
#include "server/driver.h"

namespace tessera::server {

namespace {

// "a, b and c"
std::string listText(const std::set<std::string>& names) {
  std::string out;
  size_t i = 0;
  for (const std::string& n : names) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + n;
    ++i;
  }
  return out.empty() ? "none" : out;
}

}  // namespace

core::Status SchedulerDriver::check(const SubmitCommand& cmd) const {
  TESSERA_RETURN_IF_ERROR(model::validateTaskRequest(cmd.spec.request));
  std::lock_guard lock(mu_);
  if (!leaves_.contains(cmd.tenant + "/" + cmd.queue)) {
    return core::invalidArgument("tenant '" + cmd.tenant + "' has no queue '" + cmd.queue + "'");
  }
  return checkCapacity(cmd.tenant, cmd.spec.request, cmd.spec.min_available);
}

core::Status SchedulerDriver::checkCapacity(const std::string& tenant, const model::TaskRequest& r,
                                            int64_t min_available) const {
  // The verdict depends on the request's shape, the tenant (its pools) and the nodes only: a
  // tenant's submissions mostly share a few shapes, and judging one walks every node.
  std::string key = tenant;
  key += '\0';
  for (const int64_t v : {r.cpu.value(), r.memory.value(), static_cast<int64_t>(r.gpu_count),
                          r.gpu_milli.value(), r.gpu_memory.value(), min_available}) {
    key.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  for (model::GpuModelId m : r.models) {
    key += std::to_string(m.value()) + ',';
  }
  key += '\0' + r.mig_profile + '\0';
  for (const auto& [label, value] : r.node_selector) {
    key += label + '=' + value + '\0';
  }
  if (capacity_generation_ != nodes_generation_ || capacity_verdicts_.size() > 4096) {
    capacity_verdicts_.clear();
    capacity_generation_ = nodes_generation_;
  }
  if (auto it = capacity_verdicts_.find(key); it != capacity_verdicts_.end()) {
    return it->second;
  }
  core::Status verdict = judgeCapacity(tenant, r, min_available);
  capacity_verdicts_.emplace(std::move(key), verdict);
  return verdict;
}

core::Status SchedulerDriver::judgeCapacity(const std::string& tenant, const model::TaskRequest& r,
                                            int64_t min_available) const {
  // What the pool offers, for a reason that says which part of the request nothing meets: the
  // GPU models seen, by id (names only once, below: a check runs for every submission, over
  // every node).
  std::vector<bool> seen_models(catalogue_->size(), false);
  int64_t largest_gpu_mib = 0;
  size_t most_gpus = 0;
  int64_t most_cpu = 0;
  int64_t most_memory = 0;
  // How many such tasks the whole pool holds at once, when empty: a gang must fit it whole.
  int64_t pool_holds = 0;
  if (node_index_.empty()) {
    return core::Status::ok();  // No node yet to judge it by: it waits for agents to join.
  }
  // The nodes the workload may use: in service, with its labels, in a pool open to its tenant.
  size_t selected = 0;
  size_t admitted = 0;
  for (const auto& [name, i] : node_index_) {
    const model::Node& n = nodes_[i];
    if (!sched::matchesSelector(n, r.node_selector)) {
      continue;
    }
    ++selected;
    if (!admits(n, tenant)) {
      continue;
    }
    ++admitted;
    most_gpus = std::max(most_gpus, n.gpus.size());
    most_cpu = std::max(most_cpu, n.cpu.value());
    most_memory = std::max(most_memory, n.memory.value());
    int64_t fits = INT64_MAX;
    if (r.cpu.value() > 0) {
      fits = n.cpu.value() / r.cpu.value();
    }
    if (r.memory.value() > 0) {
      fits = std::min(fits, n.memory.value() / r.memory.value());
    }
    if (r.gpu_count > 0) {
      int64_t slots = 0;  // Tasks of this request the node's GPUs hold at once.
      int64_t usable = 0;
      for (const model::GpuDevice& g : n.gpus) {
        const model::GpuModelInfo& info = catalogue_->model(g.model);
        const int64_t mib = g.memory.value() > 0 ? g.memory.value() : info.memory.value();
        if (g.model.value() < seen_models.size()) {
          seen_models[g.model.value()] = true;
        }
        largest_gpu_mib = std::max(largest_gpu_mib, mib);
        if (!r.models.empty() &&
            std::find(r.models.begin(), r.models.end(), g.model) == r.models.end()) {
          continue;
        }
        if (r.isMig()) {
          const int p = info.findMigProfile(r.mig_profile);
          if (p >= 0) {
            slots += info.mig_profiles[static_cast<size_t>(p)].max_instances;
          }
          continue;
        }
        if (r.gpu_memory.value() > 0 && mib > 0 && mib < r.gpu_memory.value()) {
          continue;
        }
        ++usable;
        if (r.isFractional()) {
          int64_t per_gpu = core::kWholeGpu.value() / std::max<int64_t>(1, r.gpu_milli.value());
          if (r.gpu_memory.value() > 0 && mib > 0) {
            per_gpu = std::min(per_gpu, mib / r.gpu_memory.value());
          }
          slots += per_gpu;
        }
      }
      if (!r.isMig() && !r.isFractional()) {
        slots = usable / r.gpu_count;
      }
      fits = std::min(fits, slots);
    }
    if (fits == INT64_MAX) {
      fits = 1000000;  // Asks for nothing: any number fit, as far as admission can tell.
    }
    pool_holds += fits;
  }
  if (admitted == 0) {
    std::string labels;
    for (const auto& [key, value] : r.node_selector) {
      labels += (labels.empty() ? "" : ", ") + key + "=" + value;
    }
    if (selected == 0) {
      return core::invalidArgument("nodeSelector: no node has the labels " + labels);
    }
    return core::invalidArgument(
        r.node_selector.empty() ? std::string("every node is in a pool dedicated to another tenant")
                                : "nodeSelector: every node with the labels " + labels +
                                      " is in a pool dedicated to another tenant");
  }
  const std::string_view offered = "; the pool offers ";
  if (r.gpu_count > 0) {
    std::set<std::string> models;
    std::set<std::string> profiles;
    for (size_t m = 0; m < seen_models.size(); ++m) {
      if (seen_models[m]) {
        const model::GpuModelInfo& info =
            catalogue_->model(model::GpuModelId{static_cast<uint16_t>(m)});
        models.insert(info.name);
        for (const model::MigProfile& p : info.mig_profiles) {
          profiles.insert(p.name);
        }
      }
    }
    std::set<std::string> wanted;
    for (model::GpuModelId m : r.models) {
      wanted.insert(catalogue_->model(m).name);
    }
    bool any_model = wanted.empty();
    for (const std::string& m : wanted) {
      any_model |= models.contains(m);
    }
    if (!any_model) {
      return core::invalidArgument("gpu.models: no GPU in the pool is a " + listText(wanted) +
                                   std::string(offered) + listText(models));
    }
    if (r.isMig() && !profiles.contains(r.mig_profile)) {
      return core::invalidArgument("gpu.mig: no GPU in the pool offers MIG profile '" +
                                   r.mig_profile + "'" + std::string(offered) + listText(profiles));
    }
    if (r.gpu_memory.value() > largest_gpu_mib && largest_gpu_mib > 0) {
      return core::invalidArgument("gpu.memoryMiB: no GPU in the pool has " +
                                   std::to_string(r.gpu_memory.value()) + " MiB; the largest has " +
                                   std::to_string(largest_gpu_mib));
    }
    if (static_cast<size_t>(r.gpu_count) > most_gpus) {
      return core::invalidArgument("gpu.count: no node in the pool has " +
                                   std::to_string(r.gpu_count) + " GPUs; the most is " +
                                   std::to_string(most_gpus));
    }
  }
  if (r.cpu.value() > most_cpu) {
    return core::invalidArgument("cpuMilli: no node in the pool has " +
                                 std::to_string(r.cpu.value()) + " milli-CPU; the most is " +
                                 std::to_string(most_cpu));
  }
  if (r.memory.value() > most_memory) {
    return core::invalidArgument("memoryMiB: no node in the pool has " +
                                 std::to_string(r.memory.value()) + " MiB; the most is " +
                                 std::to_string(most_memory));
  }
  if (pool_holds == 0) {
    return core::invalidArgument(
        "no node in the pool can hold one task of this workload (its CPU, memory and GPUs "
        "together)");
  }
  if (min_available > pool_holds) {
    return core::invalidArgument("minAvailable: its " + std::to_string(min_available) +
                                 " tasks must start together, but the whole pool holds at "
                                 "most " +
                                 std::to_string(pool_holds) + " of them at once");
  }
  return core::Status::ok();
}

core::Status SchedulerDriver::checkLimits(const SubmitCommand& cmd) const {
  const model::TaskRequest& r = cmd.spec.request;
  // A task's GPU as the scheduler counts it against limits (Scheduler::taskAmounts): whole and
  // fractional GPUs by their milli-GPU, a MIG slice by its profile's compute share, here the
  // smallest of the models that offer it (admission refuses only what could never fit).
  int64_t per_task = r.gpu_count * (r.isMig() ? 0 : r.gpu_milli.value());
  if (r.isMig()) {
    per_task = INT64_MAX;
    for (size_t m = 0; m < catalogue_->size(); ++m) {
      const model::GpuModelInfo& info =
          catalogue_->model(model::GpuModelId{static_cast<uint16_t>(m)});
      if (const int p = info.findMigProfile(r.mig_profile); p >= 0) {
        per_task =
            std::min(per_task, info.mig_profiles[static_cast<size_t>(p)].computeShare().value());
      }
    }
    if (per_task == INT64_MAX) {
      return core::Status::ok();  // No model offers it: check() says so.
    }
  }
  if (per_task <= 0) {
    return core::Status::ok();
  }
  const int64_t gang = per_task * cmd.spec.min_available;
  std::lock_guard lock(mu_);
  // The tenant's limit first (its default queue has the same), then its team's.
  for (const std::string& q : {cmd.tenant, cmd.tenant + "/" + cmd.queue}) {
    auto it = gpu_limits_.find(q);
    if (it == gpu_limits_.end() || it->second < 0 || gang <= it->second) {
      continue;
    }
    const std::string who = q == cmd.tenant
                                ? "tenant '" + cmd.tenant + "'"
                                : "queue '" + cmd.queue + "' of tenant '" + cmd.tenant + "'";
    const std::string may = it->second == 0 ? "may hold no GPU at all (its limit.gpu is 0)"
                                            : "may hold at most " + core::gpuText(it->second) +
                                                  " at once (its limit.gpu)";
    return core::invalidArgument(fmt::format(
        "gpu: this workload needs {} x {} = {} at once (minAvailable x each task's GPU), and {} "
        "{}; it could never start",
        cmd.spec.min_available, core::gpuText(per_task), core::gpuText(gang), who, may));
  }
  return core::Status::ok();
}

}  // namespace tessera::server
