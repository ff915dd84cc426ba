// Secrets engines: KV v2 and dynamic PostgreSQL credentials; docs/secrets.md.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/json_node.h"
#include "core/rfc3339.h"
#include "core/strings.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

core::Status ControlPlane::checkWorkloadSecrets(const Request& r, const WorkloadSecrets& wanted,
                                                const std::vector<WorkloadVolume>& volumes) const {
  if (secrets_ == nullptr) {
    return core::failedPrecondition("secrets: this server has no secrets engine");
  }
  // The workload gets only what its submitter may read (checked once, at submission).
  for (const std::string& path : wanted.kv) {
    if (!authorizedOn(r, "secrets/kv/data/" + path, Capability::kRead)) {
      return core::permissionDenied("secrets.kv: this token may not read secrets/kv/data/" + path);
    }
  }
  if (!wanted.pull.empty() &&
      !authorizedOn(r, "secrets/kv/data/" + wanted.pull, Capability::kRead)) {
    return core::permissionDenied("pullSecret: this token may not read secrets/kv/data/" +
                                  wanted.pull);
  }
  for (const std::string& role : wanted.db) {
    if (!authorizedOn(r, "secrets/db/creds/" + role, Capability::kRead)) {
      return core::permissionDenied("secrets.db: this token may not read secrets/db/creds/" + role);
    }
  }
  for (size_t i = 0; i < volumes.size(); ++i) {
    if (!volumes[i].kv.empty() &&
        !authorizedOn(r, "secrets/kv/data/" + volumes[i].kv, Capability::kRead)) {
      return core::permissionDenied("volumes[" + std::to_string(i) +
                                    "].kv: this token may not read secrets/kv/data/" +
                                    volumes[i].kv);
    }
  }
  return core::Status::ok();
}

HttpResponse ControlPlane::secretsApi(Request& r) {
  if (secrets_ == nullptr) {
    return noSecrets();
  }
  const std::vector<std::string> parts = split(r.scope.path);
  if (parts.size() >= 2 && parts[1] == "kv") {
    return kvApi(r, parts);
  }
  if (parts.size() >= 2 && parts[1] == "db") {
    return dbApi(r, parts);
  }
  if (parts.size() >= 2 && parts[1] == "aws") {
    return awsApi(r, parts);
  }
  return error(404,
               "unsupported path: the secrets engines are kv (secrets/kv/...), db "
               "(secrets/db/...) and aws (secrets/aws/...)");
}

