#include "server/fenced_store.h"

#include "core/log.h"

namespace tessera::server {

core::Status FencedStore::refused() {
  ++fenced_writes_;
  if (!told_.exchange(true)) {
    core::logError(
        "the store refused a write: the leader key is not this replica's any more (another "
        "replica leads); stepping down");
    if (on_fenced_) {
      on_fenced_();
    }
  }
  return core::unavailable(std::string(kNotLeading) +
                           " (another took the leader key): the write was not applied; try "
                           "again (clients retry on another replica)");
}

core::Result<int64_t> FencedStore::put(std::string_view key, std::string_view value,
                                       store::LeaseId lease) {
  store::Txn t;
  t.success.push_back(store::Op::put(std::string(key), std::string(value), lease));
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, txn(std::move(t)));
  return r.revision;
}

core::Result<store::DeleteResult> FencedStore::deleteRange(std::string_view key,
                                                           std::string_view range_end) {
  store::Txn t;
  t.success.push_back(store::Op::del(std::string(key), std::string(range_end)));
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, txn(std::move(t)));
  return store::DeleteResult{r.results.empty() ? 0 : r.results[0].deleted, r.revision};
}

core::Result<store::TxnResult> FencedStore::txn(store::Txn t) {
  t.guard.push_back(fence_);
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, inner().txn(std::move(t)));
  if (r.guard_failed) {
    // The fence, or a guard of the caller's own? The leader key says.
    auto leader = inner().get(fence_.key);
    if (!leader.isOk()) {
      return core::unavailable("the store refused a guarded write and cannot say why: " +
                               leader.status().message());
    }
    if (!*leader || (*leader)->create_revision != fence_.number) {
      return refused();
    }
  }
  return r;
}

}  // namespace tessera::server
