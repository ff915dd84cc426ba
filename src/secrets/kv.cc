#include "secrets/kv.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <functional>
#include <set>

#include "audit/record.h"
#include "core/rfc3339.h"

namespace tessera::secrets {
namespace {

using nlohmann::json;

std::string kvPrefix(const std::string& tenant) { return "/secrets/" + tenant + "/kv/"; }
std::string configKey(const std::string& tenant) { return "/secrets/" + tenant + "/kvconfig"; }

int64_t effectiveMax(const KvEntry& e, const KvConfig& c) {
  const int64_t mount = c.max_versions > 0 ? c.max_versions : kDefaultMaxVersions;
  return e.max_versions > 0 ? std::min(e.max_versions, mount) : mount;
}

constexpr int kCasRetries = 16;

// Parses a stored entry. With `only_version` (0: the current one), the other versions are skipped
// while parsing, so a read neither builds nor holds the values it does not return. The stored
// form lists "current" before "versions" (nlohmann keeps object keys sorted); were it not so, no
// version would be skipped.
json parseEntry(const std::string& plain, std::optional<int64_t> only_version) {
  if (!only_version) {
    return json::parse(plain);
  }
  std::string top;     // The top-level key being parsed.
  std::string wanted;  // The version to keep, once known.
  if (*only_version != 0) {
    wanted = std::to_string(*only_version);
  }
  const json::parser_callback_t keep = [&](int depth, json::parse_event_t event,
                                           json& parsed) -> bool {
    if (depth == 1 && event == json::parse_event_t::key) {
      top = parsed.get<std::string>();
    } else if (depth == 1 && event == json::parse_event_t::value && top == "current" &&
               wanted.empty() && parsed.is_number_integer()) {
      wanted = std::to_string(parsed.get<int64_t>());
    } else if (depth == 2 && event == json::parse_event_t::key && top == "versions" &&
               !wanted.empty()) {
      return parsed.get<std::string>() == wanted;
    }
    return true;
  };
  return json::parse(plain, keep);
}

}  // namespace

json KvEntry::toJson() const {
  json vs = json::object();
  for (const auto& [n, v] : versions) {
    json jv = {
        {"created", core::unixMillis(v.created)}, {"destroyed", v.destroyed}, {"data", v.data}};
    if (v.deleted) {
      jv["deleted"] = core::unixMillis(*v.deleted);
    }
    vs[std::to_string(n)] = std::move(jv);
  }
  return {{"current", current},
          {"oldest", oldest},
          {"max_versions", max_versions},
          {"cas_required", cas_required},
          {"custom_metadata", custom_metadata},
          {"created", core::unixMillis(created)},
          {"updated", core::unixMillis(updated)},
          {"versions", std::move(vs)}};
}

core::Result<KvEntry> KvEntry::fromJson(const json& j) {
  try {
    KvEntry e;
    e.current = j.at("current").get<int64_t>();
    e.oldest = j.at("oldest").get<int64_t>();
    e.max_versions = j.at("max_versions").get<int64_t>();
    e.cas_required = j.at("cas_required").get<bool>();
    e.custom_metadata = j.at("custom_metadata");
    e.created = core::fromUnixMillis(j.at("created").get<int64_t>());
    e.updated = core::fromUnixMillis(j.at("updated").get<int64_t>());
    for (const auto& [n, jv] : j.at("versions").items()) {
      KvVersion v;
      v.created = core::fromUnixMillis(jv.at("created").get<int64_t>());
      v.destroyed = jv.at("destroyed").get<bool>();
      v.data = jv.at("data");
      if (jv.contains("deleted")) {
        v.deleted = core::fromUnixMillis(jv["deleted"].get<int64_t>());
      }
      e.versions[std::stoll(n)] = std::move(v);
    }
    return e;
  } catch (const std::exception& ex) {
    return core::internalError(std::string("kv: a stored entry is malformed: ") + ex.what());
  }
}

json KvEntry::metadataJson() const {
  json vs = json::object();
  for (const auto& [n, v] : versions) {
    vs[std::to_string(n)] = {
        {"created_time", core::formatRfc3339Millis(v.created)},
        {"deletion_time", v.deleted ? core::formatRfc3339Millis(*v.deleted) : ""},
        {"destroyed", v.destroyed}};
  }
  return {{"current_version", current},
          {"oldest_version", oldest},
          {"max_versions", max_versions},
          {"cas_required", cas_required},
          {"custom_metadata", custom_metadata},
          {"created_time", core::formatRfc3339Millis(created)},
          {"updated_time", core::formatRfc3339Millis(updated)},
          {"versions", std::move(vs)}};
}

core::Result<int64_t> kvPut(KvEntry& e, json data, std::optional<int64_t> cas,
                            const KvConfig& config, core::WallTime now) {
  if (!data.is_object()) {
    return core::invalidArgument("kv: \"data\" must be an object");
  }
  if (!cas && (config.cas_required || e.cas_required)) {
    return core::invalidArgument(
        "kv: check-and-set parameter required for this call (options.cas)");
  }
  if (cas && *cas != e.current) {
    return core::failedPrecondition(
        "kv: check-and-set parameter did not match the current version (cas " +
        std::to_string(*cas) + ", current " + std::to_string(e.current) + ")");
  }
  if (e.current == 0) {
    e.created = now;
  }
  const int64_t v = ++e.current;
  e.versions[v] = KvVersion{now, std::nullopt, false, std::move(data)};
  e.updated = now;
  const int64_t keep = effectiveMax(e, config);
  while (static_cast<int64_t>(e.versions.size()) > keep) {
    e.versions.erase(e.versions.begin());
  }
  e.oldest = e.versions.begin()->first;
  return v;
}

core::Result<const KvVersion*> kvGet(const KvEntry& e, int64_t version) {
  const int64_t v = version == 0 ? e.current : version;
  auto it = e.versions.find(v);
  if (it == e.versions.end()) {
    return core::notFound("kv: no version " + std::to_string(v));
  }
  if (it->second.destroyed) {
    return core::notFound("kv: version " + std::to_string(v) + " is destroyed");
  }
  if (it->second.deleted) {
    return core::notFound("kv: version " + std::to_string(v) + " is deleted");
  }
  return &it->second;
}

core::Result<int64_t> kvPatch(KvEntry& e, const json& patch, std::optional<int64_t> cas,
                              const KvConfig& config, core::WallTime now) {
  if (!patch.is_object()) {
    return core::invalidArgument("kv: \"data\" must be an object");
  }
  TESSERA_ASSIGN_OR_RETURN(const KvVersion* current, kvGet(e, 0));
  json merged = current->data;
  merged.merge_patch(patch);
  return kvPut(e, std::move(merged), cas, config, now);
}

void kvDelete(KvEntry& e, const std::vector<int64_t>& versions, core::WallTime now) {
  std::vector<int64_t> which = versions;
  if (which.empty()) {
    which.push_back(e.current);
  }
  for (int64_t n : which) {
    auto it = e.versions.find(n);
    if (it != e.versions.end() && !it->second.deleted && !it->second.destroyed) {
      it->second.deleted = now;
    }
  }
}

void kvUndelete(KvEntry& e, const std::vector<int64_t>& versions) {
  for (int64_t n : versions) {
    auto it = e.versions.find(n);
    if (it != e.versions.end() && !it->second.destroyed) {
      it->second.deleted.reset();
    }
  }
}

void kvDestroy(KvEntry& e, const std::vector<int64_t>& versions) {
  for (int64_t n : versions) {
    auto it = e.versions.find(n);
    if (it != e.versions.end()) {
      it->second.destroyed = true;
      it->second.data = nullptr;
    }
  }
}

core::Status kvSetMetadata(KvEntry& e, const json& body, core::WallTime now) {
  if (!body.is_object()) {
    return core::invalidArgument("kv: the metadata body must be an object");
  }
  for (const auto& [k, v] : body.items()) {
    if (k != "max_versions" && k != "cas_required" && k != "custom_metadata") {
      return core::invalidArgument("kv: unknown metadata field \"" + k + "\"");
    }
  }
  if (body.contains("max_versions")) {
    const json& m = body["max_versions"];
    if (!m.is_number_integer() || m.get<int64_t>() < 0 || m.get<int64_t>() > 1000) {
      return core::invalidArgument("kv: \"max_versions\" must be an integer in [0, 1000]");
    }
  }
  if (body.contains("cas_required") && !body["cas_required"].is_boolean()) {
    return core::invalidArgument("kv: \"cas_required\" must be true or false");
  }
  if (body.contains("custom_metadata")) {
    const json& c = body["custom_metadata"];
    if (!c.is_object() || c.size() > 64) {
      return core::invalidArgument("kv: \"custom_metadata\" must be an object of at most 64 keys");
    }
    for (const auto& [k, v] : c.items()) {
      if (!v.is_string() || k.size() > 128 || v.get<std::string>().size() > 512) {
        return core::invalidArgument("kv: \"custom_metadata\"." + k +
                                     " must be a string (keys up to 128 bytes, values 512)");
      }
    }
  }
  if (body.contains("max_versions")) {
    e.max_versions = body["max_versions"].get<int64_t>();
  }
  if (body.contains("cas_required")) {
    e.cas_required = body["cas_required"].get<bool>();
  }
  if (body.contains("custom_metadata")) {
    e.custom_metadata = body["custom_metadata"];
  }
  if (e.current == 0 && e.created == core::WallTime{}) {
    e.created = now;
  }
  e.updated = now;
  return core::Status::ok();
}

core::Status KvEngine::checkPath(const std::string& path) {
  if (path.empty() || path.size() > 512) {
    return core::invalidArgument("kv: a key path must be 1 to 512 bytes");
  }
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view seg(path.data() + start, end - start);
    if (seg.empty() || seg == "." || seg == "..") {
      return core::invalidArgument("kv: bad key path '" + path + "' (empty, '.' or '..' segment)");
    }
    start = end + 1;
  }
  for (const char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return core::invalidArgument("kv: the key path holds a control character");
    }
  }
  return core::Status::ok();
}

