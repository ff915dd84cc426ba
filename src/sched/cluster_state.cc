#include "sched/cluster_state.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace tessera::sched {

std::string_view gpuModeName(GpuMode m) {
  switch (m) {
    case GpuMode::kExclusive:
      return "exclusive";
    case GpuMode::kShared:
      return "shared";
    case GpuMode::kMig:
      return "mig";
  }
  return "unknown";
}

void TrustGroups::setGroup(model::TenantId tenant, uint32_t group) {
  if (group_of_.size() <= tenant.value()) {
    group_of_.resize(tenant.value() + 1, 0);
  }
  group_of_[tenant.value()] = group;
}

bool TrustGroups::mayShare(model::TenantId a, model::TenantId b) const {
  if (a == b) {
    return true;
  }
  uint32_t ga = a.value() < group_of_.size() ? group_of_[a.value()] : 0;
  uint32_t gb = b.value() < group_of_.size() ? group_of_[b.value()] : 0;
  return ga != 0 && ga == gb;
}

ClusterState::ClusterState(const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes,
                           TrustGroups trust)
    : catalogue_(&catalogue), nodes_(std::move(nodes)), trust_(std::move(trust)) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    initNode(i);
  }
}

void ClusterState::initNode(size_t i) {
  const model::Node& n = nodes_[i];
  assert(model::validateNode(n).isOk());
  NodeState& s = node_state_.emplace_back();
  version_.push_back(1);
  down_.push_back(0);
  cordoned_.push_back(0);
  dedicated_.push_back(-1);
  s.free_cpu_milli = n.cpu.value();
  s.free_memory_mib = n.memory.value();
  s.gpu_begin = static_cast<uint32_t>(gpus_.size());
  s.gpu_count = static_cast<uint16_t>(n.gpus.size());
  s.idle_gpus = s.gpu_count;
  s.free_gpu_milli = 1000LL * s.gpu_count;
  total_cpu_milli_ += n.cpu.value();
  if (!n.gpus.empty()) {
    s.model = n.gpus[0].model;
  }
  for (const model::GpuDevice& d : n.gpus) {
    s.mixed_models |= d.model != s.model;
    GpuState g;
    g.model = d.model;
    g.memory = d.memory;
    g.mig_mode = d.mig;
    g.free_memory_mib = d.memory.value();
    gpus_.push_back(std::move(g));
  }
}

NodeIndex ClusterState::addNode(model::Node node) {
  const auto n = static_cast<NodeIndex>(nodes_.size());
  nodes_.push_back(std::move(node));
  initNode(n);
  down_[n] = 1;
  touch(n);
  return n;
}

void ClusterState::setCordoned(NodeIndex n, bool cordoned) {
  if ((cordoned_[n] != 0) != cordoned) {
    cordoned_[n] = cordoned ? 1 : 0;
    touch(n);
  }
}

void ClusterState::setDedicated(NodeIndex n, std::optional<model::TenantId> tenant) {
  const int64_t v = tenant ? static_cast<int64_t>(tenant->value()) : -1;
  if (dedicated_[n] != v) {
    if (dedicated_[n] >= 0) {
      auto it = pool_nodes_.find(static_cast<uint32_t>(dedicated_[n]));
      if (--it->second == 0) {
        pool_nodes_.erase(it);
      }
    }
    if (v >= 0) {
      ++pool_nodes_[static_cast<uint32_t>(v)];
    }
    dedicated_[n] = v;
    touch(n);
  }
}

void ClusterState::setTrustGroup(model::TenantId tenant, uint32_t group) {
  trust_.setGroup(tenant, group);
  for (NodeIndex n = 0; n < nodes_.size(); ++n) {
    touch(n);
  }
}

void ClusterState::setCpuPerFreeGpu(int64_t milli_cpu) {
  cpu_per_free_gpu_ = std::max<int64_t>(0, milli_cpu);
  for (NodeIndex n = 0; n < nodes_.size(); ++n) {
    touch(n);
  }
}

