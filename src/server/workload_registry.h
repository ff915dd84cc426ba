// The one in-memory owner of workload state: every tenant's workloads as the store holds them,
// fed only by the store (load at start, then its watch, in revision order), never written by a
// handler. A handler writes the store, then waits until the registry has reached its write's
// revision (`waitFor`), so its caller reads its own write; both APIs (Tessera's and the
// Kubernetes one) read from here, so a change through either is visible to the other at the
// next revision. The store's revision is the registry's clock: a record's `mod_revision` is the
// Kubernetes API's resourceVersion, and `changesSince` is what its watches read, from a window
// of recent changes (older than the window: Gone, as kube-apiserver's 410).
//
//   registry.load(records, range.revision);                       // at start
//   store.watch("/tenants/", ..., range.revision + 1, [&](auto& w) { registry.apply(w); });
//   auto put = store.txn(...);             // a handler's write
//   registry.waitFor(put->revision, 5s);   // then read it back
//   for (auto& c : *registry.changesSince("team-1", rv)) ...   // a watch
//
// Records are immutable once published (shared_ptr<const>): a reader holds one without a lock.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/workload_record.h"
#include "store/store.h"

namespace tessera::server {

using WorkloadPtr = std::shared_ptr<const WorkloadRecord>;

// One change to a workload, at the store revision that made it.
struct WorkloadChange {
  enum class Type { kAdded, kModified, kDeleted };
  Type type = Type::kAdded;
  int64_t revision = 0;
  std::string tenant;
  std::string name;
  // The record after the change; for a deletion, the last one before it (as a Kubernetes
  // DELETED event carries the object).
  WorkloadPtr record;
  // For a modification, the record before it (what changed: a cancel request, a phase).
  WorkloadPtr before;
};

class WorkloadRegistry {
 public:
  // `history`: how many changes (all tenants together) `changesSince` can replay.
  explicit WorkloadRegistry(size_t history = 4096) : history_(history) {}

  // The workloads the store held at `revision` (at start, before any apply), by tenant. A
  // record that does not decode is an error naming its key; nothing is loaded then.
  core::Status load(const std::vector<store::KeyValue>& kvs, int64_t revision);
  // The store's changes of one revision (a watch response on /tenants/): workload keys are
  // taken, others passed over. Returns the workload changes it made, in order; a stored
  // record that does not decode is logged and passed over (the revision still counts).
  std::vector<WorkloadChange> apply(const store::WatchResponse& w);
  // What takes the registry from what it holds to the workloads in `now` (a range of
  // /tenants/, read at now.revision), as one watch response at that revision: a put for each
  // workload that is new or changed, a delete for each one gone. For a store watch that ended
  // (its history compacted away): apply this, then watch again from now.revision + 1.
  store::WatchResponse catchUp(const store::RangeResult& now) const;

  // The store revision the registry has reached.
  int64_t revision() const;
  // Waits until the registry has reached `revision` (true), or `timeout` passed (false).
  bool waitFor(int64_t revision, std::chrono::milliseconds timeout) const;

  WorkloadPtr get(const std::string& tenant, const std::string& name) const;
  // A tenant's workloads, by name.
  std::vector<WorkloadPtr> list(const std::string& tenant) const;
  // A tenant's workloads and the revision they are at, read together (a Kubernetes list whose
  // resourceVersion a watch then starts from).
  std::pair<std::vector<WorkloadPtr>, int64_t> snapshot(const std::string& tenant) const;
  // Every tenant's, by tenant then name (housekeeping, metrics).
  std::vector<std::pair<std::string, WorkloadPtr>> all() const;
  // How many a tenant has stored, and how many of them are pending.
  size_t count(const std::string& tenant) const;
  int64_t pending(const std::string& tenant) const;
  // The revision of the last change to any of a tenant's workloads (the load's revision if
  // none since): what a list hands out, and what its long poll waits on.
  int64_t index(const std::string& tenant) const;

  // The changes to `tenant`'s workloads after `revision`, in order. OUT_OF_RANGE (410 Gone)
  // when the window no longer reaches back to `revision`.
  // `through`, when given, is set to the revision the answer is complete up to (a watch
  // resumes from there, past other tenants' changes).
  core::Result<std::vector<WorkloadChange>> changesSince(const std::string& tenant,
                                                         int64_t revision,
                                                         int64_t* through = nullptr) const;
  // The oldest revision `changesSince` still answers from.
  int64_t oldestRevision() const;

 private:
  struct Tenant {
    std::map<std::string, WorkloadPtr> workloads;
    int64_t pending = 0;
    int64_t index = 0;
  };
  WorkloadPtr getLocked(const std::string& tenant, const std::string& name) const;
  void putLocked(const std::string& tenant, WorkloadPtr record);
  void eraseLocked(const std::string& tenant, const std::string& name);

  const size_t history_;
  mutable std::shared_mutex mu_;
  mutable std::condition_variable_any reached_;
  std::map<std::string, Tenant> tenants_;
  int64_t revision_ = 0;
  int64_t loaded_revision_ = 0;
  // The last changes, oldest first; every change after `horizon_` is here.
  std::deque<WorkloadChange> changes_;
  int64_t horizon_ = 0;
};

}  // namespace tessera::server