core::Result<std::optional<KvEntry>> KvEngine::load(const std::string& tenant,
                                                    const std::string& key, int64_t* mod_revision,
                                                    std::optional<int64_t> only_version) const {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(key));
  if (r.kvs.empty()) {
    *mod_revision = 0;
    return std::optional<KvEntry>();
  }
  *mod_revision = r.kvs[0].mod_revision;
  TESSERA_ASSIGN_OR_RETURN(std::string plain, keys_.decrypt(tenant, key, r.kvs[0].value));
  json j;
  try {
    j = parseEntry(plain, only_version);
  } catch (const json::exception&) {
    OPENSSL_cleanse(plain.data(), plain.size());
    return core::internalError("kv: a stored entry is not JSON");
  }
  OPENSSL_cleanse(plain.data(), plain.size());
  TESSERA_ASSIGN_OR_RETURN(KvEntry e, KvEntry::fromJson(j));
  return std::optional<KvEntry>(std::move(e));
}

core::Result<KvRead> KvEngine::read(const std::string& tenant, const std::string& path,
                                    int64_t version) const {
  TESSERA_RETURN_IF_ERROR(checkPath(path));
  int64_t rev = 0;
  TESSERA_ASSIGN_OR_RETURN(std::optional<KvEntry> e,
                           load(tenant, kvPrefix(tenant) + path, &rev, version));
  if (!e) {
    return core::notFound("kv: no secret at '" + path + "'");
  }
  TESSERA_RETURN_IF_ERROR(kvGet(*e, version).status());
  const int64_t n = version == 0 ? e->current : version;
  KvVersion& v = e->versions.at(n);
  return KvRead{std::move(v.data), n, v.created};
}

