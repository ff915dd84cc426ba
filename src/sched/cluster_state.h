// The scheduler's view of the cluster: capacity and what is in use, per node and per GPU.
//
// State is incremental. `apply` and `release` touch only the node and GPUs of one assignment
// and bump that node's version, so per-node caches (fragmentation, scores) know exactly what
// to recompute. Nothing here allocates on the scoring path.
//
// Every version bump is also appended to a change journal, numbered by a sequence that only
// grows, so a cache over many nodes can refresh just the nodes that changed since it last
// looked instead of comparing every node's version:
//
//   uint64_t seen = state.journalEnd();
//   ...                                      // state changes
//   if (auto changed = state.changesSince(seen)) {
//     for (NodeIndex n : *changed) refresh(n);   // Repeats are likely: compare versions.
//   } else {
//     refreshAll();                              // Fell too far behind: entries were trimmed.
//   }
//   seen = state.journalEnd();
//
// Any number of consumers may read the journal; none registers. Memory stays bounded: when the
// journal reaches `journalLimit()` (4 x nodes + 1024) entries, its older half is dropped. A
// consumer whose entries were dropped is more than 2 x nodes changes behind, so rescanning every
// node costs it no more than reading the entries would have.
//
//   ClusterState state(catalogue, nodes, TrustGroups{});
//   Assignment a = state.apply(req, placement);   // after a filter said it fits
//   state.release(a);                              // back to the state before
//
// Single-threaded: one owner (the scheduler) mutates it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/units.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "model/task.h"

namespace tessera::sched {

using NodeIndex = uint32_t;

// How a physical GPU is being shared right now.
enum class GpuMode : uint8_t {
  kExclusive,  // Idle, or held whole by one task.
  kShared,     // Fractional tasks under `shared_isolation` (process = MPS/interposer caps,
               // none = time slicing).
  kMig,        // Partitioned; `mig` holds the occupied slices.
};

std::string_view gpuModeName(GpuMode m);

struct GpuState {
  model::GpuModelId model;
  core::MiB memory{0};          // Capacity.
  int32_t free_milli = 1000;    // Compute share not yet granted.
  int64_t free_memory_mib = 0;  // GPU memory not yet granted.
  GpuMode mode = GpuMode::kExclusive;
  model::Isolation shared_isolation = model::Isolation::kProcess;
  uint16_t tasks = 0;
  model::MigOccupancy mig;
  model::MigMode mig_mode = model::MigMode::kAny;  // Which work it may take (model::MigMode).
  // MIG instances that exist on the GPU with no task in them (left by tasks that ended, or as
  // its agent reports them): a MIG task placed in one of them needs no re-layout; one placed
  // across them destroys them.
  std::vector<model::MigInstance> mig_idle;
  // Tenants with tasks on this GPU and how many tasks each has. Small: usually 0 or 1 entry.
  std::vector<std::pair<model::TenantId, uint16_t>> tenants;

  bool idle() const { return tasks == 0; }
};

struct NodeState {
  int64_t free_cpu_milli = 0;
  int64_t free_memory_mib = 0;
  uint32_t gpu_begin = 0;  // Index of the node's first GPU in `ClusterState::gpus()`.
  uint16_t gpu_count = 0;
  uint16_t idle_gpus = 0;      // GPUs with no task at all.
  int64_t free_gpu_milli = 0;  // Sum of free_milli over the node's GPUs.
  uint32_t tasks = 0;
  model::GpuModelId model;    // Model of the node's GPUs (the first GPU's, if mixed).
  bool mixed_models = false;  // GPUs of more than one model.
};

// Which tenants may share a softly shared GPU: tenants in the same group may, a tenant may
// always share with itself, and group 0 means "alone".
class TrustGroups {
 public:
  void setGroup(model::TenantId tenant, uint32_t group);
  bool mayShare(model::TenantId a, model::TenantId b) const;

 private:
  std::vector<uint32_t> group_of_;  // Indexed by tenant id; missing = 0.
};

// Where a task goes: a node, the GPUs on it, and for MIG the slice.
struct Placement {
  NodeIndex node = 0;
  uint64_t gpus = 0;     // Bit i = GPU index i on the node.
  int mig_profile = -1;  // Index into the GPU model's profiles, for MIG requests.
  int mig_start = -1;
};

// Everything needed to undo an `apply`.
struct Assignment {
  Placement placement;
  model::TenantId tenant;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t milli_per_gpu = 0;
  int64_t gpu_memory_per_gpu = 0;
  model::Isolation isolation = model::Isolation::kHardware;
  bool whole = false;  // Took whole GPUs (exclusive).
};

class ClusterState {
 public:
  // Precondition: every node passes `model::validateNode` (at most 64 GPUs, as the GPU masks
  // require); the readers and the API check this before building a state.
  ClusterState(const model::GpuCatalogue& catalogue, std::vector<model::Node> nodes,
               TrustGroups trust = {});

