#include "server/leader.h"

#include "core/log.h"

namespace tessera::server {

LeaderElection::~LeaderElection() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (keeper_.joinable()) {
    keeper_.join();
  }
}

core::Result<bool> LeaderElection::campaign() {
  if (leading_) {
    return true;
  }
  if (lease_.value() == 0) {
    TESSERA_ASSIGN_OR_RETURN(lease_, store_.grant(ttl_));
  } else if (!store_.keepAlive(lease_).isOk()) {
    TESSERA_ASSIGN_OR_RETURN(lease_, store_.grant(ttl_));  // Ours expired meanwhile.
  }
  const std::string key(kLeaderKey);
  store::Txn txn{.compares = {store::Compare::createRevision(key, store::Compare::kEqual, 0)},
                 .success = {store::Op::put(key, address_, lease_)},
                 .failure = {store::Op::get(key)}};
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult got, store_.txn(std::move(txn)));
  std::lock_guard lock(mu_);
  if (got.succeeded) {
    leading_ = true;
    leader_ = address_;
    return true;
  }
  const auto& kvs = got.results.empty() ? std::vector<store::KeyValue>{} : got.results[0].range.kvs;
  leader_ = kvs.empty() ? "" : kvs[0].value;
  return false;
}

std::string LeaderElection::leader() const {
  std::lock_guard lock(mu_);
  return leader_;
}

void LeaderElection::startKeepAlive(std::function<void()> lost) {
  keeper_ = std::thread([this, lost = std::move(lost)] {
    auto renewed = std::chrono::steady_clock::now();
    std::unique_lock lock(mu_);
    while (!stopping_) {
      stop_cv_.wait_for(lock, ttl_ / 4, [&] { return stopping_; });
      if (stopping_) {
        break;
      }
      lock.unlock();
      const bool ok = store_.keepAlive(lease_).isOk();
      lock.lock();
      const auto now = std::chrono::steady_clock::now();
      if (ok) {
        renewed = now;
      } else if (now - renewed >= ttl_ * 3 / 4) {
        leading_ = false;
        lock.unlock();
        core::logError("leadership lost: the lease could not be renewed for {} ms (of its {} ms)",
                       std::chrono::duration_cast<std::chrono::milliseconds>(now - renewed).count(),
                       std::chrono::duration_cast<std::chrono::milliseconds>(ttl_).count());
        lost();
        return;
      }
    }
  });
}

void LeaderElection::resign() {
  if (!leading_) {
    return;
  }
  leading_ = false;
  (void)store_.revoke(lease_);  // The key goes with it.
}

}  // namespace tessera::server
