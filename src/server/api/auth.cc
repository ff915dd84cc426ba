// ACL policies and tokens, in both scopes; docs/server.md "Tokens".
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <shared_mutex>

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

HttpResponse ControlPlane::policiesApi(Request& r) {
  std::vector<std::string> parts = split(r.scope.path);
  if (parts[0] == "sys") {
    parts.erase(parts.begin());
  }
  const std::string scope = r.scope.tenant.value_or("");
  if (parts.size() == 1) {
    if (r.method != "GET" && r.method != "LIST") {
      return error(405, "method not allowed: the policy list is read with GET or LIST");
    }
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied");
    }
    std::lock_guard lock(mu_);
    return keysReply(r.request_id, policies_[scope]);
  }
  if (parts.size() != 2 || !validPolicyName(parts[1])) {
    return error(400, "policy names are lowercase letters, digits, '-', '_' and '.'");
  }
  const std::string& name = parts[1];
  bool exists = false;
  {
    std::lock_guard lock(mu_);
    exists = policies_[scope].contains(name);
  }
  if (r.method == "GET") {
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    std::lock_guard lock(mu_);
    if (!exists) {
      return error(404, "no policy '" + name + "'");
    }
    return reply(200, {{"request_id", r.request_id},
                       {"data", {{"name", name}, {"policy", policies_[scope][name].toJson()}}}});
  }
  if (r.method == "POST") {
    if (!authorized(r, exists ? Capability::kUpdate : Capability::kCreate)) {
      return error(403, "permission denied");
    }
    const json& doc = r.body.contains("policy") ? r.body["policy"] : r.body;
    // Vault's API sends the policy as text: {"policy": "path \"...\" { ... }"}.
    auto p = doc.is_string() ? Policy::fromText(name, doc.get<std::string>())
                             : Policy::fromJson(name, doc);
    if (!p.isOk()) {
      return fromStatus(p.status());
    }
    // A tenant holds a bounded number of policies (each lives in the server's memory).
    std::unique_lock<std::mutex> creating;
    if (!scope.empty()) {
      creating = std::unique_lock(tenantLock(scope));
      const int64_t max_policies =
          tenantSetting(scope, "max_policies", options_.default_max_policies);
      std::lock_guard lock(mu_);
      const auto& held = policies_[scope];
      if (!held.contains(name) && static_cast<int64_t>(held.size()) >= max_policies) {
        return error(429, "tenant '" + scope + "' holds its limit of " +
                              std::to_string(max_policies) + " policies (max_policies)");
      }
    }
    auto put = store_.put(policyKey(scope, name), p->toJson().dump());
    if (!put.isOk()) {
      return fromStatus(put.status());
    }
    std::lock_guard lock(mu_);
    policies_[scope][name] = std::move(p).value();
    return noContent();
  }
  if (r.method == "DELETE") {
    if (!authorized(r, Capability::kDelete)) {
      return error(403, "permission denied");
    }
    if (!exists) {
      return error(404, "no policy '" + name + "'");
    }
    auto del = store_.deleteRange(policyKey(scope, name));
    if (!del.isOk()) {
      return fromStatus(del.status());
    }
    std::lock_guard lock(mu_);
    policies_[scope].erase(name);
    return noContent();
  }
  return error(405, "method not allowed");
}

namespace {

// The answer to a token creation: the secret, shown this once.
HttpResponse createdReply(const std::string& request_id, const CreatedToken& created,
                          core::WallTime now) {
  return reply(200, {{"request_id", request_id},
                     {"auth",
                      {{"client_token", created.secret},
                       {"accessor", created.info.accessor},
                       {"policies", created.info.policies},
                       {"tenant", created.info.tenant},
                       {"role", created.info.role},
                       {"lease_duration", created.info.ttlSeconds(now)},
                       {"renewable", created.info.renewable}}}});
}

// A list of policy names at `field` of `body`: strings, valid names, no repeats.
core::Result<std::vector<std::string>> policyNames(const json& body, const char* field) {
  const std::string where = field;
  if (!body.at(field).is_array()) {
    return core::invalidArgument(where + ": expected a list of policy names");
  }
  std::vector<std::string> out;
  for (const json& p : body.at(field)) {
    if (!p.is_string() || !validPolicyName(p.get<std::string>())) {
      return core::invalidArgument(where + ": " + p.dump() +
                                   " is not a policy name (lowercase letters, digits, -, _, .)");
    }
    if (std::find(out.begin(), out.end(), p.get<std::string>()) != out.end()) {
      return core::invalidArgument(where + ": '" + p.get<std::string>() + "' is named twice");
    }
    out.push_back(p.get<std::string>());
  }
  return out;
}

}  // namespace

