// The placer: runs the filters and the policy's score over the nodes and picks the best.
//
//   Placer placer(state, *policy, node_rank);
//   Placer::Decision d = placer.place(request);
//   if (!d.placed) std::cout << d.explain();   // "0/1213 nodes fit: 1200 insufficient CPU, ..."
//
// Ties between equal best scores go to the node with the smallest rank (`node_rank`), a fixed
// order chosen by the caller (the simulator draws it from the seed, as the FGD artifact does);
// so a tie is a first fit in that order, not a coin flip per decision.
//
// Per request shape ("class") the placer caches each node's filter verdict and score, stamped
// with the node's version, and keeps an index over that cache:
//   - how many nodes each filter rejects (`count`), so `Decision::rejected` needs no scan;
//   - a tournament tree over the nodes in tie-break order (rank, then index): each leaf holds
//     its node if the node fits, each inner entry the better of its two children (higher
//     score; on equal scores the left one, i.e. the smaller rank), so the root is the best
//     feasible node.
// A decision first brings the class up to date: it rescores only the nodes that the cluster
// state's change journal lists since the class last looked (each a leaf update, O(log nodes)),
// or every node when the class is new or so far behind that the journal has dropped its
// entries. Then the answer is the root. A placement changes one node, so with warm classes a
// decision costs O(changes x log nodes), not a pass over every node.
//
// Preferences (gangs, reservations) are one level per node; callers also pass `marked`, the
// nodes whose level is not 0, so the index need not read the whole span: the best feasible
// marked node with a level in 1..254 wins if there is one; otherwise the root wins, after
// forbidden nodes that outrank it are taken out of the tree for the query and put back.
//
// A class is the request's resources, models, MIG profile and node selector, and its tenant
// only where the tenant changes the answer: a GPU share (the trust rule) or a tenant with a
// dedicated pool. Every other tenant's requests of one shape share a class.
//
// A new class's first decision is a pass over the nodes that keeps nothing (many shapes come
// once: a one-off task, a new tenant's first). It scores each distinct node *state* once, not
// each node, when the policy's scores depend only on the state (`Policy::scoresByState()`):
// nodes are interned by everything the resource filters and the score read, and a cluster's
// nodes are mostly alike (idle ones of a model, full ones). The second decision builds the
// cache and index the same way. The node rules (down, cordon, pool, selector) are checked per
// node.
//
// The classes are bounded: a long-running server sees request shapes without end. Past a
// memory budget (`setCacheBudget`, 512 MiB by default; an indexed class costs about 24 bytes
// per node plus 8 per tree leaf) the least recently used class goes; if it is needed again it
// is built again, cold. Class ids are never reused.
//
// Policies whose scores are not a function of the node's state (`Policy::cacheable()` false,
// e.g. "random") and calls with a preference span but no `marked` use the full scan instead:
// every node's version compared, stale ones rescored. Both paths give identical decisions.
// Single-threaded, like `ClusterState`.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/task.h"
#include "sched/cluster_state.h"
#include "sched/filter.h"
#include "sched/policy.h"

namespace tessera::sched {

class Placer {
 public:
  static constexpr uint8_t kForbidden = 255;

  struct Decision {
    bool placed = false;
    Placement placement;
    Assignment assignment;  // Set by `place` when placed.
    // How many nodes each filter rejected (index = FilterReason); for explanations.
    std::array<uint32_t, kFilterReasonCount> rejected{};
    uint32_t feasible = 0;

    // A one-line explanation of a failure: which filters rejected how many nodes.
    std::string explain(size_t node_count) const;
  };

  // `node_rank[i]` is node i's tie-break rank; empty means index order. `state` and `policy`
  // must outlive the placer.
  Placer(ClusterState& state, Policy& policy, std::vector<uint32_t> node_rank = {});

