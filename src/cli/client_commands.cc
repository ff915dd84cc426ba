#include "cli/client_commands.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/client.h"
#include "cli/client_session.h"
#include "core/hcl.h"
#include "core/units.h"

namespace tessera::cli {

using api::ApiClient;
using api::ClientConfig;
using api::pathSegment;
namespace {

using core::milliText;
using nlohmann::json;

constexpr size_t kDefaultColumns = 120;  // Table width when stdout is not a terminal.
constexpr size_t kMinReasonColumns = 24;

// 3700 -> "1h1m40s"; negative: the token never expires.
std::string durationText(int64_t seconds) {
  if (seconds < 0) {
    return "never";
  }
  if (seconds == 0) {
    return "0s";
  }
  std::string out;
  for (const auto& [unit, n] : {std::pair<const char*, int64_t>{"h", 3600}, {"m", 60}, {"s", 1}}) {
    if (seconds >= n) {
      out += std::to_string(seconds / n) + unit;
      seconds %= n;
    }
  }
  return out;
}

std::string utcText(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string truncated(const std::string& s, size_t max) {
  if (s.size() <= max) {
    return s;
  }
  return max <= 3 ? s.substr(0, max) : s.substr(0, max - 3) + "...";
}

size_t terminalColumns() {
  winsize w{};
  if (isatty(STDOUT_FILENO) != 0 && ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) {
    return w.ws_col;
  }
  return kDefaultColumns;
}

// A token as lookup-self, lookup and renew describe it.
void printToken(const json& t) {
  const std::string tenant = t.value("tenant", "");
  printKeyValues({
      {"accessor", cell(t.value("accessor", json()))},
      {"tenant", tenant.empty() ? "(admin)" : tenant},
      {"policies", cell(t.value("policies", json()))},
      {"display_name", cell(t.value("display_name", json()))},
      {"role", t.value("role", "").empty() ? "-" : t.value("role", "")},
      {"issue_time", cell(t.value("issue_time", json()))},
      {"expire_time",
       t.value("expire_time", json()).is_null() ? "never" : cell(t.value("expire_time", json()))},
      {"explicit_max_ttl_time", t.value("explicit_max_ttl_time", json()).is_null()
                                    ? "none"
                                    : cell(t.value("explicit_max_ttl_time", json()))},
      {"ttl", durationText(t.value("ttl", int64_t{-1}))},
      {"renewable", cell(t.value("renewable", json()))},
      {"period",
       t.value("period", int64_t{0}) > 0 ? durationText(t.value("period", int64_t{0})) : "-"},
      {"orphan", cell(t.value("orphan", json()))},
      {"meta", t.value("meta", json()).is_object() ? t["meta"].dump() : "-"},
  });
}

// Flattens a JSON object into "a.b" keys for a human table.
void flatten(const json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    }
    return;
  }
  if (prefix == "command" && j.is_array()) {
    std::string line;
    for (const json& a : j) {
      line += (line.empty() ? "" : " ") + cell(a);
    }
    out.emplace_back(prefix, line);
    return;
  }
  out.emplace_back(prefix, cell(j));
}

// A policy as HCL, the language it is written in.
std::string policyHcl(const json& policy) {
  std::string out;
  const json paths = policy.value("path", json::object());
  for (const auto& [pattern, rule] : paths.items()) {
    out += "path " + json(pattern).dump() + " {\n  capabilities = [";
    const json caps = rule.value("capabilities", json::array());
    for (size_t i = 0; i < caps.size(); ++i) {
      out += (i > 0 ? ", " : "") + caps[i].dump();
    }
    out += "]\n";
    // Vault's other fields (parameter constraints, wrapping TTLs): the text says all it allows.
    for (const auto& [field, v] : rule.items()) {
      if (field == "capabilities") {
        continue;
      }
      out += "  " + field + " = ";
      if (v.is_object()) {
        out += "{\n";
        for (const auto& [k, values] : v.items()) {
          out += "    " + json(k).dump() + " = " + values.dump() + "\n";
        }
        out += "  }\n";
      } else {
        out += v.dump() + "\n";
      }
    }
    out += "}\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Commands. Each returns a Status: kInvalidArgument is the user's mistake (exit 2), anything
// else a refusal or failure of the server (exit 1).

// Reads an HCL or JSON document: FILE by its extension, or "-" for standard input.
core::Result<json> readDocument(const std::string& file) {
  if (file != "-") {
    auto doc = core::parseConfigFile(file);
    if (!doc.isOk()) {
      return badInput(doc.status());
    }
    return doc;
  }
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  const size_t first = text.find_first_not_of(" \t\r\n");
  auto doc = first != std::string::npos && text[first] == '{'
                 ? core::parseJsonConfig(text, "<stdin>")
                 : core::parseHcl(text, "<stdin>");
  if (!doc.isOk()) {
    return badInput(doc.status());
  }
  return doc;
}

// --- login

struct LoginFlags {
  CommonFlags common;
  std::string token;
};

core::Status login(const LoginFlags& f) {
  std::string token = f.token;
  if (token == "-") {
    std::getline(std::cin, token);
  }
  token = trim(token);
  if (token.empty()) {
    return core::invalidArgument("the token is empty");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common, token));
  TESSERA_ASSIGN_OR_RETURN(json me, s->self());
  TESSERA_RETURN_IF_ERROR(storeToken(token));
  if (s->json()) {
    printJson(me);
    return core::Status::ok();
  }
  std::cout << "Success! You are now authenticated; the token is stored in " << tokenFilePath()
            << " and used when TESSERA_TOKEN is unset.\n\n";
  printToken(me);
  return core::Status::ok();
}

// --- queue settings, for a tenant's queue and a team's

json gpuNumber(double gpus) {
  const auto whole = static_cast<int64_t>(gpus);
  return static_cast<double>(whole) == gpus ? json(whole) : json(gpus);
}

struct QueueSettings {
  double quota_gpu = 0;
  double limit_gpu = 0;
  int64_t weight = 1;
  int64_t priority = 100;
  CLI::Option* quota = nullptr;
  CLI::Option* limit = nullptr;
  CLI::Option* weight_opt = nullptr;
  CLI::Option* priority_opt = nullptr;

  // Adds --quota-gpu, --limit-gpu, --weight and --priority, with their help texts.
  void addFlags(CLI::App* c, const std::string& quota_help, const std::string& weight_help,
                const std::string& priority_help) {
    quota = c->add_option("--quota-gpu", quota_gpu, quota_help);
    limit = c->add_option("--limit-gpu", limit_gpu,
                          "Most GPUs it may hold (0: none at all; -1: no cap, as when left out)");
    weight_opt = c->add_option("--weight", weight, weight_help);
    priority_opt = c->add_option("--priority", priority, priority_help);
  }
  // The settings given on the command line, as the API takes them.
  void addTo(json& body) const {
    if (quota->count() > 0) {
      body["quota"]["gpu"] = gpuNumber(quota_gpu);
    }
    if (limit->count() > 0) {
      body["limit"]["gpu"] = gpuNumber(limit_gpu);
    }
    if (weight_opt->count() > 0) {
      body["weight"] = weight;
    }
    if (priority_opt->count() > 0) {
      body["priority"] = priority;
    }
  }
};

// --- tenant

struct TenantFlags {
  CommonFlags common;
  std::string name;
  QueueSettings queue;
  std::string trust_group;
  // The tenant's numeric settings given as flags, by API field (kTenantLimits).
  std::map<std::string, int64_t> limits;
};

// The tenant's numeric settings: API field, flag, help.
struct TenantLimit {
  const char* field;
  const char* flag;
  const char* help;
};
constexpr TenantLimit kTenantLimits[] = {
    {"max_workloads", "--max-workloads", "Most workloads stored"},
    {"max_pending", "--max-pending", "Most pending workloads"},
    {"max_queues", "--max-queues", "Most team queues in service (besides default)"},
    {"max_tokens", "--max-tokens", "Most tokens held at once (until revoked or expired)"},
    {"max_policies", "--max-policies", "Most ACL policies (tenant-admin included)"},
    {"max_secrets", "--max-secrets", "Most KV secrets (until destroyed with their metadata)"},
    {"request_rate", "--request-rate", "API requests per second, sustained"},
    {"request_burst", "--request-burst", "API requests in a burst"},
    {"request_concurrency", "--request-concurrency", "API requests handled at once"},
    {"max_unsaved_gpu_seconds", "--max-unsaved-gpu-seconds",
     "Reclaim leaves alone a task with more unsaved work than this (GPU-seconds since its last "
     "checkpoint; -1: the server's default, one GPU-hour)"},
};

// The fields given on the command line, as the API takes them.
json tenantBody(const TenantFlags& f) {
  json body = json::object();
  f.queue.addTo(body);
  if (!f.trust_group.empty()) {
    body["trust_group"] = f.trust_group;
  }
  for (const auto& [field, value] : f.limits) {
    body[field] = value;
  }
  return body;
}

core::Status tenantCreate(const TenantFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  const std::string path = Session::path("", "tenants/" + pathSegment(f.name));
  // The API's POST creates or updates; `create` must not change an existing tenant.
  auto existing = s->call("GET", path);
  if (existing.isOk()) {
    return core::Status(core::StatusCode::kAlreadyExists,
                        "tenant '" + f.name + "' exists; change it with `tessera tenant update`");
  }
  if (existing.status().code() != core::StatusCode::kNotFound) {
    return existing.status();
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("POST", path, tenantBody(f)));
  if (s->json()) {
    printJson(r);
    return core::Status::ok();
  }
  std::cout << "Success! Created tenant '" << f.name
            << "' with its queue and its tenant-admin policy.\nGive it a token: tessera token "
               "create --tenant "
            << f.name << " --policy tenant-admin\n";
  return core::Status::ok();
}

core::Status tenantUpdate(const TenantFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  const std::string path = Session::path("", "tenants/" + pathSegment(f.name));
  // POST on a missing tenant would create it: look first, so a typo is an error.
  TESSERA_RETURN_IF_ERROR(s->call("GET", path).status());
  TESSERA_RETURN_IF_ERROR(s->call("POST", path, tenantBody(f)).status());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", path));
  if (s->json()) {
    printJson(r.value("data", json::object()));
    return core::Status::ok();
  }
  std::cout << "Success! Updated tenant '" << f.name << "'.\n";
  return core::Status::ok();
}

core::Status tenantList(const TenantFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("LIST", Session::path("", "tenants")));
  const json keys = r.value("data", json::object()).value("keys", json::array());
  if (s->json()) {
    printJson(keys);
  } else {
    printKeys(keys, "No tenants.");
  }
  return core::Status::ok();
}

core::Status tenantShow(const TenantFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r,
                           s->call("GET", Session::path("", "tenants/" + pathSegment(f.name))));
  json d = r.value("data", json::object());
  if (s->json()) {
    printJson(d);
    return core::Status::ok();
  }
  const int64_t quota = d.value("quota_milli_gpu", int64_t{0});
  const int64_t limit = d.value("limit_milli_gpu", int64_t{-1});  // -1: none; 0: no GPU.
  std::vector<std::pair<std::string, std::string>> kvs = {
      {"name", d.value("name", f.name)},
      {"quota_gpu", milliText(quota)},
      {"limit_gpu", limit >= 0 ? milliText(limit) : "none"},
  };
  for (const char* k : {"name", "quota_milli_gpu", "limit_milli_gpu"}) {
    d.erase(k);
  }
  flatten(d, "", kvs);
  printKeyValues(kvs);
  return core::Status::ok();
}

