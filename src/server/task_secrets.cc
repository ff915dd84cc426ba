#include "server/task_secrets.h"

#include <openssl/crypto.h>

#include <iostream>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/log.h"
#include "core/rfc3339.h"
#include "model/task.h"
#include "server/api_util.h"

namespace tessera::server {

using nlohmann::json;

namespace {

constexpr std::string_view kPrefix = "/taskcreds/";

}  // namespace

TaskSecrets::TaskSecrets(secrets::Secrets& engine, store::Store& store, audit::Auditor& auditor,
                         const core::Clock& clock, TaskSecretsOptions options)
    : engine_(engine), store_(store), auditor_(auditor), clock_(clock), options_(options) {}

std::string TaskSecrets::recordKey(const std::string& tenant, const std::string& key) {
  return std::string(kPrefix) + tenant + "/" + key;
}

core::Status TaskSecrets::load() {
  const std::string prefix(kPrefix);
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(prefix, store::prefixEnd(prefix)));
  std::lock_guard lock(mu_);
  for (const store::KeyValue& kv : r.kvs) {
    // /taskcreds/<tenant>/<task>@<generation>
    const std::string rest = kv.key.substr(prefix.size());
    const size_t slash = rest.find('/');
    const json j = json::parse(kv.value, nullptr, false);
    if (slash == std::string::npos || !j.is_object() || !j.contains("leases") ||
        !j["leases"].is_array()) {
      core::logWarn("ignoring a malformed task credentials record at {}", kv.key);
      continue;
    }
    auto e = std::make_shared<Entry>();
    e->tenant = rest.substr(0, slash);
    e->workload = j.value("workload", "");
    e->index = j.value("index", 0);
    for (const json& id : j["leases"]) {
      if (id.is_string()) {
        e->stored_leases.push_back(id.get<std::string>());
      }
    }
    entries_[rest.substr(slash + 1)] = std::move(e);
  }
  return core::Status::ok();
}

core::Result<json> TaskSecrets::readKv(const std::string& tenant,
                                       const std::vector<std::string>& paths) const {
  json out = json::object();
  for (const std::string& path : paths) {
    auto r = engine_.kv().read(tenant, path, 0);
    if (!r.isOk()) {
      return core::Status(r.status().code(), "secret '" + path + "': " + r.status().message());
    }
    out[path] = std::move(r->data);
  }
  return out;
}

std::string TaskSecrets::render(const json& kv, const std::vector<DbCred>& db) const {
  json dbj = json::object();
  for (const DbCred& c : db) {
    dbj[c.role] = {{"username", c.username},
                   {"password", c.password},
                   {"lease_id", c.lease.id},
                   {"expire_time", core::formatRfc3339Millis(c.lease.expires)},
                   {"revocable", true}};
  }
  std::string out = json{{"kv", kv}, {"db", std::move(dbj)}}.dump(2);
  out.push_back('\n');
  return out;
}

core::Status TaskSecrets::audit(const std::string& tenant, const std::string& what,
                                const std::string& key, const json& details) {
  audit::AuditEvent ev;
  ev.type = audit::AuditType::kResponse;
  ev.request_id = api::requestId();
  ev.tenant = tenant;
  ev.auth.policies = {"task-credentials"};
  ev.request.method = "TASK";
  ev.request.path = "tenants/" + tenant + "/tasks/" + key + "/credentials";
  ev.request.body = details;
  ev.request.body["event"] = what;
  ev.response.status = 200;
  return auditor_.record(ev);
}

void TaskSecrets::setContent(Entry& e, std::string content) {
  OPENSSL_cleanse(e.content.data(), e.content.size());
  e.content = std::move(content);
}

void TaskSecrets::wipe(std::vector<DbCred>& creds) {
  for (DbCred& c : creds) {
    OPENSSL_cleanse(c.password.data(), c.password.size());
  }
  creds.clear();
}

core::Status TaskSecrets::persistLocked(const Entry& e, const std::string& key) {
  json leases = json::array();
  for (const DbCred& c : e.db) {
    leases.push_back(c.lease.id);
  }
  for (const std::string& id : e.stored_leases) {
    leases.push_back(id);
  }
  const json record = {{"workload", e.workload}, {"index", e.index}, {"leases", leases}};
  return store_.put(recordKey(e.tenant, key), record.dump()).status();
}