core::Status KvEngine::update(
    const std::string& tenant, const std::string& path, bool create,
    const std::function<core::Status(KvEntry&, const KvConfig&)>& change) {
  TESSERA_RETURN_IF_ERROR(checkPath(path));
  TESSERA_ASSIGN_OR_RETURN(const KvConfig cfg, config(tenant));
  const std::string key = kvPrefix(tenant) + path;
  for (int attempt = 0; attempt < kCasRetries; ++attempt) {
    int64_t rev = 0;
    TESSERA_ASSIGN_OR_RETURN(std::optional<KvEntry> e, load(tenant, key, &rev));
    if (!e) {
      if (!create) {
        return core::notFound("kv: no secret at '" + path + "'");
      }
      e.emplace();
    }
    TESSERA_RETURN_IF_ERROR(change(*e, cfg));
    std::string plain = e->toJson().dump();
    auto sealed = keys_.encrypt(tenant, key, plain);
    OPENSSL_cleanse(plain.data(), plain.size());
    TESSERA_RETURN_IF_ERROR(sealed.status());
    store::Txn txn{.compares = {store::Compare::modRevision(key, store::Compare::kEqual, rev)},
                   .success = {store::Op::put(key, std::move(sealed).value())},
                   .failure = {}};
    TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, store_.txn(std::move(txn)));
    if (r.succeeded) {
      return core::Status::ok();
    }
  }
  return core::unavailable("kv: '" + path + "' is changing too often; try again");
}