core::Status tenantDelete(const TenantFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r,
                           s->call("DELETE", Session::path("", "tenants/" + pathSegment(f.name))));
  if (s->json()) {
    printJson(r);
  } else {
    std::cout << "Success! Deleted tenant '" << f.name << "'.\n";
  }
  return core::Status::ok();
}

// --- token

struct TokenFlags {
  CommonFlags common;
  std::vector<std::string> policies;
  std::string ttl;
  std::string explicit_max_ttl;
  bool no_renew = false;
  std::string display_name;
  std::string for_tenant;  // token create --tenant: a token of that tenant, from the admin.
  std::string accessor;
  std::string increment;
  bool self = false;
  std::string role;  // token create --role; the role's name for token role ...
  std::vector<std::string> allowed_policies;
  std::string token_ttl;
  std::string token_max_ttl;
  std::string period;  // token create --period; token role write --token-period.
  bool orphan = false;
  std::vector<std::string> meta;  // token create --meta KEY=VALUE.
};

// Vault's warnings in an answer, on stderr as Vault's CLI prints them.
void printWarnings(const json& answer) {
  const json w = answer.value("warnings", json());
  if (!w.is_array()) {
    return;
  }
  for (const json& line : w) {
    if (line.is_string()) {
      std::cerr << "WARNING! " << line.get<std::string>() << "\n";
    }
  }
}

core::Status tokenCreate(const TokenFlags& f) {
  json body = json::object();
  if (!f.policies.empty()) {
    body["policies"] = f.policies;
  }
  if (!f.ttl.empty()) {
    body["ttl"] = f.ttl;
  }
  if (!f.explicit_max_ttl.empty()) {
    body["explicit_max_ttl"] = f.explicit_max_ttl;
  }
  if (f.no_renew) {
    body["renewable"] = false;
  }
  if (!f.display_name.empty()) {
    body["display_name"] = f.display_name;
  }
  if (!f.period.empty()) {
    body["period"] = f.period;
  }
  if (f.orphan) {
    body["no_parent"] = true;
  }
  for (const std::string& kv : f.meta) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return core::invalidArgument("--meta: expected KEY=VALUE, got '" + kv + "'");
    }
    body["meta"][kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  std::string scope;
  if (!f.for_tenant.empty()) {
    // From the admin scope, naming the tenant. A tenant's own token can only create tokens of
    // its tenant, in its scope.
    TESSERA_ASSIGN_OR_RETURN(json me, s->self());
    const std::string mine = me.value("tenant", "");
    if (mine.empty()) {
      body["tenant"] = f.for_tenant;
    } else if (mine == f.for_tenant) {
      scope = mine;
    } else {
      return core::Status(
          core::StatusCode::kPermissionDenied,
          "this token belongs to tenant '" + mine + "' and can only create tokens of that tenant");
    }
  } else {
    TESSERA_ASSIGN_OR_RETURN(scope, s->scope());
  }
  const auto now = std::chrono::system_clock::now();
  // From a token role (Vault's auth/token/create/<role>): the role's policies, which a tenant
  // admin may hand on without holding them by name.
  const std::string op =
      f.role.empty() ? "auth/token/create" : "auth/token/create/" + pathSegment(f.role);
  if (!f.role.empty() && body.contains("tenant")) {
    scope = body["tenant"].get<std::string>();  // A tenant's role is in the tenant's scope.
    body.erase("tenant");
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("POST", Session::path(scope, op), body));
  const json auth = r.value("auth", json::object());
  if (s->json()) {
    printJson(r);  // The whole answer, as `vault token create -format=json` prints it.
    return core::Status::ok();
  }
  printWarnings(r);
  const int64_t ttl = auth.value("lease_duration", int64_t{-1});
  const int64_t period = auth.value("period", int64_t{0});
  const std::string tenant = auth.value("tenant", "");
  printKeyValues({
      {"token", auth.value("client_token", "")},
      {"token_accessor", auth.value("accessor", "")},
      {"token_tenant", tenant.empty() ? "(admin)" : tenant},
      {"token_policies", cell(auth.value("policies", json()))},
      {"token_role", auth.value("role", "").empty() ? "-" : auth.value("role", "")},
      {"token_duration", durationText(ttl)},
      {"token_renewable", cell(auth.value("renewable", json()))},
      {"token_period", period > 0 ? durationText(period) : "-"},
      {"token_orphan", cell(auth.value("orphan", json()))},
      {"token_expire_time", ttl < 0 ? "never" : utcText(now + std::chrono::seconds(ttl))},
  });
  std::cout << "\nThe token is shown only this once; the accessor can look it up, renew and "
               "revoke it.\n";
  return core::Status::ok();
}

core::Status tokenLookup(const TokenFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  json data;
  if (f.accessor.empty()) {
    TESSERA_ASSIGN_OR_RETURN(data, s->self());
  } else {
    TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
    TESSERA_ASSIGN_OR_RETURN(json r, s->call("POST", Session::path(scope, "auth/token/lookup"),
                                             {{"accessor", f.accessor}}));
    data = r.value("data", json::object());
  }
  if (s->json()) {
    printJson(data);
  } else {
    printToken(data);
  }
  return core::Status::ok();
}

core::Status tokenRenew(const TokenFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  json body = json::object();
  if (!f.increment.empty()) {
    body["increment"] = f.increment;
  }
  std::string op = "auth/token/renew-self";
  if (!f.accessor.empty()) {
    op = "auth/token/renew";
    body["accessor"] = f.accessor;
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("POST", Session::path(scope, op), body));
  if (s->json()) {
    printJson(r);  // Vault's shape: the renewed token's `auth` block (and its lookup in `data`).
  } else {
    printToken(r.value("data", json::object()));
  }
  return core::Status::ok();
}

core::Status tokenRevoke(const TokenFlags& f) {
  if (f.self == !f.accessor.empty()) {
    return core::invalidArgument("token revoke: give either an ACCESSOR or --self");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  json r;
  if (f.self) {
    TESSERA_ASSIGN_OR_RETURN(r, s->call("POST", Session::path(scope, "auth/token/revoke-self")));
  } else {
    TESSERA_ASSIGN_OR_RETURN(
        r, s->call("POST", Session::path(scope, "auth/token/revoke"), {{"accessor", f.accessor}}));
  }
  if (s->json()) {
    printJson(r);
  } else {
    std::cout << "Success! Revoked the token and every token created from it.\n";
  }
  return core::Status::ok();
}

// --- token roles

std::string rolePath(const std::string& name) {
  return name.empty() ? "auth/token/roles" : "auth/token/roles/" + pathSegment(name);
}

core::Status roleWrite(const TokenFlags& f) {
  json body = {{"allowed_policies", f.allowed_policies}};
  if (!f.token_ttl.empty()) {
    body["token_ttl"] = f.token_ttl;
  }
  if (!f.token_max_ttl.empty()) {
    body["token_max_ttl"] = f.token_max_ttl;
  }
  if (f.no_renew) {
    body["renewable"] = false;
  }
  if (!f.period.empty()) {
    body["token_period"] = f.period;
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("POST", Session::path(scope, rolePath(f.role)), body));
  if (s->json()) {
    printJson(r);
  } else {
    printWarnings(r);
    std::cout << "Success! Token role '" << f.role << "' written"
              << (scope.empty() ? "" : " in tenant '" + scope + "'")
              << "; `tessera token create --role " << f.role << "` makes its tokens.\n";
  }
  return core::Status::ok();
}

core::Status roleRead(const TokenFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", Session::path(scope, rolePath(f.role))));
  const json data = r.value("data", json::object());
  if (s->json()) {
    printJson(data);
    return core::Status::ok();
  }
  const int64_t ttl = data.value("token_ttl", int64_t{0});
  const int64_t max_ttl = data.value("token_max_ttl", int64_t{0});
  printKeyValues(
      {{"name", data.value("name", f.role)},
       {"allowed_policies", cell(data.value("allowed_policies", json()))},
       {"token_ttl", ttl == 0 ? "(the server's default)" : durationText(ttl)},
       {"token_max_ttl", max_ttl == 0 ? "(the server's maximum)" : durationText(max_ttl)},
       {"renewable", cell(data.value("renewable", json()))}});
  return core::Status::ok();
}

core::Status roleList(const TokenFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("LIST", Session::path(scope, rolePath(""))));
  const json keys = r.value("data", json::object()).value("keys", json::array());
  if (s->json()) {
    printJson(keys);
  } else {
    printKeys(keys, "No token roles.");
  }
  return core::Status::ok();
}

core::Status roleDelete(const TokenFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("DELETE", Session::path(scope, rolePath(f.role))));
  if (s->json()) {
    printJson(r);
  } else {
    std::cout << "Success! Deleted token role '" << f.role
              << "' (tokens made from it live on until they expire or are revoked).\n";
  }
  return core::Status::ok();
}

