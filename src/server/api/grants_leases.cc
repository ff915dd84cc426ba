// Grants of a tenant's secrets to another tenant, and leases (tokens' too).
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
                     {"expire_time", core::formatRfc3339Millis(g.expires)}};
  ev.response.status = status;
  return auditor_.record(ev);
}

HttpResponse ControlPlane::grantsApi(Request& r) {
  const std::string& tenant = *r.scope.tenant;
  const std::vector<std::string> parts = split(r.scope.path);
  const core::WallTime now = clock_.wallNow();
  if (parts.size() == 1 && (r.method == "GET" || r.method == "LIST")) {
    json out = json::array();
    for (const Grant& g : grants_->list(tenant)) {
      out.push_back(g.toJson(now));
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"grants", out}}}});
  }
  if (parts.size() == 1 && (r.method == "POST" || r.method == "PUT")) {
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
    // The CLI's own form, tenants/<owner>/secrets/<path>, names this tenant's path too.
    std::string on = r.body.value("on", "");
    if (const std::string mine = "tenants/" + tenant + "/"; on.rfind(mine, 0) == 0) {
      on.erase(0, mine.size());
    }
    auto g = grants_->create(tenant, to, on, policy, std::chrono::seconds(*ttl),
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
