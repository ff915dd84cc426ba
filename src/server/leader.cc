#include "server/leader.h"

#include "core/log.h"

namespace tessera::server {

namespace {

int64_t millis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

LeaderElection::~LeaderElection() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (keeper_.joinable()) {
    keeper_.join();
  }
  if (watchdog_.joinable()) {
    watchdog_.join();
  }
}

core::Result<bool> LeaderElection::campaign() {
  core::Result<bool> r = tryCampaign();
  if (!r.isOk()) {
    std::lock_guard lock(mu_);
    leader_.clear();  // Whoever led may be gone: unknown until the store answers again.
  }
  return r;
}

core::Result<bool> LeaderElection::tryCampaign() {
  if (leading_) {
    return true;
  }
  const std::string key(kLeaderKey);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto sent = std::chrono::steady_clock::now();
    if (lease_.value() == 0) {
      TESSERA_ASSIGN_OR_RETURN(lease_, store_.grant(ttl_));
    } else if (!store_.keepAlive(lease_).isOk()) {
      TESSERA_ASSIGN_OR_RETURN(lease_, store_.grant(ttl_));  // Ours expired meanwhile.
    }
    store::Txn txn{.compares = {store::Compare::createRevision(key, store::Compare::kEqual, 0)},
                   .success = {store::Op::put(key, address_, lease_)},
                   .failure = {store::Op::get(key)}};
    TESSERA_ASSIGN_OR_RETURN(store::TxnResult got, store_.txn(std::move(txn)));
    std::unique_lock lock(mu_);
    if (got.succeeded) {
      leading_ = true;
      leader_ = address_;
      term_ = got.revision;  // The revision that created the key.
      renewed_ = sent;
      return true;
    }
    const auto& kvs =
        got.results.empty() ? std::vector<store::KeyValue>{} : got.results[0].range.kvs;
    leader_ = kvs.empty() ? "" : kvs[0].value;
    if (attempt > 0 || kvs.empty() || kvs[0].value != address_ || kvs[0].lease == lease_ ||
        kvs[0].lease.value() == 0) {
      return false;
    }
    // The key names this replica, under a lease it does not hold: an earlier start of this
    // replica's led and died (its listeners are ours now). Clients sent to it would come back
    // here; waiting for its lease to lapse would only lengthen the gap.
    lock.unlock();
    core::logInfo(
        "leader election: the leader key names this replica's address from an earlier start "
        "(lease {}); taking it over",
        kvs[0].lease.value());
    if (auto r = store_.revoke(kvs[0].lease);
        !r.isOk() && r.status().code() != core::StatusCode::kNotFound) {
      return r.status();
    }
  }
  return false;
}

std::string LeaderElection::leader() const {
  std::lock_guard lock(mu_);
  return leader_;
}

store::Compare LeaderElection::fence() const {
  std::lock_guard lock(mu_);
  return store::Compare::createRevision(std::string(kLeaderKey), store::Compare::kEqual, term_);
}

void LeaderElection::startKeepAlive(std::function<void()> lost) {
  {
    std::lock_guard lock(mu_);
    lost_ = std::move(lost);
  }
  // Renews every quarter of a TTL; each call may block (etcd unreachable) for longer than that.
  keeper_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stopping_ && leading_) {
      stop_cv_.wait_for(lock, ttl_ / 4, [&] { return stopping_ || !leading_; });
      if (stopping_ || !leading_) {
        break;
      }
      lock.unlock();
      const auto sent = std::chrono::steady_clock::now();
      const bool ok = store_.keepAlive(lease_).isOk();
      lock.lock();
      if (ok) {
        renewed_ = std::max(renewed_, sent);
      }
    }
  });
  // Keeps the deadline on its own clock, whatever the renewing thread is waiting for.
  watchdog_ = std::thread([this] {
    const auto tick = std::max<core::Duration>(ttl_ / 40, std::chrono::milliseconds(5));
    std::unique_lock lock(mu_);
    while (!stopping_ && leading_) {
      stop_cv_.wait_for(lock, tick, [&] { return stopping_ || !leading_; });
      if (stopping_ || !leading_) {
        break;
      }
      const auto since = std::chrono::steady_clock::now() - renewed_;
      if (since >= ttl_ * 3 / 4) {
        lock.unlock();
        stepDown("the lease could not be renewed for " + std::to_string(millis(since)) +
                 " ms (of its " + std::to_string(millis(ttl_)) + " ms)");
        return;
      }
    }
  });
}

void LeaderElection::stepDown(const std::string& why) {
  std::function<void()> lost;
  {
    std::lock_guard lock(mu_);
    leading_ = false;
    if (lost_called_) {
      return;
    }
    lost_called_ = true;
    lost = lost_;
  }
  stop_cv_.notify_all();
  core::logError("leadership lost: {}", why);
  if (lost) {
    lost();
  }
}

void LeaderElection::resign() {
  if (!leading_) {
    return;
  }
  {
    std::lock_guard lock(mu_);
    leading_ = false;
    lost_called_ = true;  // A resignation is no loss to report.
  }
  stop_cv_.notify_all();
  (void)store_.revoke(lease_);  // The key goes with it.
}

}  // namespace tessera::server