void ClusterState::setMigMode(NodeIndex n, int gpu, model::MigMode mode) {
  GpuState& g = gpus_[node_state_[n].gpu_begin + static_cast<uint32_t>(gpu)];
  if (g.mig_mode != mode) {
    g.mig_mode = mode;
    nodes_[n].gpus[static_cast<size_t>(gpu)].mig = mode;
    touch(n);
  }
}

void ClusterState::setMigIdle(NodeIndex n, int gpu, std::vector<model::MigInstance> idle) {
  GpuState& g = gpus_[node_state_[n].gpu_begin + static_cast<uint32_t>(gpu)];
  const model::GpuModelInfo& info = catalogue_->model(g.model);
  std::erase_if(idle, [&](const model::MigInstance& i) {
    if (i.profile < 0 || static_cast<size_t>(i.profile) >= info.mig_profiles.size()) {
      return true;
    }
    const std::vector<int>& starts = info.mig_profiles[static_cast<size_t>(i.profile)].starts;
    return std::find(starts.begin(), starts.end(), i.start) == starts.end() ||
           (g.mig.used_slices & model::migSlices(info, i.profile, i.start)) != 0;
  });
  std::sort(idle.begin(), idle.end());
  if (g.mig_idle != idle) {
    g.mig_idle = std::move(idle);
    touch(n);
  }
}

void ClusterState::setUp(NodeIndex n, bool up) {
  if (this->up(n) != up) {
    down_[n] = up ? 0 : 1;
    touch(n);  // Caches see the change like any other.
  }
}

void ClusterState::setRemoved(NodeIndex n) {
  if (down_[n] != 2) {
    down_[n] = 2;
    touch(n);
  }
}

std::optional<std::span<const NodeIndex>> ClusterState::changesSince(uint64_t seq) const {
  assert(seq <= journalEnd());
  if (seq < journal_begin_) {
    return std::nullopt;
  }
  return std::span<const NodeIndex>(journal_).subspan(seq - journal_begin_);
}

void ClusterState::touch(NodeIndex n) {
  ++version_[n];
  if (journal_.size() >= journalLimit()) {
    // Dropping the older half keeps appends amortised O(1).
    const size_t drop = journal_.size() / 2;
    journal_.erase(journal_.begin(), journal_.begin() + static_cast<std::ptrdiff_t>(drop));
    journal_begin_ += drop;
  }
  journal_.push_back(n);
}

int64_t ClusterState::gpuMemoryFor(const model::TaskRequest& req, const GpuState& gpu) {
  if (req.gpu_memory.value() > 0) {
    return req.gpu_memory.value();
  }
  return gpu.memory.value() * req.gpu_milli.value() / 1000;
}

namespace {

void addTenant(GpuState& g, model::TenantId t) {
  for (auto& [tenant, count] : g.tenants) {
    if (tenant == t) {
      ++count;
      return;
    }
  }
  g.tenants.emplace_back(t, 1);
}

void removeTenant(GpuState& g, model::TenantId t) {
  for (size_t i = 0; i < g.tenants.size(); ++i) {
    if (g.tenants[i].first == t) {
      if (--g.tenants[i].second == 0) {
        g.tenants.erase(g.tenants.begin() + static_cast<std::ptrdiff_t>(i));
      }
      return;
    }
  }
  assert(false && "tenant not on GPU");
}

}  // namespace

