#include "server/workload_registry.h"

#include "core/log.h"

namespace tessera::server {

namespace {

// "/tenants/<t>/workloads/<name>" -> (t, name); nullopt for any other key.
std::optional<std::pair<std::string, std::string>> workloadKeyParts(std::string_view key) {
  constexpr std::string_view kPrefix = "/tenants/";
  constexpr std::string_view kMiddle = "/workloads/";
  if (!key.starts_with(kPrefix)) {
    return std::nullopt;
  }
  key.remove_prefix(kPrefix.size());
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos || slash == 0 ||
      key.substr(slash, kMiddle.size()) != kMiddle) {
    return std::nullopt;
  }
  const std::string_view name = key.substr(slash + kMiddle.size());
  if (name.empty() || name.find('/') != std::string_view::npos) {
    return std::nullopt;
  }
  return std::make_pair(std::string(key.substr(0, slash)), std::string(name));
}

}  // namespace

core::Status WorkloadRegistry::load(const std::vector<store::KeyValue>& kvs, int64_t revision) {
  std::map<std::string, Tenant> loaded;
  for (const store::KeyValue& kv : kvs) {
    auto parts = workloadKeyParts(kv.key);
    if (!parts) {
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(WorkloadRecord r, decodeWorkload(kv.value, kv.key));
    r.create_revision = kv.create_revision;
    r.mod_revision = kv.mod_revision;
    Tenant& t = loaded[parts->first];
    t.pending += r.status.phase == WorkloadPhase::kPending ? 1 : 0;
    t.index = revision;
    t.workloads[parts->second] = std::make_shared<const WorkloadRecord>(std::move(r));
  }
  std::unique_lock lock(mu_);
  tenants_ = std::move(loaded);
  revision_ = loaded_revision_ = horizon_ = revision;
  changes_.clear();
  reached_.notify_all();
  return core::Status::ok();
}

void WorkloadRegistry::putLocked(const std::string& tenant, WorkloadPtr record) {
  Tenant& t = tenants_[tenant];
  WorkloadPtr& slot = t.workloads[record->name];
  t.pending -= slot && slot->status.phase == WorkloadPhase::kPending ? 1 : 0;
  t.pending += record->status.phase == WorkloadPhase::kPending ? 1 : 0;
  slot = std::move(record);
}

void WorkloadRegistry::eraseLocked(const std::string& tenant, const std::string& name) {
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) {
    return;
  }
  auto it = t->second.workloads.find(name);
  if (it != t->second.workloads.end()) {
    t->second.pending -= it->second->status.phase == WorkloadPhase::kPending ? 1 : 0;
    t->second.workloads.erase(it);
  }
}

std::vector<WorkloadChange> WorkloadRegistry::apply(const store::WatchResponse& w) {
  std::vector<WorkloadChange> made;
  if (!w.error.isOk()) {
    return made;
  }
  // Decoded outside the lock: a pass's status write can carry hundreds of records.
  struct Decoded {
    std::string tenant;
    std::string name;
    WorkloadPtr record;  // Null: deleted.
    int64_t revision = 0;
  };
  std::vector<Decoded> decoded;
  for (const store::Event& e : w.events) {
    auto parts = workloadKeyParts(e.kv.key);
    if (!parts) {
      continue;
    }
    Decoded d{parts->first, parts->second, nullptr, e.kv.mod_revision};
    if (e.type == store::EventType::kPut) {
      auto r = decodeWorkload(e.kv.value, e.kv.key);
      if (!r.isOk()) {
        core::logError("workload registry: {}; passed over", r.status().message());
        continue;
      }
      r->create_revision = e.kv.create_revision;
      r->mod_revision = e.kv.mod_revision;
      d.record = std::make_shared<const WorkloadRecord>(std::move(r).value());
    }
    decoded.push_back(std::move(d));
  }
  std::unique_lock lock(mu_);
  for (Decoded& d : decoded) {
    WorkloadPtr before = getLocked(d.tenant, d.name);
    if (d.record == nullptr && before == nullptr) {
      continue;  // A delete of a key it never had.
    }
    WorkloadChange c;
    c.revision = std::max(d.revision, w.revision);
    c.tenant = d.tenant;
    c.name = d.name;
    if (d.record == nullptr) {
      c.type = WorkloadChange::Type::kDeleted;
      c.record = before;
      eraseLocked(d.tenant, d.name);
    } else {
      c.type = before ? WorkloadChange::Type::kModified : WorkloadChange::Type::kAdded;
      c.record = d.record;
      c.before = before;
      putLocked(d.tenant, d.record);
    }
    tenants_[d.tenant].index = std::max(tenants_[d.tenant].index, c.revision);
    changes_.push_back(c);
    made.push_back(std::move(c));
  }
  while (changes_.size() > history_) {
    horizon_ = changes_.front().revision;
    changes_.pop_front();
  }
  revision_ = std::max(revision_, w.revision);
  reached_.notify_all();
  return made;
}

