// The pipeline's authorization step: each route's Access (server/route_table.h) checked against
// the token's ACL policies, or the grant it comes in on, before any handler runs.
#include "secrets/service.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/access.h"
#include "server/kube/objects.h"

namespace tessera::server {

using api::error;
using api::fromStatus;

core::Result<bool> ControlPlane::objectExists(const Request& r) {
  const std::map<std::string, std::string>& p = r.match.params;
  const std::string scope = r.scope.tenant.value_or("");
  auto param = [&](const char* name) {
    auto it = p.find(name);
    return it == p.end() ? std::string() : it->second;
  };
  switch (r.match.route->api) {
    case Api::kTenants: {
      std::shared_lock lock(mu_);
      return tenants_.contains(param("tenant"));
    }
    case Api::kPolicies: {
      std::shared_lock lock(mu_);
      auto it = policies_.find(scope);
      return it != policies_.end() && it->second.contains(param("name"));
    }
    case Api::kTokens:  // auth/token/roles/{name}
      return tokens_->role(scope, param("name")).isOk();
    case Api::kWorkloads:
      return registry_.get(scope, param("name")) != nullptr;
    case Api::kQueues: {
      TESSERA_ASSIGN_OR_RETURN(auto got,
                               store_.get("/tenants/" + scope + "/queues/" + param("queue")));
      return got.has_value();
    }
    case Api::kSecrets: {
      if (secrets_ == nullptr) {
        return false;  // The handler says there is no secrets engine.
      }
      const std::vector<std::string> parts = api::split(r.scope.path);
      if (parts.size() >= 3 && parts[1] == "kv") {
        auto found = secrets_->kv().exists(scope, param("path"));
        return found.isOk() &&
               *found;  // A path it cannot read is not there (the handler says why).
      }
      if (parts.size() == 4 && parts[1] == "db") {
        return parts[2] == "config" ? secrets_->db().readConnection(scope, parts[3]).isOk()
                                    : secrets_->db().readRole(scope, parts[3]).isOk();
      }
      if (parts.size() == 4 && parts[1] == "aws" && parts[2] == "roles") {
        return secrets_->aws().readRole(scope, parts[3]).isOk();
      }
      return false;
    }
    default:
      return core::internalError("route " + r.route +
                                 " is declared create-or-update, and nothing says what exists");
  }
}

bool ControlPlane::authorizedOn(const Request& r, const std::string& scoped_path,
                                Capability needed) const {
  if (r.grant) {
    // In on a grant: the grant's capabilities on its paths, whatever the token's policies say.
    if (!r.grant->covers(scoped_path)) {
      return false;
    }
    if (!r.grant->ownerPolicy()) {
      return r.grant->capabilities.allows(needed);
    }
    // An owner's policy, as it is now (gone: nothing), on the owner's path.
    std::shared_lock lock(mu_);
    auto owner = policies_.find(r.grant->owner);
    if (owner == policies_.end()) {
      return false;
    }
    auto p = owner->second.find(r.grant->policy);
    return p != owner->second.end() &&
           allowsRequest(resolvePermissions({&p->second}, scoped_path), needed,
                         requestParameters(needed, r.body, r.scope.query));
  }
  if (r.token.isRoot()) {
    return true;
  }
  std::shared_lock lock(mu_);
  // A tenant token's policies live in its tenant and see paths inside it; an admin token's
  // policies see absolute paths.
  const std::string& scope = r.token.tenant;
  const std::string path = scope.empty() && r.scope.tenant
                               ? "tenants/" + *r.scope.tenant + "/" + scoped_path
                               : scoped_path;
  std::vector<const Policy*> policies;
  auto it = policies_.find(scope);
  for (const std::string& name : r.token.policies) {
    if (it != policies_.end()) {
      auto p = it->second.find(name);
      if (p != it->second.end()) {
        policies.push_back(&p->second);
      }
    }
  }
  // Vault's parameter and wrapping constraints too (acl.h allowsRequest).
  return allowsRequest(resolvePermissions(policies, path), needed,
                       requestParameters(needed, r.body, r.scope.query));
}

std::optional<HttpResponse> ControlPlane::authorize(Request& r) {
  const RouteSpec* route = r.match.route;
  if (route == nullptr || !r.match.allowed || !route->authenticated) {
    return std::nullopt;
  }
  const std::string& path = r.scope.path;
  if (route->asks_sudo) {
    r.sudo = r.token.isRoot() || authorizedOn(r, path, Capability::kSudo);
  }
  auto on = [&](Capability c) { return authorizedOn(r, path, c); };
  const Access access = accessFor(*route, r.method);
  bool allowed = false;
  switch (access) {
    case Access::kNone:
    case Access::kToken:
      allowed = true;
      break;
    case Access::kRead:
      allowed = on(Capability::kRead);
      break;
    case Access::kList:
      allowed = on(Capability::kList);
      break;
    case Access::kReadOrList:
      allowed = on(Capability::kRead) || on(Capability::kList);
      break;
    case Access::kCreate:
      allowed = on(Capability::kCreate);
      break;
    case Access::kUpdate:
      allowed = on(Capability::kUpdate);
      break;
    case Access::kCreateOrUpdate:
      allowed = on(Capability::kCreate) || on(Capability::kUpdate);
      break;
    case Access::kPatch:
      allowed = on(Capability::kPatch);
      break;
    case Access::kDelete:
      allowed = on(Capability::kDelete);
      break;
    case Access::kSudo:
      allowed = r.token.isRoot() || on(Capability::kSudo);
      break;
    case Access::kWrite: {
      auto exists = objectExists(r);
      if (!exists.isOk()) {
        return fromStatus(exists.status());
      }
      // The answer does not say which was missing: that would tell whether it exists.
      allowed = on(*exists ? Capability::kUpdate : Capability::kCreate);
      break;
    }
    case Access::kListFolder:
      allowed = authorizedOn(r, path + "/", Capability::kList);
      break;
    case Access::kKube: {
      const kube::KubeTarget t = kube::kubeTarget(path, r.http.method, r.scope.query, r.body);
      const auto need = kube::tesseraAccess(t);
      if (need && !authorizedOn(r, need->path, need->capability)) {
        const std::string user =
            r.token.display_name.empty() ? r.token.accessor : r.token.display_name;
        return kube::statusResponse(403, kube::forbiddenMessage(t, user),
                                    {{"kind", t.resource}, {"name", t.name}});
      }
      return std::nullopt;
    }
  }
  if (!allowed) {
    return error(403, "permission denied: " + r.method + " " + path + " needs " +
                          std::string(accessName(access)));
  }
  return std::nullopt;
}

}  // namespace tessera::server
