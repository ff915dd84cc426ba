// ForwardingStore: a Store that passes every call on to another. Decorators derive from it and
// override only what they change: the leader's fence (server/fenced_store.h), the records of
// idempotency keys (server/idempotency.h), tests' stores that hold or block calls.
//
//   class CountingStore final : public store::ForwardingStore {
//    public:
//     using ForwardingStore::ForwardingStore;
//     core::Result<int64_t> put(std::string_view k, std::string_view v, LeaseId l) override {
//       ++puts;
//       return inner().put(k, v, l);
//     }
//     std::atomic<int> puts{0};
//   };
//
// Thread-safe as the store underneath; it must outlive the decorator.
#pragma once

#include "store/store.h"

namespace tessera::store {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(Store& inner) : inner_(inner) {}

  core::Result<RangeResult> range(std::string_view key, std::string_view range_end = {},
                                  int64_t limit = 0, int64_t revision = 0) override {
    return inner_.range(key, range_end, limit, revision);
  }
  core::Result<int64_t> put(std::string_view key, std::string_view value,
                            LeaseId lease = LeaseId{}) override {
    return inner_.put(key, value, lease);
  }
  core::Result<DeleteResult> deleteRange(std::string_view key,
                                         std::string_view range_end = {}) override {
    return inner_.deleteRange(key, range_end);
  }
  core::Result<TxnResult> txn(Txn txn) override { return inner_.txn(std::move(txn)); }
  core::Result<WatchId> watch(std::string_view key, std::string_view range_end,
                              int64_t from_revision, WatchCallback callback) override {
    return inner_.watch(key, range_end, from_revision, std::move(callback));
  }
  void cancelWatch(WatchId id) override { inner_.cancelWatch(id); }
  core::Result<LeaseId> grant(core::Duration ttl) override { return inner_.grant(ttl); }
  core::Result<core::Duration> keepAlive(LeaseId id) override { return inner_.keepAlive(id); }
  core::Result<int64_t> revoke(LeaseId id) override { return inner_.revoke(id); }
  core::Result<std::vector<LeaseId>> expireLeases() override { return inner_.expireLeases(); }
  core::Status compact(int64_t revision) override { return inner_.compact(revision); }
  StoreStats stats() const override { return inner_.stats(); }
  core::Result<std::vector<Note>> notes(std::string_view topic) override {
    return inner_.notes(topic);
  }
  core::Status dropNotes(std::string_view topic, uint64_t up_to) override {
    return inner_.dropNotes(topic, up_to);
  }

 protected:
  Store& inner() const { return inner_; }

 private:
  Store& inner_;
};

}  // namespace tessera::store