// --- policy

struct PolicyFlags {
  CommonFlags common;
  std::string name;
  std::string file;
};

// Admin policies live under sys/policies, a tenant's under policies.
std::string policyPath(const std::string& scope, const std::string& name) {
  const std::string base = scope.empty() ? "sys/policies" : "policies";
  return Session::path(scope, name.empty() ? base : base + "/" + pathSegment(name));
}

core::Status policyWrite(const PolicyFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(json doc, readDocument(f.file));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("POST", policyPath(scope, f.name), doc));
  if (s->json()) {
    printJson(r);
  } else {
    std::cout << "Success! Uploaded policy '" << f.name << "'"
              << (scope.empty() ? "" : " to tenant '" + scope + "'") << ".\n";
  }
  return core::Status::ok();
}

core::Status policyRead(const PolicyFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", policyPath(scope, f.name)));
  const json data = r.value("data", json::object());
  if (s->json()) {
    printJson(data);
  } else {
    std::cout << policyHcl(data.value("policy", json::object()));
  }
  return core::Status::ok();
}

core::Status policyList(const PolicyFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("LIST", policyPath(scope, "")));
  const json keys = r.value("data", json::object()).value("keys", json::array());
  if (s->json()) {
    printJson(keys);
  } else {
    printKeys(keys, "No policies.");
  }
  return core::Status::ok();
}

core::Status policyDelete(const PolicyFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("DELETE", policyPath(scope, f.name)));
  if (s->json()) {
    printJson(r);
  } else {
    std::cout << "Success! Deleted policy '" << f.name << "'.\n";
  }
  return core::Status::ok();
}

// --- workloads

struct RunFlags {
  CommonFlags common;
  std::string name;
  std::string file;
  std::string gpus;  // "2" whole GPUs, or "0.5" of one (Run:ai's --gpu 0.5).
  CLI::Option* gpus_opt = nullptr;
  int64_t gpu_milli = 0;
  int64_t gpu_milli_limit = 0;
  int64_t gpu_memory_mib = 0;
  std::string mig;
  std::vector<std::string> models;
  std::string isolation;
  int64_t tasks = 0;
  int64_t min_available = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t priority = 0;
  bool no_preempt = false;
  int64_t duration = 0;
  std::string queue;
  std::vector<std::string> node_selector;  // KEY=VALUE
  std::vector<std::string> secret_kv;
  std::vector<std::string> secret_db;
  std::vector<std::string> env;  // NAME=VALUE
  std::vector<std::string> ports;
  int64_t retries = 0;
  std::string pull_secret;
  int64_t retry_delay_s = 0;
  int64_t retry_max_delay_s = 0;
  std::vector<std::string> identity_audiences;
  std::string image;  // oci:/path[:tag], oci-archive:/path.tar (docs/agent.md "Containers").
  int64_t shm_mib = 0;
  bool read_only_rootfs = false;
  bool wait = false;
  double wait_timeout_s = 0;
  double interval_s = 0.5;
  std::vector<std::string> command;
  // Set flags override the file; unset ones leave it alone.
  std::vector<std::pair<CLI::Option*, std::function<void(json&)>>> overrides;
};

// The workload spec from -f FILE, with HCL blocks (`gpu { ... }`, `env { ... }`,
// `identity { ... }`, `secrets { ... }`) as the objects the API takes.
core::Result<json> workloadFile(const std::string& file) {
  TESSERA_ASSIGN_OR_RETURN(json doc, readDocument(file));
  for (const char* block : {"gpu", "env", "identity", "secrets"}) {
    if (!doc.contains(block) || doc[block].is_object()) {
      continue;
    }
    auto blocks = core::hclBlocks(doc, block, 0, file);
    if (!blocks.isOk()) {
      return badInput(blocks.status());
    }
    if (blocks->size() != 1) {
      return core::invalidArgument(file + ": expected one '" + block + "' block, found " +
                                   std::to_string(blocks->size()));
    }
    json body = *(*blocks)[0].body;
    doc[block] = std::move(body);
  }
  return doc;
}

// --gpus: a whole number of GPUs, or a fraction of one GPU (0.001 to 0.999, at most three
// decimals) as Run:ai's `--gpu 0.5`. Parsed as text: no floating point reaches the milli-GPU.
struct GpuAmount {
  int64_t count = 0;  // Whole GPUs; 0 with milli > 0 for a fraction.
  int64_t milli = 0;
};

core::Result<GpuAmount> parseGpus(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return core::invalidArgument("--gpus " + text + ": " + why);
  };
  const size_t dot = text.find('.');
  const std::string whole = text.substr(0, dot);
  const std::string frac = dot == std::string::npos ? "" : text.substr(dot + 1);
  auto digits = [](const std::string& d) {
    return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if ((whole.empty() && frac.empty()) || !digits(whole) || !digits(frac) ||
      (dot != std::string::npos && frac.empty()) || whole.size() > 6) {
    return bad("expected a whole number of GPUs (2) or a fraction of one (0.5)");
  }
  const int64_t w = whole.empty() ? 0 : std::stoll(whole);
  const bool fraction = std::any_of(frac.begin(), frac.end(), [](char c) { return c != '0'; });
  if (!fraction) {
    return GpuAmount{w, 0};
  }
  if (w > 0) {
    return bad(
        "a fraction is possible only below one GPU (a task gets whole GPUs, or a share of "
        "one); ask for --gpus " +
        std::to_string(w + 1) + " or --gpus 0." + frac);
  }
  if (frac.size() > 3) {
    return bad("at most three decimals (GPU shares are in thousandths, as --gpu-milli)");
  }
  std::string milli = frac;
  milli.resize(3, '0');
  return GpuAmount{0, std::stoll(milli)};
}

