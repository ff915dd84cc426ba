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

// Vault: the key's, capped by the mount's; 0 for none.
int64_t effectiveDeleteAfter(const KvEntry& e, const KvConfig& c) {
  if (e.delete_version_after > 0 && c.delete_version_after > 0) {
    return std::min(e.delete_version_after, c.delete_version_after);
  }
  return e.delete_version_after > 0 ? e.delete_version_after : c.delete_version_after;
}

constexpr int64_t kMaxDuration = 100LL * 365 * 86400;

std::string rfc3339OrEmpty(const std::optional<core::WallTime>& t) {
  return t ? core::formatRfc3339Millis(*t) : "";
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
    if (!v.created_by.is_null()) {
      jv["created_by"] = v.created_by;
    }
    vs[std::to_string(n)] = std::move(jv);
  }
  return {{"current", current},
          {"oldest", oldest},
          {"max_versions", max_versions},
          {"cas_required", cas_required},
          {"delete_version_after", delete_version_after},
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
    e.delete_version_after = j.value("delete_version_after", int64_t{0});  // Older records lack it.
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
      v.created_by = jv.value("created_by", json());
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
    vs[std::to_string(n)] = {{"created_time", core::formatRfc3339Millis(v.created)},
                             {"deletion_time", rfc3339OrEmpty(v.deleted)},
                             {"destroyed", v.destroyed},
                             {"created_by", v.created_by}};
  }
  return {{"current_version", current},
          {"oldest_version", oldest},
          {"max_versions", max_versions},
          {"cas_required", cas_required},
          {"delete_version_after", formatGoDuration(delete_version_after)},
          // Vault answers null when there is none.
          {"custom_metadata", custom_metadata.empty() ? json() : custom_metadata},
          {"created_time", core::formatRfc3339Millis(created)},
          {"updated_time", core::formatRfc3339Millis(updated)},
          {"versions", std::move(vs)}};
}

std::string formatGoDuration(int64_t seconds) {
  if (seconds == 0) {
    return "0s";
  }
  std::string out;
  if (seconds >= 3600) {
    out += std::to_string(seconds / 3600) + "h";
  }
  if (seconds >= 60) {
    out += std::to_string(seconds % 3600 / 60) + "m";
  }
  return out + std::to_string(seconds % 60) + "s";
}

core::Result<int64_t> parseKvDuration(const json& j, const std::string& field) {
  const std::string expected =
      "kv: \"" + field + "\" must be a duration like \"3h25m19s\", \"90s\" or whole seconds";
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0 || v > kMaxDuration) {
      return core::invalidArgument(expected + " (not negative)");
    }
    return v;
  }
  if (!j.is_string() || j.get<std::string>().empty()) {
    return core::invalidArgument(expected);
  }
  const std::string s = j.get<std::string>();
  if (s.front() == '-') {
    return core::invalidArgument(expected + " (not negative)");
  }
  int64_t total = 0;
  size_t i = 0;
  bool bare = true;  // Digits only: seconds.
  while (i < s.size()) {
    size_t k = i;
    while (k < s.size() && s[k] >= '0' && s[k] <= '9') {
      ++k;
    }
    if (k == i || k - i > 12) {
      return core::invalidArgument(expected);
    }
    const int64_t n = std::stoll(s.substr(i, k - i));
    int64_t mult = 1;
    if (k < s.size()) {
      bare = false;
      const char u = s[k];
      mult = u == 's' ? 1 : u == 'm' ? 60 : u == 'h' ? 3600 : u == 'd' ? 86400 : -1;
      if (mult < 0) {
        return core::invalidArgument(expected);
      }
      ++k;
    } else if (!bare || i != 0) {
      return core::invalidArgument(expected);  // "1h30": a number without its unit.
    }
    total += n * mult;
    if (total > kMaxDuration) {
      return core::invalidArgument(expected + " (at most 100 years)");
    }
    i = k;
  }
  return total;
}

core::Result<int64_t> kvPut(KvEntry& e, json data, std::optional<int64_t> cas,
                            const KvConfig& config, core::WallTime now, json created_by) {
  if (!data.is_object()) {
    return core::invalidArgument("kv: \"data\" must be an object");
  }
  if (!cas && (config.cas_required || e.cas_required)) {
    return core::invalidArgument(
        "kv: check-and-set parameter required for this call (options.cas)");
  }
  if (cas && *cas != e.current) {
    return core::invalidArgument(
        "kv: check-and-set parameter did not match the current version (cas " +
        std::to_string(*cas) + ", current " + std::to_string(e.current) + ")");
  }
  if (e.current == 0) {
    e.created = now;
  }
  const int64_t v = ++e.current;
  std::optional<core::WallTime> deletion;
  if (const int64_t after = effectiveDeleteAfter(e, config); after > 0) {
    deletion = now + std::chrono::seconds(after);
  }
  e.versions[v] = KvVersion{now, deletion, false, std::move(data), std::move(created_by)};
  e.updated = now;
  const int64_t keep = effectiveMax(e, config);
  while (static_cast<int64_t>(e.versions.size()) > keep) {
    e.versions.erase(e.versions.begin());
  }
  e.oldest = e.versions.begin()->first;
  return v;
}

