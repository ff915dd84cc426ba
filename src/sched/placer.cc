#include "sched/placer.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <optional>

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
    : state_(state), policy_(policy), cacheable_(policy.cacheable()) {
  const size_t n = state_.nodeCount();
  if (node_rank.size() != n) {
    node_rank.resize(n);
    std::iota(node_rank.begin(), node_rank.end(), 0);
  }
  std::vector<NodeIndex> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](NodeIndex a, NodeIndex b) {
    return node_rank[a] != node_rank[b] ? node_rank[a] < node_rank[b] : a < b;
  });
  position_.resize(n);
  for (size_t p = 0; p < n; ++p) {
    position_[order[p]] = static_cast<uint32_t>(p);
  }
  leaves_ = std::bit_ceil(std::max<size_t>(n, 1));
  mark_stamp_.assign(n, 0);
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
  for (const auto& [key, value] : req.node_selector) {  // Labels cannot hold '=' or ','.
    fmt::format_to(std::back_inserter(key_buffer_), "|{}={}", key, value);
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

void Placer::nodesAdded() {
  const size_t n = state_.nodeCount();
  for (size_t i = position_.size(); i < n; ++i) {
    position_.push_back(static_cast<uint32_t>(i));  // After every node there was: last in ties.
  }
  leaves_ = std::bit_ceil(std::max<size_t>(n, 1));
  mark_stamp_.resize(n, 0);
  policy_.nodesAdded(state_);
  for (auto& [key, cls] : classes_) {
    // The policy's normalisers may have changed with the new nodes: every score is taken again.
    cls->resolved = resolveRequest(state_, cls->resolved.req);
    cls->cache.assign(n, CacheEntry{});
    cls->indexed = false;
    cls->tree.clear();
  }
}

Placer::Decision Placer::decide(const model::TaskRequest& req, std::span<const uint8_t> preference,
                                std::span<const NodeIndex> marked) {
  return decideFor(classFor(req), preference, marked);
}

Placer::Decision Placer::place(const model::TaskRequest& req, std::span<const uint8_t> preference,
                               std::span<const NodeIndex> marked) {
  RequestClass& cls = classFor(req);
  Decision d = decideFor(cls, preference, marked);
  if (d.placed) {
    d.assignment = state_.apply(req, d.placement);
    policy_.onApplied(state_, cls.resolved, d.placement);
  }
  return d;
}

Placer::Decision Placer::decideFor(RequestClass& cls, std::span<const uint8_t> preference,
                                   std::span<const NodeIndex> marked) {
  if (!cacheable_ || (!preference.empty() && marked.empty())) {
    return scan(cls, preference);
  }
  return decideIndexed(cls, preference, marked);
}

void Placer::refresh(RequestClass& cls, NodeIndex node) {
  CacheEntry& e = cls.cache[node];
  const uint32_t version = state_.version(node);
  if (cacheable_ && e.version == version) {
    return;
  }
  const FilterReason old_reason = e.reason;
  NodeFit fit = checkNode(state_, node, cls.resolved);
  e.version = version;
  e.reason = fit.reason;
  if (fit.fits()) {
    Choice c = policy_.score(state_, node, cls.resolved, fit.eligible);
    e.score = c.score;
    e.gpus = c.gpus;
    e.mig_start = static_cast<int16_t>(c.mig_start);
  }
  if (cls.indexed) {
    --cls.count[static_cast<size_t>(old_reason)];
    ++cls.count[static_cast<size_t>(e.reason)];
    setLeaf(cls, node, fit.fits() ? node : kNoNode);
  }
}

void Placer::setLeaf(RequestClass& cls, NodeIndex node, NodeIndex value) {
  std::vector<NodeIndex>& t = cls.tree;
  size_t i = leaves_ + position_[node];
  t[i] = value;
  for (i /= 2; i >= 1; i /= 2) {
    t[i] = winner(cls, t[2 * i], t[2 * i + 1]);
  }
}

void Placer::rebuildIndex(RequestClass& cls) {
  cls.indexed = false;  // So `refresh` leaves the index alone while it is rebuilt.
  const auto n = static_cast<NodeIndex>(state_.nodeCount());
  cls.count.fill(0);
  cls.tree.assign(2 * leaves_, kNoNode);
  for (NodeIndex i = 0; i < n; ++i) {
    refresh(cls, i);
    const FilterReason reason = cls.cache[i].reason;
    ++cls.count[static_cast<size_t>(reason)];
    if (reason == FilterReason::kNone) {
      cls.tree[leaves_ + position_[i]] = i;
    }
  }
  std::vector<NodeIndex>& t = cls.tree;
  for (size_t i = leaves_ - 1; i >= 1; --i) {
    t[i] = winner(cls, t[2 * i], t[2 * i + 1]);
  }
  cls.indexed = true;
}

void Placer::catchUp(RequestClass& cls) {
  const uint64_t end = state_.journalEnd();
  if (cls.indexed && cls.journal_seen == end) {
    return;
  }
  std::optional<std::span<const NodeIndex>> changed;
  if (cls.indexed) {
    changed = state_.changesSince(cls.journal_seen);
  }
  if (changed) {
    for (NodeIndex n : *changed) {
      refresh(cls, n);  // A no-op for repeats: the version already matches.
    }
  } else {
    rebuildIndex(cls);
  }
  cls.journal_seen = end;
}

Placer::Decision Placer::decideIndexed(RequestClass& cls, std::span<const uint8_t> preference,
                                       std::span<const NodeIndex> marked) {
  catchUp(cls);
  Decision d;
  for (size_t r = 1; r < kFilterReasonCount; ++r) {
    d.rejected[r] = cls.count[r];
  }
  // The best preferred node, and how many distinct feasible nodes are forbidden.
  NodeIndex best = kNoNode;
  int best_level = 0;
  uint32_t forbidden = 0;
  if (!preference.empty()) {
    if (++mark_epoch_ == 0) {  // Wrapped: stamps from 2^32 decisions ago would look current.
      std::fill(mark_stamp_.begin(), mark_stamp_.end(), 0);
      mark_epoch_ = 1;
    }
    for (NodeIndex m : marked) {
      const int level = preference[m];
      if (level == 0 || mark_stamp_[m] == mark_epoch_) {
        continue;
      }
      mark_stamp_[m] = mark_epoch_;
      if (cls.cache[m].reason != FilterReason::kNone) {
        continue;
      }
      if (level == kForbidden) {
        ++forbidden;
      } else if (best == kNoNode || level > best_level ||
                 (level == best_level && beats(cls, m, best))) {
        best = m;
        best_level = level;
      }
    }
  }
  d.rejected[static_cast<size_t>(FilterReason::kReserved)] += forbidden;
  d.feasible = cls.count[static_cast<size_t>(FilterReason::kNone)] - forbidden;
  if (best == kNoNode) {
    // No preferred node fits: every feasible node is at level 0 or forbidden. The root is the
    // best; while it is forbidden, take it out for this query and look again.
    best = cls.tree[1];
    if (!preference.empty()) {
      masked_.clear();
      while (best != kNoNode && preference[best] == kForbidden) {
        setLeaf(cls, best, kNoNode);
        masked_.push_back(best);
        best = cls.tree[1];
      }
      for (NodeIndex m : masked_) {
        setLeaf(cls, m, m);  // It was the root, so it fits.
      }
    }
  }
  if (best != kNoNode) {
    choose(cls, best, d);
  }
  return d;
}

Placer::Decision Placer::scan(RequestClass& cls, std::span<const uint8_t> preference) {
  Decision d;
  int64_t best_score = 0;
  int best_level = 0;
  NodeIndex best = 0;
  const auto n = static_cast<NodeIndex>(state_.nodeCount());
  for (NodeIndex i = 0; i < n; ++i) {
    refresh(cls, i);
    const CacheEntry& e = cls.cache[i];
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
         (e.score > best_score || (e.score == best_score && position_[i] < position_[best])))) {
      best_level = level;
      best_score = e.score;
      best = i;
    }
    ++d.feasible;
  }
  if (d.feasible > 0) {
    choose(cls, best, d);
  }
  return d;
}

void Placer::choose(const RequestClass& cls, NodeIndex node, Decision& d) const {
  const CacheEntry& e = cls.cache[node];
  d.placed = true;
  d.placement.node = node;
  d.placement.gpus = e.gpus;
  d.placement.mig_start = e.mig_start;
  if (cls.resolved.mig && e.gpus != 0) {
    const GpuState& g = state_.gpus(node)[std::countr_zero(e.gpus)];
    d.placement.mig_profile = cls.resolved.mig_profile[g.model.value()];
  }
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