// Follows a submitted workload like Nomad's monitor: prints each phase change (and a new
// reason) until it runs or ends. OK when it is running or succeeded; an error with the reason
// when it failed or was cancelled, or when `timeout_s` (0: none) passed first.
// The phase lines go to `out` (stderr under -format=json, so stdout stays one JSON document).
core::Status waitForWorkload(Session& s, const std::string& tenant, const std::string& name,
                             double interval_s, double timeout_s, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  const std::string path = Session::path(tenant, "workloads/" + pathSegment(name));
  std::string last;
  while (true) {
    TESSERA_ASSIGN_OR_RETURN(json w, s.call("GET", path));
    const json status = w.value("data", json::object()).value("status", json::object());
    const std::string phase = status.value("phase", "");
    const std::string reason = status.value("reason", "");
    // Placed is not yet running: a task is "starting" until its node's agent says it started
    // it (it may still fail there, say on a secret it cannot get).
    const json tasks = status.value("tasks", json::array());
    const auto starting = std::count_if(tasks.begin(), tasks.end(), [](const json& t) {
      return t.value("state", "") == "starting";
    });
    std::string seen = phase;
    if (phase == "running" && starting > 0) {
      seen += " (" + std::to_string(static_cast<int64_t>(tasks.size()) - starting) + "/" +
              std::to_string(tasks.size()) + " tasks started)";
    }
    seen += reason.empty() ? "" : ": " + reason;
    if (seen != last) {
      last = seen;
      out << "==> " << utcText(std::chrono::system_clock::now()) << " " << seen << "\n"
          << std::flush;
    }
    if ((phase == "running" && starting == 0) || phase == "succeeded") {
      return core::Status::ok();
    }
    if (phase == "failed" || phase == "cancelled") {
      return core::failedPrecondition("workload '" + name + "' " + phase +
                                      (reason.empty() ? "" : ": " + reason));
    }
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (timeout_s > 0 && waited.count() >= timeout_s) {
      return core::Status(core::StatusCode::kUnavailable,
                          "workload '" + name + "' is still " + phase + " after " +
                              std::to_string(static_cast<int64_t>(timeout_s)) + " s" +
                              (reason.empty() ? "" : ": " + reason));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

core::Status run(const RunFlags& f) {
  if (f.interval_s < 0.05 || f.interval_s > 3600) {
    return core::invalidArgument("--interval: expected 0.05 to 3600 seconds");
  }
  if (f.wait_timeout_s < 0) {
    return core::invalidArgument("--wait-timeout: expected seconds, 0 for none");
  }
  json body = json::object();
  if (!f.file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(body, workloadFile(f.file));
  }
  if (f.gpus_opt != nullptr && f.gpus_opt->count() > 0) {
    TESSERA_ASSIGN_OR_RETURN(GpuAmount g, parseGpus(f.gpus));
    if (g.milli > 0 && f.gpu_milli > 0) {
      return core::invalidArgument("--gpus " + f.gpus +
                                   " and --gpu-milli both give a share of a GPU: use one");
    }
  }
  for (const std::string& kv : f.env) {
    const size_t eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos) {
      return core::invalidArgument("--env " + kv + ": expected NAME=VALUE");
    }
  }
  for (const auto& [opt, apply] : f.overrides) {
    if (opt->count() > 0) {
      apply(body);
    }
  }
  if (!f.command.empty()) {
    body["command"] = f.command;
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("workloads"));
  TESSERA_ASSIGN_OR_RETURN(
      json r, s->call("POST", Session::path(tenant, "workloads/" + pathSegment(f.name)), body));
  const json data = r.value("data", json::object());
  if (s->json()) {
    printJson(data);
  } else {
    std::cout << "Workload '" << data.value("name", f.name) << "' submitted to tenant '"
              << data.value("tenant", tenant) << "': " << data.value("phase", "pending") << "\n";
  }
  if (f.wait) {
    std::cout << std::flush;
    return waitForWorkload(*s, tenant, data.value("name", f.name), f.interval_s, f.wait_timeout_s,
                           s->json() ? std::cerr : std::cout);
  }
  return core::Status::ok();
}

struct WorkloadFlags {
  CommonFlags common;
  std::string name;
  std::string phase;         // ps --phase
  double watch_s = 0;        // top --watch: seconds between frames; 0: one frame.
  bool all_tenants = false;  // ps -A
  bool per_gpu = false;      // nodes --gpus
};

constexpr const char* kPhases[] = {"pending", "running", "succeeded", "failed", "cancelled"};

// "running/total" tasks of a workload as GET workloads/NAME answers it.
std::string taskCounts(const json& w) {
  const json status = w.value("status", json::object());
  int64_t running = 0;
  for (const json& t : status.value("tasks", json::array())) {
    running += t.value("state", "") == "running" ? 1 : 0;
  }
  const int64_t total = w.value("spec", json::object()).value("tasks", int64_t{1});
  return std::to_string(running) + "/" + std::to_string(total);
}

// `tessera ps -A`: every tenant's workloads, each with its tenant, for an operator's token (one
// request for the tenants, then one per tenant).
core::Status psAllTenants(const WorkloadFlags& f, Session& s) {
  auto tenants = s.call("LIST", "/v1/tenants");
  if (!tenants.isOk()) {
    if (tenants.status().code() == core::StatusCode::kNotFound ||
        tenants.status().code() == core::StatusCode::kPermissionDenied) {
      return core::Status(core::StatusCode::kPermissionDenied,
                          "ps -A lists every tenant's workloads: it needs an operator's token "
                          "(list on tenants, read and list on tenants/*/workloads), and this "
                          "one is not (" +
                              tenants.status().message() + ")");
    }
    return tenants.status();
  }
  json workloads = json::array();
  for (const json& key : tenants->value("data", json::object()).value("keys", json::array())) {
    const std::string tenant = key.get<std::string>();
    auto list = s.call("LIST", Session::path(tenant, "workloads") + "?detail=true");
    if (!list.isOk() && list.status().code() == core::StatusCode::kNotFound) {
      continue;  // Deleted since the listing.
    }
    if (!list.isOk()) {
      return list.status().withContext("tenant '" + tenant + "'");
    }
    for (json w : list->value("data", json::object()).value("workloads", json::array())) {
      w["tenant"] = tenant;
      if (f.phase.empty() || w.value("status", json::object()).value("phase", "") == f.phase) {
        workloads.push_back(std::move(w));
      }
    }
  }
  if (s.json()) {
    printJson(workloads);
    return core::Status::ok();
  }
  if (workloads.empty()) {
    std::cout << "No " << (f.phase.empty() ? "" : f.phase + " ") << "workloads in any tenant.\n";
    return core::Status::ok();
  }
  std::vector<std::vector<std::string>> rows;
  std::array<size_t, 4> width = {6, 4, 5, 5};  // The headers before REASON.
  for (const json& w : workloads) {
    const json status = w.value("status", json::object());
    rows.push_back({w.value("tenant", ""), w.value("name", ""), status.value("phase", ""),
                    taskCounts(w), status.value("reason", "")});
    for (size_t i = 0; i < width.size(); ++i) {
      width[i] = std::max(width[i], rows.back()[i].size());
    }
  }
  const size_t used = width[0] + width[1] + width[2] + width[3] + 8;  // With the gaps.
  const size_t columns = terminalColumns();
  const size_t reason_w = columns > used + kMinReasonColumns ? columns - used : kMinReasonColumns;
  Table t({"TENANT", "NAME", "PHASE", "TASKS", "REASON"});
  for (auto& row : rows) {
    row[4] = truncated(row[4], reason_w);
    t.add(std::move(row));
  }
  t.print(std::cout);
  return core::Status::ok();
}

core::Status ps(const WorkloadFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  if (f.all_tenants) {
    return psAllTenants(f, *s);
  }
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("workloads"));
  // One request: the list with each workload's status (`?detail=true`).
  TESSERA_ASSIGN_OR_RETURN(json list,
                           s->call("LIST", Session::path(tenant, "workloads") + "?detail=true"));
  const json data = list.value("data", json::object());
  json workloads = json::array();
  if (data.contains("workloads")) {
    workloads = data["workloads"];
  } else {
    // A server from before `detail`: one request per workload, as before.
    for (const json& key : data.value("keys", json::array())) {
      const std::string name = key.get<std::string>();
      auto w = s->call("GET", Session::path(tenant, "workloads/" + pathSegment(name)));
      if (!w.isOk() && w.status().code() == core::StatusCode::kNotFound) {
        continue;  // Gone since the listing.
      }
      if (!w.isOk()) {
        return w.status();
      }
      workloads.push_back(w->value("data", json::object()));
    }
  }
  if (!f.phase.empty()) {
    json kept = json::array();
    for (json& w : workloads) {
      if (w.value("status", json::object()).value("phase", "") == f.phase) {
        kept.push_back(std::move(w));
      }
    }
    workloads = std::move(kept);
  }
  if (s->json()) {
    printJson(workloads);
    return core::Status::ok();
  }
  if (workloads.empty()) {
    std::cout << "No " << (f.phase.empty() ? "" : f.phase + " ") << "workloads in tenant '"
              << tenant << "'.\n";
    return core::Status::ok();
  }
  std::vector<std::vector<std::string>> rows;
  size_t name_w = 4, phase_w = 5, tasks_w = 5;
  for (const json& w : workloads) {
    const json status = w.value("status", json::object());
    rows.push_back({w.value("name", ""), status.value("phase", ""), taskCounts(w),
                    status.value("reason", "")});
    name_w = std::max(name_w, rows.back()[0].size());
    phase_w = std::max(phase_w, rows.back()[1].size());
    tasks_w = std::max(tasks_w, rows.back()[2].size());
  }
  const size_t used = name_w + phase_w + tasks_w + 6;  // The columns before REASON.
  const size_t columns = terminalColumns();
  const size_t reason_w = columns > used + kMinReasonColumns ? columns - used : kMinReasonColumns;
  Table t({"NAME", "PHASE", "TASKS", "REASON"});
  for (auto& row : rows) {
    row[3] = truncated(row[3], reason_w);
    t.add(std::move(row));
  }
  t.print(std::cout);
  return core::Status::ok();
}

core::Status show(const WorkloadFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("workloads"));
  const std::string base = Session::path(tenant, "workloads/" + pathSegment(f.name));
  TESSERA_ASSIGN_OR_RETURN(json w, s->call("GET", base));
  TESSERA_ASSIGN_OR_RETURN(json ev, s->call("GET", base + "/events"));
  json data = w.value("data", json::object());
  data["events"] = ev.value("data", json::object()).value("events", json::array());
  if (s->json()) {
    printJson(data);
    return core::Status::ok();
  }
  const json status = data.value("status", json::object());
  std::vector<std::pair<std::string, std::string>> head = {
      {"Name:", data.value("name", f.name)},
      {"Tenant:", data.value("tenant", tenant)},
      {"Phase:", status.value("phase", "")},
  };
  if (status.contains("reason")) {
    head.emplace_back("Reason:", cell(status["reason"]));
  }
  if (status.contains("attempt")) {  // Retried, or failed once: which attempt this is.
    head.emplace_back("Attempt:", cell(status["attempt"]));
  }
  head.emplace_back("Tasks:", taskCounts(data) + " running");
  head.emplace_back("Submitted:", cell(data.value("submitted", json())));
  Table h;
  for (auto& [k, v] : head) {
    h.add({k, v});
  }
  h.print(std::cout);

  std::vector<std::pair<std::string, std::string>> spec;
  flatten(data.value("spec", json::object()), "", spec);
  std::cout << "\nSpec:\n";
  if (spec.empty()) {
    std::cout << "  (defaults)\n";
  } else {
    Table t;
    for (auto& [k, v] : spec) {
      t.add({k, v});
    }
    t.print(std::cout, "  ");
  }

  const json tasks = status.value("tasks", json::array());
  std::cout << "\nTask placements:\n";
  if (tasks.empty()) {
    std::cout << "  (none yet)\n";
  } else {
    Table t({"TASK", "STATE", "NODE", "GPUS", "SHARE"});
    for (size_t i = 0; i < tasks.size(); ++i) {
      const json& task = tasks[i];
      std::string gpus;
      for (const json& g : task.value("gpus", json::array())) {
        gpus += (gpus.empty() ? "" : ",") + g.dump();
      }
      const int64_t milli = task.value("milli_per_gpu", int64_t{0});
      const std::string mig = task.value("mig", "");
      const std::string share = gpus.empty()   ? "-"
                                : !mig.empty() ? "MIG " + mig
                                : milli > 0    ? milliText(milli) + " GPU each"
                                               : "whole GPUs";
      // A task starting says what it waits for: "starting: pulling image (312 MB of 1.2 GB)".
      const std::string progress = task.value("progress", "");
      // One that ended without running says so ("finished" reads as done).
      const std::string state =
          task.value("start_failed", false) ? "could not start" : task.value("state", "");
      t.add({std::to_string(i), state + (progress.empty() ? "" : ": " + progress),
             task.value("node", "-"), gpus.empty() ? "-" : gpus, share});
    }
    t.print(std::cout, "  ");
  }

  const json attempts = status.value("attempts", json::array());
  if (!attempts.empty()) {
    std::cout << "\nHow earlier attempts ended:\n";
    for (const json& a : attempts) {
      std::cout << "  " << cell(a) << "\n";  // "attempt 1: task 0 on node ... exited with ..."
    }
  }

  std::cout << "\nEvents:\n";
  Table e({"TIME", "EVENT"});
  for (const json& event : data["events"]) {
    // An eviction or preemption says why: "evicted: preempted by workload urgent (...)".
    const json reason = event.value("reason", json());
    e.add({cell(event.value("time", json())),
           cell(event.value("event", json())) +
               (reason.is_string() && !reason.get<std::string>().empty()
                    ? ": " + reason.get<std::string>()
                    : "")});
  }
  e.print(std::cout, "  ");
  return core::Status::ok();
}

core::Status cancel(const WorkloadFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("workloads"));
  TESSERA_ASSIGN_OR_RETURN(
      json r, s->call("DELETE", Session::path(tenant, "workloads/" + pathSegment(f.name))));
  if (s->json()) {
    printJson(r);
  } else {
    std::cout << "Cancelling workload '" << f.name << "' of tenant '" << tenant
              << "'; `tessera show " << f.name << "` follows it.\n";
  }
  return core::Status::ok();
}

