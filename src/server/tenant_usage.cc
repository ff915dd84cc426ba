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
  TESSERA_RETURN_IF_ERROR(u->start());
  return u;
}

core::Status TenantUsage::start() {
  uint64_t generation = 0;
  std::vector<store::WatchId> old;
  {
    std::lock_guard lock(mu_);
    generation = ++generation_;
    old.swap(watches_);
  }
  for (store::WatchId w : old) {
    store_.cancelWatch(w);  // Not under mu_: it waits for a running callback.
  }
  store::Txn read;
  for (std::string_view prefix : kPrefixes) {
    read.success.push_back(store::Op::get(std::string(prefix), store::prefixEnd(prefix)));
  }
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult got, store_.txn(std::move(read)));
  std::map<std::string, int64_t, std::less<>> counted;
  for (const store::OpResult& r : got.results) {
    for (const store::KeyValue& kv : r.range.kvs) {
      if (std::string_view t = tenantOf(kv.key); !t.empty()) {
        counted[std::string(t)] += sizeOf(kv);
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    bytes_ = std::move(counted);
  }
  for (std::string_view prefix : kPrefixes) {
    auto w = store_.watch(
        prefix, store::prefixEnd(prefix), got.revision + 1,
        [this, generation](const store::WatchResponse& resp) { apply(resp, generation); });
    if (!w.isOk()) {
      return w.status();  // Started again (Resumer), the watch made here with it.
    }
    std::lock_guard lock(mu_);
    watches_.push_back(*w);
  }
  return core::Status::ok();
}

core::Status TenantUsage::startAgain() {
  TESSERA_RETURN_IF_ERROR(start());
  core::logInfo("tenant byte usage counted again and followed from the store's revision");
  return core::Status::ok();
}

TenantUsage::~TenantUsage() {
  again_.stop();
  for (store::WatchId w : watches_) {
    store_.cancelWatch(w);
  }
}

int64_t TenantUsage::bytes(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = bytes_.find(tenant);
  return it == bytes_.end() ? 0 : it->second;
}

void TenantUsage::apply(const store::WatchResponse& w, uint64_t generation) {
  std::lock_guard lock(mu_);
  if (generation != generation_) {
    return;  // A watch of an earlier start, ending.
  }
  if (!w.error.isOk()) {
    core::logError("tenant byte usage stopped following the store: {}; counting again",
                   w.error.message());
    again_.due();
    return;
  }
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
