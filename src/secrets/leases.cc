#include "secrets/leases.h"

#include <algorithm>
#include <cmath>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/rfc3339.h"

namespace tessera::secrets {
namespace {

using nlohmann::json;

bool permanent(const core::Status& s) {
  return s.code() == core::StatusCode::kInvalidArgument ||
         s.code() == core::StatusCode::kFailedPrecondition;
}

constexpr size_t kMaxErrorBytes = 240;  // As Vault keeps RevokeErr.

}  // namespace

std::string_view leaseStateName(LeaseState s) {
  switch (s) {
    case LeaseState::kActive:
      return "active";
    case LeaseState::kRevoking:
      return "revoking";
    case LeaseState::kIrrevocable:
      return "irrevocable";
  }
  return "active";
}

json Lease::toJson() const {
  return {{"lease_id", id},
          {"tenant", tenant},
          {"kind", kind},
          {"data", data},
          {"issue_time", core::formatRfc3339Millis(issued)},
          {"expire_time", core::formatRfc3339Millis(expires)},
          {"max_expire_time", core::formatRfc3339Millis(max_expires)},
          {"issued_ms", core::unixMillis(issued)},
          {"expires_ms", core::unixMillis(expires)},
          {"max_expires_ms", core::unixMillis(max_expires)},
          {"renewable", renewable},
          {"state", leaseStateName(state)},
          {"attempts", attempts},
          {"last_error", last_error},
          {"next_attempt_ms", core::unixMillis(next_attempt)}};
}

core::Result<Lease> Lease::fromJson(const json& j) {
  try {
    Lease l;
    l.id = j.at("lease_id").get<std::string>();
    l.tenant = j.at("tenant").get<std::string>();
    l.kind = j.at("kind").get<std::string>();
    l.data = j.at("data");
    l.issued = core::fromUnixMillis(j.at("issued_ms").get<int64_t>());
    l.expires = core::fromUnixMillis(j.at("expires_ms").get<int64_t>());
    l.max_expires = core::fromUnixMillis(j.at("max_expires_ms").get<int64_t>());
    l.renewable = j.at("renewable").get<bool>();
    const std::string state = j.at("state").get<std::string>();
    l.state = state == "revoking"      ? LeaseState::kRevoking
              : state == "irrevocable" ? LeaseState::kIrrevocable
                                       : LeaseState::kActive;
    l.attempts = j.at("attempts").get<int>();
    l.last_error = j.at("last_error").get<std::string>();
    l.next_attempt = core::fromUnixMillis(j.at("next_attempt_ms").get<int64_t>());
    return l;
  } catch (const std::exception& e) {
    return core::internalError(std::string("leases: a stored lease is malformed: ") + e.what());
  }
}

int64_t Lease::ttlSeconds(core::WallTime now) const {
  if (now >= expires) {
    return 0;
  }
  // A partial second counts: a lease made a moment ago for an hour answers 3600, as asked.
  return std::chrono::ceil<std::chrono::seconds>(expires - now).count();
}

LeaseManager::LeaseManager(store::Store& store, const core::Clock& clock, LeaseOptions options)
    : store_(store),
      clock_(clock),
      options_(options),
      rng_(options.seed != 0 ? options.seed
                             : static_cast<uint64_t>(clock.now().time_since_epoch().count())) {}

core::Result<std::unique_ptr<LeaseManager>> LeaseManager::open(store::Store& store,
                                                               const core::Clock& clock,
                                                               LeaseOptions options) {
  std::unique_ptr<LeaseManager> m(new LeaseManager(store, clock, options));
  TESSERA_RETURN_IF_ERROR(m->load());
  return m;
}

LeaseManager::~LeaseManager() { stop(); }

core::Status LeaseManager::load() {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r,
                           store_.range("/leases/", store::prefixEnd("/leases/")));
  std::lock_guard lock(mu_);
  for (const store::KeyValue& kv : r.kvs) {
    json j;
    try {
      j = json::parse(kv.value);
    } catch (const json::exception&) {
      return core::internalError("leases: the record at " + kv.key + " is not JSON");
    }
    TESSERA_ASSIGN_OR_RETURN(Lease l, Lease::fromJson(j));
    indexLocked(l);
    leases_[mapKey(l.tenant, l.id)] = std::move(l);
  }
  return core::Status::ok();
}

