#include "secrets/service.h"

namespace tessera::secrets {

core::Result<std::unique_ptr<Secrets>> Secrets::open(store::Store& store, const core::Clock& clock,
                                                     SecretsOptions options) {
  std::unique_ptr<Secrets> s(new Secrets(store, clock));
  TESSERA_ASSIGN_OR_RETURN(s->keys_, KeyManager::open(store, std::move(options.seal)));
  s->kv_ = std::make_unique<KvEngine>(store, *s->keys_, clock);
  TESSERA_ASSIGN_OR_RETURN(s->leases_, LeaseManager::open(store, clock, options.leases));
  s->db_ = std::make_unique<DatabaseEngine>(store, *s->keys_, *s->leases_, clock, options.database);
  s->leases_->setRevoker(std::string(kDatabaseLeaseKind), s->db_.get());
  s->aws_ = std::make_unique<AwsEngine>(store, *s->keys_);
  return s;
}

Secrets::~Secrets() { stop(); }

core::Status Secrets::openIdentity(IdentityOptions options) {
  if (identity_) {
    return core::failedPrecondition("secrets: the identity issuer is open already");
  }
  TESSERA_ASSIGN_OR_RETURN(identity_,
                           IdentityIssuer::open(store_, *keys_, clock_, std::move(options)));
  identity_ptr_.store(identity_.get());
  return core::Status::ok();
}

void Secrets::start() { leases_->start(); }

void Secrets::stop() {
  if (leases_) {
    leases_->stop();
  }
}

core::Status Secrets::deleteTenant(const std::string& tenant) {
  if (keys_->status().sealed) {
    return core::unavailable("secrets are sealed; unseal before deleting a tenant");
  }
  TESSERA_ASSIGN_OR_RETURN(size_t revoked, leases_->revokePrefix(tenant, ""));
  (void)revoked;
  const size_t left = leases_->list(tenant, "").size();
  if (left > 0) {
    return core::failedPrecondition("tenant '" + tenant + "' still has " + std::to_string(left) +
                                    " lease(s) that could not be revoked (see GET "
                                    "sys/leases?tenant=" +
                                    tenant + "); force-revoke them first");
  }
  const std::string prefix = "/secrets/" + tenant + "/";
  TESSERA_RETURN_IF_ERROR(store_.deleteRange(prefix, store::prefixEnd(prefix)).status());
  return keys_->shred(tenant);
}

core::Result<size_t> Secrets::rewrap() {
  const uint32_t active = keys_->activeTerm();
  if (active == 0) {
    return core::unavailable("secrets are sealed");
  }
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r,
                           store_.range("/secrets/", store::prefixEnd("/secrets/")));
  size_t rewritten = 0;
  for (const store::KeyValue& kv : r.kvs) {
    auto term = Barrier::termOf(kv.value);
    if (!term.isOk() || *term >= active) {
      continue;  // Not sealed (plain config) or already current.
    }
    const size_t slash = kv.key.find('/', 9);  // After "/secrets/".
    const std::string tenant = kv.key.substr(9, slash - 9);
    TESSERA_ASSIGN_OR_RETURN(std::string plain, keys_->decrypt(tenant, kv.key, kv.value));
    TESSERA_ASSIGN_OR_RETURN(std::string sealed, keys_->encrypt(tenant, kv.key, plain));
    store::Txn txn{
        .compares = {store::Compare::modRevision(kv.key, store::Compare::kEqual, kv.mod_revision)},
        .success = {store::Op::put(kv.key, std::move(sealed))},
        .failure = {}};
    TESSERA_ASSIGN_OR_RETURN(store::TxnResult t, store_.txn(std::move(txn)));
    rewritten += t.succeeded ? 1 : 0;  // Changed meanwhile: the writer used the new term.
  }
  return rewritten;
}

}  // namespace tessera::secrets