PowerSource ControlPlane::powerSource() const {
  PowerSource source;
  source.policy = [this](const std::string& scope,
                         const std::string& name) -> std::optional<Policy> {
    std::shared_lock lock(mu_);
    auto in_scope = policies_.find(scope);
    if (in_scope == policies_.end()) {
      return std::nullopt;
    }
    auto it = in_scope->second.find(name);
    return it == in_scope->second.end() ? std::nullopt : std::optional<Policy>(it->second);
  };
  source.tenant_reach = [this](const std::string& tenant) {
    // Each live grant to the tenant: its capabilities on its prefix of the owner's paths (for
    // an owner's policy, every capability the policy gives anywhere: more than it may give
    // there, so the check errs on refusing).
    Policy reach;
    reach.name = "grants to tenant '" + tenant + "'";
    if (grants_ == nullptr) {
      return reach;
    }
    const core::WallTime now = clock_.wallNow();
    for (const Grant& g : grants_->list(tenant)) {
      if (g.grantee != tenant || g.expires <= now) {
        continue;
      }
      Capabilities caps = g.capabilities;
      if (g.ownerPolicy()) {
        std::shared_lock lock(mu_);
        if (auto owner = policies_.find(g.owner); owner != policies_.end()) {
          if (auto p = owner->second.find(g.policy); p != owner->second.end()) {
            for (const PathRule& rule : p->second.rules) {
              if ((rule.capabilities.bits & static_cast<uint16_t>(Capability::kDeny)) == 0) {
                caps.bits |= rule.capabilities.bits;
              }
            }
          }
        }
      }
      const std::string at = "tenants/" + g.owner + "/" + g.on;
      reach.rules.push_back({at, caps, {}});
      reach.rules.push_back({at + "/*", caps, {}});
    }
    return reach;
  };
  return source;
}

core::Status ControlPlane::holdsPowerOf(const Request& r, const std::string& scope,
                                        const std::string& name) const {
  const std::string where = scope.empty() ? "the admin scope" : "tenant '" + scope + "'";
  if (name == "root") {
    // A root token's power is its name, not its rules: only a root token makes one.
    return core::Status(core::StatusCode::kPermissionDenied,
                        "policy 'root' cannot be given through a token role (only a root token "
                        "creates root tokens, with auth/token/create)");
  }
  {
    std::shared_lock lock(mu_);
    auto in_scope = policies_.find(scope);
    if (in_scope == policies_.end() || !in_scope->second.contains(name)) {
      // Names resolve in the role's own scope: an admin policy of that name is not this one.
      return core::invalidArgument("no policy '" + name + "' in " + where);
    }
  }
  return checkChildPower(r.token, scope, {name}, powerSource(), /*through_role=*/true);
}