// `tessera suspend NAME` / `tessera resume NAME`.
core::Status suspendOrResume(const WorkloadFlags& f, bool suspend) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("workloads"));
  const std::string verb = suspend ? "suspend" : "resume";
  TESSERA_ASSIGN_OR_RETURN(
      json r,
      s->call("POST", Session::path(tenant, "workloads/" + pathSegment(f.name) + "/" + verb)));
  if (s->json()) {
    printJson(r);
  } else if (suspend) {
    std::cout << "Suspended workload '" << f.name << "' of tenant '" << tenant
              << "': its running tasks stop, and none starts until `tessera resume " << f.name
              << "`.\n";
  } else {
    std::cout << "Resumed workload '" << f.name << "' of tenant '" << tenant
              << "': its tasks left to run are placed again.\n";
  }
  return core::Status::ok();
}

// --- cluster

std::string memoryText(int64_t mib) {
  return mib % 1024 == 0 ? std::to_string(mib / 1024) + " GiB" : std::to_string(mib) + " MiB";
}

core::Status nodes(const WorkloadFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", Session::path(scope, "nodes")));
  const json list = r.value("data", json::object()).value("nodes", json::array());
  if (s->json()) {
    printJson(list);
    return core::Status::ok();
  }
  if (f.per_gpu) {
    // One row per GPU: how much of it is allocated, and to whom (an operator sees every tenant's
    // tasks; a tenant only its own).
    Table g({"NODE", "GPU", "MODEL", "MIG", "ALLOCATED", "USED BY"});
    for (const json& n : list) {
      for (const json& d : n.value("devices", json::array())) {
        std::string who;
        for (const json& u : d.value("uses", json::array())) {
          std::string one = u.value("tenant", "") + "/" + u.value("workload", "") + "." +
                            std::to_string(u.value("task", 0));
          if (u.value("milli", int64_t{1000}) < 1000) {
            one += " (" + milliText(u.value("milli", int64_t{0})) + ")";
          }
          if (u.contains("mig_profile")) {
            one += " [" + u.value("mig_profile", "") + "]";
          }
          if (u.value("terminating", false)) {
            one += " (stopping)";
          }
          who += (who.empty() ? "" : ", ") + one;
        }
        g.add({n.value("name", ""), std::to_string(d.value("index", 0)), d.value("model", ""),
               d.value("mig", false) ? "on" : "-",
               milliText(d.value("allocated_milli", int64_t{0})), who.empty() ? "-" : who});
      }
    }
    g.print(std::cout);
    return core::Status::ok();
  }
  Table t({"NAME", "STATE", "GPUS", "ALLOCATED", "CPU", "MEMORY", "LABELS"});
  for (const json& n : list) {
    std::string gpus;
    const json by_model = n.value("gpus", json::object());
    for (const auto& [model, count] : by_model.items()) {
      gpus += (gpus.empty() ? "" : ", ") + count.dump() + "x " + model;
    }
    std::string state = n.value("state", "");
    if (n.value("cordoned", false)) {
      state += ",cordoned";
    }
    std::string labels;
    const json node_labels = n.value("labels", json::object());
    for (const auto& [key, value] : node_labels.items()) {
      labels += (labels.empty() ? "" : ",") + key + "=" + value.get<std::string>();
    }
    if (n.contains("dedicated_to")) {
      labels += " (dedicated to " + n.value("dedicated_to", "") + ")";
    }
    const size_t total = n.value("devices", json::array()).size();
    t.add({n.value("name", ""), state, gpus.empty() ? "-" : gpus,
           total == 0 ? "-"
                      : milliText(n.value("allocated_milli_gpu", int64_t{0})) + "/" +
                            std::to_string(total),
           milliText(n.value("cpu_milli", int64_t{0})),
           memoryText(n.value("memory_mib", int64_t{0})), labels.empty() ? "-" : labels});
  }
  t.print(std::cout);
  return core::Status::ok();
}

// One frame of `top`.
core::Status topFrame(Session& s, const std::string& scope) {
  TESSERA_ASSIGN_OR_RETURN(json r, s.call("GET", Session::path(scope, "queues")));
  const json queues = r.value("data", json::object()).value("queues", json::array());
  if (s.json()) {
    std::cout << queues.dump() << "\n";  // With --watch, one line per frame: JSON lines.
    return core::Status::ok();
  }
  Table t({"QUEUE", "ALLOCATED", "FAIR SHARE", "QUOTA", "PENDING"});
  for (const json& q : queues) {
    t.add({q.value("name", ""), milliText(q.value("allocated_milli_gpu", int64_t{0})),
           milliText(q.value("fair_share_milli_gpu", int64_t{0})),
           milliText(q.value("quota_milli_gpu", int64_t{0})),
           milliText(q.value("pending_milli_gpu", int64_t{0}))});
  }
  t.print(std::cout);
  std::cout << "(GPUs)\n";
  return core::Status::ok();
}

core::Status top(const WorkloadFlags& f) {
  if (f.watch_s != 0 && (f.watch_s < 0.1 || f.watch_s > 3600)) {
    return core::invalidArgument("--watch: expected 0.1 to 3600 seconds between frames");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->scope());
  if (f.watch_s == 0) {
    if (s->json()) {
      TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", Session::path(scope, "queues")));
      printJson(r.value("data", json::object()).value("queues", json::array()));
      return core::Status::ok();
    }
    return topFrame(*s, scope);
  }
  // Like watch(1): a frame every N seconds until interrupted; on a terminal each frame
  // replaces the last.
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  while (true) {
    if (!s->json()) {
      std::cout << (terminal ? "\033[H\033[2J" : "") << "Every " << f.watch_s
                << "s: tessera top    " << utcText(std::chrono::system_clock::now()) << "\n\n";
    }
    TESSERA_RETURN_IF_ERROR(topFrame(*s, scope));
    std::cout << (terminal || s->json() ? "" : "\n") << std::flush;
    std::this_thread::sleep_for(std::chrono::duration<double>(f.watch_s));
  }
}

// ---------------------------------------------------------------------------------------------
// queue: a tenant's queues (its teams').

struct QueueFlags {
  CommonFlags common;
  std::string name;
  QueueSettings queue;
};

// Creates (`create`) or changes a queue: only the settings given are sent.
core::Status queuePut(const QueueFlags& f, bool create) {
  json body = json::object();
  f.queue.addTo(body);
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("queues"));
  const std::string path = Session::path(tenant, "queues/" + pathSegment(f.name));
  auto existing = s->call("GET", path);
  if (existing.isOk() == create) {
    return create ? core::Status(core::StatusCode::kAlreadyExists,
                                 "queue '" + f.name +
                                     "' exists; change it with `tessera queue "
                                     "update`")
                  : existing.status();
  }
  if (create && existing.status().code() != core::StatusCode::kNotFound) {
    return existing.status();
  }
  TESSERA_RETURN_IF_ERROR(s->call("POST", path, body).status());
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", path));
  if (s->json()) {
    printJson(r.value("data", json::object()));
    return core::Status::ok();
  }
  std::cout << "Success! " << (create ? "Created" : "Updated") << " queue '" << f.name
            << "' in tenant '" << tenant << "'. Submit to it: tessera run NAME --queue " << f.name
            << "\n";
  return core::Status::ok();
}

core::Status queueCreate(const QueueFlags& f) { return queuePut(f, true); }
core::Status queueUpdate(const QueueFlags& f) { return queuePut(f, false); }

core::Status queueDelete(const QueueFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("queues"));
  TESSERA_RETURN_IF_ERROR(
      s->call("DELETE", Session::path(tenant, "queues/" + pathSegment(f.name))).status());
  if (s->json()) {
    printJson(json{{"deleted", f.name}, {"tenant", tenant}});
  } else {
    std::cout << "Success! Deleted queue '" << f.name << "' of tenant '" << tenant << "'.\n";
  }
  return core::Status::ok();
}

core::Status queueShow(const QueueFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("queues"));
  TESSERA_ASSIGN_OR_RETURN(json r,
                           s->call("GET", Session::path(tenant, "queues/" + pathSegment(f.name))));
  const json data = r.value("data", json::object());
  if (s->json()) {
    printJson(data);
    return core::Status::ok();
  }
  printKeyValues({{"name", data.value("name", "")},
                  {"quota_gpu", milliText(data.value("quota_milli_gpu", int64_t{0}))},
                  {"limit_gpu", data.value("limit_milli_gpu", int64_t{-1}) >= 0
                                    ? milliText(data.value("limit_milli_gpu", int64_t{-1}))
                                    : "none"},
                  {"weight", std::to_string(data.value("weight", int64_t{1}))},
                  {"priority", std::to_string(data.value("priority", int64_t{100}))}});
  return core::Status::ok();
}

// ---------------------------------------------------------------------------------------------
// audit tail: the tenant's own audit records, from the server.

struct AuditTailFlags {
  CommonFlags common;
  int lines = 20;
  bool follow = false;
  double interval_s = 1;
};

// Who acted: the token's display name, else the start of its accessor (HMAC'd in the log by
// default), else "-" (no token).
std::string auditActor(const json& rec) {
  const json auth = rec.value("auth", json::object());
  const std::string name = auth.is_object() ? auth.value("display_name", "") : "";
  if (!name.empty()) {
    return name;
  }
  std::string accessor = auth.is_object() ? auth.value("accessor", "") : "";
  if (accessor.empty()) {
    return "-";
  }
  constexpr std::string_view kHmac = "hmac-sha256:";
  if (accessor.rfind(kHmac, 0) == 0) {
    return "hmac:" + accessor.substr(kHmac.size(), 8);
  }
  return accessor.substr(0, 8);
}

void printAuditRecord(const json& rec, bool as_json) {
  if (as_json) {
    std::cout << rec.dump() << "\n" << std::flush;  // JSON lines, as in the log.
    return;
  }
  const json req = rec.value("request", json::object());
  const json resp = rec.value("response", json::object());
  std::string status = rec.value("type", "") == "response" && resp.contains("status")
                           ? std::to_string(resp.value("status", 0))
                           : "-";
  std::cout << rec.value("seq", int64_t{0}) << "  " << rec.value("time", "") << "  "
            << rec.value("type", "") << "  " << auditActor(rec) << "  " << req.value("method", "")
            << " " << req.value("path", "") << "  " << status;
  const std::string error = rec.value("error", "");
  if (!error.empty()) {
    std::cout << "  (" << error << ")";
  }
  std::cout << "  " << rec.value("request_id", "") << "\n" << std::flush;
}