  const model::GpuCatalogue& catalogue() const { return *catalogue_; }
  const TrustGroups& trust() const { return trust_; }
  // Puts `tenant` in trust group `group` (0: alone). Every node counts as changed, so cached
  // filter verdicts are taken again; what already shares a GPU stays where it is.
  void setTrustGroup(model::TenantId tenant, uint32_t group);
  // CPU a node with GPUs holds back for GPU tasks, in milli-CPU per free GPU (a GPU's free share
  // counts in proportion): a task that asks for no GPU fits only where the node's free CPU after
  // it still covers that for every free GPU (FilterReason::kCpuHeldForGpus). 0, the default, holds
  // nothing back. Set it before placing: every node counts as changed.
  void setCpuPerFreeGpu(int64_t milli_cpu);
  int64_t cpuPerFreeGpu() const { return cpu_per_free_gpu_; }
  size_t nodeCount() const { return nodes_.size(); }
  const model::Node& node(NodeIndex n) const { return nodes_[n]; }
  const NodeState& nodeState(NodeIndex n) const { return node_state_[n]; }
  std::span<const GpuState> gpus(NodeIndex n) const {
    const NodeState& s = node_state_[n];
    return {gpus_.data() + s.gpu_begin, s.gpu_count};
  }
  // Whether the node takes tasks. A node whose agent is lost is down: it fails every filter
  // (FilterReason::kNodeDown); what ran there is the scheduler's business.
  bool up(NodeIndex n) const { return down_[n] == 0; }
  void setUp(NodeIndex n, bool up);
  // A removed node is down for good and counts as no node at all (FilterReason::kRemoved: a
  // waiting workload's reason does not count it). Node indexes are never reused.
  bool removed(NodeIndex n) const { return down_[n] == 2; }
  void setRemoved(NodeIndex n);
  // A cordoned node takes no new tasks (FilterReason::kCordoned); what runs there stays.
  bool cordoned(NodeIndex n) const { return cordoned_[n] != 0; }
  void setCordoned(NodeIndex n, bool cordoned);
  // A node of a pool dedicated to one tenant takes that tenant's tasks only
  // (FilterReason::kDedicated); nullopt: any tenant's.
  bool admits(NodeIndex n, model::TenantId tenant) const {
    return dedicated_[n] < 0 || dedicated_[n] == static_cast<int64_t>(tenant.value());
  }
  std::optional<model::TenantId> dedicatedTo(NodeIndex n) const {
    if (dedicated_[n] < 0) {
      return std::nullopt;
    }
    return model::TenantId{static_cast<uint32_t>(dedicated_[n])};
  }
  void setDedicated(NodeIndex n, std::optional<model::TenantId> tenant);
  // Whether some node is dedicated to `tenant`: only then does its tenant change which nodes
  // admit a task.
  bool hasPool(model::TenantId tenant) const { return pool_nodes_.contains(tenant.value()); }
  // Adds a node (a machine that joined), down until setUp; its index is the next one. Caches
  // sized by node count must grow with it (Placer::nodesAdded, Policy::nodesAdded).
  // Precondition: it passes `model::validateNode`.
  NodeIndex addNode(model::Node node);
  // GPU `gpu` of node `n` is now in MIG mode `mode` (its agent said so). Precondition: the GPU
  // index is the node's; a mode changes only while the GPU is idle.
  void setMigMode(NodeIndex n, int gpu, model::MigMode mode);
  // The MIG instances on GPU `gpu` of node `n` that run nothing, as its agent reports them
  // (GpuState::mig_idle); instances that overlap one in use are left out.
  void setMigIdle(NodeIndex n, int gpu, std::vector<model::MigInstance> idle);

  // Bumped by every change to the node; caches compare it.
  uint32_t version(NodeIndex n) const { return version_[n]; }
  const std::vector<uint32_t>& versions() const { return version_; }

  // The change journal (see the top of this header). `journalEnd()` is the sequence number the
  // next change will get. `changesSince(seq)` lists the nodes changed at sequence numbers
  // `seq` .. `journalEnd() - 1`, oldest first, one entry per change; it returns nullopt when
  // some of those entries were trimmed, and the caller must then treat every node as changed.
  // The span is valid until the next `apply` or `release`. Precondition: seq <= journalEnd().
  uint64_t journalEnd() const { return journal_begin_ + journal_.size(); }
  std::optional<std::span<const NodeIndex>> changesSince(uint64_t seq) const;
  size_t journalLimit() const { return 4 * nodes_.size() + 1024; }

  // Memory a task takes on each of its GPUs: its explicit GPU memory, or for a share without
  // one, the GPU's memory in proportion to the share.
  static int64_t gpuMemoryFor(const model::TaskRequest& req, const GpuState& gpu);

  // Applies a placement the filters accepted. Precondition: it fits (checked in debug builds).
  Assignment apply(const model::TaskRequest& req, const Placement& p);
  // Undoes `apply`. Precondition: `a` was applied and not yet released.
  void release(const Assignment& a);

  // Cluster totals.
  int64_t totalGpus() const { return static_cast<int64_t>(gpus_.size()); }

  int64_t usedGpuMilli() const { return used_gpu_milli_; }
  int64_t totalCpuMilli() const { return total_cpu_milli_; }
  int64_t usedCpuMilli() const { return used_cpu_milli_; }

 private:
  const model::GpuCatalogue* catalogue_;
  std::vector<model::Node> nodes_;
  TrustGroups trust_;
  int64_t cpu_per_free_gpu_ = 0;
  std::vector<NodeState> node_state_;
  std::vector<GpuState> gpus_;
  std::vector<uint32_t> version_;
  std::vector<uint8_t> down_;       // Per node: 1 while down, 2 once removed.
  std::vector<uint8_t> cordoned_;   // Per node: 1 while cordoned.
  std::vector<int64_t> dedicated_;  // Per node: the tenant its pool is dedicated to, or -1.
  std::unordered_map<uint32_t, uint32_t> pool_nodes_;  // Tenant -> nodes dedicated to it.
  std::vector<NodeIndex> journal_;  // Node changed at sequence journal_begin_ + i.
  uint64_t journal_begin_ = 0;
  int64_t used_gpu_milli_ = 0;

  int64_t total_cpu_milli_ = 0;
  int64_t used_cpu_milli_ = 0;

  // Appends the state of nodes_[i] (the constructor, addNode).
  void initNode(size_t i);
  // Bumps the node's version and journals the change.
  void touch(NodeIndex n);
};

}  // namespace tessera::sched
