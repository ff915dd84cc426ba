// The secrets side of the API (docs/secrets.md): the seal, KV v2 and leases. Part of
// ControlPlane; the request path (scope, token, tenant boundary, audit) is control_plane.cc's.
#include <algorithm>
#include <charconv>

#include "audit/record.h"
#include "core/json_node.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using api::error;
using api::fromStatus;
using api::noContent;
using api::reply;
using api::split;
using nlohmann::json;

namespace {

json sealJson(const secrets::SealStatus& s) {
  return {{"initialized", s.initialized},
          {"sealed", s.sealed},
          {"type", s.mode},
          {"n", s.shares},
          {"t", s.threshold},
          {"progress", s.progress},
          {"term", s.term}};
}

HttpResponse noSecrets() { return error(503, "this server has no secrets engine configured"); }

// Tokens are leases too (docs/secrets.md "Leases"): "auth/token/create/<accessor>", with the
// token's own expiry, renewal and revocation (the token manager keeps them, restart-safe).
constexpr std::string_view kTokenLeasePrefix = "auth/token/create/";

std::string tokenLeaseId(const TokenInfo& t) { return std::string(kTokenLeasePrefix) + t.accessor; }

json tokenLeaseJson(const TokenInfo& t, core::WallTime now) {
  auto time = [](core::WallTime w) {
    return w == core::WallTime::max() ? json(nullptr) : json(audit::formatRfc3339Millis(w));
  };
  return {{"lease_id", tokenLeaseId(t)},
          {"tenant", t.tenant},
          {"kind", "token"},
          {"data", {{"accessor", t.accessor}, {"policies", t.policies}}},
          {"issue_time", time(t.issued)},
          {"expire_time", time(t.expires)},
          {"max_expire_time", time(t.max_expiry)},
          {"renewable", t.renewable},
          {"revocable", true},
          {"state", "active"},
          {"ttl", t.ttlSeconds(now)}};
}

// A renewal's "increment" ("1h" or seconds); zero when absent (the lease's own TTL).
core::Result<core::Duration> incrementOf(const json& body) {
  if (!body.contains("increment")) {
    return core::Duration::zero();
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t s, parseDurationSeconds(body["increment"], "increment"));
  return std::chrono::duration_cast<core::Duration>(std::chrono::seconds(s));
}

// Everything after the first `skip` parts, joined with '/'.
std::string rest(const std::vector<std::string>& parts, size_t skip) {
  std::string out;
  for (size_t i = skip; i < parts.size(); ++i) {
    out += (i > skip ? "/" : "") + parts[i];
  }
  return out;
}

// ?version=N (absent: 0, the current version).
core::Result<int64_t> versionParam(const ScopedPath& scope) {
  auto it = scope.query.find("version");
  if (it == scope.query.end()) {
    return int64_t{0};
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || v < 0) {
    return core::invalidArgument("version: '" + it->second + "' is not a version number");
  }
  return v;
}

// {"versions": [1, 2]} of delete/undelete/destroy.
core::Result<std::vector<int64_t>> versionsField(const json& body, bool required) {
  std::vector<int64_t> out;
  if (!body.contains("versions")) {
    if (required) {
      return core::invalidArgument("\"versions\": a list of version numbers is required");
    }
    return out;
  }
  const json& v = body["versions"];
  if (!v.is_array() || v.size() > 1000) {
    return core::invalidArgument("\"versions\" must be a list of at most 1000 version numbers");
  }
  for (const json& n : v) {
    if (!n.is_number_integer() || n.get<int64_t>() < 1) {
      return core::invalidArgument("\"versions\" holds something that is not a version number");
    }
    out.push_back(n.get<int64_t>());
  }
  return out;
}

}  // namespace

std::vector<std::string> ControlPlane::sensitivePointers(const ScopedPath& scope) {
  if (scope.tenant && scope.path.rfind("secrets/", 0) == 0) {
    // Secret values written and read (a credential's user and password are in data too); list
    // answers name secrets, which may say too much.
    return {"/request/body/data", "/request/body/connection_url", "/response/body/data"};
  }
  if (scope.tenant && scope.path.rfind("leases/", 0) == 0) {
    return {"/response/body/data"};
  }
  // A task's output may print anything it was given (its env, its secrets): the text an agent
  // sends and the text a reader gets.
  const std::vector<std::string> parts = split(scope.path);
  if (scope.tenant && parts.size() == 3 && parts[0] == "workloads" && parts[2] == "logs") {
    return {"/response/body/data/text"};
  }
  if (!scope.tenant && parts.size() == 5 && parts[0] == "sys" && parts[1] == "nodes" &&
      parts[3] == "logs") {
    return {"/request/body/data_hex"};
  }
  if (!scope.tenant && scope.path == "sys/generate-root") {
    return {"/request/body/keys", "/response/body/data"};
  }
  return {};
}

