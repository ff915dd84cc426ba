// Everything the secrets side of the server holds, in one place: the keys and seal, KV, leases
// (with the expiry manager's thread), dynamic database credentials and workload identity. The
// control plane calls these from its request threads (each piece is thread-safe).
//
//   auto s = Secrets::open(store, clock, options);   // key-file mode: unsealed at once
//   s->kv().write("team-1", "app/db", {{"password", "..."}}, std::nullopt);
//   s->start();                                      // the lease expiry thread
#pragma once

#include <atomic>
#include <memory>

#include "core/clock.h"
#include "core/status.h"
#include "secrets/aws_sts.h"
#include "secrets/database.h"
#include "secrets/identity.h"
#include "secrets/keys.h"
#include "secrets/kv.h"
#include "secrets/leases.h"
#include "store/store.h"

namespace tessera::secrets {

struct SecretsOptions {
  SealOptions seal;
  LeaseOptions leases;
  DatabaseOptions database;
};

class Secrets {
 public:
  static core::Result<std::unique_ptr<Secrets>> open(store::Store& store, const core::Clock& clock,
                                                     SecretsOptions options);
  ~Secrets();
  Secrets(const Secrets&) = delete;
  Secrets& operator=(const Secrets&) = delete;

  KeyManager& keys() { return *keys_; }
  KvEngine& kv() { return *kv_; }
  LeaseManager& leases() { return *leases_; }
  DatabaseEngine& db() { return *db_; }
  AwsEngine& aws() { return *aws_; }  // STS sessions (aws_sts.h).
  // The OIDC issuer, once `openIdentity` ran (it needs the server's address); else null.
  IdentityIssuer* identity() { return identity_ptr_.load(); }
  core::Status openIdentity(IdentityOptions options);

  // Starts and stops the lease expiry thread.
  void start();
  void stop();

  // A tenant is deleted: its leases are revoked (those that fail stay, irrevocable or retried,
  // and are reported), its records removed and its keys shredded, so even a copy of the store
  // taken earlier no longer opens its secrets. Needs the barrier unsealed.
  core::Status deleteTenant(const std::string& tenant);

  // Re-seals every value under /secrets/ written with an older key term under the active one
  // (after `rotate`). Returns how many values it rewrote. Safe while requests run: each value is
  // replaced only if unchanged since it was read.
  core::Result<size_t> rewrap();

 private:
  Secrets(store::Store& store, const core::Clock& clock) : store_(store), clock_(clock) {}
  store::Store& store_;
  const core::Clock& clock_;
  std::unique_ptr<KeyManager> keys_;
  std::unique_ptr<KvEngine> kv_;
  std::unique_ptr<LeaseManager> leases_;
  std::unique_ptr<DatabaseEngine> db_;  // The revoker of "db" leases.
  std::unique_ptr<AwsEngine> aws_;
  std::unique_ptr<IdentityIssuer> identity_;
  std::atomic<IdentityIssuer*> identity_ptr_{nullptr};  // Read by request threads.
};

}  // namespace tessera::secrets
