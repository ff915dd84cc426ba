// FencedStore: the store as a leading replica writes to it (docs/server.md, "High
// availability"). Every write it passes on carries a guard (store::Txn::guard): the leader key
// still has the create revision it had when this replica took it. A replica that has lost the
// leadership, whatever its own clock says (a pause, a network cut, a clock that jumped), can
// therefore never write: the store itself refuses, and nothing of the write happens. Reads,
// watches and leases pass through unguarded; so do the two housekeeping writes that change no
// state another replica relies on (dropNotes, compact).
//
//   FencedStore fenced(store, store::Compare::createRevision("/sys/leader", kEqual, term),
//                      [] { /* step down */ });
//   ControlPlane::open(fenced, ...);   // every write it makes is fenced
//
// A caller's own guards (Txn::guard) are kept, and a txn that fails on one of them is returned as
// it is. A write the fence refuses fails with UNAVAILABLE, "this replica no longer leads ...: the
// write was not applied", and `on_fenced` runs (once) so the replica steps down at once.
//
// Thread-safe, as Store.
#pragma once

#include <atomic>
#include <functional>

#include "store/forwarding_store.h"

namespace tessera::server {

// What the error of a write the fence refused says; the server answers it 503 as a standby would
// (X-Tessera-Standby), so clients go to the new leader.
inline constexpr std::string_view kNotLeading = "this replica no longer leads";

class FencedStore final : public store::ForwardingStore {
 public:
  FencedStore(store::Store& inner, store::Compare fence, std::function<void()> on_fenced)
      : ForwardingStore(inner), fence_(std::move(fence)), on_fenced_(std::move(on_fenced)) {}

  core::Result<int64_t> put(std::string_view key, std::string_view value,
                            store::LeaseId lease = store::LeaseId{}) override;
  core::Result<store::DeleteResult> deleteRange(std::string_view key,
                                                std::string_view range_end = {}) override;
  core::Result<store::TxnResult> txn(store::Txn txn) override;

  // Writes refused by the fence so far.
  int64_t fencedWrites() const { return fenced_writes_; }

 private:
  core::Status refused();

  const store::Compare fence_;
  std::function<void()> on_fenced_;
  std::atomic<int64_t> fenced_writes_{0};
  std::atomic<bool> told_{false};
};

}  // namespace tessera::server