core::Status auditTail(const AuditTailFlags& f) {
  if (f.lines < 1 || f.lines > 10000) {
    return core::invalidArgument("-n: expected 1 to 10000 records");
  }
  if (f.interval_s < 0.1 || f.interval_s > 3600) {
    return core::invalidArgument("--interval: expected 0.1 to 3600 seconds");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("audit records"));
  TESSERA_ASSIGN_OR_RETURN(
      json r, s->call("GET", Session::path(tenant, "audit?limit=" + std::to_string(f.lines))));
  // Following, the tail's own polls would fill the view: they are skipped by request id.
  std::vector<std::string> own = {r.value("request_id", "")};
  int64_t last = 0;
  auto show = [&](const json& data) {
    for (const json& rec : data.value("records", json::array())) {
      last = std::max(last, rec.value("seq", int64_t{0}));
      if (f.follow && std::find(own.begin(), own.end(), rec.value("request_id", "")) != own.end()) {
        continue;
      }
      printAuditRecord(rec, s->json());
    }
  };
  show(r.value("data", json::object()));
  while (f.follow) {
    std::this_thread::sleep_for(std::chrono::duration<double>(f.interval_s));
    TESSERA_ASSIGN_OR_RETURN(
        r, s->call("GET", Session::path(tenant, "audit?limit=1000&after=" + std::to_string(last))));
    own.push_back(r.value("request_id", ""));
    if (own.size() > 8) {
      own.erase(own.begin());  // A poll's records arrive by the next one or the one after.
    }
    show(r.value("data", json::object()));
  }
  return core::Status::ok();
}

struct LogsFlags {
  CommonFlags common;
  std::string name;
  int64_t task = 0;
  bool stderr_stream = false;
  bool follow = false;
  double interval_s = 1;
  int64_t tail = -1;  // The last N lines only; -1: all.
};

// The last `lines` lines of `text` (a last line without its newline counts).
std::string lastLines(const std::string& text, int64_t lines) {
  if (lines <= 0) {
    return "";
  }
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') {
    --pos;  // The newline that ends the last line.
  }
  for (int64_t n = 0; pos > 0; --pos) {
    if (text[pos - 1] == '\n' && ++n == lines) {
      break;
    }
  }
  return text.substr(pos);
}

// A task's log from its node's agent, from the start; -f keeps reading while the workload runs.
core::Status logs(const LogsFlags& f) {
  if (f.interval_s < 0.1 || f.interval_s > 3600) {
    return core::invalidArgument("--interval: expected 0.1 to 3600 seconds");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("workloads"));
  const std::string base = Session::path(tenant, "workloads/" + pathSegment(f.name) + "/logs") +
                           "?task=" + std::to_string(f.task) +
                           "&stream=" + (f.stderr_stream ? "stderr" : "stdout");
  int64_t offset = 0;
  if (f.tail >= 0) {
    // Read back from the end in growing windows until they hold `tail` lines (or the start).
    TESSERA_ASSIGN_OR_RETURN(json first, s->call("GET", base + "&offset=0&limit=1"));
    const int64_t size = first.value("data", json::object()).value("size", int64_t{0});
    int64_t window = 64 * 1024;
    std::string text;
    while (true) {
      const int64_t from = std::max<int64_t>(0, size - window);
      text.clear();
      for (int64_t at = from; at < size;) {
        TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", base + "&offset=" + std::to_string(at)));
        const json data = r.value("data", json::object());
        const int64_t next = data.value("next_offset", at);
        if (next <= at) {
          break;
        }
        text += data.value("text", "");
        at = next;
      }
      const auto newlines = std::count(text.begin(), text.end(), '\n');
      if (from == 0 || newlines > f.tail) {
        break;
      }
      window *= 4;
    }
    std::cout << lastLines(text, f.tail) << std::flush;
    offset = size;
    if (!f.follow) {
      return core::Status::ok();
    }
  }
  while (true) {
    TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", base + "&offset=" + std::to_string(offset)));
    const json data = r.value("data", json::object());
    const std::string text = data.value("text", "");
    std::cout << text << std::flush;
    offset = data.value("next_offset", offset);
    if (offset < data.value("size", int64_t{0})) {
      continue;  // More is there already.
    }
    const std::string phase = data.value("phase", "");
    if (!f.follow || (phase != "running" && phase != "pending")) {
      return core::Status::ok();
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(f.interval_s));
  }
}

// ---------------------------------------------------------------------------------------------
// Wiring.

void addLogin(CLI::App& app, int* rc) {
  auto f = std::make_shared<LoginFlags>();
  CLI::App* c = app.add_subcommand(
      "login",
      "Check a token and store it in ~/.tessera-token (mode 0600), used when TESSERA_TOKEN is "
      "unset");
  addCommonFlags(c, f->common, {.token = false});
  c->add_option("TOKEN", f->token, "The token (`-`: read it from standard input)")->required();
  bind(c, f, &login, rc);
}

void addTenantCommands(CLI::App& app, int* rc) {
  CLI::App* tenant =
      app.add_subcommand("tenant", "Create, update, list, show and delete tenants (admin)");
  tenant->require_subcommand(1);
  const FlagSet admin{.tenant = false};
  auto settings = [](CLI::App* c, TenantFlags& f) {
    f.queue.addFlags(c, "Guaranteed GPUs", "Fair-share weight (default 1)",
                     "Queue priority (default 100; higher first)");
    c->add_option("--trust-group", f.trust_group, "Tenants that may share a GPU's memory");
    for (const TenantLimit& l : kTenantLimits) {
      c->add_option_function<int64_t>(
          l.flag, [&f, field = std::string(l.field)](const int64_t& v) { f.limits[field] = v; },
          l.help);
    }
  };
  {
    auto f = std::make_shared<TenantFlags>();
    CLI::App* c =
        tenant->add_subcommand("create", "Create a tenant, its queue and its tenant-admin policy");
    addCommonFlags(c, f->common, admin);
    c->add_option("NAME", f->name, "Tenant name (lowercase letters, digits, '-')")->required();
    settings(c, *f);
    c->footer("Settings left out take the server's defaults (its limits block).");
    bind(c, f, &tenantCreate, rc);
  }
  {
    auto f = std::make_shared<TenantFlags>();
    CLI::App* c = tenant->add_subcommand(
        "update", "Change a tenant's quota, limit, weights or limits; the rest stays");
    addCommonFlags(c, f->common, admin);
    c->add_option("NAME", f->name, "Tenant name")->required();
    settings(c, *f);
    c->footer(
        "A higher quota or limit takes effect at the next scheduling pass; a lower limit stops "
        "new starts but evicts nothing.");
    bind(c, f, &tenantUpdate, rc);
  }
  {
    auto f = std::make_shared<TenantFlags>();
    CLI::App* c = tenant->add_subcommand("list", "List tenants");
    addCommonFlags(c, f->common, admin);
    bind(c, f, &tenantList, rc);
  }
  {
    auto f = std::make_shared<TenantFlags>();
    CLI::App* c = tenant->add_subcommand("show", "Show a tenant's quota, limit and weights");
    addCommonFlags(c, f->common, admin);
    c->add_option("NAME", f->name, "Tenant name")->required();
    bind(c, f, &tenantShow, rc);
  }
  {
    auto f = std::make_shared<TenantFlags>();
    CLI::App* c = tenant->add_subcommand(
        "delete", "Delete a tenant (once none of its workloads is pending or running)");
    addCommonFlags(c, f->common, admin);
    c->add_option("NAME", f->name, "Tenant name")->required();
    bind(c, f, &tenantDelete, rc);
  }
}