store::WatchResponse WorkloadRegistry::catchUp(const store::RangeResult& now) const {
  store::WatchResponse out;
  out.revision = now.revision;
  std::shared_lock lock(mu_);
  std::set<std::pair<std::string, std::string>> present;
  for (const store::KeyValue& kv : now.kvs) {
    auto parts = workloadKeyParts(kv.key);
    if (!parts) {
      continue;
    }
    WorkloadPtr held = getLocked(parts->first, parts->second);
    if (held == nullptr || held->mod_revision != kv.mod_revision) {
      out.events.push_back({store::EventType::kPut, kv, std::nullopt});
    }
    present.insert(std::move(*parts));
  }
  for (const auto& [tenant, t] : tenants_) {
    for (const auto& [name, record] : t.workloads) {
      if (!present.contains({tenant, name})) {
        store::Event gone;
        gone.type = store::EventType::kDelete;
        gone.kv.key = "/tenants/" + tenant + "/workloads/" + name;
        gone.kv.mod_revision = now.revision;
        out.events.push_back(std::move(gone));
      }
    }
  }
  return out;
}

WorkloadPtr WorkloadRegistry::getLocked(const std::string& tenant, const std::string& name) const {
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) {
    return nullptr;
  }
  auto it = t->second.workloads.find(name);
  return it == t->second.workloads.end() ? nullptr : it->second;
}

int64_t WorkloadRegistry::revision() const {
  std::shared_lock lock(mu_);
  return revision_;
}

bool WorkloadRegistry::waitFor(int64_t revision, std::chrono::milliseconds timeout) const {
  std::shared_lock lock(mu_);
  return reached_.wait_for(lock, timeout, [&] { return revision_ >= revision; });
}

WorkloadPtr WorkloadRegistry::get(const std::string& tenant, const std::string& name) const {
  std::shared_lock lock(mu_);
  return getLocked(tenant, name);
}

std::vector<WorkloadPtr> WorkloadRegistry::list(const std::string& tenant) const {
  std::vector<WorkloadPtr> out;
  std::shared_lock lock(mu_);
  if (auto t = tenants_.find(tenant); t != tenants_.end()) {
    out.reserve(t->second.workloads.size());
    for (const auto& [name, r] : t->second.workloads) {
      out.push_back(r);
    }
  }
  return out;
}

std::pair<std::vector<WorkloadPtr>, int64_t> WorkloadRegistry::snapshot(
    const std::string& tenant) const {
  std::pair<std::vector<WorkloadPtr>, int64_t> out;
  std::shared_lock lock(mu_);
  if (auto t = tenants_.find(tenant); t != tenants_.end()) {
    for (const auto& [name, r] : t->second.workloads) {
      out.first.push_back(r);
    }
  }
  out.second = revision_;
  return out;
}

std::vector<std::pair<std::string, WorkloadPtr>> WorkloadRegistry::all() const {
  std::vector<std::pair<std::string, WorkloadPtr>> out;
  std::shared_lock lock(mu_);
  for (const auto& [tenant, t] : tenants_) {
    for (const auto& [name, r] : t.workloads) {
      out.emplace_back(tenant, r);
    }
  }
  return out;
}

size_t WorkloadRegistry::count(const std::string& tenant) const {
  std::shared_lock lock(mu_);
  auto t = tenants_.find(tenant);
  return t == tenants_.end() ? 0 : t->second.workloads.size();
}

int64_t WorkloadRegistry::pending(const std::string& tenant) const {
  std::shared_lock lock(mu_);
  auto t = tenants_.find(tenant);
  return t == tenants_.end() ? 0 : t->second.pending;
}

int64_t WorkloadRegistry::index(const std::string& tenant) const {
  std::shared_lock lock(mu_);
  auto t = tenants_.find(tenant);
  return t == tenants_.end() ? loaded_revision_ : std::max(t->second.index, loaded_revision_);
}

core::Result<std::vector<WorkloadChange>> WorkloadRegistry::changesSince(const std::string& tenant,
                                                                         int64_t revision,
                                                                         int64_t* through) const {
  std::shared_lock lock(mu_);
  if (through != nullptr) {
    *through = revision_;
  }
  if (revision < horizon_) {
    return core::outOfRange("too old resource version: " + std::to_string(revision) + " (" +
                            std::to_string(horizon_) + ")");
  }
  std::vector<WorkloadChange> out;
  // From the first change after `revision` (the window is in revision order).
  auto it = std::upper_bound(changes_.begin(), changes_.end(), revision,
                             [](int64_t rev, const WorkloadChange& c) { return rev < c.revision; });
  for (; it != changes_.end(); ++it) {
    if (it->tenant == tenant) {
      out.push_back(*it);
    }
  }
  return out;
}

int64_t WorkloadRegistry::oldestRevision() const {
  std::shared_lock lock(mu_);
  return horizon_;
}

}  // namespace tessera::server