std::optional<HttpResponse> ControlPlane::unauthenticatedSecretsApi(const HttpRequest& http,
                                                                    const ScopedPath& scope,
                                                                    const json& body) {
  if (scope.tenant || (scope.path != "sys/seal-status" && scope.path != "sys/init" &&
                       scope.path != "sys/unseal" && scope.path != "sys/generate-root")) {
    return std::nullopt;
  }
  if (secrets_ == nullptr) {
    return noSecrets();
  }
  secrets::KeyManager& keys = secrets_->keys();
  if (scope.path == "sys/seal-status") {
    return reply(200, sealJson(keys.status()));
  }
  const bool put = http.method == "PUT" || http.method == "POST";
  if (!put) {
    return error(405, "use PUT");
  }
  // Init and unseal are recorded (without the shares) so an operator sees who tried.
  audit::AuditEvent ev;
  ev.type = audit::AuditType::kResponse;
  ev.request_id = api::requestId();
  ev.request.method = http.method;
  ev.request.path = scope.path;
  ev.request.remote_address = http.remote;
  auto finish = [&](HttpResponse resp) {
    ev.response.status = static_cast<int>(resp.status);
    if (!auditor_.record(ev).isOk()) {
      return error(503, "the audit log cannot record this request, so it is refused");
    }
    return resp;
  };
  if (scope.path == "sys/init") {
    static const std::string kRequest = "request";
    core::JsonNode n(body, "body", kRequest);
    if (core::Status st = n.checkKeys({"secret_shares", "secret_threshold"}); !st.isOk()) {
      return finish(fromStatus(st));
    }
    int64_t shares = 5;
    int64_t threshold = 3;
    for (const auto& [field, out] :
         {std::pair{"secret_shares", &shares}, std::pair{"secret_threshold", &threshold}}) {
      if (n.has(field)) {
        auto v = n.child(field).integer(1, 255);
        if (!v.isOk()) {
          return finish(fromStatus(v.status()));
        }
        *out = *v;
      }
    }
    if (shares < 1 || shares > 255 || threshold < 1 || threshold > shares) {
      return finish(error(400, "need 1 <= secret_threshold <= secret_shares <= 255"));
    }
    if (threshold < 2 && shares > 1) {
      return finish(error(400, "a threshold of 1 with several shares makes every share the key"));
    }
    auto got = keys.initialize(static_cast<int>(shares), static_cast<int>(threshold));
    if (!got.isOk()) {
      return finish(fromStatus(got.status()));
    }
    return finish(reply(200, {{"keys", *got}, {"seal", sealJson(keys.status())}}));
  }
  if (scope.path == "sys/generate-root") {
    // A root token only for a quorum of unseal shares (in key-file mode, the key file's
    // contents), short-lived and not renewable: no forever credentials, not even for operators.
    static const std::string kRequest = "request";
    core::JsonNode n(body, "body", kRequest);
    if (core::Status st = n.checkKeys({"keys", "ttl"}); !st.isOk()) {
      return finish(fromStatus(st));
    }
    if (!body.contains("keys") || !body["keys"].is_array() || body["keys"].size() > 255) {
      return finish(error(400, "\"keys\": a list of unseal shares is required"));
    }
    std::vector<std::string> shares;
    for (const json& k : body["keys"]) {
      if (!k.is_string()) {
        return finish(error(400, "\"keys\": every share is a hex string"));
      }
      shares.push_back(k.get<std::string>());
    }
    int64_t ttl_s = int64_t{15} * 60;
    if (body.contains("ttl")) {
      auto t = parseDurationSeconds(body["ttl"], "ttl");
      if (!t.isOk()) {
        return finish(fromStatus(t.status()));
      }
      ttl_s = *t;
    }
    if (ttl_s < 60 || ttl_s > 3600) {
      return finish(error(400, "ttl: a generated root token lives 1m to 1h"));
    }
    if (core::Status st = keys.checkQuorum(shares); !st.isOk()) {
      return finish(fromStatus(st));
    }
    TokenInfo quorum;  // The shares stand in for a parent: root, with no cap of its own.
    quorum.policies = {"root"};
    quorum.max_expiry = core::WallTime::max();
    TokenRequest req;
    req.policies = {"root"};
    req.display_name = "generate-root";
    req.ttl = std::chrono::seconds(ttl_s);
    req.explicit_max_ttl = req.ttl;
    req.renewable = false;
    auto token = tokens_->create(quorum, req);
    if (!token.isOk()) {
      return finish(fromStatus(token.status()));
    }
    ev.auth.accessor = token->info.accessor;  // Who it was given to shows in every later record.
    return finish(reply(200, {{"data",
                               {{"token", token->secret},
                                {"accessor", token->info.accessor},
                                {"ttl", ttl_s},
                                {"renewable", false}}}}));
  }
  // sys/unseal
  if (!body.is_object()) {
    return finish(error(400, "request: body: expected an object"));
  }
  if (body.contains("reset") && !body["reset"].is_boolean()) {
    return finish(error(400, "\"reset\": expected true or false"));
  }
  if (body.value("reset", false)) {
    keys.resetUnseal();
    return finish(reply(200, sealJson(keys.status())));
  }
  if (!body.contains("key") || !body["key"].is_string()) {
    return finish(error(400, "\"key\": an unseal share (hex) is required"));
  }
  auto st = keys.unseal(body["key"].get<std::string>());
  if (!st.isOk()) {
    return finish(fromStatus(st.status()));
  }
  return finish(reply(200, sealJson(*st)));
}

