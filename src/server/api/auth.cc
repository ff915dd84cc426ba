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
    std::lock_guard lock(mu_);
    if (!exists) {
      return error(404, "no policy '" + name + "'");
    }
    return reply(200, {{"request_id", r.request_id},
                       {"data", {{"name", name}, {"policy", policies_[scope][name].toJson()}}}});
  }
  if (r.method == "POST") {
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

// Vault's `auth` block for `t` (token create and renew answers): what Vault's clients read
// (hvac, the Go client's lifetime watcher), plus Tessera's tenant and role. `secret` is the
// token itself, only where the caller already holds it or is given it now.
json authBlock(const TokenInfo& t, const std::string& secret, core::WallTime now) {
  return {{"client_token", secret},
          {"accessor", t.accessor},
          {"policies", t.policies},
          {"token_policies", t.policies},
          {"metadata", t.meta.empty() ? json(nullptr) : json(t.meta)},
          {"lease_duration", t.ttlSeconds(now)},
          {"renewable", t.renewable},
          {"entity_id", ""},
          {"token_type", "service"},
          {"orphan", t.parent.empty()},
          {"num_uses", 0},
          {"tenant", t.tenant},
          {"role", t.role},
          {"period", std::chrono::duration_cast<std::chrono::seconds>(t.period).count()}};
}

// An answer in Vault's envelope: `auth` set, `data` as given, warnings if any.
HttpResponse vaultReply(const std::string& request_id, json auth, json data,
                        const std::vector<std::string>& warnings) {
  return reply(200, {{"request_id", request_id},
                     {"lease_id", ""},
                     {"lease_duration", 0},
                     {"renewable", false},
                     {"data", std::move(data)},
                     {"warnings", warnings.empty() ? json(nullptr) : json(warnings)},
                     {"auth", std::move(auth)}});
}

// The answer to a token creation: the secret, shown this once.
HttpResponse createdReply(const std::string& request_id, const CreatedToken& created,
                          core::WallTime now, const std::vector<std::string>& warnings) {
  return vaultReply(request_id, authBlock(created.info, created.secret, now), nullptr, warnings);
}

// The answer to a renewal: Vault's `auth` block, and the token as a lookup shows it in `data`
// (Tessera's own clients read its `ttl` there).
HttpResponse renewedReply(const std::string& request_id, const TokenInfo& t,
                          const std::string& secret, core::WallTime now) {
  return vaultReply(request_id, authBlock(t, secret, now), t.toJson(now), {});
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

// Vault's token-creation fields that both creation paths read the same way (docs/server.md
// "Vault's token fields"): each is mapped onto `req`, or accepted and ignored with a warning
// saying what Tessera does instead, as Vault answers parameters it does not use. Fields the
// caller handles itself (`own`) are skipped; any other key is reported in Vault's words. Errors
// only for values of the wrong type or out of range.
core::Status readVaultTokenFields(const json& body, const std::vector<std::string>& own,
                                  TokenRequest& req, std::vector<std::string>& warnings) {
  const std::string source = "token request";
  core::JsonNode n(body, "", source);
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items()) {
    if (std::find(own.begin(), own.end(), key) != own.end()) {
      continue;
    }
    if (key == "renewable" || key == "no_parent" || key == "no_default_policy") {
      TESSERA_ASSIGN_OR_RETURN(bool b, n.child(key.c_str()).boolean());
      if (key == "renewable") {
        req.renewable = req.renewable && b;
      } else if (key == "no_parent") {
        req.orphan = b;
      }
      // no_default_policy: Tessera has no default policy to add or leave out.
    } else if (key == "display_name") {
      if (!value.is_string() || value.get<std::string>().size() > 256) {
        return n.child(key.c_str()).error("expected a string of at most 256 bytes");
      }
      req.display_name = value.get<std::string>();
    } else if (key == "period") {
      TESSERA_ASSIGN_OR_RETURN(req.period, parseDuration(value, key));
    } else if (key == "meta") {
      if (value.is_null()) {
        continue;
      }
      if (!value.is_object() || value.size() > 64) {
        return n.child(key.c_str()).error("expected an object of at most 64 string values");
      }
      for (const auto& [k, v] : value.items()) {
        if (k.empty() || k.size() > 128 || !v.is_string() || v.get<std::string>().size() > 512) {
          return n.child(key.c_str())
              .child(k.c_str())
              .error("expected a string of at most 512 bytes, under a key of 1 to 128 bytes");
        }
        req.meta[k] = v.get<std::string>();
      }
    } else if (key == "num_uses") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0) {
        return n.child(key.c_str()).error("expected a whole number, 0 or more");
      }
      if (value.get<int64_t>() > 0) {
        warnings.push_back(
            "num_uses is not supported: the token may be used any number of times until it "
            "expires; give it a short ttl instead");
      }
    } else if (key == "type") {
      const std::string type = value.is_string() ? value.get<std::string>() : "?";
      if (type == "batch") {
        warnings.push_back("type: batch tokens are not supported; this is a service token");
      } else if (type != "service" && type != "default" && !type.empty()) {
        return n.child(key.c_str()).error("expected \"service\", \"batch\" or \"default\"");
      }
    } else if (key == "id") {
      if (!value.is_null() && !(value.is_string() && value.get<std::string>().empty())) {
        warnings.push_back(
            "id is ignored: Tessera chooses every token's secret (use this answer's "
            "auth.client_token)");
      }
    } else if (key == "entity_alias") {
      if (!value.is_null() && !(value.is_string() && value.get<std::string>().empty())) {
        warnings.push_back("entity_alias is ignored: Tessera has no identity entities");
      }
    } else {
      unknown.push_back(key);
    }
  }
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& k : unknown) {
      list += (list.empty() ? "" : " ") + k;
    }
    warnings.push_back("Endpoint ignored these unrecognized parameters: [" + list + "]");
  }
  return core::Status::ok();
}

}  // namespace