  // Chooses a placement for `req` without changing the state. With `preference` (one level per
  // node, empty = none), a feasible node of a higher level wins over any of a lower level; the
  // score decides within a level; level `kForbidden` excludes the node (counted as
  // `FilterReason::kReserved`). Gangs use it to stay on one node or NVLink domain, reservations
  // to keep nodes for a waiting gang. `marked` lists every node whose level is not 0 (repeats
  // allowed; a node of level 0 in it is ignored); without it a non-empty `preference` costs a
  // full scan. Precondition: `preference` is empty or has one entry per node.
  Decision decide(const model::TaskRequest& req, std::span<const uint8_t> preference = {},
                  std::span<const NodeIndex> marked = {});
  // Chooses and applies it.
  Decision place(const model::TaskRequest& req, std::span<const uint8_t> preference = {},
                 std::span<const NodeIndex> marked = {});
  // Applies a placement chosen earlier (to restore a released task exactly), telling the policy.
  Assignment applyAt(const model::TaskRequest& req, const Placement& p);
  // Undoes a `place` or `applyAt`.
  void release(const model::TaskRequest& req, const Assignment& a);
  // Nodes were added to the state (ClusterState::addNode): they rank after every earlier node in
  // ties, and every class's cache is taken again (the policy's too).
  void nodesAdded();
  // An integer naming the request's shape: requests with equal ids are interchangeable. A shape
  // whose class was dropped (see setCacheBudget) gets a new id when it comes back; an id is
  // never given to another shape.
  uint32_t classId(const model::TaskRequest& req) { return classFor(req).id; }
  // Appends to `out` everything of `req` but its tenant that the filters and scores read: two
  // requests of one tenant with equal keys are interchangeable.
  static void appendShapeKey(const model::TaskRequest& req, std::string& out);

  // At most `bytes` for the classes' caches and indexes (at least one class is always kept).
  static constexpr size_t kDefaultCacheBudget = size_t{512} << 20;
  void setCacheBudget(size_t bytes);
  // Classes held now, and the bytes their caches and indexes take.
  size_t classCount() const { return classes_.size(); }
  size_t cacheBytes() const;
  // Distinct node states interned so far (see the top of this header), stale ones included.
  size_t stateCount() const { return state_ids_.size(); }

 private:
  struct CacheEntry {
    uint32_t version = 0;  // Node version the entry was computed for; 0 = never.
    FilterReason reason = FilterReason::kNone;
    int16_t mig_start = -1;
    int64_t score = 0;
    uint64_t gpus = 0;
  };
  struct RequestClass {
    uint32_t id = 0;
    ResolvedRequest resolved;
    std::vector<CacheEntry> cache;  // By node.
    // The index (see the top of this header). Built on the class's first indexed decision;
    // cacheable policies only.
    bool indexed = false;
    uint64_t journal_seen = 0;  // `ClusterState::journalEnd()` when the class last caught up.
    std::array<uint32_t, kFilterReasonCount> count{};  // Nodes by cached reason; [kNone] fit.
    std::vector<NodeIndex> tree;  // [1] is the root, [leaves_ + position] the leaves.
    uint64_t last_used = 0;       // `use_clock_` at its last lookup.
    bool scanned = false;         // Its first decision was made (`scanByState`).
  };

  // The tenant of a class that tenants without a pool share: one no node is dedicated to (ids
  // are handed out from 1 upwards).
  static constexpr model::TenantId kNoPoolTenant{UINT32_MAX};

  RequestClass& classFor(const model::TaskRequest& req);
  // What a class holds, in bytes; and what its cache and index over every node add.
  size_t classBytes(const RequestClass& cls) const;
  size_t indexBytes() const;
  // Drops least recently used classes, never `keep`, until `incoming` more bytes fit the budget
  // (or only `keep` is left).
  void makeRoom(size_t incoming, const RequestClass* keep);
  Decision decideFor(RequestClass& cls, std::span<const uint8_t> preference,
                     std::span<const NodeIndex> marked);
  // The full scan: every node's version compared, the best found by walking them all.
  Decision scan(RequestClass& cls, std::span<const uint8_t> preference);
  // The indexed decision. Precondition: the policy is cacheable; `marked` as for `decide`.
  Decision decideIndexed(RequestClass& cls, std::span<const uint8_t> preference,
                         std::span<const NodeIndex> marked);
  // Fills in the placement on `node` with its chosen GPUs (and MIG slot).
  void choose(const RequestClass& cls, NodeIndex node, uint64_t gpus, int mig_start,
              Decision& d) const;