core::Result<int64_t> KvEngine::write(const std::string& tenant, const std::string& path, json data,
                                      std::optional<int64_t> cas) {
  int64_t version = 0;
  const core::WallTime now = clock_.wallNow();
  TESSERA_RETURN_IF_ERROR(update(tenant, path, true, [&](KvEntry& e, const KvConfig& cfg) {
    TESSERA_ASSIGN_OR_RETURN(version, kvPut(e, data, cas, cfg, now));
    return core::Status::ok();
  }));
  return version;
}

core::Result<int64_t> KvEngine::patch(const std::string& tenant, const std::string& path,
                                      const json& patch, std::optional<int64_t> cas) {
  int64_t version = 0;
  const core::WallTime now = clock_.wallNow();
  TESSERA_RETURN_IF_ERROR(update(tenant, path, false, [&](KvEntry& e, const KvConfig& cfg) {
    TESSERA_ASSIGN_OR_RETURN(version, kvPatch(e, patch, cas, cfg, now));
    return core::Status::ok();
  }));
  return version;
}

core::Status KvEngine::remove(const std::string& tenant, const std::string& path,
                              const std::vector<int64_t>& versions) {
  const core::WallTime now = clock_.wallNow();
  return update(tenant, path, false, [&](KvEntry& e, const KvConfig&) {
    kvDelete(e, versions, now);
    return core::Status::ok();
  });
}

core::Status KvEngine::undelete(const std::string& tenant, const std::string& path,
                                const std::vector<int64_t>& versions) {
  return update(tenant, path, false, [&](KvEntry& e, const KvConfig&) {
    kvUndelete(e, versions);
    return core::Status::ok();
  });
}

core::Status KvEngine::destroy(const std::string& tenant, const std::string& path,
                               const std::vector<int64_t>& versions) {
  return update(tenant, path, false, [&](KvEntry& e, const KvConfig&) {
    kvDestroy(e, versions);
    return core::Status::ok();
  });
}