core::Status TaskSecrets::issueLocked(Entry& e, const NodeTask& t, const std::string& key) {
  TESSERA_ASSIGN_OR_RETURN(json kv, readKv(t.tenant, t.secrets.kv));
  std::vector<DbCred> made;
  auto undo = [&] {
    for (const DbCred& c : made) {
      (void)engine_.leases().revoke(t.tenant, c.lease.id);  // Retried by the lease manager.
    }
    wipe(made);
    wipe(e.db);
  };
  for (const std::string& role : t.secrets.db) {
    auto c = engine_.db().createCredential(t.tenant, role, core::Duration::zero());
    if (!c.isOk()) {
      undo();
      return core::Status(c.status().code(),
                          "database role '" + role + "': " + c.status().message());
    }
    const core::WallTime issued = c->lease.issued;
    made.push_back(
        {role, c->username, c->password, c->lease, issued + (c->lease.expires - issued) / 2});
    OPENSSL_cleanse(c->password.data(), c->password.size());
  }
  json leases = json::array();
  for (const DbCred& c : made) {
    leases.push_back(c.lease.id);
  }
  e.tenant = t.tenant;
  e.workload = t.workload;
  e.index = t.index;
  e.db = made;
  if (!made.empty()) {
    if (core::Status put = persistLocked(e, key); !put.isOk()) {
      undo();
      return put;
    }
  }
  const json details = {{"workload", t.workload},
                        {"task", t.index},
                        {"kv", t.secrets.kv},
                        {"db", t.secrets.db},
                        {"leases", leases}};
  if (!audit(t.tenant, "task credentials issued", key, details).isOk()) {
    undo();
    (void)store_.deleteRange(recordKey(t.tenant, key));
    return core::unavailable("the audit log cannot record the task's credentials");
  }
  wipe(made);
  e.kv = std::move(kv);
  setContent(e, render(e.kv, e.db));
  e.kv_read = clock_.wallNow();
  e.resolved = true;
  return core::Status::ok();
}

core::Result<PullCredentials> registryLogin(const json& data, const std::string& registry) {
  if (!data.is_object()) {
    return core::invalidArgument("its data is not an object");
  }
  json doc = data;
  for (const char* key : {".dockerconfigjson", "auths"}) {
    if (data.contains(key) && data[key].is_string()) {
      const json parsed = json::parse(data[key].get<std::string>(), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object()) {
        return core::invalidArgument(std::string("its \"") + key + "\" is not JSON");
      }
      doc = std::string_view(key) == "auths" ? json{{"auths", parsed}} : parsed;
      break;
    }
  }
  if (!doc.contains("auths")) {
    if (doc.contains("username") && doc["username"].is_string() && doc.contains("password") &&
        doc["password"].is_string()) {
      if (doc.contains("registry") && doc["registry"] != registry) {
        return core::notFound("it is for registry " + doc["registry"].dump() + ", not " + registry);
      }
      return PullCredentials{doc["username"].get<std::string>(),
                             doc["password"].get<std::string>()};
    }
    return core::invalidArgument(
        "expected Docker's config.json ({\"auths\": {...}}, or as a string under "
        "\".dockerconfigjson\") or {\"username\", \"password\"}");
  }
  if (!doc["auths"].is_object()) {
    return core::invalidArgument("its \"auths\" is not an object");
  }
  // How Docker writes the key: the host, or a URL of it; Docker Hub's is a v1 URL.
  auto hostOf = [](std::string key) {
    for (const char* scheme : {"https://", "http://"}) {
      if (key.starts_with(scheme)) {
        key = key.substr(std::string_view(scheme).size());
      }
    }
    key = key.substr(0, key.find('/'));
    if (key == "index.docker.io" || key == "registry-1.docker.io") {
      key = "docker.io";
    }
    return key;
  };
  for (const auto& [key, entry] : doc["auths"].items()) {
    if (hostOf(key) != registry) {
      continue;
    }
    const std::string where = "auths[\"" + key.substr(0, 100) + "\"]";
    if (!entry.is_object()) {
      return core::invalidArgument(where + " is not an object");
    }
    PullCredentials c;
    if (entry.contains("auth") && entry["auth"].is_string() &&
        !entry["auth"].get<std::string>().empty()) {
      auto plain = audit::base64Decode(entry["auth"].get<std::string>());
      const size_t colon = plain.isOk() ? plain->find(':') : std::string::npos;
      if (colon == std::string::npos) {
        return core::invalidArgument(where + ".auth is not base64 of \"user:password\"");
      }
      c.username = plain->substr(0, colon);
      c.password = plain->substr(colon + 1);
      OPENSSL_cleanse(plain->data(), plain->size());
      return c;
    }
    for (const auto& [field, out] :
         {std::pair{"username", &c.username}, std::pair{"password", &c.password}}) {
      if (!entry.contains(field) || !entry[field].is_string()) {
        return core::invalidArgument(where + " has neither \"auth\" nor a string \"" + field +
                                     "\"");
      }
      *out = entry[field].get<std::string>();
    }
    return c;
  }
  return core::notFound("it has no login for registry " + registry);
}