void addTokenCommands(CLI::App& app, int* rc) {
  CLI::App* token = app.add_subcommand("token", "Create, look up, renew and revoke tokens");
  token->require_subcommand(1);
  {
    auto f = std::make_shared<TokenFlags>();
    CLI::App* c = token->add_subcommand(
        "create", "Create a token (a child of the calling one); prints its secret once");
    addCommonFlags(c, f->common, {.tenant = false});
    c->add_option("--policy", f->policies,
                  "A policy for the token (repeat, or a,b); none: the token can only look up, "
                  "renew and revoke itself")
        ->delimiter(',');
    c->add_option("--ttl", f->ttl, "Time to live, like 30m, 4h, 7d (default: the server's)");
    c->add_option("--explicit-max-ttl", f->explicit_max_ttl,
                  "Hard limit from now that no renewal passes");
    c->add_flag("--no-renew", f->no_renew, "The token cannot be renewed");
    c->add_option("--display-name", f->display_name, "A name for audit logs");
    c->add_option("--tenant", f->for_tenant,
                  "Create a token of this tenant (admin tokens; the scope otherwise comes from "
                  "$TESSERA_TENANT or the token's own tenant)");
    c->add_option("--role", f->role,
                  "Create it from this token role (`tessera token role write`): the role's "
                  "policies (or --policy, some of them), TTL and cap");
    c->add_option("--period", f->period,
                  "A periodic token: each renewal gives it this long again, with no maximum "
                  "(for service credentials that renew themselves, like 24h)");
    c->add_flag("--orphan", f->orphan,
                "No parent: revoking the calling token does not revoke it (root, or sudo on "
                "auth/token/create)");
    c->add_option("--meta", f->meta, "KEY=VALUE metadata, shown by lookups (repeat)");
    c->footer(
        "Without --role a token gets only policies the calling token has itself. A tenant "
        "admin delegates narrower tokens to its developers with a role: `tessera token role "
        "write dev --allowed-policy dev --token-max-ttl 8h`, then `tessera token create --role "
        "dev`. No token ever gets more power than the one that creates it.");
    bind(c, f, &tokenCreate, rc);
  }
  {
    CLI::App* role = token->add_subcommand(
        "role", "Token roles: which policies and TTLs tokens created from them get");
    role->require_subcommand(1);
    {
      auto f = std::make_shared<TokenFlags>();
      CLI::App* c = role->add_subcommand("write", "Create or replace a token role");
      addCommonFlags(c, f->common);
      c->add_option("NAME", f->role, "Role name (lowercase letters, digits, '-')")->required();
      c->add_option("--allowed-policy", f->allowed_policies,
                    "A policy its tokens may have (repeat, or a,b); each must be within the "
                    "calling token's own power")
          ->delimiter(',')
          ->required();
      c->add_option("--token-ttl", f->token_ttl, "TTL of its tokens, like 1h (default: server's)");
      c->add_option("--token-max-ttl", f->token_max_ttl,
                    "Hard cap of its tokens from issue time, like 8h (default: server's maximum)");
      c->add_flag("--no-renew", f->no_renew, "Its tokens cannot be renewed");
      c->add_option("--token-period", f->period,
                    "Its tokens are periodic with this period, like 24h (service credentials)");
      bind(c, f, &roleWrite, rc);
    }
    {
      auto f = std::make_shared<TokenFlags>();
      CLI::App* c = role->add_subcommand("read", "Show a token role");
      addCommonFlags(c, f->common);
      c->add_option("NAME", f->role, "Role name")->required();
      bind(c, f, &roleRead, rc);
    }
    {
      auto f = std::make_shared<TokenFlags>();
      CLI::App* c = role->add_subcommand("list", "List the scope's token roles");
      addCommonFlags(c, f->common);
      bind(c, f, &roleList, rc);
    }
    {
      auto f = std::make_shared<TokenFlags>();
      CLI::App* c = role->add_subcommand("delete", "Delete a token role");
      addCommonFlags(c, f->common);
      c->add_option("NAME", f->role, "Role name")->required();
      bind(c, f, &roleDelete, rc);
    }
  }
  {
    auto f = std::make_shared<TokenFlags>();
    CLI::App* c = token->add_subcommand(
        "lookup", "Show a token by its accessor, or the calling token without one");
    addCommonFlags(c, f->common);
    c->add_option("ACCESSOR", f->accessor, "The token's accessor (default: this token)");
    bind(c, f, &tokenLookup, rc);
  }
  {
    auto f = std::make_shared<TokenFlags>();
    CLI::App* c = token->add_subcommand(
        "renew", "Extend a token's TTL, by its accessor, or the calling token without one");
    addCommonFlags(c, f->common);
    c->add_option("ACCESSOR", f->accessor, "The token's accessor (default: this token)");
    c->add_option("--increment", f->increment,
                  "New TTL from now, like 1h (default: the token's own TTL)");
    bind(c, f, &tokenRenew, rc);
  }
  {
    auto f = std::make_shared<TokenFlags>();
    CLI::App* c = token->add_subcommand(
        "revoke", "Revoke a token by its accessor (or --self), and every token created from it");
    addCommonFlags(c, f->common);
    c->add_option("ACCESSOR", f->accessor, "The token's accessor");
    c->add_flag("--self", f->self, "Revoke the calling token");
    bind(c, f, &tokenRevoke, rc);
  }
}

void addPolicyCommands(CLI::App& app, int* rc) {
  CLI::App* policy = app.add_subcommand(
      "policy", "Write, read, list and delete ACL policies (a tenant's, or the admin's)");
  policy->require_subcommand(1);
  {
    auto f = std::make_shared<PolicyFlags>();
    CLI::App* c = policy->add_subcommand("write", "Create or replace a policy from a file");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Policy name")->required();
    c->add_option("FILE", f->file, "The policy in HCL (.hcl) or JSON (.json); `-`: stdin")
        ->required();
    bind(c, f, &policyWrite, rc);
  }
  {
    auto f = std::make_shared<PolicyFlags>();
    CLI::App* c = policy->add_subcommand("read", "Show a policy (as HCL)");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Policy name")->required();
    bind(c, f, &policyRead, rc);
  }
  {
    auto f = std::make_shared<PolicyFlags>();
    CLI::App* c = policy->add_subcommand("list", "List policies");
    addCommonFlags(c, f->common);
    bind(c, f, &policyList, rc);
  }
  {
    auto f = std::make_shared<PolicyFlags>();
    CLI::App* c = policy->add_subcommand("delete", "Delete a policy");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Policy name")->required();
    bind(c, f, &policyDelete, rc);
  }
}

void addRun(CLI::App& app, int* rc) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* c = app.add_subcommand(
      "run", "Submit a workload: NAME [flags] [-f FILE] [-- COMMAND ARGS...]; prints its phase");
  addCommonFlags(c, f->common);
  c->add_option("NAME", f->name, "Workload name (lowercase letters, digits, '-')")->required();
  c->add_option("COMMAND", f->command, "The command a task runs, after `--`");
  c->add_option("-f,--file", f->file,
                "The workload spec (.json or .hcl, as the API body); flags override it");
  RunFlags* r = f.get();
  auto flag = [r](CLI::Option* opt, std::function<void(json&)> apply) {
    r->overrides.emplace_back(opt, std::move(apply));
  };
  flag(r->gpus_opt =
           c->add_option("--gpus", r->gpus,
                         "GPUs per task: whole (2), or a fraction of one GPU (0.5, as Run:ai's "
                         "--gpu 0.5; the same as --gpu-milli 500)"),
       [r](json& b) {
         auto g = parseGpus(r->gpus);  // Checked in run() before any override applies.
         if (g.isOk() && g->milli > 0) {
           b["gpu"]["milli"] = g->milli;
         } else if (g.isOk()) {
           b["gpu"]["count"] = g->count;
         }
       });
  flag(c->add_option("--image", r->image,
                     "Run each task in a container of this image: a registry's "
                     "(registry.example/team/trainer:2.4, nvcr.io/nvidia/pytorch@sha256:...), "
                     "oci:/path[:tag] (an OCI layout on the node) or oci-archive:/path.tar"),
       [r](json& b) { b["image"] = r->image; });
  flag(c->add_option("--pull-secret", r->pull_secret,
                     "With a registry --image: the tenant's KV secret to pull it with (Docker's "
                     "config.json, or username and password; pullSecret in a spec)"),
       [r](json& b) { b["pullSecret"] = r->pull_secret; });
  flag(c->add_option("--port", r->ports,
                     "A port on its node for each task, by name (repeat, or a,b): "
                     "TESSERA_PORT_<NAME> in its environment; a workload of several tasks also "
                     "gets \"master\" (MASTER_PORT)")
           ->delimiter(','),
       [r](json& b) { b["ports"] = r->ports; });
  flag(c->add_option("--retries", r->retries,
                     "When a task fails, start the whole workload over, up to N times "
                     "(restart.attempts; then it fails, saying after how many attempts)")
           ->check(CLI::Range(0, 1000)),
       [r](json& b) { b["restart"]["attempts"] = r->retries; });
  flag(c->add_option("--retry-delay", r->retry_delay_s,
                     "Seconds between a failure and the next attempt (restart.delay; default 0)")
           ->check(CLI::Range(0, 3600)),
       [r](json& b) { b["restart"]["delay"] = r->retry_delay_s; });
  flag(c->add_option("--retry-max-delay", r->retry_max_delay_s,
                     "Back off: the delay doubles after each failure up to this many seconds "
                     "(restart.maxDelay; needs --retry-delay; Kubernetes' Job controller: 10 "
                     "doubling to 360)")
           ->check(CLI::Range(0, 3600)),
       [r](json& b) { b["restart"]["maxDelay"] = r->retry_max_delay_s; });
  flag(c->add_option("--shm-mib", r->shm_mib, "With --image: the size of /dev/shm, MiB"),
       [r](json& b) { b["shmMiB"] = r->shm_mib; });
  flag(c->add_flag("--read-only-rootfs", r->read_only_rootfs,
                   "With --image: the container's root filesystem is read-only"),
       [r](json& b) { b["readOnlyRootfs"] = r->read_only_rootfs; });
  flag(c->add_option("--gpu-milli", r->gpu_milli, "Share of each GPU, 1-1000 (1000: whole)"),
       [r](json& b) { b["gpu"]["milli"] = r->gpu_milli; });
  flag(c->add_option("--gpu-milli-limit", r->gpu_milli_limit,
                     "Burst limit of a time-sliced share (with --isolation none): GPU time it "
                     "may use, up to 1000, while no other share is guaranteed it"),
       [r](json& b) { b["gpu"]["milliLimit"] = r->gpu_milli_limit; });
  flag(c->add_option("--gpu-memory-mib", r->gpu_memory_mib, "GPU memory per GPU, MiB"),
       [r](json& b) { b["gpu"]["memoryMiB"] = r->gpu_memory_mib; });
  flag(c->add_option("--mig", r->mig, "MIG profile, like 3g.40gb"),
       [r](json& b) { b["gpu"]["mig"] = r->mig; });
  flag(c->add_option("--model", r->models, "Acceptable GPU model (repeat, or a,b)")->delimiter(','),
       [r](json& b) { b["gpu"]["models"] = r->models; });
  flag(c->add_option("--isolation", r->isolation, "hardware, process or none")
           ->check(CLI::IsMember({"hardware", "process", "none"})),
       [r](json& b) { b["gpu"]["isolation"] = r->isolation; });
  flag(c->add_option("--tasks", r->tasks, "Tasks (default 1)"),
       [r](json& b) { b["tasks"] = r->tasks; });
  flag(c->add_option("--min-available", r->min_available,
                     "Tasks that must start together (gang; default: all)"),
       [r](json& b) { b["minAvailable"] = r->min_available; });
  flag(c->add_option("--cpu-milli", r->cpu_milli, "CPU per task, thousandths of a core"),
       [r](json& b) { b["cpuMilli"] = r->cpu_milli; });
  flag(c->add_option("--memory-mib", r->memory_mib, "Memory per task, MiB"),
       [r](json& b) { b["memoryMiB"] = r->memory_mib; });
  flag(c->add_option("--priority", r->priority, "Priority within the tenant"),
       [r](json& b) { b["priority"] = r->priority; });
  flag(c->add_flag("--no-preempt", r->no_preempt, "Never preempt it"),
       [](json& b) { b["preemptible"] = false; });
  flag(c->add_option("--duration", r->duration,
                     "Seconds each task runs on simulated nodes (0: until cancelled)"),
       [r](json& b) { b["duration"] = r->duration; });
  flag(c->add_option("--queue", r->queue, "The tenant's queue (a team's; default: default)"),
       [r](json& b) { b["queue"] = r->queue; });
  flag(c->add_option("--node-selector", r->node_selector,
                     "Run only on nodes with this label, KEY=VALUE (repeat, or a,b): "
                     "pool=team-1")
           ->delimiter(','),
       [r](json& b) {
         for (const std::string& l : r->node_selector) {
           const size_t eq = l.find('=');
           b["nodeSelector"][l.substr(0, eq)] = eq == std::string::npos ? "" : l.substr(eq + 1);
         }
       });
  flag(c->add_option("--secret-kv", r->secret_kv,
                     "A KV secret each task gets in $TESSERA_SECRETS_FILE (repeat, or a,b)")
           ->delimiter(','),
       [r](json& b) { b["secrets"]["kv"] = r->secret_kv; });
  flag(c->add_option("--secret-db", r->secret_db,
                     "A database role each task gets a credential of, revoked when the task "
                     "ends (repeat, or a,b)")
           ->delimiter(','),
       [r](json& b) { b["secrets"]["db"] = r->secret_db; });
  flag(c->add_option("--env", r->env,
                     "An environment variable of each task, NAME=VALUE (repeat); names that "
                     "look secret are sealed (docs/server.md)"),
       [r](json& b) {
         for (const std::string& kv : r->env) {
           const size_t eq = kv.find('=');
           b["env"][kv.substr(0, eq)] = kv.substr(eq + 1);
         }
       });
  flag(c->add_option("--identity-audience", r->identity_audiences,
                     "An audience of the task's workload identity token, like "
                     "sts.amazonaws.com (repeat, or a,b; default: tessera)")
           ->delimiter(','),
       [r](json& b) { b["identity"]["audiences"] = r->identity_audiences; });
  c->add_flag("--wait", r->wait,
              "Follow the workload until it runs or ends, printing each phase change; exit 0 "
              "when running or succeeded, 1 with the reason when it failed or was cancelled");
  c->add_option("--wait-timeout", r->wait_timeout_s,
                "With --wait: give up (exit 1) after this many seconds; 0: never")
      ->capture_default_str();
  c->add_option("--interval", r->interval_s, "With --wait: seconds between polls")
      ->capture_default_str();
  c->footer(
      "Flags that take several values take one each time they are given (--secret-kv a "
      "--secret-kv b) or a comma list (--secret-kv a,b); everything after `--` is the "
      "command: tessera run train --secret-kv app/config -- sh -c 'echo hi'");
  bind(c, f, &run, rc);
}