// Whether `r`'s token may create an orphan token (Vault: root, or sudo on the create path).
bool ControlPlane::mayCreateOrphan(Request& r) {
  return r.sudo;  // The pipeline's: the route asks (RouteSpec::asks_sudo).
}

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
    auto role = tokens_->role(scope, name);
    if (!role.isOk()) {
      return fromStatus(role.status());
    }
    json data = role->toJson();
    data["name"] = name;
    return reply(200, {{"request_id", r.request_id}, {"data", data}});
  }
  if (r.method == "DELETE") {
    core::Status st = tokens_->deleteRole(scope, name);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  // POST: create or replace.
  auto existing = tokens_->role(scope, name);
  if (!existing.isOk() && existing.status().code() != core::StatusCode::kNotFound) {
    return fromStatus(existing.status());
  }
  const std::string source = "token role";
  core::JsonNode n(r.body, "", source);
  if (!r.body.is_object()) {
    return error(400, "token role: expected an object");
  }
  // Vault's other role fields are accepted and reported as ignored, as Vault does.
  std::vector<std::string> ignored;
  for (const auto& [key, value] : r.body.items()) {
    if (key == "orphan" && value == false) {
      continue;  // What Tessera's roles are; hvac sends it with every role.
    }
    if (key != "allowed_policies" && key != "token_ttl" && key != "token_max_ttl" &&
        key != "renewable" && key != "token_period" && key != "period") {
      ignored.push_back(key);
    }
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
  for (const char* f : {"token_period", "period"}) {  // `period` is Vault's older name.
    if (r.body.contains(f) && !r.body[f].is_null()) {
      auto d = parseDuration(r.body[f], f);
      if (!d.isOk()) {
        return fromStatus(d.status());
      }
      if (*d < core::Duration::zero()) {
        return error(400, std::string("token role: ") + f + ": must not be negative");
      }
      role.token_period = *d;
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
  if (role.token_period > core::Duration::zero() && !role.renewable) {
    return error(400,
                 "token role: a token_period makes its tokens renewable: renewable=false "
                 "clashes");
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
  if (!st.isOk()) {
    return fromStatus(st);
  }
  if (ignored.empty()) {
    return noContent();
  }
  std::string list;
  for (const std::string& k : ignored) {
    list += (list.empty() ? "" : " ") + k;
  }
  return reply(200,
               {{"request_id", r.request_id},
                {"data", nullptr},
                {"warnings", {"Endpoint ignored these unrecognized parameters: [" + list + "]"}}});
}

HttpResponse ControlPlane::createFromRole(Request& r, const std::string& role_name) {
  if (r.grant) {
    return error(403, "permission denied: token roles are not reachable through a grant");
  }
  if (!validName(role_name)) {
    return error(400, "token role names are lowercase letters, digits and '-'");
  }
  const std::string scope = r.scope.tenant.value_or("");
  auto role = tokens_->role(scope, role_name);
  if (!role.isOk()) {
    return fromStatus(role.status());
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
  req.period = role->token_period;
  std::vector<std::string> warnings;
  const core::Duration role_period = req.period;
  if (core::Status st = readVaultTokenFields(
          r.body, {"policies", "ttl", "explicit_max_ttl", "role_name"}, req, warnings);
      !st.isOk()) {
    return fromStatus(st);
  }
  if (role_period > core::Duration::zero() && req.period != role_period) {
    req.period = role_period;  // The role decides, as in Vault.
    warnings.push_back(
        "period: token role '" + role_name + "' gives its tokens a period of " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(role_period).count()) +
        " s, which applies");
  }
  if (req.orphan && !mayCreateOrphan(r)) {
    return error(403,
                 "permission denied: no_parent: only a root token or one with sudo on "
                 "auth/token/create/" +
                     role_name + " creates orphan tokens");
  }
  const int64_t max_tokens =
      req.tenant.empty() ? 0 : tenantSetting(req.tenant, "max_tokens", options_.default_max_tokens);
  auto created = tokens_->create(r.token, req, static_cast<size_t>(max_tokens));
  if (!created.isOk()) {
    return fromStatus(created.status());
  }
  return createdReply(r.request_id, *created, clock_.wallNow(), warnings);
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
    return t.isOk() ? renewedReply(r.request_id, *t, requestToken(r.http), now)
                    : fromStatus(t.status());
  }
  if (r.method != "POST" && !(op == "lookup" && r.method == "GET")) {
    return error(405, "use POST");
  }
  const std::string scope = r.scope.tenant.value_or("");
  if (op == "create") {
    if (r.body.contains("role_name") && r.body["role_name"].is_string() &&
        !r.body["role_name"].get<std::string>().empty()) {
      return createFromRole(r, r.body["role_name"].get<std::string>());  // Vault takes it here too.
    }
    TokenRequest req;
    req.tenant = scope;
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
    std::vector<std::string> warnings;
    if (r.body.contains("policies") && !r.body["policies"].is_null()) {
      if (!r.body["policies"].is_array()) {
        return error(400, "policies: expected a list of names");
      }
      for (const json& p : r.body["policies"]) {
        if (!p.is_string()) {
          return error(400, "policies: expected a list of names");
        }
        req.policies.push_back(p.get<std::string>());
      }
    } else {
      warnings.push_back(
          "policies: none given, so the token has none (unlike Vault, Tessera does not copy the "
          "creating token's policies): it can only look up, renew and revoke itself");
    }
    for (const char* f : {"ttl", "explicit_max_ttl"}) {
      if (r.body.contains(f) && !r.body[f].is_null()) {
        auto d = parseDuration(r.body[f], f);
        if (!d.isOk()) {
          return fromStatus(d.status());
        }
        (std::string(f) == "ttl" ? req.ttl : req.explicit_max_ttl) = *d;
      }
    }
    if (core::Status st = readVaultTokenFields(
            r.body, {"policies", "ttl", "explicit_max_ttl", "tenant", "role_name"}, req, warnings);
        !st.isOk()) {
      return fromStatus(st);
    }
    if (req.orphan && !mayCreateOrphan(r)) {
      return error(403,
                   "permission denied: no_parent: only a root token or one with sudo on "
                   "auth/token/create creates orphan tokens");
    }
    if (req.period == core::Duration::zero() && req.ttl > options_.tokens.max_ttl) {
      // Vault's answer: the longest TTL there is, and a warning that says so.
      req.ttl = options_.tokens.max_ttl;
      warnings.push_back(
          "ttl is above the server's max_ttl of " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(options_.tokens.max_ttl).count()) +
          " s; the token's TTL is capped to it");
    }
    // Every token lives in the server's memory until it expires: a tenant holds a bounded number.
    const int64_t max_tokens =
        req.tenant.empty() ? 0
                           : tenantSetting(req.tenant, "max_tokens", options_.default_max_tokens);
    auto created = tokens_->create(r.token, req, static_cast<size_t>(max_tokens));
    if (!created.isOk()) {
      return fromStatus(created.status());
    }
    return createdReply(r.request_id, *created, now, warnings);
  }
  // lookup, renew, revoke by accessor (Vault's -accessor paths, and Tessera's own without the
  // suffix), or by the token itself (`token`, as Vault's lookup, renew and revoke take it): only
  // tokens of this scope.
  for (const char* f : {"accessor", "token"}) {
    if (r.body.contains(f) && !r.body[f].is_string()) {
      return error(400, std::string("token request: ") + f + ": expected a string");
    }
  }
  std::string accessor = r.body.value(
      "accessor", r.scope.query.count("accessor") != 0 ? r.scope.query.at("accessor") : "");
  std::optional<std::string> secret;
  if (accessor.empty() && r.body.contains("token") && op.find('-') == std::string::npos) {
    secret = r.body["token"].get<std::string>();
    auto by_secret = tokens_->lookup(*secret);
    if (!by_secret.isOk() || by_secret->tenant != scope) {
      return error(404, "no such token");
    }
    accessor = by_secret->accessor;
  }
  auto target = tokens_->lookupAccessor(accessor);
  if (!target.isOk() || target->tenant != scope) {
    return error(404, "no such token");
  }
  const std::string verb = op.substr(0, op.find('-'));  // lookup-accessor -> lookup
  if (verb == "lookup") {
    return reply(200, {{"request_id", r.request_id}, {"data", target->toJson(now)}});
  }
  if (verb == "renew") {
    auto inc = incrementOf(r.body);
    if (!inc.isOk()) {
      return fromStatus(inc.status());
    }
    auto t = tokens_->renew(accessor, *inc);
    return t.isOk() ? renewedReply(r.request_id, *t, secret.value_or(""), now)
                    : fromStatus(t.status());
  }
  if (verb == "revoke") {
    auto n = tokens_->revoke(accessor);
    return n.isOk() ? noContent() : fromStatus(n.status());
  }
  return error(404, "unsupported path");
}

}  // namespace tessera::server
