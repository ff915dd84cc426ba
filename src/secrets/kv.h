// Per-tenant key-value secrets with Vault KV v2 semantics (issue #6; docs/secrets.md "KV").
//
// A key holds numbered versions. A write adds one (check-and-set: `cas` must equal the current
// version, 0 meaning "only if the key has no version yet"; required when the tenant's config or
// the key's metadata says `cas_required`). Beyond `max_versions` (the key's, else the tenant's,
// else 10; the smaller if both are set) the oldest are removed for good at the next write.
// `delete` hides versions (soft; `undelete` brings them back), `destroy` erases their data,
// deleting the metadata erases the key with every version. Reads of a deleted or destroyed
// version are "not found".
//
// The rules are pure functions on a `KvEntry` (table-tested in kv_test.cc); `KvEngine` keeps one
// sealed record per key in the store, at /secrets/<tenant>/kv/<path>, and changes it with a
// compare-and-swap on its revision, so concurrent writers never lose an update.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "secrets/keys.h"
#include "store/store.h"

namespace tessera::secrets {

inline constexpr int64_t kDefaultMaxVersions = 10;

struct KvVersion {
  core::WallTime created{};
  std::optional<core::WallTime> deleted;
  bool destroyed = false;
  nlohmann::json data;  // Null once destroyed.
};

struct KvEntry {
  int64_t current = 0;       // The newest version; 0: none yet.
  int64_t oldest = 0;        // The oldest version still kept.
  int64_t max_versions = 0;  // 0: the tenant's setting.
  bool cas_required = false;
  nlohmann::json custom_metadata = nlohmann::json::object();
  core::WallTime created{};
  core::WallTime updated{};
  std::map<int64_t, KvVersion> versions;

  nlohmann::json toJson() const;  // The stored form (with data).
  static core::Result<KvEntry> fromJson(const nlohmann::json& j);
  // The API's metadata answer (no data).
  nlohmann::json metadataJson() const;
};

struct KvConfig {
  int64_t max_versions = 0;  // 0: kDefaultMaxVersions.
  bool cas_required = false;
};

// The rules. Versions outside what the key holds are ignored, as in Vault.
core::Result<int64_t> kvPut(KvEntry& e, nlohmann::json data, std::optional<int64_t> cas,
                            const KvConfig& config, core::WallTime now);
// Version 0: the current one.
core::Result<const KvVersion*> kvGet(const KvEntry& e, int64_t version);
// A new version: the current one's data with `patch` merged in (JSON merge patch, RFC 7386: a
// null removes a field). Not found when there is no current version, or it is deleted or
// destroyed; `cas` as for kvPut.
core::Result<int64_t> kvPatch(KvEntry& e, const nlohmann::json& patch, std::optional<int64_t> cas,
                              const KvConfig& config, core::WallTime now);
// Empty `versions`: the current one.
void kvDelete(KvEntry& e, const std::vector<int64_t>& versions, core::WallTime now);
void kvUndelete(KvEntry& e, const std::vector<int64_t>& versions);
void kvDestroy(KvEntry& e, const std::vector<int64_t>& versions);
// From a metadata write's body: max_versions, cas_required, custom_metadata (string values, at
// most 64 keys). Invalid argument names the bad field.
core::Status kvSetMetadata(KvEntry& e, const nlohmann::json& body, core::WallTime now);

struct KvRead {
  nlohmann::json data;
  int64_t version = 0;
  core::WallTime created{};
};

class KvEngine {
 public:
  KvEngine(store::Store& store, const KeyManager& keys, const core::Clock& clock)
      : store_(store), keys_(keys), clock_(clock) {}

  core::Result<KvRead> read(const std::string& tenant, const std::string& path,
                            int64_t version) const;
  // Returns the new version.
  core::Result<int64_t> write(const std::string& tenant, const std::string& path,
                              nlohmann::json data, std::optional<int64_t> cas);
  // See kvPatch; returns the new version.
  core::Result<int64_t> patch(const std::string& tenant, const std::string& path,
                              const nlohmann::json& patch, std::optional<int64_t> cas);
  core::Status remove(const std::string& tenant, const std::string& path,
                      const std::vector<int64_t>& versions);
  core::Status undelete(const std::string& tenant, const std::string& path,
                        const std::vector<int64_t>& versions);
  core::Status destroy(const std::string& tenant, const std::string& path,
                       const std::vector<int64_t>& versions);
  core::Result<KvEntry> metadata(const std::string& tenant, const std::string& path) const;
  // Whether the key has a record (any version, even deleted ones), without opening it: what
  // decides between `create` and `update` before a write.
  core::Result<bool> exists(const std::string& tenant, const std::string& path) const;
  // How many keys the tenant has (deleted versions and all: a key counts until it is destroyed
  // with its metadata).
  core::Result<int64_t> count(const std::string& tenant) const;
  core::Status putMetadata(const std::string& tenant, const std::string& path,
                           const nlohmann::json& body);
  core::Status deleteKey(const std::string& tenant, const std::string& path);
  // The names directly under `prefix` ("" or ending in '/'); folders end in '/'.
  core::Result<std::vector<std::string>> list(const std::string& tenant,
                                              const std::string& prefix) const;
  core::Result<KvConfig> config(const std::string& tenant) const;
  core::Status setConfig(const std::string& tenant, const nlohmann::json& body);

  // Checks a key path: 1-512 bytes of segments separated by '/', none empty, "." or "..", no
  // control characters.
  static core::Status checkPath(const std::string& path);

 private:
  // `only_version`: parse just that version (0: the current one), for a read.
  core::Result<std::optional<KvEntry>> load(const std::string& tenant, const std::string& key,
                                            int64_t* mod_revision,
                                            std::optional<int64_t> only_version = {}) const;
  // Reads the key's entry, applies `change` (told whether the key exists) and writes it back if
  // nobody wrote in between (else tries again).
  core::Status update(const std::string& tenant, const std::string& path, bool create,
                      const std::function<core::Status(KvEntry&, const KvConfig&)>& change);

  store::Store& store_;
  const KeyManager& keys_;
  const core::Clock& clock_;
};

}  // namespace tessera::secrets