core::Status ControlPlane::checkWorkloadSecrets(const Request& r,
                                                const WorkloadSecrets& wanted) const {
  if (secrets_ == nullptr) {
    return core::failedPrecondition("secrets: this server has no secrets engine");
  }
  // The workload gets only what its submitter may read (checked once, at submission).
  for (const std::string& path : wanted.kv) {
    if (!authorizedOn(r, "secrets/kv/data/" + path, Capability::kRead)) {
      return core::permissionDenied("secrets.kv: this token may not read secrets/kv/data/" + path);
    }
  }
  for (const std::string& role : wanted.db) {
    if (!authorizedOn(r, "secrets/db/creds/" + role, Capability::kRead)) {
      return core::permissionDenied("secrets.db: this token may not read secrets/db/creds/" + role);
    }
  }
  return core::Status::ok();
}

std::string ControlPlane::identityToken(const NodeTask& t, const std::string& node) {
  secrets::IdentityIssuer* issuer = secrets_ != nullptr ? secrets_->identity() : nullptr;
  if (issuer == nullptr) {
    return "";
  }
  const core::WallTime now = clock_.wallNow();
  const std::string key = t.id + "@" + std::to_string(t.generation);
  {
    std::lock_guard lock(identity_mu_);
    auto it = identity_cache_.find(key);
    if (it != identity_cache_.end() && now < it->second.refresh) {
      return it->second.token;
    }
  }
  secrets::TaskIdentity who;
  who.tenant = t.tenant;
  who.workload = t.workload;
  who.task = t.index;
  who.node = node;
  who.generation = t.generation;
  auto token = issuer->issue(who, t.identity_audiences);
  if (!token.isOk()) {
    return "";  // Sealed, say: the agent keeps the token it has, and asks again next time.
  }
  // Tokens live options().token_ttl (issue() gives no shorter one unless asked).
  const core::WallTime expires =
      now + std::chrono::duration_cast<core::WallTime::duration>(issuer->options().token_ttl);
  std::lock_guard lock(identity_mu_);
  std::erase_if(identity_cache_, [&](const auto& e) { return e.second.expires <= now; });
  identity_cache_[key] = {*token, now + (expires - now) / 2, expires};
  return *token;
}

std::optional<HttpResponse> ControlPlane::wellKnownApi(const HttpRequest& http) {
  const std::string path = http.target.substr(0, http.target.find('?'));
  if (path != "/.well-known/openid-configuration" && path != "/.well-known/jwks.json") {
    return std::nullopt;
  }
  secrets::IdentityIssuer* issuer = secrets_ != nullptr ? secrets_->identity() : nullptr;
  if (issuer == nullptr) {
    return error(404, "this server issues no workload identities");
  }
  if (http.method != "GET") {
    return error(405, "use GET");
  }
  if (path == "/.well-known/openid-configuration") {
    return reply(200, issuer->discoveryDocument());
  }
  auto keys = issuer->jwks();
  if (!keys.isOk()) {
    return fromStatus(keys.status());
  }
  return reply(200, *keys);
}

