#include "server/tenant_usage.h"

#include "core/log.h"

namespace tessera::server {
namespace {

constexpr std::string_view kPrefixes[] = {"/tenants/", "/secrets/"};

int64_t sizeOf(const store::KeyValue& kv) {
  return static_cast<int64_t>(kv.key.size() + kv.value.size());
}

}  // namespace

std::string_view TenantUsage::tenantOf(std::string_view key) {
  for (std::string_view prefix : kPrefixes) {
    if (key.starts_with(prefix)) {
      std::string_view rest = key.substr(prefix.size());
      return rest.substr(0, rest.find('/'));
    }
  }
  return {};
}

core::Result<std::unique_ptr<TenantUsage>> TenantUsage::open(store::Store& store) {
  std::unique_ptr<TenantUsage> u(new TenantUsage(store));
  store::Txn read;
  for (std::string_view prefix : kPrefixes) {
    read.success.push_back(store::Op::get(std::string(prefix), store::prefixEnd(prefix)));
  }
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult got, store.txn(std::move(read)));
  for (const store::OpResult& r : got.results) {
    for (const store::KeyValue& kv : r.range.kvs) {
      if (std::string_view t = tenantOf(kv.key); !t.empty()) {
        u->bytes_[std::string(t)] += sizeOf(kv);
      }
    }
  }
  TenantUsage* self = u.get();
  for (std::string_view prefix : kPrefixes) {
    TESSERA_ASSIGN_OR_RETURN(
        store::WatchId w,
        store.watch(prefix, store::prefixEnd(prefix), got.revision + 1,
                    [self](const store::WatchResponse& resp) { self->apply(resp); }));
    u->watches_.push_back(w);
  }
  return u;
}

TenantUsage::~TenantUsage() {
  for (store::WatchId w : watches_) {
    store_.cancelWatch(w);
  }
}

int64_t TenantUsage::bytes(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = bytes_.find(tenant);
  return it == bytes_.end() ? 0 : it->second;
}

void TenantUsage::apply(const store::WatchResponse& w) {
  if (!w.error.isOk()) {
    core::logError("tenant byte usage no longer follows the store: {}", w.error.message());
    return;
  }
  std::lock_guard lock(mu_);
  for (const store::Event& e : w.events) {
    const std::string_view t = tenantOf(e.kv.key);
    if (t.empty()) {
      continue;
    }
    int64_t delta = e.type == store::EventType::kPut ? sizeOf(e.kv) : 0;
    if (e.prev_kv) {
      delta -= sizeOf(*e.prev_kv);
    }
    auto it = bytes_.find(t);
    if (it == bytes_.end()) {
      it = bytes_.emplace(std::string(t), 0).first;
    }
    it->second += delta;
    if (it->second <= 0) {
      bytes_.erase(it);
    }
  }
}

}  // namespace tessera::server
