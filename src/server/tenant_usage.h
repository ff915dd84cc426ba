// TenantUsage: how many bytes each tenant keeps in the store (the keys and current values under
// /tenants/<tenant> and /secrets/<tenant>/: its record, queues, policies, workloads with their
// status and events, KV secrets with their versions, database roles), kept current by a watch,
// so that a tenant's byte quota (`max_bytes`, docs/server.md "Bounded tenants") is checked
// with a map lookup, not a scan.
//
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<TenantUsage> usage, TenantUsage::open(store));
//   if (usage->bytes("team-1") + body.size() > max_bytes) { ... 429 ... }
//
// A write is counted once the store's watch delivers it (within a few milliseconds), so a
// tenant's concurrent writes may pass its quota by what they carry together (bounded by its
// request concurrency times the request size limit). History the store keeps for watches is
// not counted: compaction bounds it for every tenant together. When the store ends a watch (its
// history compacted while the server was cut off), a thread counts again from the store and
// watches on from there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/resumer.h"
#include "store/store.h"

namespace tessera::server {

class TenantUsage {
 public:
  // Reads what every tenant stores now and watches from there. The store must outlive it.
  static core::Result<std::unique_ptr<TenantUsage>> open(store::Store& store);
  ~TenantUsage();
  TenantUsage(const TenantUsage&) = delete;
  TenantUsage& operator=(const TenantUsage&) = delete;

  // Bytes the tenant stores (0 for a tenant with nothing).
  int64_t bytes(const std::string& tenant) const;
  // The tenant a key counts against ("" for keys of no tenant).
  static std::string_view tenantOf(std::string_view key);

 private:
  explicit TenantUsage(store::Store& store) : store_(store) {}
  // Counts every tenant's bytes from the store and watches on from there, ending the watches
  // it had; what watches of an earlier start still deliver is passed over.
  core::Status start();
  core::Status startAgain();  // start() when a watch ended, logged.
  void apply(const store::WatchResponse& w, uint64_t generation);

  store::Store& store_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t, std::less<>> bytes_;
  std::vector<store::WatchId> watches_;
  uint64_t generation_ = 0;  // Of the last start; its watches' deliveries count.
  Resumer again_{"tenant byte usage", [this] { return startAgain(); }};  // When a watch ends.
};

}  // namespace tessera::server
