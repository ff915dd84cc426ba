// ACL policies and tokens, in both scopes; docs/server.md "Tokens".
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
  if (parts.size() != 2 || !validName(parts[1])) {
    return error(400, "policy names are lowercase letters, digits and '-'");
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
    auto p = Policy::fromJson(name, doc);
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

HttpResponse ControlPlane::tokensApi(Request& r) {
  const std::vector<std::string> parts = split(r.scope.path);
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
    return reply(200, {{"request_id", r.request_id},
                       {"auth",
                        {{"client_token", created->secret},
                         {"accessor", created->info.accessor},
                         {"policies", created->info.policies},
                         {"tenant", created->info.tenant},
                         {"lease_duration", created->info.ttlSeconds(now)},
                         {"renewable", created->info.renewable}}}});
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