void LeaseManager::setRevoker(const std::string& kind, Revoker* revoker) {
  std::lock_guard lock(mu_);
  revokers_[kind] = revoker;
}

core::WallTime LeaseManager::dueOf(const Lease& l) const {
  return l.state == LeaseState::kActive ? l.expires : l.next_attempt;
}

void LeaseManager::indexLocked(const Lease& l) {
  if (l.state != LeaseState::kIrrevocable || options_.irrevocable_retry > core::Duration::zero()) {
    due_.emplace(dueOf(l), mapKey(l.tenant, l.id));
  }
}

void LeaseManager::unindexLocked(const Lease& l) { due_.erase({dueOf(l), mapKey(l.tenant, l.id)}); }

core::Result<Lease> LeaseManager::create(const std::string& tenant, const std::string& path,
                                         const std::string& kind, json data, core::Duration ttl,
                                         core::Duration max_ttl, bool renewable) {
  if (ttl <= core::Duration::zero()) {
    return core::invalidArgument("leases: a lease needs a positive TTL");
  }
  if (path.empty() || path.back() == '/') {
    return core::invalidArgument("leases: bad lease path '" + path + "'");
  }
  ttl = std::min(ttl, options_.max_ttl);
  max_ttl = std::clamp(max_ttl, ttl, options_.max_ttl);
  TESSERA_ASSIGN_OR_RETURN(std::string suffix, audit::randomHex(12));
  const core::WallTime now = clock_.wallNow();
  Lease l;
  l.id = path + "/" + suffix;
  l.tenant = tenant;
  l.kind = kind;
  l.data = std::move(data);
  l.issued = now;
  l.expires = now + std::chrono::duration_cast<core::WallTime::duration>(ttl);
  l.max_expires = now + std::chrono::duration_cast<core::WallTime::duration>(max_ttl);
  l.renewable = renewable;
  TESSERA_RETURN_IF_ERROR(store_.put(storeKey(l), l.toJson().dump()).status());
  std::lock_guard lock(mu_);
  indexLocked(l);
  leases_[mapKey(tenant, l.id)] = l;
  wake_.notify_all();
  return l;
}

core::Result<Lease> LeaseManager::lookup(const std::string& tenant, const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = leases_.find(mapKey(tenant, id));
  if (it == leases_.end()) {
    return core::notFound("leases: no lease '" + id + "'");
  }
  return it->second;
}

core::Result<Lease> LeaseManager::renew(const std::string& tenant, const std::string& id,
                                        core::Duration increment) {
  std::unique_lock lock(mu_);
  auto it = leases_.find(mapKey(tenant, id));
  if (it == leases_.end()) {
    return core::notFound("leases: no lease '" + id + "'");
  }
  const std::string key = it->first;
  Lease l = it->second;
  if (l.state != LeaseState::kActive || in_flight_.contains(key)) {
    return core::failedPrecondition("leases: lease '" + id + "' is being revoked");
  }
  if (!l.renewable) {
    return core::failedPrecondition("leases: lease '" + id + "' is not renewable");
  }
  const core::WallTime now = clock_.wallNow();
  if (now >= l.expires) {
    return core::failedPrecondition("leases: lease '" + id + "' has expired");
  }
  if (increment <= core::Duration::zero()) {
    increment = std::chrono::duration_cast<core::Duration>(l.expires - l.issued);
  }
  const core::WallTime next = std::min(
      now + std::chrono::duration_cast<core::WallTime::duration>(increment), l.max_expires);
  Revoker* backend = nullptr;
  if (auto r = revokers_.find(l.kind); r != revokers_.end()) {
    backend = r->second;
  }
  lock.unlock();
  if (backend != nullptr) {
    TESSERA_RETURN_IF_ERROR(backend->extend(l, next));
  }
  Lease updated = l;
  updated.expires = next;
  // Written outside the lock; a concurrent renew of the same lease may win either way.
  TESSERA_RETURN_IF_ERROR(store_.put(storeKey(updated), updated.toJson().dump()).status());
  lock.lock();
  it = leases_.find(key);
  if (it == leases_.end() || in_flight_.contains(key)) {
    return core::failedPrecondition("leases: lease '" + id + "' was revoked meanwhile");
  }
  unindexLocked(it->second);
  it->second.expires = next;
  indexLocked(it->second);
  return it->second;
}

