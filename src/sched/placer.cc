#include "sched/placer.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <optional>
#include <type_traits>

namespace tessera::sched {

std::string Placer::Decision::explain(size_t node_count) const {
  if (placed) {
    return fmt::format("placed on node {}", placement.node);
  }
  // Removed nodes are no nodes: neither counted nor a reason.
  const size_t removed = rejected[static_cast<size_t>(FilterReason::kRemoved)];
  node_count -= std::min(node_count, removed);
  if (node_count == 0) {
    return removed > 0 ? "no node is in service (every node was removed)"
                       : "no node is in service yet (none is declared, none has joined)";
  }
  std::string out = fmt::format("0/{} nodes fit", node_count);
  const char* sep = ": ";
  for (size_t i = 1; i < kFilterReasonCount; ++i) {
    if (rejected[i] > 0 && i != static_cast<size_t>(FilterReason::kRemoved)) {
      out += fmt::format("{}{} {}", sep, rejected[i],
                         filterReasonCounted(static_cast<FilterReason>(i), rejected[i]));
      sep = ", ";
    }
  }
  return out;
}

Placer::Placer(ClusterState& state, Policy& policy, std::vector<uint32_t> node_rank)
    : state_(state),
      policy_(policy),
      cacheable_(policy.cacheable()),
      by_state_(cacheable_ && policy.scoresByState()) {
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
  state_id_.assign(n, NodeStateId{});
}

void Placer::appendShapeKey(const model::TaskRequest& req, std::string& out) {
  fmt::format_to(std::back_inserter(out), ",{},{},{},{},{},{},{}|", req.cpu.value(),
                 req.memory.value(), req.gpu_count, req.gpu_milli.value(), req.gpu_memory.value(),
                 static_cast<int>(req.isolation), req.mig_profile);
  for (model::GpuModelId m : req.models) {
    fmt::format_to(std::back_inserter(out), "{};", m.value());
  }
  for (const auto& [key, value] : req.node_selector) {  // Labels cannot hold '=' or ','.
    fmt::format_to(std::back_inserter(out), "|{}={}", key, value);
  }
}

Placer::RequestClass& Placer::classFor(const model::TaskRequest& req) {
  // Everything the filters and scores read. Requests with equal keys behave identically.
  // The tenant changes what a request may use in two ways only: a pool dedicated to it, and the
  // trust rule for a GPU share. Requests of other tenants are alike whoever sends them, so they
  // share one class (with a tenant no node is dedicated to), and a server with many tenants pays
  // the cold scan once per shape, not once per tenant and shape.
  const bool by_tenant = req.isFractional() || state_.hasPool(req.tenant);
  key_buffer_.clear();
  if (by_tenant) {
    fmt::format_to(std::back_inserter(key_buffer_), "{}", req.tenant.value());
  } else {
    key_buffer_.push_back('*');
  }
  appendShapeKey(req, key_buffer_);
  auto it = classes_.find(key_buffer_);
  if (it == classes_.end()) {
    auto cls = std::make_unique<RequestClass>();
    cls->id = next_class_id_++;
    model::TaskRequest as_class = req;
    if (!by_tenant) {
      as_class.tenant = kNoPoolTenant;
    }
    cls->resolved = resolveRequest(state_, as_class);
    if (!by_state_) {
      // (Else on its second decision, `decideFor`.)
      makeRoom(classBytes(*cls) + indexBytes(), nullptr);
      cls->cache.resize(state_.nodeCount());
    } else {
      makeRoom(classBytes(*cls), nullptr);
    }
    it = classes_.emplace(key_buffer_, std::move(cls)).first;
  }
  it->second->last_used = ++use_clock_;
  return *it->second;
}

size_t Placer::classBytes(const RequestClass& cls) const {
  return sizeof(RequestClass) + cls.cache.capacity() * sizeof(CacheEntry) +
         cls.tree.capacity() * sizeof(NodeIndex) + cls.resolved.node_ok.capacity() +
         cls.resolved.model_ok.capacity() + cls.resolved.mig_profile.capacity() * sizeof(int16_t);
}

size_t Placer::indexBytes() const {
  return state_.nodeCount() * sizeof(CacheEntry) +
         (cacheable_ ? 2 * leaves_ * sizeof(NodeIndex) : 0);
}

size_t Placer::cacheBytes() const {
  size_t bytes = 0;
  for (const auto& [key, cls] : classes_) {
    bytes += classBytes(*cls);
  }
  return bytes;
}

void Placer::setCacheBudget(size_t bytes) {
  cache_budget_ = bytes;
  const RequestClass* newest = nullptr;
  for (const auto& [key, cls] : classes_) {
    if (newest == nullptr || cls->last_used > newest->last_used) {
      newest = cls.get();
    }
  }
  makeRoom(0, newest);
}

void Placer::makeRoom(size_t incoming, const RequestClass* keep) {
  size_t held = cacheBytes();
  // Linear searches: this runs when a class is made or indexed, which costs a pass over every
  // node anyway.
  while (held + incoming > cache_budget_) {
    auto oldest = classes_.end();
    for (auto it = classes_.begin(); it != classes_.end(); ++it) {
      if (it->second.get() != keep &&
          (oldest == classes_.end() || it->second->last_used < oldest->second->last_used)) {
        oldest = it;
      }
    }
    if (oldest == classes_.end()) {
      return;
    }
    held -= classBytes(*oldest->second);
    classes_.erase(oldest);
  }
}

void Placer::nodesAdded() {
  const size_t n = state_.nodeCount();
  for (size_t i = position_.size(); i < n; ++i) {
    position_.push_back(static_cast<uint32_t>(i));  // After every node there was: last in ties.
  }
  leaves_ = std::bit_ceil(std::max<size_t>(n, 1));
  mark_stamp_.resize(n, 0);
  state_id_.resize(n, NodeStateId{});
  policy_.nodesAdded(state_);
  for (auto& [key, cls] : classes_) {
    // The policy's normalisers may have changed with the new nodes: every score is taken again.
    cls->resolved = resolveRequest(state_, cls->resolved.req);
    if (!cls->cache.empty()) {
      cls->cache.assign(n, CacheEntry{});
    }
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
  if (by_state_ && cls.cache.empty()) {
    if (!cls.scanned) {
      // Its first decision: one pass over the nodes, a score per node state, nothing kept.
      // Many shapes are asked for once (a new tenant's, a one-off task), so the cache and
      // index wait for the second.
      cls.scanned = true;
      return scanByState(cls, preference);
    }
    makeRoom(indexBytes(), &cls);
    cls.cache.resize(state_.nodeCount());
  }
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

namespace {

template <typename T>
void appendBytes(std::string& out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

uint32_t Placer::stateId(NodeIndex node) {
  const uint32_t version = state_.version(node);
  if (state_id_[node].version == version) {
    return state_id_[node].id;
  }
  if (state_ids_.size() > 2 * state_.nodeCount() + 1024) {
    state_ids_.clear();
    std::fill(state_id_.begin(), state_id_.end(), NodeStateId{});
    verdicts_.clear();
  }
  // Everything the resource filters and a by-state policy read of a node; fields appended
  // whole and in a fixed order, so equal keys mean equal states. Not the node's rules (up,
  // cordon, pool, labels): `rebuildIndex` checks those per node.
  std::string& k = state_key_;
  k.clear();
  const model::Node& spec = state_.node(node);
  const NodeState& ns = state_.nodeState(node);
  appendBytes(k, spec.cpu.value());
  appendBytes(k, spec.memory.value());
  appendBytes(k, ns.free_cpu_milli);
  appendBytes(k, ns.free_memory_mib);
  appendBytes(k, ns.gpu_count);
  appendBytes(k, ns.idle_gpus);
  appendBytes(k, ns.free_gpu_milli);
  appendBytes(k, ns.model.value());
  appendBytes(k, ns.mixed_models);
  for (const GpuState& g : state_.gpus(node)) {
    appendBytes(k, g.model.value());
    appendBytes(k, g.memory.value());
    appendBytes(k, g.free_milli);
    appendBytes(k, g.free_memory_mib);
    appendBytes(k, g.mode);
    appendBytes(k, g.shared_isolation);
    appendBytes(k, g.tasks);
    appendBytes(k, g.mig.used_slices);
    appendBytes(k, g.mig.count);
    appendBytes(k, g.mig_mode);
    appendBytes(k, static_cast<uint32_t>(g.mig_idle.size()));
    for (const model::MigInstance& i : g.mig_idle) {
      appendBytes(k, i.profile);
      appendBytes(k, i.start);
    }
    appendBytes(k, static_cast<uint32_t>(g.tenants.size()));
    for (const auto& [tenant, count] : g.tenants) {
      appendBytes(k, tenant.value());
      appendBytes(k, count);
    }
  }
  const auto [it, fresh] = state_ids_.try_emplace(k, static_cast<uint32_t>(state_ids_.size()));
  state_id_[node] = NodeStateId{version, it->second};
  return it->second;
}

void Placer::newBuild() {
  if (++build_epoch_ == 0) {  // Wrapped: old stamps would look current.
    verdicts_.clear();
    build_epoch_ = 1;
  }
}

const Placer::StateVerdict& Placer::verdictFor(const RequestClass& cls, NodeIndex node) {
  const uint32_t id = stateId(node);
  if (verdicts_.size() <= id) {
    verdicts_.resize(id + 1);
  }
  StateVerdict& v = verdicts_[id];
  if (v.stamp != build_epoch_) {
    const NodeFit fit = checkNodeResources(state_, node, cls.resolved);
    v = StateVerdict{build_epoch_, fit.reason, -1, 0, 0};
    if (fit.fits()) {
      const Choice c = policy_.score(state_, node, cls.resolved, fit.eligible);
      v.score = c.score;
      v.gpus = c.gpus;
      v.mig_start = static_cast<int16_t>(c.mig_start);
    }
  }
  return v;
}

Placer::Decision Placer::scanByState(RequestClass& cls, std::span<const uint8_t> preference) {
  newBuild();
  Decision d;
  StateVerdict best;
  int best_level = 0;
  NodeIndex best_node = 0;
  const auto n = static_cast<NodeIndex>(state_.nodeCount());
  for (NodeIndex i = 0; i < n; ++i) {
    FilterReason reason = checkNodeRules(state_, i, cls.resolved);
    const StateVerdict* v = nullptr;
    if (reason == FilterReason::kNone) {
      v = &verdictFor(cls, i);
      reason = v->reason;
    }
    if (reason != FilterReason::kNone) {
      ++d.rejected[static_cast<size_t>(reason)];
      continue;
    }
    const int level = preference.empty() ? 0 : preference[i];
    if (level == kForbidden) {
      ++d.rejected[static_cast<size_t>(FilterReason::kReserved)];
      continue;
    }
    if (d.feasible == 0 || scanBeats(level, v->score, i, best_level, best.score, best_node)) {
      best_level = level;
      best = *v;
      best_node = i;
    }
    ++d.feasible;
  }
  if (d.feasible > 0) {
    choose(cls, best_node, best.gpus, best.mig_start, d);
  }
  return d;
}

void Placer::rebuildIndex(RequestClass& cls) {
  cls.indexed = false;  // So `refresh` leaves the index alone while it is rebuilt.
  const auto n = static_cast<NodeIndex>(state_.nodeCount());
  cls.count.fill(0);
  cls.tree.assign(2 * leaves_, kNoNode);
  if (by_state_) {
    newBuild();
  }
  for (NodeIndex i = 0; i < n; ++i) {
    if (by_state_ && cls.cache[i].version != state_.version(i)) {
      CacheEntry& e = cls.cache[i];
      e.version = state_.version(i);
      e.reason = checkNodeRules(state_, i, cls.resolved);
      if (e.reason == FilterReason::kNone) {
        const StateVerdict& v = verdictFor(cls, i);
        e.reason = v.reason;
        e.score = v.score;
        e.gpus = v.gpus;
        e.mig_start = v.mig_start;
      }
    } else {
      refresh(cls, i);
    }
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
    choose(cls, best, cls.cache[best].gpus, cls.cache[best].mig_start, d);
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
    if (d.feasible == 0 || scanBeats(level, e.score, i, best_level, best_score, best)) {
      best_level = level;
      best_score = e.score;
      best = i;
    }
    ++d.feasible;
  }
  if (d.feasible > 0) {
    choose(cls, best, cls.cache[best].gpus, cls.cache[best].mig_start, d);
  }
  return d;
}

void Placer::choose(const RequestClass& cls, NodeIndex node, uint64_t gpus, int mig_start,
                    Decision& d) const {
  d.placed = true;
  d.placement.node = node;
  d.placement.gpus = gpus;
  d.placement.mig_start = mig_start;
  if (cls.resolved.mig && gpus != 0) {
    const GpuState& g = state_.gpus(node)[std::countr_zero(gpus)];
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