HttpResponse ControlPlane::sealApi(Request& r) {
  if (secrets_ == nullptr) {
    return noSecrets();
  }
  const std::string what = split(r.scope.path)[1];
  // Root (or sudo) operations: they affect every tenant.
  if (!r.token.isRoot() && !authorized(r, Capability::kSudo)) {
    return error(403, "permission denied: sys/" + what + " needs a root or sudo token");
  }
  if (what == "key-status") {
    const secrets::SealStatus s = secrets_->keys().status();
    return reply(200, {{"request_id", r.request_id}, {"data", {{"term", s.term}}}});
  }
  if (r.method != "PUT" && r.method != "POST") {
    return error(405, "use PUT");
  }
  if (what == "seal") {
    secrets_->keys().seal();
    return noContent();
  }
  if (what == "rotate") {
    auto term = secrets_->keys().rotate();
    if (!term.isOk()) {
      return fromStatus(term.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"term", *term}}}});
  }
  auto n = secrets_->rewrap();  // what == "rewrap"
  if (!n.isOk()) {
    return fromStatus(n.status());
  }
  return reply(200, {{"request_id", r.request_id}, {"data", {{"rewrapped", *n}}}});
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
  return error(404,
               "unsupported path: the secrets engines are kv (secrets/kv/...) and db "
               "(secrets/db/...)");
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
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied");
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
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
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
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    auto got = config ? db.readConnection(tenant, name) : db.readRole(tenant, name);
    if (!got.isOk()) {
      return fromStatus(got.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", *got}});
  }
  if (r.method == "PUT" || r.method == "POST") {
    const bool exists =
        config ? db.readConnection(tenant, name).isOk() : db.readRole(tenant, name).isOk();
    if (!authorized(r, exists ? Capability::kUpdate : Capability::kCreate)) {
      return error(403, "permission denied");
    }
    core::Status st =
        config ? db.putConnection(tenant, name, r.body) : db.putRole(tenant, name, r.body);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  if (r.method == "DELETE") {
    if (!authorized(r, Capability::kDelete)) {
      return error(403, "permission denied");
    }
    core::Status st = config ? db.deleteConnection(tenant, name) : db.deleteRole(tenant, name);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  return error(405, "use GET, PUT, DELETE or LIST");
}

HttpResponse ControlPlane::kvApi(Request& r, const std::vector<std::string>& parts) {
  const std::string& tenant = *r.scope.tenant;
  secrets::KvEngine& kv = secrets_->kv();
  if (parts.size() < 3) {
    return error(404,
                 "unsupported path: secrets/kv/{data,metadata,delete,undelete,destroy}/PATH "
                 "or secrets/kv/config");
  }
  const std::string& op = parts[2];
  const std::string path = rest(parts, 3);
  auto need = [&](Capability c) { return authorized(r, c); };
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
      if (!need(Capability::kRead)) {
        return error(403, "permission denied");
      }
      auto c = kv.config(tenant);
      if (!c.isOk()) {
        return fromStatus(c.status());
      }
      return reply(
          200, {{"request_id", r.request_id},
                {"data", {{"max_versions", c->max_versions}, {"cas_required", c->cas_required}}}});
    }
    if (r.method != "PUT" && r.method != "POST") {
      return error(405, "use GET or PUT");
    }
    if (!need(Capability::kUpdate)) {
      return error(403, "permission denied");
    }
    core::Status st = kv.setConfig(tenant, r.body);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  // LIST secrets/kv/metadata[/PREFIX]
  if (op == "metadata" && r.method == "LIST") {
    if (!need(Capability::kList)) {
      return error(403, "permission denied");
    }
    std::string prefix = path;
    if (!prefix.empty() && prefix.back() != '/') {
      prefix += '/';
    }
    auto names = kv.list(tenant, prefix);
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
  if (op == "data") {
    if (r.method == "GET") {
      if (!need(Capability::kRead)) {
        return error(403, "permission denied");
      }
      auto version = versionParam(r.scope);
      if (!version.isOk()) {
        return fromStatus(version.status());
      }
      auto got = kv.read(tenant, path, *version);
      if (!got.isOk()) {
        return fromStatus(got.status());
      }
      return reply(200, {{"request_id", r.request_id},
                         {"data",
                          {{"data", got->data},
                           {"metadata",
                            {{"version", got->version},
                             {"created_time", audit::formatRfc3339Millis(got->created)}}}}}});
    }
    if (r.method == "PUT" || r.method == "POST" || r.method == "PATCH") {
      // Creating a key needs `create`, a new version of an existing one `update` (Vault's rule);
      // a patch only ever makes a new version.
      const bool patch = r.method == "PATCH";
      const auto found = patch ? core::Result<bool>(true) : kv.exists(tenant, path);
      const bool exists = found.isOk() && *found;
      if (!need(exists ? Capability::kUpdate : Capability::kCreate)) {
        return error(403, "permission denied");
      }
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
      auto v = patch ? kv.patch(tenant, path, r.body["data"], cas)
                     : kv.write(tenant, path, r.body["data"], cas);
      if (!v.isOk()) {
        return fromStatus(v.status());
      }
      return reply(200, {{"request_id", r.request_id}, {"data", {{"version", *v}}}});
    }
    if (r.method == "DELETE") {
      if (!need(Capability::kDelete)) {
        return error(403, "permission denied");
      }
      core::Status st = kv.remove(tenant, path, {});
      return st.isOk() ? noContent() : fromStatus(st);
    }
    return error(405, "use GET, PUT, PATCH or DELETE");
  }
  if (op == "delete" || op == "undelete" || op == "destroy") {
    if (r.method != "PUT" && r.method != "POST") {
      return error(405, "use PUT");
    }
    if (!need(Capability::kUpdate)) {
      return error(403, "permission denied");
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
      if (!need(Capability::kRead)) {
        return error(403, "permission denied");
      }
      auto m = kv.metadata(tenant, path);
      if (!m.isOk()) {
        return fromStatus(m.status());
      }
      return reply(200, {{"request_id", r.request_id}, {"data", m->metadataJson()}});
    }
    if (r.method == "PUT" || r.method == "POST") {
      const auto found = kv.exists(tenant, path);
      const bool exists = found.isOk() && *found;
      if (!need(exists ? Capability::kUpdate : Capability::kCreate)) {
        return error(403, "permission denied");
      }
      if (!exists) {
        if (auto refused = room_for_new_key()) {
          return *refused;
        }
      }
      core::Status st = kv.putMetadata(tenant, path, r.body);
      return st.isOk() ? noContent() : fromStatus(st);
    }
    if (r.method == "DELETE") {
      if (!need(Capability::kDelete)) {
        return error(403, "permission denied");
      }
      core::Status st = kv.deleteKey(tenant, path);
      return st.isOk() ? noContent() : fromStatus(st);
    }
    return error(405, "use GET, PUT, DELETE or LIST");
  }
  return error(404, "unsupported path: secrets/kv/" + op);
}

core::Status ControlPlane::auditGrant(const std::string& tenant, const Grant& g,
                                      const std::string& what, const std::string& method,
                                      const std::string& path, int status,
                                      const std::string& accessor) {
  audit::AuditEvent ev;
  ev.type = audit::AuditType::kResponse;
  ev.request_id = api::requestId();
  ev.tenant = tenant;
  ev.auth.accessor = accessor;
  ev.auth.policies = {"grant:" + g.id};
  ev.request.method = method;
  ev.request.path = path;
  ev.request.body = {{"event", what},
                     {"grant", g.id},
                     {"owner", g.owner},
                     {"grantee", g.grantee},
                     {"on", "tenants/" + g.owner + "/" + g.on},
                     {"policy", g.policy},
                     {"expire_time", audit::formatRfc3339Millis(g.expires)}};
  ev.response.status = status;
  return auditor_.record(ev);
}

HttpResponse ControlPlane::grantsApi(Request& r) {
  const std::string& tenant = *r.scope.tenant;
  const std::vector<std::string> parts = split(r.scope.path);
  const core::WallTime now = clock_.wallNow();
  if (parts.size() == 1 && (r.method == "GET" || r.method == "LIST")) {
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied");
    }
    json out = json::array();
    for (const Grant& g : grants_->list(tenant)) {
      out.push_back(g.toJson(now));
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"grants", out}}}});
  }
  if (parts.size() == 1 && (r.method == "POST" || r.method == "PUT")) {
    if (!authorized(r, Capability::kCreate)) {
      return error(403, "permission denied");
    }
    static const std::string kRequest = "request";
    core::JsonNode n(r.body, "body", kRequest);
    if (core::Status st = n.checkKeys({"to", "on", "policy", "ttl"}); !st.isOk()) {
      return fromStatus(st);
    }
    if (!r.body.contains("ttl")) {
      return error(400, "grant: \"ttl\" is required (like \"4h\"); no grant is forever");
    }
    auto ttl = parseDurationSeconds(r.body["ttl"], "ttl");
    if (!ttl.isOk()) {
      return fromStatus(ttl.status());
    }
    for (const char* field : {"to", "on", "policy"}) {
      if (r.body.contains(field) && !r.body[field].is_string()) {
        return error(400, std::string("grant: \"") + field + "\" must be a string");
      }
    }
    const std::string to = r.body.value("to", "");
    const std::string policy = r.body.value("policy", "read");
    if (!validName(to)) {
      return error(400, "grant: \"to\" must name a tenant (lowercase letters, digits and '-')");
    }
    // Whether `to` is a tenant is not this tenant's business: a grant to a name with no tenant
    // is given like any other, and is void (a tenant created later under that name starts with
    // no grants, see putTenant).
    bool grantee_exists = false;
    {
      std::shared_lock lock(mu_);
      grantee_exists = tenants_.contains(to);
      auto own = policies_.find(tenant);
      if (policy != "read" && policy != "write" &&
          (own == policies_.end() || !own->second.contains(policy))) {
        return error(400, "grant: policy must be \"read\", \"write\" or one of tenant '" + tenant +
                              "''s policies; it has no policy '" + policy + "'");
      }
    }
    auto g = grants_->create(tenant, to, r.body.value("on", ""), policy, std::chrono::seconds(*ttl),
                             options_.tokens.max_ttl, r.token.accessor, now);
    if (!g.isOk()) {
      return fromStatus(g.status());
    }
    // The owner's stream has this request; the grantee's learns it was given something.
    if (grantee_exists &&
        !auditGrant(to, *g, "grant given", "POST", "tenants/" + tenant + "/grants/" + g->id, 200,
                    r.token.accessor)
             .isOk()) {
      (void)grants_->revoke(tenant, g->id);
      return error(503, "the audit log cannot record this request, so it is refused");
    }
    return reply(200, {{"request_id", r.request_id}, {"data", g->toJson(now)}});
  }
  if (parts.size() == 2 && r.method == "DELETE") {
    if (!authorized(r, Capability::kDelete)) {
      return error(403, "permission denied");
    }
    auto g = grants_->revoke(tenant, parts[1]);
    if (!g.isOk()) {
      return fromStatus(g.status());
    }
    (void)auditGrant(g->grantee, *g, "grant revoked", "DELETE",
                     "tenants/" + tenant + "/grants/" + g->id, 204, r.token.accessor);
    return noContent();
  }
  return error(405, "use GET or POST on grants, DELETE on grants/<id>");
}

