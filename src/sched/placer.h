// The placer: runs the filters and the policy's score over every node and picks the best.
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
// with the node's version: placing a task invalidates only the node it touched, so a decision
// costs one version compare per unchanged node. Single-threaded, like `ClusterState`.
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
  // score decides within a level; level `kForbidden` excludes the node. Gangs use it to stay on
  // one node or NVLink domain, reservations to keep nodes for a waiting gang.
  Decision decide(const model::TaskRequest& req, std::span<const uint8_t> preference = {});
  // Chooses and applies it.
  Decision place(const model::TaskRequest& req, std::span<const uint8_t> preference = {});
  // Applies a placement chosen earlier (to restore a released task exactly), telling the policy.
  Assignment applyAt(const model::TaskRequest& req, const Placement& p);
  // Undoes a `place` or `applyAt`.
  void release(const model::TaskRequest& req, const Assignment& a);
  // A small integer naming the request's shape: requests with equal ids are interchangeable.
  uint32_t classId(const model::TaskRequest& req) { return classFor(req).id; }

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
  };

  RequestClass& classFor(const model::TaskRequest& req);
  Decision decideFor(RequestClass& cls, std::span<const uint8_t> preference);

  ClusterState& state_;
  Policy& policy_;
  std::vector<uint32_t> rank_;
  std::unordered_map<std::string, std::unique_ptr<RequestClass>> classes_;
  std::string key_buffer_;
};

}  // namespace tessera::sched