std::shared_ptr<TaskSecrets::Entry> TaskSecrets::entryFor(const NodeTask& t,
                                                          const std::string& key) {
  std::lock_guard lock(mu_);
  std::shared_ptr<Entry>& slot = entries_[key];
  if (slot == nullptr) {
    slot = std::make_shared<Entry>();
    slot->tenant = t.tenant;
  }
  return slot;
}

core::Result<PullCredentials> TaskSecrets::pullCredentials(const NodeTask& t) {
  const std::string key = t.id + "@" + std::to_string(t.generation);
  auto ref = model::parseImageRef(t.image);
  if (!ref.isOk() || ref->kind != model::ImageRef::Kind::kRegistry) {
    return core::failedPrecondition("a pull secret is for an image from a registry");
  }
  const std::shared_ptr<Entry> e = entryFor(t, key);
  std::lock_guard lock(e->mu);
  if (e->ended) {
    return core::failedPrecondition("the task has ended; its credentials are revoked");
  }
  const core::WallTime now = clock_.wallNow();
  if (e->pull_resolved && now - e->pull_read < options_.kv_refresh) {
    return e->pull;
  }
  const std::string& path = t.secrets.pull;
  auto read = engine_.kv().read(t.tenant, path, 0);
  if (!read.isOk()) {
    if (e->pull_resolved) {
      return e->pull;  // A failed refresh keeps the login the task has.
    }
    return core::Status(read.status().code(),
                        "pull secret '" + path + "': " + read.status().message());
  }
  auto login = registryLogin(read->data, ref->registry);
  if (!login.isOk()) {
    if (e->pull_resolved) {
      return e->pull;
    }
    return core::Status(login.status().code(),
                        "pull secret '" + path + "': " + login.status().message());
  }
  e->pull_read = now;
  if (e->pull_resolved && login->username == e->pull.username &&
      login->password == e->pull.password) {
    OPENSSL_cleanse(login->password.data(), login->password.size());
    return e->pull;
  }
  const json details = {{"workload", t.workload},
                        {"task", t.index},
                        {"kv_path", path},
                        {"registry", ref->registry},
                        {"username", login->username},
                        {"password", login->password}};
  if (!audit(t.tenant, "pull secret read", key, details).isOk()) {
    OPENSSL_cleanse(login->password.data(), login->password.size());
    return core::unavailable("the audit log cannot record the read of the pull secret");
  }
  OPENSSL_cleanse(e->pull.password.data(), e->pull.password.size());
  e->pull = std::move(login).value();
  e->pull_resolved = true;
  return e->pull;
}