Assignment ClusterState::apply(const model::TaskRequest& req, const Placement& p) {
  NodeState& ns = node_state_[p.node];
  assert(ns.free_cpu_milli >= req.cpu.value() && ns.free_memory_mib >= req.memory.value());
  Assignment a;
  a.placement = p;
  a.tenant = req.tenant;
  a.cpu_milli = req.cpu.value();
  a.memory_mib = req.memory.value();
  a.isolation = req.isolation;
  a.whole = !req.isMig() && req.gpu_count > 0 && req.gpu_milli >= core::kWholeGpu;
  ns.free_cpu_milli -= a.cpu_milli;
  ns.free_memory_mib -= a.memory_mib;
  used_cpu_milli_ += a.cpu_milli;
  ++ns.tasks;

  for (uint64_t mask = p.gpus; mask != 0; mask &= mask - 1) {
    const int idx = std::countr_zero(mask);
    assert(idx < ns.gpu_count);
    GpuState& g = gpus_[ns.gpu_begin + idx];
    if (g.idle()) {
      --ns.idle_gpus;
    }
    int32_t milli = 0;
    int64_t mem = 0;
    if (req.isMig()) {
      const model::GpuModelInfo& info = catalogue_->model(g.model);
      assert(p.mig_profile >= 0 && model::migSlotFree(info, g.mig, p.mig_profile, p.mig_start));
      const model::MigProfile& prof = info.mig_profiles[p.mig_profile];
      model::addMigInstance(info, g.mig, p.mig_profile, p.mig_start);
      // The instance is one left idle (reused) or new: then the idle ones in its way go.
      const unsigned slices = model::migSlices(info, p.mig_profile, p.mig_start);
      std::erase_if(g.mig_idle, [&](const model::MigInstance& i) {
        return (model::migSlices(info, i.profile, i.start) & slices) != 0;
      });
      g.mode = GpuMode::kMig;
      milli = static_cast<int32_t>(prof.computeShare().value());
      mem = prof.memory.value();
    } else if (a.whole) {
      assert(g.idle());
      g.mig_idle.clear();  // Out of MIG use: its layout goes.
      milli = g.free_milli;
      mem = g.free_memory_mib;
      g.mode = GpuMode::kExclusive;
    } else {
      milli = static_cast<int32_t>(req.gpu_milli.value());
      mem = gpuMemoryFor(req, g);
      g.mig_idle.clear();
      assert(g.free_milli >= milli);
      g.mode = GpuMode::kShared;
      g.shared_isolation = req.isolation;
    }
    g.free_milli -= milli;
    g.free_memory_mib -= mem;
    ++g.tasks;
    addTenant(g, req.tenant);
    ns.free_gpu_milli -= milli;
    used_gpu_milli_ += milli;
    a.milli_per_gpu = milli;
    a.gpu_memory_per_gpu = mem;
  }
  touch(p.node);
  return a;
}

void ClusterState::release(const Assignment& a) {
  const Placement& p = a.placement;
  NodeState& ns = node_state_[p.node];
  ns.free_cpu_milli += a.cpu_milli;
  ns.free_memory_mib += a.memory_mib;
  used_cpu_milli_ -= a.cpu_milli;
  --ns.tasks;
  for (uint64_t mask = p.gpus; mask != 0; mask &= mask - 1) {
    GpuState& g = gpus_[ns.gpu_begin + std::countr_zero(mask)];
    g.free_milli += a.milli_per_gpu;
    g.free_memory_mib += a.gpu_memory_per_gpu;
    --g.tasks;
    removeTenant(g, a.tenant);
    if (g.mode == GpuMode::kMig) {
      model::removeMigInstance(catalogue_->model(g.model), g.mig, p.mig_profile, p.mig_start);
      // The instance stays, idle, until a layout needs its slices.
      const model::MigInstance left{p.mig_profile, p.mig_start};
      g.mig_idle.insert(std::lower_bound(g.mig_idle.begin(), g.mig_idle.end(), left), left);
    }
    if (g.idle()) {
      ++ns.idle_gpus;
      g.mode = GpuMode::kExclusive;  // An empty GPU can be given any mode again.
    }
    ns.free_gpu_milli += a.milli_per_gpu;
    used_gpu_milli_ -= a.milli_per_gpu;
  }
  touch(p.node);
}

}  // namespace tessera::sched
