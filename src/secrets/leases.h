// Leases and the expiry manager (issue #6; docs/secrets.md "Leases").
//
// Every dynamic credential has a lease: an id (`<path>/<random>`, so a prefix names every lease
// of a path, as in Vault), a TTL counted from issue and a max TTL it can never be renewed past.
// `renew(increment)` moves the expiry to now + increment, capped by the max TTL. When a lease
// expires or is revoked, the manager revokes it in the outside system through the `Revoker` of
// its kind (e.g. "db": drop the PostgreSQL role):
//   1. the intent is written first (state "revoking", attempts + 1), so a crash between the
//      outside call and the record's removal retries it, and a revocation that keeps crashing the
//      server still runs out of attempts;
//   2. on success the record is deleted; on failure it is retried after
//      backoff * 2^(attempts-1), jittered by +-50% (Vault's numbers: 10 s base, 6 attempts);
//   3. after `max_attempts`, or at once on a permanent error (invalid argument or failed
//      precondition from the revoker), the lease is marked "irrevocable": kept, listed, counted
//      in metrics, and retried no more until an operator force-revokes it.
// Records live at /leases/<tenant>/<id> (plain JSON: ids, times, user names, never a password),
// so the manager works while the barrier is sealed, and `open` loads them all: leases that
// expired while the server was down are due at once.
// Thread-safety: every method may be called from any thread; outside calls (revokers) run
// without the manager's lock. `tick` may run on any one thread at a time.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/rng.h"
#include "core/status.h"
#include "store/store.h"

namespace tessera::secrets {

enum class LeaseState { kActive, kRevoking, kIrrevocable };
std::string_view leaseStateName(LeaseState s);

struct Lease {
  std::string id;  // "<path>/<random hex>".
  std::string tenant;
  std::string kind;                                // Names the revoker.
  nlohmann::json data = nlohmann::json::object();  // What the revoker needs; never a secret.
  core::WallTime issued{};
  core::WallTime expires{};
  core::WallTime max_expires{};
  bool renewable = true;
  LeaseState state = LeaseState::kActive;
  int attempts = 0;               // Revocation attempts so far.
  std::string last_error;         // The last attempt's error (at most 240 bytes).
  core::WallTime next_attempt{};  // When a revoking lease is tried again.

  nlohmann::json toJson() const;  // The stored and API form.
  static core::Result<Lease> fromJson(const nlohmann::json& j);
  // TTL left at `now`, in seconds rounded up (0 once expired).
  int64_t ttlSeconds(core::WallTime now) const;
};

// Undoes a credential in the outside system. Called without locks, from the expiry thread or a
// request thread. Idempotent: the same lease may be revoked twice (after a crash). An error is
// retried unless it is kInvalidArgument or kFailedPrecondition (permanent).
class Revoker {
 public:
  virtual ~Revoker() = default;
  virtual core::Status revoke(const Lease& lease) = 0;
  // A renewal moves the lease's expiry to `expires`; a credential that carries its own expiry
  // (a PostgreSQL role's VALID UNTIL) follows it here. An error refuses the renewal.
  virtual core::Status extend(const Lease& lease, core::WallTime expires) {
    (void)lease;
    (void)expires;
    return core::Status::ok();
  }
};

struct LeaseOptions {
  int max_attempts = 6;
  core::Duration backoff_base = std::chrono::seconds(10);
  core::Duration max_ttl = std::chrono::hours(24 * 32);  // No lease outlives this.
  size_t batch = 128;  // Leases per store transaction (the store's txn limit).
  // Irrevocable leases are tried once more this long after they became irrevocable, and again
  // as long as they fail (Vault retries them daily); 0: never.
  core::Duration irrevocable_retry = std::chrono::hours(24);
  uint64_t seed = 0;  // Jitter; 0 picks one from the clock.
};

class LeaseManager {
 public:
  static core::Result<std::unique_ptr<LeaseManager>> open(store::Store& store,
                                                          const core::Clock& clock,
                                                          LeaseOptions options = {});
  ~LeaseManager();
  LeaseManager(const LeaseManager&) = delete;
  LeaseManager& operator=(const LeaseManager&) = delete;

  // Revokers by kind; set before leases of that kind come due (a lease without one fails
  // permanently).
  void setRevoker(const std::string& kind, Revoker* revoker);

  // A new lease under `path` ("db/creds/readonly"). ttl > 0; max_ttl is raised to ttl if below
  // it, and both are capped by the options' max_ttl.
  core::Result<Lease> create(const std::string& tenant, const std::string& path,
                             const std::string& kind, nlohmann::json data, core::Duration ttl,
                             core::Duration max_ttl, bool renewable = true);
  core::Result<Lease> lookup(const std::string& tenant, const std::string& id) const;
  // increment 0: the lease's original TTL.
  core::Result<Lease> renew(const std::string& tenant, const std::string& id,
                            core::Duration increment);
  // Revokes now, on this thread. Ok once the outside system confirmed; unavailable (with the
  // error) if the attempt failed and a retry is scheduled.
  core::Status revoke(const std::string& tenant, const std::string& id);
  // Revokes every lease of the tenant whose id starts with `prefix`; returns how many were
  // revoked now (the others are retried as above).
  core::Result<size_t> revokePrefix(const std::string& tenant, const std::string& prefix);
  // Removes a lease's record without revoking it (for irrevocable leases an operator has dealt
  // with by hand).
  core::Status forceRevoke(const std::string& tenant, const std::string& id);
  // The tenant's leases ("" for all tenants) whose id starts with `prefix`.
  std::vector<Lease> list(const std::string& tenant, const std::string& prefix,
                          std::optional<LeaseState> state = std::nullopt) const;
  size_t count(std::optional<LeaseState> state = std::nullopt) const;

  // Processes every lease due now, in batches; returns how many it finished (revoked or made
  // irrevocable). For tests with a fake clock; `start` runs it on a thread.
  core::Result<size_t> tick();
  // The earliest time something is due.
  std::optional<core::WallTime> nextDue() const;
  // A thread that ticks when something is due (checking at least every `poll`, since the wall
  // clock may jump).
  void start(core::Duration poll = std::chrono::seconds(1));
  void stop();

 private:
  LeaseManager(store::Store& store, const core::Clock& clock, LeaseOptions options);
  core::Status load();
  static std::string mapKey(const std::string& tenant, const std::string& id) {
    return tenant + '\n' + id;
  }
  static std::string storeKey(const Lease& l) { return "/leases/" + l.tenant + "/" + l.id; }
  core::WallTime dueOf(const Lease& l) const;
  // Requires mu_.
  void indexLocked(const Lease& l);
  void unindexLocked(const Lease& l);
  // Revokes the given leases (marked in flight by the caller): intents, outside calls, records.
  // Returns how many finished and, for a single lease, its error.
  core::Result<size_t> process(std::vector<Lease> batch, core::Status* single_error);

  store::Store& store_;
  const core::Clock& clock_;
  const LeaseOptions options_;
  mutable std::mutex mu_;  // Guards everything below.
  core::Rng rng_;
  std::map<std::string, Revoker*> revokers_;
  std::map<std::string, Lease> leases_;                   // mapKey -> lease
  std::set<std::pair<core::WallTime, std::string>> due_;  // (due, mapKey)
  std::set<std::string> in_flight_;                       // mapKeys being revoked now
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::secrets