core::Result<json> TaskSecrets::readVolumes(const NodeTask& t) const {
  json out = json::array();
  for (size_t i = 0; i < t.volumes.size(); ++i) {
    const WorkloadVolume& v = t.volumes[i];
    if (v.kv.empty()) {
      out.push_back(nullptr);
      continue;
    }
    const std::string where = "volumes[" + std::to_string(i) + "]: secret '" + v.kv + "'";
    auto r = engine_.kv().read(t.tenant, v.kv, 0);
    if (!r.isOk()) {
      if (r.status().code() == core::StatusCode::kNotFound && v.optional) {
        out.push_back(nullptr);
        continue;
      }
      return core::Status(r.status().code(), where + ": " + r.status().message());
    }
    if (!r->data.is_object()) {
      return core::failedPrecondition(where + ": its data is not an object of keys");
    }
    for (const auto& [key, file] : v.items) {
      if (!r->data.contains(key) && !v.optional) {
        return core::notFound(where + ": no key '" + key + "'");
      }
    }
    out.push_back(std::move(r->data));
  }
  return out;
}

core::Result<std::vector<protocol::TaskVolume>> TaskSecrets::volumes(const NodeTask& t) {
  const std::string key = t.id + "@" + std::to_string(t.generation);
  const std::shared_ptr<Entry> e = entryFor(t, key);
  std::lock_guard lock(e->mu);
  if (e->ended) {
    return core::failedPrecondition("the task has ended; its credentials are revoked");
  }
  const core::WallTime now = clock_.wallNow();
  if (!e->volumes_resolved || now - e->volumes_read >= options_.kv_refresh) {
    auto data = readVolumes(t);
    if (!data.isOk() && !e->volumes_resolved) {
      return data.status();
    }
    if (data.isOk() && (!e->volumes_resolved || *data != e->volume_kv)) {
      json paths = json::array();
      for (const WorkloadVolume& v : t.volumes) {
        if (!v.kv.empty()) {
          paths.push_back(v.kv);
        }
      }
      const json details = {{"workload", t.workload}, {"task", t.index}, {"kv", paths}};
      if (!audit(t.tenant, "volumes read", key, details).isOk()) {
        if (!e->volumes_resolved) {
          return core::unavailable("the audit log cannot record the read of the task's volumes");
        }
      } else {
        e->volume_kv = std::move(data).value();
        e->volumes_resolved = true;
      }
    }
    e->volumes_read = now;
  }
  std::vector<protocol::TaskVolume> out;
  for (size_t i = 0; i < t.volumes.size(); ++i) {
    const WorkloadVolume& v = t.volumes[i];
    protocol::TaskVolume tv;
    tv.path = v.path;
    if (v.kv.empty()) {
      tv.tmpfs = true;
      tv.size_mib = v.size_mib;
      out.push_back(std::move(tv));
      continue;
    }
    const json& data = e->volume_kv.at(i);
    auto content = [](const json& value) {
      return value.is_string() ? value.get<std::string>() : value.dump();
    };
    if (data.is_object()) {
      if (v.items.empty()) {
        for (const auto& [k, value] : data.items()) {
          if (k.find('/') == std::string::npos && protocol::isVolumeFilePath(k)) {
            tv.files[k] = content(value);
          }
        }
      } else {
        for (const auto& [k, file] : v.items) {
          if (data.contains(k)) {
            tv.files[file] = content(data[k]);
          }
        }
      }
    }
    out.push_back(std::move(tv));
  }
  return out;
}

core::Result<std::string> TaskSecrets::resolve(const NodeTask& t) {
  const std::string key = t.id + "@" + std::to_string(t.generation);
  const std::shared_ptr<Entry> e = entryFor(t, key);
  std::lock_guard lock(e->mu);
  if (e->ended) {
    return core::failedPrecondition("the task has ended; its credentials are revoked");
  }
  if (!e->resolved) {
    TESSERA_RETURN_IF_ERROR(issueLocked(*e, t, key));
    return e->content;
  }
  const core::WallTime now = clock_.wallNow();
  if (!t.secrets.kv.empty() && now - e->kv_read >= options_.kv_refresh) {
    // A failed refresh keeps the values the task has.
    if (auto kv = readKv(t.tenant, t.secrets.kv); kv.isOk() && *kv != e->kv) {
      e->kv = std::move(kv).value();
      setContent(*e, render(e->kv, e->db));
    }
    e->kv_read = now;
  }
  return e->content;
}