HttpResponse ControlPlane::tokenRolesApi(Request& r) {
  const std::vector<std::string> parts = split(r.scope.path);  // auth/token/roles[/<name>]
  const std::string scope = r.scope.tenant.value_or("");
  if (r.grant) {
    return error(403, "permission denied: token roles are not reachable through a grant");
  }
  if (parts.size() == 3) {
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied: listing token roles needs list on auth/token/roles");
    }
    auto names = tokens_->roleNames(scope);
    if (!names.isOk()) {
      return fromStatus(names.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"keys", *names}}}});
  }
  if (parts.size() != 4 || !validName(parts[3])) {
    return error(400, "token role names are lowercase letters, digits and '-'");
  }
  const std::string& name = parts[3];
  if (r.method == "GET") {
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied: reading a token role needs read on its path");
    }
    auto role = tokens_->role(scope, name);
    if (!role.isOk()) {
      return fromStatus(role.status());
    }
    json data = role->toJson();
    data["name"] = name;
    return reply(200, {{"request_id", r.request_id}, {"data", data}});
  }
  if (r.method == "DELETE") {
    if (!authorized(r, Capability::kDelete)) {
      return error(403, "permission denied: deleting a token role needs delete on its path");
    }
    core::Status st = tokens_->deleteRole(scope, name);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  // POST: create or replace.
  auto existing = tokens_->role(scope, name);
  if (!existing.isOk() && existing.status().code() != core::StatusCode::kNotFound) {
    return fromStatus(existing.status());
  }
  if (!authorized(r, existing.isOk() ? Capability::kUpdate : Capability::kCreate)) {
    return error(403,
                 "permission denied: writing a token role needs create or update on "
                 "auth/token/roles/" +
                     name);
  }
  const std::string source = "token role";
  core::JsonNode n(r.body, "", source);
  if (core::Status st =
          n.checkKeys({"allowed_policies", "token_ttl", "token_max_ttl", "renewable"});
      !st.isOk()) {
    return fromStatus(st);
  }
  if (!r.body.contains("allowed_policies")) {
    return error(400, "token role: allowed_policies: required (the policies its tokens may have)");
  }
  auto allowed = policyNames(r.body, "allowed_policies");
  if (!allowed.isOk()) {
    return fromStatus(allowed.status());
  }
  if (allowed->empty()) {
    return error(400, "token role: allowed_policies: name at least one policy");
  }
  TokenRole role;
  role.allowed_policies = *allowed;
  // The writer may hand on only what it holds: checked now, and again at each token creation
  // (a policy may have grown since).
  for (const std::string& p : role.allowed_policies) {
    if (core::Status st = holdsPowerOf(r, scope, p); !st.isOk()) {
      return fromStatus(st.withContext("token role '" + name + "'"));
    }
  }
  for (const char* f : {"token_ttl", "token_max_ttl"}) {
    if (r.body.contains(f)) {
      auto d = parseDuration(r.body[f], f);
      if (!d.isOk()) {
        return fromStatus(d.status());
      }
      if (*d < core::Duration::zero()) {
        return error(400, std::string("token role: ") + f + ": must not be negative");
      }
      (std::string(f) == "token_ttl" ? role.token_ttl : role.token_max_ttl) = *d;
    }
  }
  if (role.token_max_ttl > core::Duration::zero() && role.token_ttl > role.token_max_ttl) {
    return error(400, "token role: token_ttl is longer than token_max_ttl");
  }
  if (n.has("renewable")) {
    auto renewable = n.child("renewable").boolean();
    if (!renewable.isOk()) {
      return fromStatus(renewable.status());
    }
    role.renewable = *renewable;
  }
  if (!existing.isOk()) {
    // Each role is a store key of the scope: a tenant holds as many as it may hold policies.
    auto names = tokens_->roleNames(scope);
    if (!names.isOk()) {
      return fromStatus(names.status());
    }
    const int64_t max_roles =
        scope.empty() ? 0 : tenantSetting(scope, "max_policies", options_.default_max_policies);
    if (max_roles > 0 && static_cast<int64_t>(names->size()) >= max_roles) {
      return error(429, "tenant '" + scope + "' holds its limit of " + std::to_string(max_roles) +
                            " token roles (max_policies)");
    }
  }
  core::Status st = tokens_->putRole(scope, name, role);
  return st.isOk() ? noContent() : fromStatus(st);
}