core::Result<const KvVersion*> kvGet(const KvEntry& e, int64_t version, core::WallTime now) {
  const int64_t v = version == 0 ? e.current : version;
  auto it = e.versions.find(v);
  if (it == e.versions.end()) {
    return core::notFound("kv: no version " + std::to_string(v));
  }
  if (it->second.destroyed) {
    return core::notFound("kv: version " + std::to_string(v) + " is destroyed");
  }
  if (it->second.deletedAt(now)) {
    return core::notFound("kv: version " + std::to_string(v) + " is deleted");
  }
  return &it->second;
}

core::Result<int64_t> kvPatch(KvEntry& e, const json& patch, std::optional<int64_t> cas,
                              const KvConfig& config, core::WallTime now, json created_by) {
  if (!patch.is_object()) {
    return core::invalidArgument("kv: \"data\" must be an object");
  }
  TESSERA_ASSIGN_OR_RETURN(const KvVersion* current, kvGet(e, 0, now));
  json merged = current->data;
  merged.merge_patch(patch);
  return kvPut(e, std::move(merged), cas, config, now, std::move(created_by));
}

void kvDelete(KvEntry& e, const std::vector<int64_t>& versions, core::WallTime now) {
  std::vector<int64_t> which = versions;
  if (which.empty()) {
    which.push_back(e.current);
  }
  for (int64_t n : which) {
    auto it = e.versions.find(n);
    if (it != e.versions.end() && !it->second.deletedAt(now) && !it->second.destroyed) {
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

core::Status kvSetMetadata(KvEntry& e, const json& body, core::WallTime now, bool merge) {
  if (!body.is_object()) {
    return core::invalidArgument("kv: the metadata body must be an object");
  }
  for (const auto& [k, v] : body.items()) {
    if (k != "max_versions" && k != "cas_required" && k != "custom_metadata" &&
        k != "delete_version_after") {
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
  int64_t delete_after = e.delete_version_after;
  if (body.contains("delete_version_after")) {
    TESSERA_ASSIGN_OR_RETURN(delete_after,
                             parseKvDuration(body["delete_version_after"], "delete_version_after"));
  }
  json custom = e.custom_metadata;
  if (body.contains("custom_metadata")) {
    const json& c = body["custom_metadata"];
    if (!c.is_object()) {
      return core::invalidArgument("kv: \"custom_metadata\" must be an object of at most 64 keys");
    }
    for (const auto& [k, v] : c.items()) {
      // A PATCH removes a key with null, as a JSON merge patch does.
      if (!(v.is_string() || (merge && v.is_null())) || k.size() > 128 ||
          (v.is_string() && v.get<std::string>().size() > 512)) {
        return core::invalidArgument("kv: \"custom_metadata\"." + k +
                                     " must be a string (keys up to 128 bytes, values 512)");
      }
    }
    if (merge) {
      custom.merge_patch(c);
    } else {
      custom = c;
    }
    if (custom.size() > 64) {
      return core::invalidArgument("kv: \"custom_metadata\" must be an object of at most 64 keys");
    }
  }
  if (body.contains("max_versions")) {
    e.max_versions = body["max_versions"].get<int64_t>();
  }
  if (body.contains("cas_required")) {
    e.cas_required = body["cas_required"].get<bool>();
  }
  e.delete_version_after = delete_after;
  e.custom_metadata = std::move(custom);
  if (e.current == 0 && e.created == core::WallTime{}) {
    e.created = now;
  }
  e.updated = now;
  return core::Status::ok();
}

json kvSubkeys(const json& data, int64_t depth) {
  if (!data.is_object()) {
    return nullptr;
  }
  json out = json::object();
  for (const auto& [k, v] : data.items()) {
    out[k] = v.is_object() && depth != 1 ? kvSubkeys(v, depth == 0 ? 0 : depth - 1) : json();
  }
  return out;
}

json KvRead::metadataJson() const {
  return {{"created_time", core::formatRfc3339Millis(created)},
          {"custom_metadata",
           custom_metadata.is_object() && !custom_metadata.empty() ? custom_metadata : json()},
          {"deletion_time", rfc3339OrEmpty(deletion)},
          {"destroyed", destroyed},
          {"version", version},
          {"created_by", created_by}};
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

namespace {

// `with_data`: move the version's data into the answer (a read); without, leave it (a write's
// answer, taken before the entry is stored).
KvRead readOf(KvVersion& v, int64_t n, const json& custom_metadata, core::WallTime now,
              bool with_data = true) {
  KvRead out;
  out.version = n;
  out.created = v.created;
  out.deletion = v.deleted;
  out.destroyed = v.destroyed;
  out.gone = v.destroyed || v.deletedAt(now);
  if (with_data && !out.gone) {
    out.data = std::move(v.data);
  }
  out.created_by = v.created_by;
  out.custom_metadata = custom_metadata;
  return out;
}

}  // namespace

core::Result<KvRead> KvEngine::lookup(const std::string& tenant, const std::string& path,
                                      int64_t version) const {
  TESSERA_RETURN_IF_ERROR(checkPath(path));
  int64_t rev = 0;
  TESSERA_ASSIGN_OR_RETURN(std::optional<KvEntry> e,
                           load(tenant, kvPrefix(tenant) + path, &rev, version));
  if (!e) {
    return core::notFound("kv: no secret at '" + path + "'");
  }
  const int64_t n = version == 0 ? e->current : version;
  auto it = e->versions.find(n);
  if (it == e->versions.end()) {
    return core::notFound("kv: no version " + std::to_string(n));
  }
  return readOf(it->second, n, e->custom_metadata, clock_.wallNow());
}

core::Result<KvRead> KvEngine::read(const std::string& tenant, const std::string& path,
                                    int64_t version) const {
  TESSERA_ASSIGN_OR_RETURN(KvRead r, lookup(tenant, path, version));
  if (r.gone) {
    return core::notFound("kv: version " + std::to_string(r.version) + " is " +
                          (r.destroyed ? "destroyed" : "deleted"));
  }
  return r;
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
                                      std::optional<int64_t> cas, const json& created_by,
                                      KvRead* written) {
  int64_t version = 0;
  const core::WallTime now = clock_.wallNow();
  TESSERA_RETURN_IF_ERROR(update(tenant, path, true, [&](KvEntry& e, const KvConfig& cfg) {
    TESSERA_ASSIGN_OR_RETURN(version, kvPut(e, data, cas, cfg, now, created_by));
    if (written != nullptr) {
      *written = readOf(e.versions.at(version), version, e.custom_metadata, now, false);
    }
    return core::Status::ok();
  }));
  return version;
}

core::Result<int64_t> KvEngine::patch(const std::string& tenant, const std::string& path,
                                      const json& patch, std::optional<int64_t> cas,
                                      const json& created_by, KvRead* written) {
  int64_t version = 0;
  const core::WallTime now = clock_.wallNow();
  TESSERA_RETURN_IF_ERROR(update(tenant, path, false, [&](KvEntry& e, const KvConfig& cfg) {
    TESSERA_ASSIGN_OR_RETURN(version, kvPatch(e, patch, cas, cfg, now, created_by));
    if (written != nullptr) {
      *written = readOf(e.versions.at(version), version, e.custom_metadata, now, false);
    }
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
                                   const json& body, bool merge) {
  const core::WallTime now = clock_.wallNow();
  return update(tenant, path, !merge,
                [&](KvEntry& e, const KvConfig&) { return kvSetMetadata(e, body, now, merge); });
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
                                                      const std::string& prefix,
                                                      bool exclude_deleted) const {
  if (!prefix.empty()) {
    if (prefix.back() != '/') {
      return core::invalidArgument("kv: a list prefix ends with '/'");
    }
    TESSERA_RETURN_IF_ERROR(checkPath(prefix.substr(0, prefix.size() - 1)));
  }
  const std::string from = kvPrefix(tenant) + prefix;
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(from, store::prefixEnd(from)));
  std::set<std::string> names;
  const core::WallTime now = clock_.wallNow();
  for (const store::KeyValue& kv : r.kvs) {
    if (exclude_deleted) {
      // Only the current version's state matters: parse just it.
      int64_t rev = 0;
      TESSERA_ASSIGN_OR_RETURN(std::optional<KvEntry> e, load(tenant, kv.key, &rev, 0));
      if (!e || !kvGet(*e, 0, now).isOk()) {
        continue;
      }
    }
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
      c.delete_version_after = j.value("delete_version_after", int64_t{0});
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
    } else if (k == "delete_version_after") {
      TESSERA_ASSIGN_OR_RETURN(c.delete_version_after, parseKvDuration(v, k));
    } else {
      return core::invalidArgument("kv: unknown config field \"" + k + "\"");
    }
  }
  const json j = {{"max_versions", c.max_versions},
                  {"cas_required", c.cas_required},
                  {"delete_version_after", c.delete_version_after}};
  return store_.put(configKey(tenant), j.dump()).status();
}

}  // namespace tessera::secrets