void TaskSecrets::revokeLocked(Entry& e, const std::string& key) {
  json leases = json::array();
  for (const DbCred& c : e.db) {
    leases.push_back(c.lease.id);
  }
  for (const std::string& id : e.stored_leases) {
    leases.push_back(id);
  }
  for (const json& id : leases) {
    // A failed attempt is retried by the lease manager (and the lease expires anyway).
    const core::Status s = engine_.leases().revoke(e.tenant, id.get<std::string>());
    if (!s.isOk() && s.code() != core::StatusCode::kNotFound) {
      core::logWarn("revoking lease {} of task {}: {} (retried)", id.get<std::string>(), key,
                    s.message());
    }
  }
  if (!leases.empty()) {
    (void)store_.deleteRange(recordKey(e.tenant, key));
  }
  if (e.resolved || !leases.empty()) {
    (void)audit(e.tenant, "task credentials revoked", key,
                {{"workload", e.workload}, {"task", e.index}, {"leases", leases}});
  }
  wipe(e.db);
  OPENSSL_cleanse(e.pull.password.data(), e.pull.password.size());
  e.pull = {};
  setContent(e, "");
  e.kv = json();
  e.stored_leases.clear();
  e.ended = true;
}

size_t TaskSecrets::sweep(const std::function<std::set<std::string>()>& live_tasks) {
  std::vector<std::pair<std::string, std::shared_ptr<Entry>>> all;
  {
    std::lock_guard lock(mu_);
    all.assign(entries_.begin(), entries_.end());
  }
  // Asked after the entries were taken: an entry is made only for a task that was live, so one
  // missing from this set has ended (asked before, a task started in between would look ended).
  const std::set<std::string> live = live_tasks();
  size_t revoked = 0;
  const core::WallTime now = clock_.wallNow();
  for (auto& [key, e] : all) {
    std::lock_guard lock(e->mu);
    if (e->ended) {
      continue;
    }
    if (!live.contains(key)) {
      revokeLocked(*e, key);
      ++revoked;
      std::lock_guard map_lock(mu_);
      entries_.erase(key);
      continue;
    }
    bool changed = false;
    for (DbCred& c : e->db) {
      if (now < c.renew_at) {
        continue;
      }
      if (c.lease.expires < c.lease.max_expires) {
        auto r = engine_.leases().renew(e->tenant, c.lease.id, core::Duration::zero());
        if (r.isOk()) {
          // Renewed from now by the lease's TTL: the next renewal is due half of it from here.
          c.renew_at = now + (r->expires - now) / 2;
          c.lease.expires = r->expires;
          changed = true;
        }
        continue;
      }
      // At its max TTL: a new credential takes over while the old one still works (a task
      // reads the file again when a login fails). The old one ends by itself, or with the task.
      auto fresh = engine_.db().createCredential(e->tenant, c.role, core::Duration::zero());
      if (!fresh.isOk()) {
        continue;  // Tried again at the next sweep; the old one lasts until its max TTL.
      }
      e->stored_leases.push_back(c.lease.id);
      const std::string old_lease = c.lease.id;
      OPENSSL_cleanse(c.password.data(), c.password.size());
      c.username = fresh->username;
      c.password = fresh->password;
      OPENSSL_cleanse(fresh->password.data(), fresh->password.size());
      c.lease = fresh->lease;
      c.renew_at = now + (c.lease.expires - now) / 2;
      (void)persistLocked(*e, key);
      (void)audit(e->tenant, "task credentials rotated", key,
                  {{"workload", e->workload},
                   {"task", e->index},
                   {"role", c.role},
                   {"lease", c.lease.id},
                   {"replaces", old_lease}});
      changed = true;
    }
    if (changed) {
      setContent(*e, render(e->kv, e->db));  // The new expiry or credential reaches the task.
    }
  }
  return revoked;
}

core::Status TaskSecrets::forgetTenant(const std::string& tenant) {
  {
    std::lock_guard lock(mu_);
    std::erase_if(entries_, [&](const auto& kv) { return kv.second->tenant == tenant; });
  }
  const std::string prefix = std::string(kPrefix) + tenant + "/";
  return store_.deleteRange(prefix, store::prefixEnd(prefix)).status();
}

size_t TaskSecrets::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace tessera::server