HttpResponse ControlPlane::createFromRole(Request& r, const std::string& role_name) {
  if (r.grant) {
    return error(403, "permission denied: token roles are not reachable through a grant");
  }
  if (!validName(role_name)) {
    return error(400, "token role names are lowercase letters, digits and '-'");
  }
  if (!authorized(r, Capability::kUpdate) && !authorized(r, Capability::kCreate)) {
    return error(403, "permission denied: creating tokens from role '" + role_name +
                          "' needs create or update on auth/token/create/" + role_name);
  }
  const std::string scope = r.scope.tenant.value_or("");
  auto role = tokens_->role(scope, role_name);
  if (!role.isOk()) {
    return fromStatus(role.status());
  }
  const std::string source = "token request";
  core::JsonNode n(r.body, "", source);
  if (core::Status st =
          n.checkKeys({"policies", "ttl", "explicit_max_ttl", "renewable", "display_name"});
      !st.isOk()) {
    return fromStatus(st);
  }
  TokenRequest req;
  req.tenant = scope;
  req.role = role_name;
  req.policies = role->allowed_policies;
  if (r.body.contains("policies")) {
    auto asked = policyNames(r.body, "policies");
    if (!asked.isOk()) {
      return fromStatus(asked.status());
    }
    for (const std::string& p : *asked) {
      if (std::find(role->allowed_policies.begin(), role->allowed_policies.end(), p) ==
          role->allowed_policies.end()) {
        return error(403, "permission denied: token role '" + role_name +
                              "' does not allow policy '" + p + "'");
      }
    }
    req.policies = *asked;
  }
  for (const std::string& p : req.policies) {
    if (core::Status st = holdsPowerOf(r, scope, p); !st.isOk()) {
      return fromStatus(st.withContext("token role '" + role_name + "'"));
    }
  }
  req.ttl = role->token_ttl;
  req.explicit_max_ttl = role->token_max_ttl;
  for (const char* f : {"ttl", "explicit_max_ttl"}) {
    if (r.body.contains(f)) {
      auto d = parseDuration(r.body[f], f);
      if (!d.isOk()) {
        return fromStatus(d.status());
      }
      core::Duration& into = std::string(f) == "ttl" ? req.ttl : req.explicit_max_ttl;
      // Shorter than the role says, never longer.
      if (role->token_max_ttl > core::Duration::zero() && *d > role->token_max_ttl) {
        return error(
            400,
            std::string(f) + ": longer than token role '" + role_name + "' allows (token_max_ttl " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::seconds>(role->token_max_ttl).count()) +
                " s)");
      }
      into = *d;
    }
  }
  req.renewable = role->renewable;
  if (n.has("renewable")) {
    auto renewable = n.child("renewable").boolean();
    if (!renewable.isOk()) {
      return fromStatus(renewable.status());
    }
    req.renewable = role->renewable && *renewable;
  }
  if (n.has("display_name")) {
    const json& name = n.child("display_name").value();
    if (!name.is_string() || name.get<std::string>().size() > 256) {
      return fromStatus(n.child("display_name").error("expected a string of at most 256 bytes"));
    }
    req.display_name = name.get<std::string>();
  }
  const int64_t max_tokens =
      req.tenant.empty() ? 0 : tenantSetting(req.tenant, "max_tokens", options_.default_max_tokens);
  auto created = tokens_->create(r.token, req, static_cast<size_t>(max_tokens));
  if (!created.isOk()) {
    return fromStatus(created.status());
  }
  return createdReply(r.request_id, *created, clock_.wallNow());
}

