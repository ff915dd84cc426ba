// Per-tenant key-value secrets with Vault KV v2 semantics (issue #6; docs/secrets.md "KV").
//
// A key holds numbered versions. A write adds one (check-and-set: `cas` must equal the current
// version, 0 meaning "only if the key has no version yet"; required when the tenant's config or
// the key's metadata says `cas_required`). Beyond `max_versions` (the key's, else the tenant's,
// else 10; the smaller if both are set) the oldest are removed for good at the next write.
// `delete` hides versions (soft; `undelete` brings them back), `destroy` erases their data,
// deleting the metadata erases the key with every version. Reads of a deleted or destroyed
// version are "not found" (`lookup` tells which, with the version's metadata, as Vault answers).
// `delete_version_after` (the key's, else the tenant's; the smaller if both) gives each new
// version a deletion time that far ahead, as Vault does: once it has passed, the version reads
// as deleted (decided at read time, nothing runs in the background). A check-and-set mismatch
// is an invalid argument (Vault answers 400).
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
  // When it is (or, with delete_version_after, will be) deleted: deleted once it has passed.
  std::optional<core::WallTime> deleted;
  bool destroyed = false;
  nlohmann::json data;        // Null once destroyed.
  nlohmann::json created_by;  // Who wrote it ({"accessor", "display_name"}); null if unknown.

  bool deletedAt(core::WallTime now) const { return deleted && *deleted <= now; }
};

struct KvEntry {
  int64_t current = 0;       // The newest version; 0: none yet.
  int64_t oldest = 0;        // The oldest version still kept.
  int64_t max_versions = 0;  // 0: the tenant's setting.
  bool cas_required = false;
  int64_t delete_version_after = 0;  // Seconds; 0: the tenant's setting.
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
  int64_t delete_version_after = 0;  // Seconds; 0: never.
};

// Go's duration format, as Vault writes delete_version_after ("0s", "1h0m0s", "3h25m19s").
std::string formatGoDuration(int64_t seconds);
// A duration as Vault takes one: whole seconds as a number or a string, or Go's format with
// h, m and s ("3h25m19s", "90s"); also "d". Negative is an error naming `field`.
core::Result<int64_t> parseKvDuration(const nlohmann::json& j, const std::string& field);

// The rules. Versions outside what the key holds are ignored, as in Vault.
core::Result<int64_t> kvPut(KvEntry& e, nlohmann::json data, std::optional<int64_t> cas,
                            const KvConfig& config, core::WallTime now,
                            nlohmann::json created_by = nullptr);
// Version 0: the current one. `now` decides whether a scheduled deletion has passed (the
// default: any deletion time counts).
core::Result<const KvVersion*> kvGet(const KvEntry& e, int64_t version,
                                     core::WallTime now = core::WallTime::max());
// A new version: the current one's data with `patch` merged in (JSON merge patch, RFC 7386: a
// null removes a field). Not found when there is no current version, or it is deleted or
// destroyed; `cas` as for kvPut.
core::Result<int64_t> kvPatch(KvEntry& e, const nlohmann::json& patch, std::optional<int64_t> cas,
                              const KvConfig& config, core::WallTime now,
                              nlohmann::json created_by = nullptr);
// Empty `versions`: the current one.
void kvDelete(KvEntry& e, const std::vector<int64_t>& versions, core::WallTime now);
void kvUndelete(KvEntry& e, const std::vector<int64_t>& versions);
void kvDestroy(KvEntry& e, const std::vector<int64_t>& versions);
// From a metadata write's body: max_versions, cas_required, delete_version_after,
// custom_metadata (string values, at most 64 keys). Invalid argument names the bad field.
// `merge` (PATCH): custom_metadata is merged into the key's (a null value removes a key).
core::Status kvSetMetadata(KvEntry& e, const nlohmann::json& body, core::WallTime now,
                           bool merge = false);
// Vault's subkeys: `data`'s structure with every leaf value null, `depth` levels deep (0: all).
nlohmann::json kvSubkeys(const nlohmann::json& data, int64_t depth);

// One version, as a read or a write answers it.
struct KvRead {
  nlohmann::json data;  // Null when gone.
  int64_t version = 0;
  core::WallTime created{};
  std::optional<core::WallTime> deletion;  // Passed (deleted) or scheduled.
  bool destroyed = false;
  bool gone = false;  // Deleted or destroyed: `data` is null.
  nlohmann::json created_by;
  nlohmann::json custom_metadata;  // The key's.

  // Vault's version metadata: created_time, custom_metadata (null when none), deletion_time
  // ("" when none), destroyed, version; and Tessera's created_by.
  nlohmann::json metadataJson() const;
};

class KvEngine {
 public:
  KvEngine(store::Store& store, const KeyManager& keys, const core::Clock& clock)
      : store_(store), keys_(keys), clock_(clock) {}

  // Not found for a version that is deleted or destroyed.
  core::Result<KvRead> read(const std::string& tenant, const std::string& path,
                            int64_t version) const;
  // As read, but a deleted or destroyed version is an answer (`gone`, with its metadata); not
  // found only when there is no such key or version.
  core::Result<KvRead> lookup(const std::string& tenant, const std::string& path,
                              int64_t version) const;
  // Returns the new version; `written`, if given, gets its metadata.
  core::Result<int64_t> write(const std::string& tenant, const std::string& path,
                              nlohmann::json data, std::optional<int64_t> cas,
                              const nlohmann::json& created_by = nullptr,
                              KvRead* written = nullptr);
  // See kvPatch; returns the new version.
  core::Result<int64_t> patch(const std::string& tenant, const std::string& path,
                              const nlohmann::json& patch, std::optional<int64_t> cas,
                              const nlohmann::json& created_by = nullptr,
                              KvRead* written = nullptr);
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
  // `merge`: PATCH (see kvSetMetadata); the key must exist.
  core::Status putMetadata(const std::string& tenant, const std::string& path,
                           const nlohmann::json& body, bool merge = false);
  core::Status deleteKey(const std::string& tenant, const std::string& path);
  // The names directly under `prefix` ("" or ending in '/'); folders end in '/'.
  // `exclude_deleted` (Vault 1.21): leave out keys whose current version is deleted or
  // destroyed, and folders holding only such keys.
  core::Result<std::vector<std::string>> list(const std::string& tenant, const std::string& prefix,
                                              bool exclude_deleted = false) const;
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