core::Status LeaseManager::revoke(const std::string& tenant, const std::string& id) {
  std::vector<Lease> batch;
  {
    std::lock_guard lock(mu_);
    const std::string key = mapKey(tenant, id);
    auto it = leases_.find(key);
    if (it == leases_.end()) {
      return core::notFound("leases: no lease '" + id + "'");
    }
    if (in_flight_.contains(key)) {
      return core::unavailable("leases: lease '" + id + "' is being revoked now");
    }
    in_flight_.insert(key);
    batch.push_back(it->second);
  }
  core::Status single;
  TESSERA_RETURN_IF_ERROR(process(std::move(batch), &single).status());
  return single;
}

core::Result<size_t> LeaseManager::revokePrefix(const std::string& tenant,
                                                const std::string& prefix) {
  std::vector<Lease> all;
  {
    std::lock_guard lock(mu_);
    const std::string from = mapKey(tenant, prefix);
    for (auto it = leases_.lower_bound(from);
         it != leases_.end() && it->first.compare(0, from.size(), from) == 0; ++it) {
      if (!in_flight_.contains(it->first) && it->second.state != LeaseState::kIrrevocable) {
        in_flight_.insert(it->first);
        all.push_back(it->second);
      }
    }
  }
  size_t done = 0;
  for (size_t i = 0; i < all.size(); i += options_.batch) {
    const size_t end = std::min(all.size(), i + options_.batch);
    std::vector<Lease> batch(all.begin() + static_cast<std::ptrdiff_t>(i),
                             all.begin() + static_cast<std::ptrdiff_t>(end));
    auto n = process(std::move(batch), nullptr);
    if (!n.isOk()) {
      std::lock_guard lock(mu_);  // Whatever was not processed is free again.
      for (size_t k = end; k < all.size(); ++k) {
        in_flight_.erase(mapKey(all[k].tenant, all[k].id));
      }
      return n.status();
    }
    done += *n;
  }
  return done;
}

core::Status LeaseManager::forceRevoke(const std::string& tenant, const std::string& id) {
  Lease l;
  {
    std::lock_guard lock(mu_);
    auto it = leases_.find(mapKey(tenant, id));
    if (it == leases_.end()) {
      return core::notFound("leases: no lease '" + id + "'");
    }
    if (in_flight_.contains(it->first)) {
      return core::unavailable("leases: lease '" + id + "' is being revoked now");
    }
    l = it->second;
  }
  TESSERA_RETURN_IF_ERROR(store_.deleteRange(storeKey(l)).status());
  std::lock_guard lock(mu_);
  auto it = leases_.find(mapKey(tenant, id));
  if (it != leases_.end()) {
    unindexLocked(it->second);
    leases_.erase(it);
  }
  return core::Status::ok();
}

std::vector<Lease> LeaseManager::list(const std::string& tenant, const std::string& prefix,
                                      std::optional<LeaseState> state) const {
  std::vector<Lease> out;
  std::lock_guard lock(mu_);
  for (const auto& [key, l] : leases_) {
    if ((tenant.empty() || l.tenant == tenant) && l.id.compare(0, prefix.size(), prefix) == 0 &&
        (!state || l.state == *state)) {
      out.push_back(l);
    }
  }
  return out;
}

size_t LeaseManager::count(std::optional<LeaseState> state) const {
  std::lock_guard lock(mu_);
  if (!state) {
    return leases_.size();
  }
  return static_cast<size_t>(std::count_if(
      leases_.begin(), leases_.end(), [&](const auto& e) { return e.second.state == *state; }));
}

std::optional<core::WallTime> LeaseManager::nextDue() const {
  std::lock_guard lock(mu_);
  for (const auto& [due, key] : due_) {
    if (!in_flight_.contains(key)) {
      return due;
    }
  }
  return std::nullopt;
}

core::Result<size_t> LeaseManager::tick() {
  size_t done = 0;
  for (;;) {
    std::vector<Lease> batch;
    {
      std::lock_guard lock(mu_);
      const core::WallTime now = clock_.wallNow();
      for (auto it = due_.begin(); it != due_.end() && it->first <= now; ++it) {
        if (in_flight_.insert(it->second).second) {
          batch.push_back(leases_.at(it->second));
          if (batch.size() >= options_.batch) {
            break;
          }
        }
      }
    }
    if (batch.empty()) {
      return done;
    }
    TESSERA_ASSIGN_OR_RETURN(size_t n, process(std::move(batch), nullptr));
    done += n;
  }
}