void addWorkloadCommands(CLI::App& app, int* rc) {
  {
    auto f = std::make_shared<WorkloadFlags>();
    CLI::App* c =
        app.add_subcommand("ps", "List the tenant's workloads (one request): phase, tasks, reason");
    addCommonFlags(c, f->common);
    c->add_option("--phase", f->phase, "Only workloads in this phase")
        ->check(CLI::IsMember(std::vector<std::string>(std::begin(kPhases), std::end(kPhases))));
    c->add_flag("-A,--all-tenants", f->all_tenants,
                "Every tenant's workloads, with a TENANT column (an operator's token)");
    bind(c, f, &ps, rc);
  }
  {
    auto f = std::make_shared<WorkloadFlags>();
    CLI::App* c = app.add_subcommand(
        "show", "Show a workload: spec, phase, each task's node and GPUs, events");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Workload name")->required();
    bind(c, f, &show, rc);
  }
  {
    auto f = std::make_shared<LogsFlags>();
    CLI::App* c = app.add_subcommand(
        "logs", "Print a task's output (from its node's agent); -f follows while it runs");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Workload name")->required();
    c->add_option("--task", f->task, "Task index in the workload")->capture_default_str();
    c->add_flag("--stderr", f->stderr_stream, "Standard error instead of standard output");
    c->add_flag("-f,--follow", f->follow, "Keep printing new output until the workload ends");
    c->add_option("--interval", f->interval_s, "Seconds between polls with -f")
        ->capture_default_str();
    c->add_option("-n,--tail", f->tail, "Only the last N lines (then follow them with -f)")
        ->check(CLI::NonNegativeNumber);
    c->footer(
        "Tasks on simulated nodes keep no logs. A task placed again after its node was lost "
        "shows the log of its current node.");
    bind(c, f, &logs, rc);
  }
  {
    auto f = std::make_shared<WorkloadFlags>();
    CLI::App* c = app.add_subcommand("cancel", "Cancel a workload");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Workload name")->required();
    bind(c, f, &cancel, rc);
  }
  for (const bool suspend : {true, false}) {
    auto f = std::make_shared<WorkloadFlags>();
    CLI::App* c = app.add_subcommand(
        suspend ? "suspend" : "resume",
        suspend ? "Suspend a workload: its running tasks stop (with their grace period), those "
                  "that finished stay done, and none starts until it is resumed"
                : "Resume a suspended workload: its tasks left to run are placed again");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Workload name")->required();
    c->callback([f, rc, suspend] { *rc = finish(suspendOrResume(*f, suspend)); });
  }
  {
    auto f = std::make_shared<WorkloadFlags>();
    CLI::App* c = app.add_subcommand(
        "nodes",
        "List nodes: STATE (ready, waiting, lost; cordoned), GPUs by model, GPUs ALLOCATED of "
        "all, CPU, memory");
    addCommonFlags(c, f->common);
    c->add_flag("--gpus", f->per_gpu,
                "One row per GPU: how much is allocated, and to which tasks (an operator sees "
                "every tenant's; a tenant its own)");
    bind(c, f, &nodes, rc);
  }
  {
    auto f = std::make_shared<WorkloadFlags>();
    CLI::App* c =
        app.add_subcommand("top", "Per queue: GPUs allocated, fair share, quota and pending");
    addCommonFlags(c, f->common);
    c->add_option("-w,--watch", f->watch_s,
                  "Show a new frame every N seconds until interrupted (Ctrl-C)");
    bind(c, f, &top, rc);
  }
}

}  // namespace

void addAuditTail(CLI::App& audit, int* rc) {
  auto f = std::make_shared<AuditTailFlags>();
  CLI::App* c = audit.add_subcommand(
      "tail", "Show the tenant's latest audit records from the server; -f keeps following");
  addCommonFlags(c, f->common);
  c->add_option("-n,--lines", f->lines, "How many of the latest records")->capture_default_str();
  c->add_flag("-f,--follow", f->follow, "Keep polling and print new records as they come");
  c->add_option("--interval", f->interval_s, "Seconds between polls with -f")
      ->capture_default_str();
  c->footer(
      "Columns: seq, time, type (request/response), actor (the token's display name, else "
      "the start of its accessor, HMAC'd), method and path, status, error, request id. "
      "-format=json prints each record as the log holds it (JSON lines, with hash and "
      "prev_hash). A tenant sees only its own records; the tail's own polls are skipped while "
      "following.");
  bind(c, f, &auditTail, rc);
}

void addQueueCommands(CLI::App& app, int* rc) {
  CLI::App* queue = app.add_subcommand(
      "queue", "A tenant's queues: one per team, each with its quota, limit and weight");
  queue->require_subcommand(1);
  auto settings = [](CLI::App* c, QueueFlags& f) {
    c->add_option("NAME", f.name, "Queue name (lowercase letters, digits, '-')")->required();
    f.queue.addFlags(c, "GPUs guaranteed to this queue",
                     "Share of the tenant's surplus (default 1)",
                     "Served first among the tenant's queues (default 100)");
  };
  {
    auto f = std::make_shared<QueueFlags>();
    CLI::App* c = queue->add_subcommand("create", "Create a queue in the tenant");
    addCommonFlags(c, f->common);
    settings(c, *f);
    c->footer(
        "The tenant's share of the cluster is divided among its queues: quotas first, then the "
        "rest by weight (docs/fairness.md). Workloads go to a queue with `tessera run NAME "
        "--queue Q`; without it, to `default`, which follows the tenant's own quota and limit.");
    bind(c, f, &queueCreate, rc);
  }
  {
    auto f = std::make_shared<QueueFlags>();
    CLI::App* c = queue->add_subcommand("update", "Change a queue's settings; the rest stays");
    addCommonFlags(c, f->common);
    settings(c, *f);
    bind(c, f, &queueUpdate, rc);
  }
  {
    auto f = std::make_shared<QueueFlags>();
    CLI::App* c = queue->add_subcommand("delete", "Delete a queue that has no unfinished work");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Queue name")->required();
    c->footer(
        "Refused while the queue has pending or running workloads: cancel them first (`tessera "
        "ps`, `tessera cancel`). Finished workloads keep their records. The default queue lives "
        "as long as its tenant.");
    bind(c, f, &queueDelete, rc);
  }
  {
    auto f = std::make_shared<QueueFlags>();
    CLI::App* c = queue->add_subcommand("show", "Show a queue's quota, limit, weight, priority");
    addCommonFlags(c, f->common);
    c->add_option("NAME", f->name, "Queue name")->required();
    bind(c, f, &queueShow, rc);
  }
  {
    auto f = std::make_shared<WorkloadFlags>();
    CLI::App* c = queue->add_subcommand(
        "list", "The tenant's queues: GPUs allocated, fair share, quota, pending (as top)");
    addCommonFlags(c, f->common);
    bind(c, f, &top, rc);
  }
}

void addClientCommands(CLI::App& app, int* rc) {
  addLogin(app, rc);
  addTenantCommands(app, rc);
  addTokenCommands(app, rc);
  addPolicyCommands(app, rc);
  addRun(app, rc);
  addWorkloadCommands(app, rc);
  addQueueCommands(app, rc);
  addNodeCommands(app, rc);
  addKubeconfigCommand(app, rc);
}

}  // namespace tessera::cli