HttpResponse ControlPlane::awsApi(Request& r, const std::vector<std::string>& parts) {
  const std::string& tenant = *r.scope.tenant;
  secrets::AwsEngine& aws = secrets_->aws();
  const bool config = parts.size() == 3 && parts[2] == "config";
  const bool roles = parts.size() >= 3 && parts.size() <= 4 && parts[2] == "roles";
  const bool creds = parts.size() == 4 && parts[2] == "creds";
  if (!config && !roles && !creds) {
    return error(404,
                 "unsupported path: secrets/aws/config, secrets/aws/roles/NAME or "
                 "secrets/aws/creds/ROLE");
  }
  if (roles && parts.size() == 3) {  // LIST secrets/aws/roles
    if (r.method != "LIST" && r.method != "GET") {
      return error(405, "use LIST");
    }
    auto names = aws.listRoles(tenant);
    if (!names.isOk()) {
      return fromStatus(names.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"keys", *names}}}});
  }
  if (core::Status st = secrets_->keys().addTenant(tenant); !st.isOk()) {
    return fromStatus(st);
  }
  if (creds) {
    // Reading is what the capability names (as for secrets/db/creds); POST is the same request.
    if (r.method != "GET" && r.method != "POST") {
      return error(405, "use GET or POST");
    }
    const std::string& name = parts[3];
    auto role = aws.readRole(tenant, name);
    if (!role.isOk()) {
      return fromStatus(role.status());
    }
    auto cfg = aws.readConfig(tenant);
    if (!cfg.isOk()) {
      return fromStatus(cfg.status());
    }
    // The session may outlive neither the grant the caller came in on nor the caller's token:
    // STS sessions cannot be revoked.
    const core::WallTime now = clock_.wallNow();
    std::optional<int64_t> grant_left;
    if (r.grant) {
      grant_left = std::chrono::duration_cast<std::chrono::seconds>(r.grant->expires - now).count();
    }
    std::optional<int64_t> token_left;
    if (r.token.expires != core::WallTime::max()) {
      token_left = r.token.ttlSeconds(now);
    }
    auto duration = secrets::clampStsDuration(
        role->value("ttl", int64_t{0}), role->value("max_ttl", int64_t{0}), grant_left, token_left);
    if (!duration.isOk()) {
      return fromStatus(duration.status());
    }
    secrets::IdentityIssuer* issuer = secrets_->identity();
    if (issuer == nullptr) {
      return error(503, "aws: this server has no workload identity issuer to sign for STS");
    }
    // The role's owner is the subject (its trust policy names it); the session's name says who
    // asked, so CloudTrail shows a grantee's use.
    secrets::TaskIdentity who;
    who.tenant = tenant;
    who.workload = "secrets.aws." + name;
    auto jwt = issuer->issue(who, {"sts.amazonaws.com"}, std::chrono::minutes(5));
    if (!jwt.isOk()) {
      return fromStatus(jwt.status());
    }
    auto endpoint = secrets::parseStsEndpoint(cfg->value("sts_endpoint", std::string()));
    if (!endpoint.isOk()) {
      return fromStatus(endpoint.status());
    }
    const std::string caller = r.token.tenant.empty() ? "operator" : r.token.tenant;
    auto got = secrets::callSts(*endpoint,
                                secrets::assumeRoleWithWebIdentityForm(
                                    role->value("role_arn", std::string()),
                                    secrets::stsSessionName("tessera." + caller), *jwt, *duration));
    if (!got.isOk()) {
      return error(502, got.status().message());
    }
    return reply(200, {{"request_id", r.request_id},
                       {"lease_id", ""},
                       {"lease_duration", *duration},
                       {"renewable", false},
                       {"revocable", false},
                       {"data",
                        {{"access_key", got->access_key_id},
                         {"secret_key", got->secret_access_key},
                         {"session_token", got->session_token},
                         {"expiration", got->expiration},
                         {"ttl", *duration}}}});
  }
  if (r.method == "GET") {
    auto got = config ? aws.readConfig(tenant) : aws.readRole(tenant, parts[3]);
    if (!got.isOk()) {
      return fromStatus(got.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", *got}});
  }
  if (r.method == "PUT" || r.method == "POST") {
    if (config && r.grant) {
      // The endpoint receives JWTs that the real STS accepts for every role of the tenant.
      return error(403, "permission denied: secrets/aws/config cannot be changed through a grant");
    }
    core::Status st =
        config ? aws.putConfig(tenant, r.body) : aws.putRole(tenant, parts[3], r.body);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  if (r.method == "DELETE" && !config) {
    core::Status st = aws.deleteRole(tenant, parts[3]);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  return error(405, config ? "use GET or POST" : "use GET, POST, DELETE or LIST");
}

HttpResponse ControlPlane::dbApi(Request& r, const std::vector<std::string>& parts) {
  const std::string& tenant = *r.scope.tenant;
  secrets::DatabaseEngine& db = secrets_->db();
  if (parts.size() < 3 || parts.size() > 4 ||
      (parts[2] != "config" && parts[2] != "roles" && parts[2] != "creds")) {
    return error(404, "unsupported path: secrets/db/{config,roles}/NAME or secrets/db/creds/ROLE");
  }
  const std::string& what = parts[2];
  if (parts.size() == 3) {  // LIST secrets/db/config, secrets/db/roles
    if (what == "creds" || (r.method != "LIST" && r.method != "GET")) {
      return error(405, "use LIST");
    }
    auto names = what == "config" ? db.listConnections(tenant) : db.listRoles(tenant);
    if (!names.isOk()) {
      return fromStatus(names.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"keys", *names}}}});
  }
  const std::string& name = parts[3];
  if (core::Status st = secrets_->keys().addTenant(tenant); !st.isOk()) {
    return fromStatus(st);
  }
  if (what == "creds") {
    // A GET that creates a credential, as in Vault: reading is what the capability names.
    if (r.method != "GET") {
      return error(405, "use GET");
    }
    core::Duration ttl{};
    if (auto it = r.scope.query.find("ttl"); it != r.scope.query.end()) {
      const bool digits = !it->second.empty() && it->second.size() < 10 &&
                          std::all_of(it->second.begin(), it->second.end(),
                                      [](char ch) { return ch >= '0' && ch <= '9'; });
      auto s =
          parseDurationSeconds(digits ? json(std::stoll(it->second)) : json(it->second), "ttl");
      if (!s.isOk()) {
        return fromStatus(s.status());
      }
      ttl = std::chrono::seconds(*s);
    }
    if (r.grant) {
      // Through a grant: the credential ends with the grant (its lease cannot be renewed by the
      // grantee: leases/ is not a grantable path).
      const auto left =
          std::chrono::duration_cast<core::Duration>(r.grant->expires - clock_.wallNow());
      if (ttl == core::Duration::zero()) {
        auto role = db.readRole(tenant, name);
        if (role.isOk() && role->contains("default_ttl")) {
          ttl = std::chrono::seconds((*role)["default_ttl"].get<int64_t>());
        }
      }
      ttl = ttl == core::Duration::zero() ? left : std::min(ttl, left);
      if (ttl < std::chrono::seconds(1)) {
        return error(403, "permission denied: the grant is about to expire");
      }
    }
    auto cred = db.createCredential(tenant, name, ttl);
    if (!cred.isOk()) {
      return fromStatus(cred.status());
    }
    return reply(200, {{"request_id", r.request_id},
                       {"lease_id", cred->lease.id},
                       {"lease_duration", cred->lease.ttlSeconds(clock_.wallNow())},
                       {"renewable", cred->lease.renewable},
                       {"data", {{"username", cred->username}, {"password", cred->password}}}});
  }
  const bool config = what == "config";
  if (r.method == "GET") {
    auto got = config ? db.readConnection(tenant, name) : db.readRole(tenant, name);
    if (!got.isOk()) {
      return fromStatus(got.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", *got}});
  }
  if (r.method == "PUT" || r.method == "POST") {
    core::Status st =
        config ? db.putConnection(tenant, name, r.body) : db.putRole(tenant, name, r.body);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  if (r.method == "DELETE") {
    core::Status st = config ? db.deleteConnection(tenant, name) : db.deleteRole(tenant, name);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  return error(405, "use GET, PUT, DELETE or LIST");
}

HttpResponse ControlPlane::kvApi(Request& r, const std::vector<std::string>& parts) {
  const std::string& tenant = *r.scope.tenant;
  secrets::KvEngine& kv = secrets_->kv();
  if (parts.size() < 3) {
    return error(
        404,
        "unsupported path: secrets/kv/{data,metadata,subkeys,delete,undelete,destroy}/PATH "
        "or secrets/kv/config");
  }
  const std::string& op = parts[2];
  const std::string path = rest(parts, 3);
  // A new key takes one of the tenant's max_secrets places; `creating` holds the tenant's lock
  // until the write is done.
  std::unique_lock<std::mutex> creating;
  auto room_for_new_key = [&]() -> std::optional<HttpResponse> {
    creating = std::unique_lock(tenantLock(tenant));
    auto exists = kv.exists(tenant, path);  // Again: another request may have created it.
    if (!exists.isOk()) {
      return fromStatus(exists.status());
    }
    if (*exists) {
      return std::nullopt;
    }
    const int64_t max_secrets = tenantSetting(tenant, "max_secrets", options_.default_max_secrets);
    auto held = kv.count(tenant);
    if (!held.isOk()) {
      return fromStatus(held.status());
    }
    if (*held >= max_secrets) {
      return error(429, "tenant '" + tenant + "' holds its limit of " +
                            std::to_string(max_secrets) +
                            " secrets (max_secrets); destroy some with their metadata");
    }
    return std::nullopt;
  };
  if (op == "config") {
    if (r.method == "GET") {
      auto c = kv.config(tenant);
      if (!c.isOk()) {
        return fromStatus(c.status());
      }
      return reply(
          200, {{"request_id", r.request_id},
                {"data",
                 {{"max_versions", c->max_versions},
                  {"cas_required", c->cas_required},
                  {"delete_version_after", secrets::formatGoDuration(c->delete_version_after)}}}});
    }
    if (r.method != "PUT" && r.method != "POST") {
      return error(405, "use GET or PUT");
    }
    core::Status st = kv.setConfig(tenant, r.body);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  // LIST secrets/kv/metadata[/PREFIX]
  if (op == "metadata" && r.method == "LIST") {
    // As Vault: a LIST is checked on the folder's path, with its trailing '/', so
    // `path "secrets/kv/metadata/dev/*" { capabilities = ["list"] }` lists metadata/dev/.
    std::string prefix = path;
    if (!prefix.empty() && prefix.back() != '/') {
      prefix += '/';
    }
    bool exclude_deleted = false;
    if (auto it = r.scope.query.find("exclude_deleted"); it != r.scope.query.end()) {
      const std::string& v = it->second;
      if (v == "true" || v == "1" || v == "t" || v == "True" || v == "TRUE") {
        exclude_deleted = true;
      } else if (v != "false" && v != "0" && v != "f" && v != "False" && v != "FALSE" &&
                 !v.empty()) {
        return error(400, "exclude_deleted: expected true or false, not '" + v + "'");
      }
    }
    auto names = kv.list(tenant, prefix, exclude_deleted);
    if (!names.isOk()) {
      return fromStatus(names.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"keys", *names}}}});
  }
  if (path.empty()) {
    return error(400, "a secret path is required after secrets/kv/" + op + "/");
  }
  if (core::Status st = secrets::KvEngine::checkPath(path); !st.isOk()) {
    return fromStatus(st);
  }
  if (core::Status st = secrets_->keys().addTenant(tenant); !st.isOk()) {
    return fromStatus(st);
  }
  // Who writes a version: the token's public accessor and its name, never its secret.
  const json created_by = {{"accessor", r.token.accessor}, {"display_name", r.token.display_name}};
  if (op == "data" || op == "subkeys") {
    if (op == "subkeys" && r.method != "GET") {
      return error(405, "use GET");
    }
    if (r.method == "GET") {
      auto version = versionParam(r.scope);
      if (!version.isOk()) {
        return fromStatus(version.status());
      }
      int64_t depth = 0;
      if (auto it = r.scope.query.find("depth"); op == "subkeys" && it != r.scope.query.end()) {
        const bool digits = !it->second.empty() && it->second.size() < 10 &&
                            std::all_of(it->second.begin(), it->second.end(),
                                        [](char ch) { return ch >= '0' && ch <= '9'; });
        if (!digits) {
          return error(400, "depth: expected a whole number (0: every level)");
        }
        depth = std::stoll(it->second);
      }
      auto got = kv.lookup(tenant, path, *version);
      if (!got.isOk()) {
        return fromStatus(got.status());
      }
      // Vault's shape; a deleted or destroyed version is a 404 that still says which, with its
      // metadata and no data.
      const char* field = op == "data" ? "data" : "subkeys";
      const json value = got->gone         ? json()
                         : op == "subkeys" ? secrets::kvSubkeys(got->data, depth)
                                           : got->data;
      json answer = {{"request_id", r.request_id},
                     {"data", {{field, value}, {"metadata", got->metadataJson()}}}};
      if (got->gone) {
        // Vault's clients read `data` of this 404 and ignore `errors`; Tessera's show the reason.
        answer["errors"] = {"kv: version " + std::to_string(got->version) + " is " +
                            (got->destroyed ? "destroyed" : "deleted")};
      }
      return reply(got->gone ? 404 : 200, answer);
    }
    if (r.method == "PUT" || r.method == "POST" || r.method == "PATCH") {
      // Creating a key needs `create`, a new version of an existing one `update` (Vault's rule);
      // a patch only ever makes a new version, and needs `patch`, as in Vault.
      const bool patch = r.method == "PATCH";
      const auto found = patch ? core::Result<bool>(true) : kv.exists(tenant, path);
      const bool exists = found.isOk() && *found;
      static const std::string kRequest = "request";
      core::JsonNode n(r.body, "body", kRequest);
      if (core::Status st = n.checkKeys({"data", "options"}); !st.isOk()) {
        return fromStatus(st);
      }
      if (!r.body.contains("data") || !r.body["data"].is_object()) {
        return error(400, "\"data\": an object of the secret's fields is required");
      }
      if (!exists) {
        if (auto refused = room_for_new_key()) {
          return *refused;
        }
      }
      std::optional<int64_t> cas;
      if (r.body.contains("options")) {
        const json& o = r.body["options"];
        if (!o.is_object() || (o.contains("cas") && !o["cas"].is_number_integer())) {
          return error(400, "\"options\": {\"cas\": VERSION} is the only option");
        }
        if (o.contains("cas")) {
          cas = o["cas"].get<int64_t>();
        }
      }
      secrets::KvRead written;
      auto v = patch ? kv.patch(tenant, path, r.body["data"], cas, created_by, &written)
                     : kv.write(tenant, path, r.body["data"], cas, created_by, &written);
      if (!v.isOk()) {
        return fromStatus(v.status());
      }
      return reply(200, {{"request_id", r.request_id}, {"data", written.metadataJson()}});
    }
    if (r.method == "DELETE") {
      core::Status st = kv.remove(tenant, path, {});
      return st.isOk() ? noContent() : fromStatus(st);
    }
    return error(405, "use GET, PUT, PATCH or DELETE");
  }
  if (op == "delete" || op == "undelete" || op == "destroy") {
    if (r.method != "PUT" && r.method != "POST") {
      return error(405, "use PUT");
    }
    auto versions = versionsField(r.body, op != "delete");
    if (!versions.isOk()) {
      return fromStatus(versions.status());
    }
    core::Status st = op == "delete"     ? kv.remove(tenant, path, *versions)
                      : op == "undelete" ? kv.undelete(tenant, path, *versions)
                                         : kv.destroy(tenant, path, *versions);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  if (op == "metadata") {
    if (r.method == "GET") {
      auto m = kv.metadata(tenant, path);
      if (!m.isOk()) {
        return fromStatus(m.status());
      }
      return reply(200, {{"request_id", r.request_id}, {"data", m->metadataJson()}});
    }
    if (r.method == "PUT" || r.method == "POST") {
      const auto found = kv.exists(tenant, path);
      const bool exists = found.isOk() && *found;
      if (!exists) {
        if (auto refused = room_for_new_key()) {
          return *refused;
        }
      }
      core::Status st = kv.putMetadata(tenant, path, r.body);
      return st.isOk() ? noContent() : fromStatus(st);
    }
    if (r.method == "PATCH") {
      // Vault: a merge into the key's metadata (custom_metadata merged, null removes a key);
      // the key must exist; `patch`.
      core::Status st = kv.putMetadata(tenant, path, r.body, /*merge=*/true);
      return st.isOk() ? noContent() : fromStatus(st);
    }
    if (r.method == "DELETE") {
      core::Status st = kv.deleteKey(tenant, path);
      return st.isOk() ? noContent() : fromStatus(st);
    }
    return error(405, "use GET, PUT, PATCH, DELETE or LIST");
  }
  return error(404, "unsupported path: secrets/kv/" + op);
}

}  // namespace tessera::server
