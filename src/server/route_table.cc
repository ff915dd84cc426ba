#include "server/route_table.h"

#include <algorithm>
#include <cctype>

namespace tessera::server {

using nlohmann::json;

namespace {

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

std::string_view accessName(Access a) {
  switch (a) {
    case Access::kNone:
      return "none (no token)";
    case Access::kToken:
      return "any valid token";
    case Access::kRead:
      return "read";
    case Access::kList:
      return "list";
    case Access::kReadOrList:
      return "read|list";
    case Access::kCreate:
      return "create";
    case Access::kUpdate:
      return "update";
    case Access::kCreateOrUpdate:
      return "create|update";
    case Access::kPatch:
      return "patch";
    case Access::kDelete:
      return "delete";
    case Access::kSudo:
      return "sudo";
    case Access::kWrite:
      return "create (new) or update (existing)";
    case Access::kListFolder:
      return "list (on the path with a trailing /)";
    case Access::kKube:
      return "the Kubernetes verb's, on its object's Tessera path";
  }
  return "?";
}

Access accessFor(const RouteSpec& route, std::string_view method) {
  if (!route.authenticated) {
    return Access::kNone;
  }
  method = methodOf(method);
  for (const MethodAccess& m : route.access) {
    if (m.method == method) {
      return m.access;
    }
  }
  if (method == "GET") {
    return Access::kRead;
  }
  if (method == "LIST") {
    return Access::kList;
  }
  if (method == "PATCH") {
    return Access::kPatch;
  }
  if (method == "DELETE") {
    return Access::kDelete;
  }
  return Access::kWrite;
}

bool changesState(const RouteSpec& route, std::string_view method) {
  method = methodOf(method);
  if (method == "GET" || method == "LIST") {
    return false;
  }
  const Access a = accessFor(route, method);
  return !(a == Access::kRead || a == Access::kList || a == Access::kReadOrList ||
           a == Access::kListFolder);
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