HttpResponse ControlPlane::tokensApi(Request& r) {
  const std::vector<std::string> parts = split(r.scope.path);
  if (parts.size() >= 3 && parts[2] == "roles") {
    return tokenRolesApi(r);
  }
  if (parts.size() == 4 && parts[2] == "create") {
    return createFromRole(r, parts[3]);
  }
  if (parts.size() != 3) {
    return error(404, "unsupported path");
  }
  const std::string& op = parts[2];
  const core::WallTime now = clock_.wallNow();
  // The token itself may always look itself up, renew and revoke itself.
  if (op == "lookup-self") {
    if (r.method != "GET" && r.method != "POST") {
      return error(405, "use GET or POST");
    }
    return reply(200, {{"request_id", r.request_id}, {"data", r.token.toJson(now)}});
  }
  if (op == "renew-self" || op == "revoke-self") {
    if (r.method != "POST" && r.method != "PUT") {  // A read must never renew or revoke.
      return error(405, "use POST");
    }
    if (op == "revoke-self") {
      auto n = tokens_->revoke(r.token.accessor);
      return n.isOk() ? noContent() : fromStatus(n.status());
    }
    auto inc = incrementOf(r.body);
    if (!inc.isOk()) {
      return fromStatus(inc.status());
    }
    auto t = tokens_->renew(r.token.accessor, *inc);
    return t.isOk() ? reply(200, {{"request_id", r.request_id}, {"data", t->toJson(now)}})
                    : fromStatus(t.status());
  }
  if (r.method != "POST" && !(op == "lookup" && r.method == "GET")) {
    return error(405, "use POST");
  }
  if (!authorized(r, Capability::kUpdate) && !authorized(r, Capability::kCreate)) {
    return error(403, "permission denied");
  }
  const std::string scope = r.scope.tenant.value_or("");
  if (op == "create") {
    TokenRequest req;
    req.tenant = scope;
    const std::string source = "token request";
    core::JsonNode n(r.body, "", source);
    core::Status st =
        n.checkKeys({"policies", "ttl", "explicit_max_ttl", "renewable", "display_name", "tenant"});
    if (!st.isOk()) {
      return fromStatus(st);
    }
    if (r.body.contains("tenant")) {
      if (!scope.empty() || !r.body["tenant"].is_string() ||
          !validName(r.body["tenant"].get<std::string>())) {
        return error(400, "tenant: name a tenant only when creating from the admin scope");
      }
      req.tenant = r.body["tenant"].get<std::string>();
      std::lock_guard lock(mu_);
      if (!tenants_.contains(req.tenant)) {
        return error(404, "no tenant '" + req.tenant + "'");
      }
    }
    if (r.body.contains("policies")) {
      if (!r.body["policies"].is_array()) {
        return error(400, "policies: expected a list of names");
      }
      for (const json& p : r.body["policies"]) {
        if (!p.is_string()) {
          return error(400, "policies: expected a list of names");
        }
        req.policies.push_back(p.get<std::string>());
      }
    }
    for (const char* f : {"ttl", "explicit_max_ttl"}) {
      if (r.body.contains(f)) {
        auto d = parseDuration(r.body[f], f);
        if (!d.isOk()) {
          return fromStatus(d.status());
        }
        (std::string(f) == "ttl" ? req.ttl : req.explicit_max_ttl) = *d;
      }
    }
    if (n.has("renewable")) {
      auto renewable = n.child("renewable").boolean();
      if (!renewable.isOk()) {
        return fromStatus(renewable.status());
      }
      req.renewable = *renewable;
    }
    if (n.has("display_name")) {
      const json& name = n.child("display_name").value();
      if (!name.is_string() || name.get<std::string>().size() > 256) {
        return fromStatus(n.child("display_name").error("expected a string of at most 256 bytes"));
      }
      req.display_name = name.get<std::string>();
    }
    // Every token lives in the server's memory until it expires: a tenant holds a bounded number.
    const int64_t max_tokens =
        req.tenant.empty() ? 0
                           : tenantSetting(req.tenant, "max_tokens", options_.default_max_tokens);
    auto created = tokens_->create(r.token, req, static_cast<size_t>(max_tokens));
    if (!created.isOk()) {
      return fromStatus(created.status());
    }
    return createdReply(r.request_id, *created, now);
  }
  // lookup, renew, revoke by accessor: only tokens of this scope.
  if (r.body.contains("accessor") && !r.body["accessor"].is_string()) {
    return error(400, "token request: accessor: expected a string");
  }
  const std::string accessor = r.body.value(
      "accessor", r.scope.query.count("accessor") != 0 ? r.scope.query.at("accessor") : "");
  auto target = tokens_->lookupAccessor(accessor);
  if (!target.isOk() || target->tenant != scope) {
    return error(404, "no such token");
  }
  if (op == "lookup") {
    return reply(200, {{"request_id", r.request_id}, {"data", target->toJson(now)}});
  }
  if (op == "renew") {
    auto inc = incrementOf(r.body);
    if (!inc.isOk()) {
      return fromStatus(inc.status());
    }
    auto t = tokens_->renew(accessor, *inc);
    return t.isOk() ? reply(200, {{"request_id", r.request_id}, {"data", t->toJson(now)}})
                    : fromStatus(t.status());
  }
  if (op == "revoke") {
    auto n = tokens_->revoke(accessor);
    return n.isOk() ? noContent() : fromStatus(n.status());
  }
  return error(404, "unsupported path");
}

}  // namespace tessera::server
