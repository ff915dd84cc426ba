#include "sched/placer.h"

#include <fmt/format.h>

#include <numeric>

namespace tessera::sched {

std::string Placer::Decision::explain(size_t node_count) const {
  if (placed) {
    return fmt::format("placed on node {}", placement.node);
  }
  std::string out = fmt::format("0/{} nodes fit", node_count);
  const char* sep = ": ";
  for (size_t i = 1; i < kFilterReasonCount; ++i) {
    if (rejected[i] > 0) {
      out +=
          fmt::format("{}{} {}", sep, rejected[i], filterReasonName(static_cast<FilterReason>(i)));
      sep = ", ";
    }
  }
  return out;
}

Placer::Placer(ClusterState& state, Policy& policy, std::vector<uint32_t> node_rank)
    : state_(state), policy_(policy), rank_(std::move(node_rank)) {
  if (rank_.size() != state_.nodeCount()) {
    rank_.resize(state_.nodeCount());
    std::iota(rank_.begin(), rank_.end(), 0);
  }
}

Placer::RequestClass& Placer::classFor(const model::TaskRequest& req) {
  // Everything the filters and scores read. Requests with equal keys behave identically.
  key_buffer_.clear();
  fmt::format_to(std::back_inserter(key_buffer_), "{},{},{},{},{},{},{},{}|", req.tenant.value(),
                 req.cpu.value(), req.memory.value(), req.gpu_count, req.gpu_milli.value(),
                 req.gpu_memory.value(), static_cast<int>(req.isolation), req.mig_profile);
  for (model::GpuModelId m : req.models) {
    fmt::format_to(std::back_inserter(key_buffer_), "{};", m.value());
  }
  auto it = classes_.find(key_buffer_);
  if (it == classes_.end()) {
    auto cls = std::make_unique<RequestClass>();
    cls->id = static_cast<uint32_t>(classes_.size());
    cls->resolved = resolveRequest(state_, req);
    cls->cache.resize(state_.nodeCount());
    it = classes_.emplace(key_buffer_, std::move(cls)).first;
  }
  return *it->second;
}

Placer::Decision Placer::decide(const model::TaskRequest& req,
                                std::span<const uint8_t> preference) {
  return decideFor(classFor(req), preference);
}

Placer::Decision Placer::decideFor(RequestClass& cls, std::span<const uint8_t> preference) {
  const ResolvedRequest& r = cls.resolved;
  const bool cacheable = policy_.cacheable();
  const std::vector<uint32_t>& versions = state_.versions();
  Decision d;
  int64_t best_score = 0;
  int best_level = 0;
  NodeIndex best = 0;
  const auto n = static_cast<NodeIndex>(state_.nodeCount());
  for (NodeIndex i = 0; i < n; ++i) {
    CacheEntry& e = cls.cache[i];
    if (!cacheable || e.version != versions[i]) {
      NodeFit fit = checkNode(state_, i, r);
      e.version = versions[i];
      e.reason = fit.reason;
      if (fit.fits()) {
        Choice c = policy_.score(state_, i, r, fit.eligible);
        e.score = c.score;
        e.gpus = c.gpus;
        e.mig_start = static_cast<int16_t>(c.mig_start);
      }
    }
    if (e.reason != FilterReason::kNone) {
      ++d.rejected[static_cast<size_t>(e.reason)];
      continue;
    }
    const int level = preference.empty() ? 0 : preference[i];
    if (level == kForbidden) {
      ++d.rejected[static_cast<size_t>(FilterReason::kReserved)];
      continue;
    }
    if (d.feasible == 0 || level > best_level ||
        (level == best_level &&
         (e.score > best_score || (e.score == best_score && rank_[i] < rank_[best])))) {
      best_level = level;
      best_score = e.score;
      best = i;
    }
    ++d.feasible;
  }
  if (d.feasible == 0) {
    return d;
  }
  const CacheEntry& e = cls.cache[best];
  d.placed = true;
  d.placement.node = best;
  d.placement.gpus = e.gpus;
  d.placement.mig_start = e.mig_start;
  if (r.mig && e.gpus != 0) {
    const GpuState& g = state_.gpus(best)[std::countr_zero(e.gpus)];
    d.placement.mig_profile = r.mig_profile[g.model.value()];
  }
  return d;
}

Placer::Decision Placer::place(const model::TaskRequest& req, std::span<const uint8_t> preference) {
  RequestClass& cls = classFor(req);
  Decision d = decideFor(cls, preference);
  if (d.placed) {
    d.assignment = state_.apply(req, d.placement);
    policy_.onApplied(state_, cls.resolved, d.placement);
  }
  return d;
}

Assignment Placer::applyAt(const model::TaskRequest& req, const Placement& p) {
  Assignment a = state_.apply(req, p);
  policy_.onApplied(state_, classFor(req).resolved, p);
  return a;
}

void Placer::release(const model::TaskRequest& req, const Assignment& a) {
  state_.release(a);
  policy_.onReleased(state_, classFor(req).resolved, a.placement);
}

}  // namespace tessera::sched