  // Rescores `node` for the class if its cache entry is stale (or always, for policies that
  // are not cacheable), keeping the index in step when the class has one.
  void refresh(RequestClass& cls, NodeIndex node);
  // Brings the class's index up to date with the state, building it on first use.
  void catchUp(RequestClass& cls);
  void rebuildIndex(RequestClass& cls);
  // The interned id of `node`'s state (see `state_ids_`), computed again when its version moved.
  uint32_t stateId(NodeIndex node);
  // Starts a build: verdicts found before are forgotten.
  void newBuild();
  // What `rebuildIndex` found for one node state in this build: `stamp == build_epoch_` when set.
  struct StateVerdict {
    uint32_t stamp = 0;
    FilterReason reason = FilterReason::kNone;
    int16_t mig_start = -1;
    int64_t score = 0;
    uint64_t gpus = 0;
  };
  // The resource filters' verdict and the score for `node`'s state in this build, computed on
  // first sight of the state. Valid until the next call.
  const StateVerdict& verdictFor(const RequestClass& cls, NodeIndex node);
  // A class's first decision (`by_state_`): as `scan`, without filling the class's cache.
  Decision scanByState(RequestClass& cls, std::span<const uint8_t> preference);
  // Sets the leaf of `node` to `value` (the node itself or kNoNode) and updates its ancestors.
  void setLeaf(RequestClass& cls, NodeIndex node, NodeIndex value);
  // True when node `a` beats node `b` at the same preference level: higher score, then
  // earlier in tie-break order.
  bool beats(const RequestClass& cls, NodeIndex a, NodeIndex b) const {
    const int64_t sa = cls.cache[a].score;
    const int64_t sb = cls.cache[b].score;
    return sa > sb || (sa == sb && position_[a] < position_[b]);
  }
  // In a scan: whether node `a` at preference `level_a` with `score_a` beats the best so far, `b`:
  // the higher level, then the higher score, then the earlier in tie-break order.
  bool scanBeats(int level_a, int64_t score_a, NodeIndex a, int level_b, int64_t score_b,
                 NodeIndex b) const {
    if (level_a != level_b) {
      return level_a > level_b;
    }
    return score_a > score_b || (score_a == score_b && position_[a] < position_[b]);
  }
  // The better of two tree entries, either of which may be kNoNode.
  NodeIndex winner(const RequestClass& cls, NodeIndex a, NodeIndex b) const {
    if (a == kNoNode) {
      return b;
    }
    return b != kNoNode && beats(cls, b, a) ? b : a;
  }

  static constexpr NodeIndex kNoNode = UINT32_MAX;

  ClusterState& state_;
  Policy& policy_;
  const bool cacheable_;  // `policy_.cacheable()`, a fixed property of the policy.
  // A new class is built by scoring each distinct node state once (`policy_.scoresByState()`):
  // nodes of a cluster are mostly alike (idle ones of a model, full ones), so a class costs a
  // lookup per node and a score per state. Each node's state is interned as an id; the ids are
  // dropped and taken again when the table outgrows the nodes (old states pile up).
  const bool by_state_;
  std::unordered_map<std::string, uint32_t> state_ids_;
  struct NodeStateId {
    uint32_t version = 0;  // The node's version when `id` was taken; 0: never.
    uint32_t id = 0;
  };
  std::vector<NodeStateId> state_id_;  // By node.
  std::string state_key_;
  std::vector<StateVerdict> verdicts_;  // By state id.
  uint32_t build_epoch_ = 0;
  // By node: its place in tie-break order (rank, then index), so equal ranks tie as before.
  std::vector<uint32_t> position_;
  size_t leaves_ = 1;  // Leaves of every class's tree: a power of two >= the node count.
  // Scratch for indexed decisions: `mark_stamp_[n] == mark_epoch_` when node n was seen in
  // this decision's `marked`; `masked_` lists the forbidden nodes taken out of the tree.
  std::vector<uint32_t> mark_stamp_;
  uint32_t mark_epoch_ = 0;
  std::vector<NodeIndex> masked_;
  std::unordered_map<std::string, std::unique_ptr<RequestClass>> classes_;
  std::string key_buffer_;
  uint32_t next_class_id_ = 0;
  uint64_t use_clock_ = 0;
  size_t cache_budget_ = kDefaultCacheBudget;
};

}  // namespace tessera::sched
