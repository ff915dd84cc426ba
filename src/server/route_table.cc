#include "server/route_table.h"

#include <algorithm>
#include <cctype>

namespace tessera::server {

using nlohmann::json;

namespace {

using enum RouteScope;

constexpr bool kAuth = true;
constexpr bool kOpen = false;

std::vector<RouteSpec> makeTable() {
  return {
      // Unauthenticated (admin scope): health, the seal, this document.
      {kAdmin,
       "sys/health",
       {"GET"},
       Api::kHealth,
       kOpen,
       "Health: version, seal, audit sinks, scheduler passes"},
      {kAdmin,
       "sys/openapi",
       {"GET"},
       Api::kOpenApi,
       kOpen,
       "This document: every route, generated from the server's route table"},
      {kAdmin,
       "sys/seal-status",
       {"GET"},
       Api::kSealUnauthenticated,
       kOpen,
       "The secrets barrier's seal"},
      {kAdmin,
       "sys/init",
       {"POST"},
       Api::kSealUnauthenticated,
       kOpen,
       "Initialize a Shamir-sealed store: the unseal key's shares"},
      {kAdmin,
       "sys/unseal",
       {"POST"},
       Api::kSealUnauthenticated,
       kOpen,
       "Give one unseal share ({\"key\": \"...\"}, or {\"reset\": true})"},
      {kAdmin,
       "sys/generate-root",
       {"POST"},
       Api::kSealUnauthenticated,
       kOpen,
       "A short-lived root token for a quorum of unseal shares"},
      {kRoot,
       "/.well-known/openid-configuration",
       {"GET"},
       Api::kWellKnown,
       kOpen,
       "OIDC discovery of the workload identity issuer"},
      {kRoot,
       "/.well-known/jwks.json",
       {"GET"},
       Api::kWellKnown,
       kOpen,
       "The workload identity issuer's public keys"},
      // The web console (server/console.h, docs/console.md): static files, no token; every
      // request its page makes goes to the API above with the user's token.
      {kRoot, "/", {"GET"}, Api::kConsole, kOpen, "Redirects to the web console, /ui/"},
      {kRoot, "/ui", {"GET"}, Api::kConsole, kOpen, "Redirects to the web console, /ui/"},
      {kRoot,
       "/ui/{file}",
       {"GET"},
       Api::kConsole,
       kOpen,
       "The web console: index.html at /ui/, its bundles, gpu-models.json (MIG slices)"},

      // Admin scope.
      {kAdmin, "sys/metrics", {"GET"}, Api::kMetrics, kAuth, "Prometheus metrics"},
      {kAdmin, "tenants", {"GET", "LIST"}, Api::kTenants, kAuth, "Tenant names"},
      {kAdmin,
       "tenants/{tenant}",
       {"GET", "POST", "DELETE"},
       Api::kTenants,
       kAuth,
       "A tenant's settings: read, create or update, delete"},
      {kAdmin, "sys/policies", {"GET", "LIST"}, Api::kPolicies, kAuth, "Admin ACL policy names"},
      {kAdmin,
       "sys/policies/{name}",
       {"GET", "POST", "DELETE"},
       Api::kPolicies,
       kAuth,
       "An admin ACL policy"},
      {kAdmin,
       "sys/nodes/join",
       {"POST"},
       Api::kNodeJoin,
       kOpen,
       "An agent joins with a join token ({\"join_token\", \"node\", \"discovery\", "
       "\"cpu_milli\", \"memory_mib\", \"labels\"}): its node and credential"},
      {kAdmin,
       "sys/nodes/join-tokens",
       {"GET", "LIST", "POST"},
       Api::kJoinTokens,
       kAuth,
       "Join tokens: create one ({\"ttl\": \"1h\", \"labels\": {...}}), or list them"},
      {kAdmin,
       "sys/nodes/join-tokens/{accessor}",
       {"DELETE"},
       Api::kJoinTokens,
       kAuth,
       "Revoke a join token"},
      {kAdmin,
       "sys/nodes/{node}/credential",
       {"POST"},
       Api::kNodeCredential,
       kAuth,
       "A joined node's agent renews its credential: a new token, the old one revoked"},
      {kAdmin,
       "sys/nodes/{node}/heartbeat",
       {"POST"},
       Api::kNodeHeartbeat,
       kAuth,
       "An agent's heartbeat: its lease, discovery and task reports; answers its task list"},
      {kAdmin,
       "sys/nodes/{node}/tasks",
       {"GET"},
       Api::kNodeTasks,
       kAuth,
       "An agent's watch: waits for its task list to change or a log request (?index=&wait_ms=)"},
      {kAdmin,
       "sys/nodes/{node}/logs/{id}",
       {"POST"},
       Api::kNodeLogs,
       kAuth,
       "An agent's answer to a log request"},
      {kAdmin, "nodes", {"GET", "LIST"}, Api::kNodes, kAuth, "Nodes: capacity and state"},
      {kAdmin,
       "nodes/{node}",
       {"GET", "DELETE"},
       Api::kNodeAdmin,
       kAuth,
       "A node; DELETE takes a joined node out of service (drain it first)"},
      {kAdmin,
       "nodes/{node}/{op}",
       {"POST"},
       Api::kNodeAdmin,
       kAuth,
       "cordon (no new tasks), uncordon, or drain (cordon, then move its tasks elsewhere)"},
      {kAdmin, "sys/pools", {"GET", "LIST"}, Api::kPools, kAuth, "Pools dedicated to a tenant"},
      {kAdmin,
       "sys/pools/{pool}",
       {"GET", "POST", "DELETE"},
       Api::kPools,
       kAuth,
       "Dedicate the nodes labelled pool=<pool> to one tenant ({\"tenant\"}), or open them"},
      {kAdmin,
       "queues",
       {"GET", "LIST"},
       Api::kQueues,
       kAuth,
       "Every queue: allocated, fair share, quota, pending"},
      {kAdmin, "sys/key-status", {"GET"}, Api::kSeal, kAuth, "The active key term (root or sudo)"},
      {kAdmin, "sys/seal", {"POST"}, Api::kSeal, kAuth, "Forget the keys (root or sudo)"},
      {kAdmin, "sys/rotate", {"POST"}, Api::kSeal, kAuth, "A new key term (root or sudo)"},
      {kAdmin,
       "sys/rewrap",
       {"POST"},
       Api::kSeal,
       kAuth,
       "Re-seal values of older key terms (root or sudo)"},
      {kAdmin,
       "sys/leases/count",
       {"GET", "LIST"},
       Api::kAdminLeases,
       kAuth,
       "How many leases there are (?type=&tenant=&prefix=)"},
      {kAdmin,
       "sys/leases/revoke-force",
       {"POST"},
       Api::kAdminLeases,
       kAuth,
       "Remove an irrevocable lease by hand"},
      {kAdmin,
       "sys/leases",
       {"GET", "LIST"},
       Api::kAdminLeases,
       kAuth,
       "Every tenant's leases (?type=&tenant=&prefix=)"},
      {kAdmin,
       "sys/doctor",
       {"GET"},
       Api::kDoctor,
       kAuth,
       "Tokens, grants and leases that live long or forever (?threshold=24h)"},

      // Both scopes: tokens.
      {kAdmin, "auth/token/create", {"POST"}, Api::kTokens, kAuth, "Create a token"},
      {kAdmin,
       "auth/token/lookup-self",
       {"GET", "POST"},
       Api::kTokens,
       kAuth,
       "The calling token (any token, its own data only)"},
      {kAdmin, "auth/token/renew-self", {"POST"}, Api::kTokens, kAuth, "Renew the calling token"},
      {kAdmin, "auth/token/revoke-self", {"POST"}, Api::kTokens, kAuth, "Revoke the calling token"},
      // GET reads {"accessor"} from a body too (or ?accessor=), as it always has.
      {kAdmin,
       "auth/token/lookup",
       {"GET", "POST"},
       Api::kTokens,
       kAuth,
       "A token by accessor",
       {"GET"}},
      {kAdmin, "auth/token/renew", {"POST"}, Api::kTokens, kAuth, "Renew a token by accessor"},
      {kAdmin, "auth/token/revoke", {"POST"}, Api::kTokens, kAuth, "Revoke a token by accessor"},
      // Vault's names for the same by accessor (its lookup, renew and revoke take the token).
      {kAdmin, "auth/token/lookup-accessor", {"POST"}, Api::kTokens, kAuth, "A token by accessor"},
      {kAdmin,
       "auth/token/renew-accessor",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Renew a token by accessor"},
      {kAdmin,
       "auth/token/revoke-accessor",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Revoke a token by accessor"},
      {kTenant, "auth/token/create", {"POST"}, Api::kTokens, kAuth, "Create a tenant token"},
      {kTenant,
       "auth/token/lookup-self",
       {"GET", "POST"},
       Api::kTokens,
       kAuth,
       "The calling token"},
      {kTenant, "auth/token/renew-self", {"POST"}, Api::kTokens, kAuth, "Renew the calling token"},
      {kTenant,
       "auth/token/revoke-self",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Revoke the calling token"},
      {kTenant,
       "auth/token/lookup",
       {"GET", "POST"},
       Api::kTokens,
       kAuth,
       "A tenant token by accessor",
       {"GET"}},
      {kTenant,
       "auth/token/renew",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Renew a tenant token by accessor"},
      {kTenant,
       "auth/token/revoke",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Revoke a tenant token by accessor"},
      {kTenant,
       "auth/token/lookup-accessor",
       {"POST"},
       Api::kTokens,
       kAuth,
       "A tenant token by accessor"},
      {kTenant,
       "auth/token/renew-accessor",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Renew a tenant token by accessor"},
      {kTenant,
       "auth/token/revoke-accessor",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Revoke a tenant token by accessor"},
      // Both scopes: token roles (tenant admins delegate narrower tokens; docs/server.md).
      {kAdmin, "auth/token/roles", {"GET", "LIST"}, Api::kTokens, kAuth, "Token role names"},
      {kAdmin,
       "auth/token/roles/{name}",
       {"GET", "POST", "DELETE"},
       Api::kTokens,
       kAuth,
       "A token role: allowed_policies, token_ttl, token_max_ttl"},
      {kAdmin, "auth/token/create/{role}", {"POST"}, Api::kTokens, kAuth, "Create from a role"},
      {kTenant, "auth/token/roles", {"GET", "LIST"}, Api::kTokens, kAuth, "Token role names"},
      {kTenant,
       "auth/token/roles/{name}",
       {"GET", "POST", "DELETE"},
       Api::kTokens,
       kAuth,
       "A tenant token role: allowed_policies, token_ttl, token_max_ttl"},
      {kTenant,
       "auth/token/create/{role}",
       {"POST"},
       Api::kTokens,
       kAuth,
       "Create a tenant token from a role"},

      // Tenant scope.
      {kTenant, "workloads", {"LIST"}, Api::kWorkloads, kAuth, "The tenant's workloads"},
      {kTenant,
       "workloads/{name}",
       {"GET", "POST", "DELETE"},
       Api::kWorkloads,
       kAuth,
       "A workload: its spec and status; submit; cancel"},
      {kTenant,
       "workloads/{name}/events",
       {"GET"},
       Api::kWorkloads,
       kAuth,
       "A workload's events, evictions included"},
      {kTenant,
       "workloads/{name}/logs",
       {"GET"},
       Api::kWorkloads,
       kAuth,
       "A piece of a task's log (?task=&stream=&offset=&limit=)"},
      {kTenant, "policies", {"GET", "LIST"}, Api::kPolicies, kAuth, "The tenant's ACL policies"},
      {kTenant,
       "policies/{name}",
       {"GET", "POST", "DELETE"},
       Api::kPolicies,
       kAuth,
       "A tenant ACL policy"},
      {kTenant, "nodes", {"GET", "LIST"}, Api::kNodes, kAuth, "Nodes: capacity and state"},
      {kTenant, "queues", {"GET", "LIST"}, Api::kQueues, kAuth, "The tenant's queues"},
      {kTenant,
       "metrics",
       {"GET"},
       Api::kTenantMetrics,
       kAuth,
       "The tenant's own Prometheus metrics: its queues, workloads, GPUs, evictions, requests"},
      {kTenant,
       "queues/{queue}",
       {"GET", "POST", "DELETE"},
       Api::kQueues,
       kAuth,
       "A team's queue under the tenant's"},
      {kTenant,
       "audit",
       {"GET"},
       Api::kAudit,
       kAuth,
       "The tenant's own audit records (?limit=&after=)"},
      {kTenant,
       "grants",
       {"GET", "LIST", "POST"},
       Api::kGrants,
       kAuth,
       "Grants of the tenant's secrets to other tenants, given and received; give one"},
      {kTenant, "grants/{id}", {"DELETE"}, Api::kGrants, kAuth, "Revoke a grant early"},
      {kTenant, "leases", {"GET", "LIST"}, Api::kLeases, kAuth, "The tenant's leases (?prefix=)"},
      {kTenant, "leases/lookup", {"POST"}, Api::kLeases, kAuth, "A lease"},
      {kTenant, "leases/renew", {"POST"}, Api::kLeases, kAuth, "Renew a lease"},
      {kTenant, "leases/revoke", {"POST"}, Api::kLeases, kAuth, "Revoke a lease"},
      {kTenant,
       "leases/revoke-prefix/{prefix*}",
       {"POST"},
       Api::kLeases,
       kAuth,
       "Revoke every lease under a prefix"},
      {kTenant,
       "secrets/kv/config",
       {"GET", "POST"},
       Api::kSecrets,
       kAuth,
       "The KV engine's settings (max_versions, cas_required)"},
      {kTenant,
       "secrets/kv/data/{path+}",
       {"GET", "POST", "PATCH", "DELETE"},
       Api::kSecrets,
       kAuth,
       "A KV secret's data (?version=); write, patch, delete the latest version"},
      {kTenant,
       "secrets/kv/metadata/{path*}",
       {"GET", "LIST", "POST", "PATCH", "DELETE"},
       Api::kSecrets,
       kAuth,
       "A KV secret's versions and settings (PATCH merges); list keys under a prefix "
       "(?exclude_deleted=true)"},
      {kTenant,
       "secrets/kv/subkeys/{path+}",
       {"GET"},
       Api::kSecrets,
       kAuth,
       "A KV secret's keys without their values (?version=, ?depth=)"},
      {kTenant,
       "secrets/kv/delete/{path+}",
       {"POST"},
       Api::kSecrets,
       kAuth,
       "Delete versions of a KV secret"},
      {kTenant,
       "secrets/kv/undelete/{path+}",
       {"POST"},
       Api::kSecrets,
       kAuth,
       "Undelete versions of a KV secret"},
      {kTenant,
       "secrets/kv/destroy/{path+}",
       {"POST"},
       Api::kSecrets,
       kAuth,
       "Destroy versions of a KV secret for good"},
      {kTenant,
       "secrets/db/config",
       {"GET", "LIST"},
       Api::kSecrets,
       kAuth,
       "PostgreSQL connection names"},
      {kTenant,
       "secrets/db/config/{name}",
       {"GET", "POST", "DELETE"},
       Api::kSecrets,
       kAuth,
       "A PostgreSQL connection"},
      {kTenant,
       "secrets/db/roles",
       {"GET", "LIST"},
       Api::kSecrets,
       kAuth,
       "Dynamic credential role names"},
      {kTenant,
       "secrets/db/roles/{name}",
       {"GET", "POST", "DELETE"},
       Api::kSecrets,
       kAuth,
       "A dynamic credential role"},
      {kTenant,
       "secrets/db/creds/{role}",
       {"GET"},
       Api::kSecrets,
       kAuth,
       "A new database credential of the role, with its lease"},
      {kTenant,
       "secrets/aws/config",
       {"GET", "POST"},
       Api::kSecrets,
       kAuth,
       "The AWS engine's STS endpoint and region"},
      {kTenant, "secrets/aws/roles", {"GET", "LIST"}, Api::kSecrets, kAuth, "AWS role names"},
      {kTenant,
       "secrets/aws/roles/{name}",
       {"GET", "POST", "DELETE"},
       Api::kSecrets,
       kAuth,
       "An AWS role to assume (role_arn, ttl, max_ttl)"},
      {kTenant,
       "secrets/aws/creds/{role}",
       {"GET", "POST"},
       Api::kSecrets,
       kAuth,
       "A new STS session of the role (expire-only), clamped to a grant's window"},
  };
}

std::vector<std::string_view> splitPath(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
  }
  return out;
}

// A pattern segment's parameter: its name and kind ('1' one segment, '*' zero or more, '+' one
// or more); an empty name for a literal.
std::pair<std::string_view, char> param(std::string_view segment) {
  if (segment.size() < 3 || segment.front() != '{' || segment.back() != '}') {
    return {{}, 0};
  }
  std::string_view name = segment.substr(1, segment.size() - 2);
  if (name.back() == '*' || name.back() == '+') {
    return {name.substr(0, name.size() - 1), name.back()};
  }
  return {name, '1'};
}

// Each route's pattern, split once.
const std::vector<std::vector<std::string_view>>& patterns() {
  static const std::vector<std::vector<std::string_view>> split = [] {
    std::vector<std::vector<std::string_view>> out;
    for (const RouteSpec& route : routeTable()) {
      out.push_back(splitPath(route.pattern));
    }
    return out;
  }();
  return split;
}

// Whether `parts` match `pattern`; if so, and `params` is not null, its parameters.
bool matches(const std::vector<std::string_view>& pattern,
             const std::vector<std::string_view>& parts,
             std::map<std::string, std::string>* params) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    const auto [name, kind] = param(pattern[i]);
    if (kind == '*' || kind == '+') {
      if (kind == '+' && i >= parts.size()) {
        return false;
      }
      if (params != nullptr) {
        std::string rest;
        for (size_t j = i; j < parts.size(); ++j) {
          rest += (j > i ? "/" : "") + std::string(parts[j]);
        }
        (*params)[std::string(name)] = std::move(rest);
      }
      return true;
    }
    if (i >= parts.size() || (kind == 0 && pattern[i] != parts[i])) {
      return false;
    }
    if (kind == '1' && params != nullptr) {
      (*params)[std::string(name)] = std::string(parts[i]);
    }
  }
  return parts.size() == pattern.size();
}

std::string_view methodOf(std::string_view method) { return method == "PUT" ? "POST" : method; }

}  // namespace

const std::vector<RouteSpec>& routeTable() {
  static const std::vector<RouteSpec> table = makeTable();
  return table;
}

RouteMatch matchRoute(RouteScope scope, std::string_view path, std::string_view method) {
  RouteMatch m;
  const std::vector<std::string_view> parts = splitPath(path);
  const std::vector<RouteSpec>& table = routeTable();
  const std::vector<std::vector<std::string_view>>& split = patterns();
  for (size_t i = 0; i < table.size(); ++i) {
    const RouteSpec& route = table[i];
    if (route.scope == scope && matches(split[i], parts, nullptr)) {
      matches(split[i], parts, &m.params);
      m.route = &route;
      m.allowed = std::find(route.methods.begin(), route.methods.end(), methodOf(method)) !=
                  route.methods.end();
      m.label =
          std::string(scope == RouteScope::kTenant ? "tenant/" : "") + std::string(route.pattern);
      return m;
    }
  }
  m.label = "unmatched";
  return m;
}

std::string allowHeader(const RouteSpec& route) {
  std::string out;
  for (std::string_view m : route.methods) {
    out += (out.empty() ? "" : ", ") + std::string(m);
    if (m == "POST") {
      out += ", PUT";
    }
  }
  return out;
}

bool takesBody(const RouteSpec& route, std::string_view method) {
  method = methodOf(method);
  return method == "POST" || method == "PATCH" ||
         std::find(route.body_methods.begin(), route.body_methods.end(), method) !=
             route.body_methods.end();
}

json openApiDocument(std::string_view version) {
  json paths = json::object();
  for (const RouteSpec& route : routeTable()) {
    std::string path;
    json parameters = json::array();
    if (route.scope == RouteScope::kRoot) {
      path = std::string(route.pattern);
    } else {
      path = route.scope == RouteScope::kTenant ? "/v1/tenants/{tenant}/" : "/v1/";
      if (route.scope == RouteScope::kTenant) {
        parameters.push_back({{"name", "tenant"},
                              {"in", "path"},
                              {"required", true},
                              {"description", "The tenant (left out on its chroot listener)"},
                              {"schema", {{"type", "string"}}}});
      }
      for (std::string_view segment : splitPath(route.pattern)) {
        const auto [name, kind] = param(segment);
        if (kind == 0) {
          path += std::string(segment) + "/";
          continue;
        }
        path += "{" + std::string(name) + "}/";
        std::string description = kind == '1' ? "One path segment" : "The rest of the path";
        parameters.push_back({{"name", std::string(name)},
                              {"in", "path"},
                              {"required", true},
                              {"description", description},
                              {"schema", {{"type", "string"}}}});
      }
      path.pop_back();
    }
    json& item = paths[path];
    if (!parameters.empty()) {
      item["parameters"] = parameters;
    }
    const bool lists =
        std::find(route.methods.begin(), route.methods.end(), "LIST") != route.methods.end();
    for (std::string_view method : route.methods) {
      json op = {{"summary", std::string(route.summary)},
                 {"operationId", std::string(method) + " " + path},
                 {"responses",
                  {{"200", {{"description", "OK: {\"request_id\", \"data\"}"}}},
                   {"default", {{"description", "An error: {\"errors\": [\"...\"]}"}}}}}};
      if (route.authenticated) {
        op["security"] = json::array({{{"token", json::array()}}});
      } else {
        op["security"] = json::array();
      }
      if (method == "LIST" || (method == "GET" && lists)) {
        if (method == "GET") {
          continue;  // One GET operation: with ?list=true it is the LIST.
        }
        op["parameters"] = json::array({{{"name", "list"},
                                         {"in", "query"},
                                         {"required", route.methods.size() == 1},
                                         {"description", "true: list (the LIST method)"},
                                         {"schema", {{"type", "boolean"}}}}});
        item["get"] = std::move(op);
        continue;
      }
      if (method == "POST") {
        op["description"] = "PUT is taken as POST.";
      }
      if (method == "POST" || method == "PATCH") {  // OpenAPI advises against a GET's body.
        op["requestBody"] = {
            {"content", {{"application/json", {{"schema", {{"type", "object"}}}}}}}};
      }
      std::string lower(method);
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      item[lower] = std::move(op);
    }
  }
  return {{"openapi", "3.0.3"},
          {"info",
           {{"title", "Tessera API"},
            {"version", std::string(version)},
            {"description",
             "GPU sharing for many tenants. Generated from the server's route table "
             "(src/server/route_table.cc); docs/server.md says what each route does."}}},
          {"components",
           {{"securitySchemes",
             {{"token", {{"type", "apiKey"}, {"in", "header"}, {"name", "X-Tessera-Token"}}}}}}},
          {"paths", std::move(paths)}};
}

}  // namespace tessera::server