core::Result<KvEntry> KvEngine::metadata(const std::string& tenant, const std::string& path) const {
  TESSERA_RETURN_IF_ERROR(checkPath(path));
  int64_t rev = 0;
  TESSERA_ASSIGN_OR_RETURN(std::optional<KvEntry> e, load(tenant, kvPrefix(tenant) + path, &rev));
  if (!e) {
    return core::notFound("kv: no secret at '" + path + "'");
  }
  return std::move(*e);
}

core::Result<bool> KvEngine::exists(const std::string& tenant, const std::string& path) const {
  TESSERA_RETURN_IF_ERROR(checkPath(path));
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(kvPrefix(tenant) + path));
  return !r.kvs.empty();
}

core::Result<int64_t> KvEngine::count(const std::string& tenant) const {
  const std::string prefix = kvPrefix(tenant);
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r,
                           store_.range(prefix, store::prefixEnd(prefix), /*limit=*/1));
  return r.count;
}

core::Status KvEngine::putMetadata(const std::string& tenant, const std::string& path,
                                   const json& body) {
  const core::WallTime now = clock_.wallNow();
  return update(tenant, path, true,
                [&](KvEntry& e, const KvConfig&) { return kvSetMetadata(e, body, now); });
}

core::Status KvEngine::deleteKey(const std::string& tenant, const std::string& path) {
  TESSERA_RETURN_IF_ERROR(checkPath(path));
  TESSERA_ASSIGN_OR_RETURN(store::DeleteResult d, store_.deleteRange(kvPrefix(tenant) + path));
  if (d.deleted == 0) {
    return core::notFound("kv: no secret at '" + path + "'");
  }
  return core::Status::ok();
}

core::Result<std::vector<std::string>> KvEngine::list(const std::string& tenant,
                                                      const std::string& prefix) const {
  if (!prefix.empty()) {
    if (prefix.back() != '/') {
      return core::invalidArgument("kv: a list prefix ends with '/'");
    }
    TESSERA_RETURN_IF_ERROR(checkPath(prefix.substr(0, prefix.size() - 1)));
  }
  const std::string from = kvPrefix(tenant) + prefix;
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(from, store::prefixEnd(from)));
  std::set<std::string> names;
  for (const store::KeyValue& kv : r.kvs) {
    const std::string rest = kv.key.substr(from.size());
    const size_t slash = rest.find('/');
    names.insert(slash == std::string::npos ? rest : rest.substr(0, slash + 1));
  }
  if (names.empty()) {
    return core::notFound("kv: nothing under '" + prefix + "'");
  }
  return std::vector<std::string>(names.begin(), names.end());
}

core::Result<KvConfig> KvEngine::config(const std::string& tenant) const {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(configKey(tenant)));
  KvConfig c;
  if (!r.kvs.empty()) {
    try {
      const json j = json::parse(r.kvs[0].value);
      c.max_versions = j.value("max_versions", int64_t{0});
      c.cas_required = j.value("cas_required", false);
    } catch (const json::exception&) {
      return core::internalError("kv: the tenant's KV config is corrupt");
    }
  }
  return c;
}

core::Status KvEngine::setConfig(const std::string& tenant, const json& body) {
  if (!body.is_object()) {
    return core::invalidArgument("kv: the config body must be an object");
  }
  TESSERA_ASSIGN_OR_RETURN(KvConfig c, config(tenant));
  for (const auto& [k, v] : body.items()) {
    if (k == "max_versions") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000) {
        return core::invalidArgument("kv: \"max_versions\" must be an integer in [0, 1000]");
      }
      c.max_versions = v.get<int64_t>();
    } else if (k == "cas_required") {
      if (!v.is_boolean()) {
        return core::invalidArgument("kv: \"cas_required\" must be true or false");
      }
      c.cas_required = v.get<bool>();
    } else {
      return core::invalidArgument("kv: unknown config field \"" + k + "\"");
    }
  }
  const json j = {{"max_versions", c.max_versions}, {"cas_required", c.cas_required}};
  return store_.put(configKey(tenant), j.dump()).status();
}

}  // namespace tessera::secrets
