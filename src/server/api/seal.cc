// The seal (unauthenticated init, unseal, generate-root; seal, rotate, rewrap), the workload
// identity issuer's documents and tokens, what the audit log HMACs per route, and sys/doctor.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/json_node.h"
#include "core/strings.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

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
    ev.auth.display_name = token->info.display_name;
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

HttpResponse ControlPlane::doctorApi(Request& r) {
  if (r.method != "GET") {
    return error(405, "use GET");
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
      } else if (t.period > core::Duration::zero()) {
        // A service credential: it ends one period after its holder stops renewing it, so only
        // a period longer than the threshold is long.
        if (t.period > std::chrono::seconds(threshold_s)) {
          why = "periodic: lives " +
                std::to_string(std::chrono::duration_cast<std::chrono::hours>(t.period).count()) +
                " h after its last renewal, for ever while renewed";
        }
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

}  // namespace tessera::server