HttpResponse ControlPlane::doctorApi(Request& r) {
  if (r.method != "GET") {
    return error(405, "use GET");
  }
  if (!r.token.isRoot() && !authorized(r, Capability::kSudo)) {
    return error(403, "permission denied: sys/doctor needs a root or sudo token");
  }
  int64_t threshold_s = int64_t{24} * 3600;
  if (auto it = r.scope.query.find("threshold"); it != r.scope.query.end()) {
    auto t = parseDurationSeconds(json(it->second), "threshold");
    if (!t.isOk()) {
      return fromStatus(t.status());
    }
    threshold_s = *t;
  }
  const core::WallTime now = clock_.wallNow();
  const auto limit = now + std::chrono::seconds(threshold_s);
  const auto hours_left = [&](core::WallTime t) {
    return std::chrono::duration_cast<std::chrono::hours>(t - now).count();
  };
  json findings = json::array();
  std::vector<std::string> scopes = {""};
  {
    std::shared_lock lock(mu_);
    for (const auto& [name, config] : tenants_) {
      scopes.push_back(name);
    }
  }
  for (const std::string& scope : scopes) {
    for (const TokenInfo& t : tokens_->list(scope)) {
      std::string why;
      if (t.expires == core::WallTime::max()) {
        why = "never expires (the bootstrap root token: revoke it once other admin tokens exist)";
      } else if (t.renewable && t.max_expiry > limit) {
        why = "renewable for " + std::to_string(hours_left(t.max_expiry)) + " h more";
      } else if (t.expires > limit) {
        why = "expires in " + std::to_string(hours_left(t.expires)) + " h";
      }
      if (!why.empty()) {
        findings.push_back({{"kind", "token"},
                            {"tenant", t.tenant},
                            {"id", t.accessor},
                            {"name", t.display_name},
                            {"policies", t.policies},
                            {"why", why}});
      }
    }
  }
  for (const std::string& scope : scopes) {
    for (const Grant& g : grants_->list(scope)) {
      if (g.owner == scope && g.expires > limit) {
        findings.push_back({{"kind", "grant"},
                            {"tenant", g.owner},
                            {"id", g.id},
                            {"name", "to " + g.grantee + " on " + g.on},
                            {"why", "expires in " + std::to_string(hours_left(g.expires)) + " h"}});
      }
    }
  }
  if (secrets_ != nullptr) {
    for (const secrets::Lease& l : secrets_->leases().list("", "")) {
      std::string why;
      if (l.state == secrets::LeaseState::kIrrevocable) {
        why = "irrevocable: " + l.last_error;
      } else if (l.renewable && l.max_expires > limit) {
        why = "renewable for " + std::to_string(hours_left(l.max_expires)) + " h more";
      } else if (l.expires > limit) {
        why = "expires in " + std::to_string(hours_left(l.expires)) + " h";
      }
      if (!why.empty()) {
        findings.push_back({{"kind", "lease"},
                            {"tenant", l.tenant},
                            {"id", l.id},
                            {"name", l.kind},
                            {"why", why}});
      }
    }
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data", {{"threshold_s", threshold_s}, {"findings", findings}}}});
}

HttpResponse ControlPlane::tokenLeaseApi(Request& r, const std::string& op,
                                         const std::string& accessor) {
  const std::string& tenant = *r.scope.tenant;
  const core::WallTime now = clock_.wallNow();
  auto t = tokens_->lookupAccessor(accessor);
  if (!t.isOk() || t->tenant != tenant) {
    return error(404, "no lease 'auth/token/create/" + accessor + "'");
  }
  if (op == "lookup") {
    json j = tokenLeaseJson(*t, now);
    j.erase("tenant");
    return reply(200, {{"request_id", r.request_id}, {"data", j}});
  }
  if (op == "renew") {
    auto increment = incrementOf(r.body);
    if (!increment.isOk()) {
      return fromStatus(increment.status());
    }
    auto renewed = tokens_->renew(accessor, *increment);
    if (!renewed.isOk()) {
      return fromStatus(renewed.status());
    }
    return reply(200, {{"request_id", r.request_id},
                       {"lease_id", tokenLeaseId(*renewed)},
                       {"lease_duration", renewed->ttlSeconds(now)},
                       {"renewable", renewed->renewable}});
  }
  auto revoked = tokens_->revoke(accessor);
  return revoked.isOk() ? noContent() : fromStatus(revoked.status());
}

HttpResponse ControlPlane::leasesApi(Request& r) {
  if (secrets_ == nullptr) {
    return noSecrets();
  }
  const std::string& tenant = *r.scope.tenant;
  secrets::LeaseManager& leases = secrets_->leases();
  const std::vector<std::string> parts = split(r.scope.path);
  const core::WallTime now = clock_.wallNow();
  auto lease_json = [&](const secrets::Lease& l) {
    json j = l.toJson();
    j.erase("tenant");
    j["ttl"] = l.ttlSeconds(now);
    j["revocable"] = true;  // Every lease has a revoker; expire-only credentials get none.
    return j;
  };
  if (parts.size() == 1) {  // LIST leases?prefix=
    if (r.method != "LIST" && r.method != "GET") {
      return error(405, "use LIST");
    }
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied");
    }
    auto it = r.scope.query.find("prefix");
    const std::string prefix = it == r.scope.query.end() ? "" : it->second;
    json keys = json::array();
    for (const secrets::Lease& l : leases.list(tenant, prefix)) {
      keys.push_back(l.id);
    }
    for (const TokenInfo& t : tokens_->list(tenant)) {
      if (tokenLeaseId(t).starts_with(prefix)) {
        keys.push_back(tokenLeaseId(t));
      }
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"keys", keys}}}});
  }
  const std::string& op = parts[1];
  if (r.method != "PUT" && r.method != "POST") {
    return error(405, "use PUT");
  }
  if (op == "revoke-prefix") {
    if (!authorized(r, Capability::kUpdate)) {
      return error(403, "permission denied");
    }
    const std::string prefix = rest(parts, 2);
    auto n = leases.revokePrefix(tenant, prefix);
    if (!n.isOk()) {
      return fromStatus(n.status());
    }
    // Tokens only for a prefix under auth/: revoking db/ (or everything else) logs no one out.
    size_t tokens = 0;
    if (prefix.starts_with("auth/")) {
      for (const TokenInfo& t : tokens_->list(tenant)) {
        if (tokenLeaseId(t).starts_with(prefix)) {
          auto revoked = tokens_->revoke(t.accessor);  // Its children too.
          tokens += revoked.isOk() ? static_cast<size_t>(*revoked) : 0;
        }
      }
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"revoked", *n + tokens}}}});
  }
  if (parts.size() != 2 || (op != "lookup" && op != "renew" && op != "revoke")) {
    return error(404, "unsupported path: leases/{lookup,renew,revoke,revoke-prefix/PREFIX}");
  }
  if (!r.body.contains("lease_id") || !r.body["lease_id"].is_string()) {
    return error(400, "\"lease_id\" is required");
  }
  const std::string id = r.body["lease_id"].get<std::string>();
  if (!authorized(r, op == "lookup" ? Capability::kRead : Capability::kUpdate)) {
    return error(403, "permission denied");
  }
  if (id.starts_with(kTokenLeasePrefix)) {
    return tokenLeaseApi(r, op, id.substr(kTokenLeasePrefix.size()));
  }
  if (op == "lookup") {
    auto l = leases.lookup(tenant, id);
    if (!l.isOk()) {
      return fromStatus(l.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", lease_json(*l)}});
  }
  if (op == "renew") {
    auto increment = incrementOf(r.body);
    if (!increment.isOk()) {
      return fromStatus(increment.status());
    }
    auto l = leases.renew(tenant, id, *increment);
    if (!l.isOk()) {
      return fromStatus(l.status());
    }
    return reply(200, {{"request_id", r.request_id},
                       {"lease_id", l->id},
                       {"lease_duration", l->ttlSeconds(now)},
                       {"renewable", l->renewable}});
  }
  core::Status st = leases.revoke(tenant, id);
  if (!st.isOk() && st.code() != core::StatusCode::kUnavailable) {
    return fromStatus(st);
  }
  if (!st.isOk()) {
    // The attempt failed; the expiry manager keeps trying. Accepted, not done.
    return reply(202, {{"request_id", r.request_id}, {"warnings", {st.message()}}});
  }
  return noContent();
}

HttpResponse ControlPlane::adminLeasesApi(Request& r) {
  if (secrets_ == nullptr) {
    return noSecrets();
  }
  secrets::LeaseManager& leases = secrets_->leases();
  const std::vector<std::string> parts = split(r.scope.path);
  const auto state_param = [&]() -> core::Result<std::optional<secrets::LeaseState>> {
    auto it = r.scope.query.find("type");
    if (it == r.scope.query.end() || it->second.empty()) {
      return std::optional<secrets::LeaseState>();
    }
    for (auto s : {secrets::LeaseState::kActive, secrets::LeaseState::kRevoking,
                   secrets::LeaseState::kIrrevocable}) {
      if (it->second == secrets::leaseStateName(s)) {
        return std::optional<secrets::LeaseState>(s);
      }
    }
    return core::invalidArgument("type: one of active, revoking, irrevocable");
  };
  if (parts.size() == 2 || (parts.size() == 3 && parts[2] == "count")) {
    if (r.method != "GET" && r.method != "LIST") {
      return error(405, "use GET");
    }
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    auto state = state_param();
    if (!state.isOk()) {
      return fromStatus(state.status());
    }
    const bool counting = parts.size() == 3;  // The count is of every lease, like the store's.
    auto tenant = r.scope.query.find("tenant");
    auto prefix_it = r.scope.query.find("prefix");
    const std::string prefix =
        counting || prefix_it == r.scope.query.end() ? "" : prefix_it->second;
    // Tokens are always active: they are listed unless another state is asked for.
    std::vector<TokenInfo> tokens;
    if (!*state || **state == secrets::LeaseState::kActive) {
      std::vector<std::string> scopes;
      if (!counting && tenant != r.scope.query.end()) {
        scopes.push_back(tenant->second);
      } else {
        std::shared_lock lock(mu_);
        scopes.emplace_back();  // Admin tokens.
        for (const auto& [name, config] : tenants_) {
          scopes.push_back(name);
        }
      }
      for (const std::string& scope : scopes) {
        for (TokenInfo& t : tokens_->list(scope)) {
          if (tokenLeaseId(t).starts_with(prefix)) {
            tokens.push_back(std::move(t));
          }
        }
      }
    }
    if (counting) {
      return reply(200, {{"request_id", r.request_id},
                         {"data", {{"count", leases.count(*state) + tokens.size()}}}});
    }
    json out = json::array();
    for (const secrets::Lease& l :
         leases.list(tenant == r.scope.query.end() ? "" : tenant->second, prefix, *state)) {
      json j = l.toJson();
      j["revocable"] = true;
      out.push_back(std::move(j));
    }
    const core::WallTime now = clock_.wallNow();
    for (const TokenInfo& t : tokens) {
      out.push_back(tokenLeaseJson(t, now));
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"leases", out}}}});
  }
  if (parts.size() == 3 && parts[2] == "revoke-force") {
    if (r.method != "PUT" && r.method != "POST") {
      return error(405, "use PUT");
    }
    if (!r.token.isRoot() && !authorized(r, Capability::kSudo)) {
      return error(403, "permission denied: revoke-force needs a root or sudo token");
    }
    const std::string tenant = r.body.value("tenant", "");
    const std::string id = r.body.value("lease_id", "");
    if (tenant.empty() || id.empty()) {
      return error(400, "\"tenant\" and \"lease_id\" are required");
    }
    core::Status st = leases.forceRevoke(tenant, id);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  return error(404, "unsupported path: sys/leases, sys/leases/count, sys/leases/revoke-force");
}

}  // namespace tessera::server