core::Result<size_t> LeaseManager::process(std::vector<Lease> batch, core::Status* single_error) {
  // 1. The intents.
  store::Txn intents;
  for (Lease& l : batch) {
    l.state = LeaseState::kRevoking;
    ++l.attempts;
    intents.success.push_back(store::Op::put(storeKey(l), l.toJson().dump()));
  }
  auto wrote = store_.txn(std::move(intents));
  if (!wrote.isOk()) {
    std::lock_guard lock(mu_);
    for (const Lease& l : batch) {
      in_flight_.erase(mapKey(l.tenant, l.id));
    }
    return wrote.status();
  }
  // 2. The outside calls.
  std::vector<core::Status> results;
  results.reserve(batch.size());
  for (const Lease& l : batch) {
    Revoker* r = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = revokers_.find(l.kind);
      r = it == revokers_.end() ? nullptr : it->second;
    }
    results.push_back(
        r == nullptr ? core::failedPrecondition("no revoker for leases of kind '" + l.kind + "'")
                     : r->revoke(l));
  }
  // 3. The records: deleted when revoked, else rescheduled or given up on.
  const core::WallTime now = clock_.wallNow();
  store::Txn records;
  size_t finished = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    Lease& l = batch[i];
    const core::Status& st = results[i];
    if (st.isOk()) {
      records.success.push_back(store::Op::del(storeKey(l)));
      ++finished;
      continue;
    }
    l.last_error = st.message().substr(0, kMaxErrorBytes);
    if (permanent(st) || l.attempts >= options_.max_attempts) {
      l.state = LeaseState::kIrrevocable;
      // Tried once more later, in case whatever failed was mended.
      l.next_attempt = now + options_.irrevocable_retry;
      ++finished;
    } else {
      double factor = std::ldexp(1.0, l.attempts - 1);
      {
        std::lock_guard lock(mu_);
        factor *= 0.5 + rng_.uniformDouble();
      }
      l.next_attempt = now + std::chrono::duration_cast<core::WallTime::duration>(
                                 std::chrono::duration<double, core::Duration::period>(
                                     static_cast<double>(options_.backoff_base.count()) * factor));
    }
    records.success.push_back(store::Op::put(storeKey(l), l.toJson().dump()));
  }
  auto written = store_.txn(std::move(records));
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < batch.size(); ++i) {
    const Lease& l = batch[i];
    const std::string key = mapKey(l.tenant, l.id);
    in_flight_.erase(key);
    auto it = leases_.find(key);
    if (it == leases_.end()) {
      continue;  // Force-revoked meanwhile.
    }
    unindexLocked(it->second);
    if (!written.isOk()) {
      // The intent is on disk; retry soon.
      it->second = l;
      it->second.next_attempt = now + std::chrono::seconds(1);
      indexLocked(it->second);
      continue;
    }
    if (results[i].isOk()) {
      leases_.erase(it);
    } else {
      it->second = l;
      indexLocked(it->second);
    }
  }
  if (single_error != nullptr && !batch.empty() && !results[0].isOk()) {
    *single_error =
        core::unavailable("revocation failed (" + std::string(leaseStateName(batch[0].state)) +
                          "): " + results[0].message());
  }
  if (!written.isOk()) {
    return written.status();
  }
  return finished;
}

void LeaseManager::start(core::Duration poll) {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) {
    return;
  }
  stopping_ = false;
  thread_ = std::thread([this, poll] {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      lock.unlock();
      // A failure (the store's) is retried after a pause, not in a busy loop.
      const bool failed = !tick().isOk();
      const auto next = nextDue();
      lock.lock();
      core::Duration wait = poll;
      if (next) {
        wait = std::min(wait, std::chrono::duration_cast<core::Duration>(std::max(
                                  *next - clock_.wallNow(), core::WallTime::duration::zero())));
      }
      if (failed) {
        wait = std::max(wait, core::Duration(std::chrono::milliseconds(100)));
      }
      if (wait > core::Duration::zero()) {
        wake_.wait_for(lock, wait);
      }
    }
  });
}

void LeaseManager::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

}  // namespace tessera::secrets
