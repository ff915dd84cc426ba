// ACL policies: which capabilities a token has on an API path, with Vault's policy language.
//
//   auto p = Policy::fromJson("readers", json::parse(R"({"path": {
//       "workloads/*": {"capabilities": ["read", "list"]},
//       "workloads/secret-*": {"capabilities": ["deny"]}}})"));
//   Capabilities c = resolve({&*p}, "workloads/train-1");   // read | list
//   bool ok = c.allows(Capability::kRead);
//
// Semantics (Vault's, docs/server.md):
//   - Deny by default. `deny` overrides every other capability, `sudo` included.
//   - Patterns: an exact path matches itself only; a trailing `*` (only as the last character)
//     is a prefix glob ("workloads/a-*" matches "workloads/a-b/events"); `+` as a whole segment
//     matches exactly one non-empty path segment. A leading `/` is dropped, as Vault does.
//   - Of all patterns that match, only the most specific applies (Vault's five-rule order,
//     `morePrecise`); the same pattern in several policies gives the union of their
//     capabilities and parameter constraints (merged as Vault merges them).
//   - A path ending in `/` (a LIST, or a request that ended in `/`) is checked as it is, and
//     also without the `/`, as Vault does for LIST: the most specific rule granting `list` wins
//     unless a more specific one denies.
//   - The old `policy = "read|write|sudo|deny"` form becomes capabilities exactly as Vault's
//     parsePaths does; `allowed_parameters`, `denied_parameters`, `required_parameters`,
//     `min_wrapping_ttl` and `max_wrapping_ttl` are Vault's (`allowsRequest`).
// Paths are relative to the scope the policy lives in: a tenant's policies are evaluated on the
// path inside that tenant ("workloads/x", not "tenants/t/workloads/x"), so no tenant policy can
// name anything outside its tenant. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::server {

enum class Capability : uint16_t {
  kCreate = 1 << 0,
  kRead = 1 << 1,
  kUpdate = 1 << 2,
  kPatch = 1 << 3,
  kDelete = 1 << 4,
  kList = 1 << 5,
  kSudo = 1 << 6,
  kDeny = 1 << 7,
  // Vault's, for its snapshot-recovery operations; accepted so that policies load, but no
  // Tessera route asks for it.
  kRecover = 1 << 8,
};

// A set of capabilities.
struct Capabilities {
  uint16_t bits = 0;

  bool allows(Capability c) const {
    return (bits & static_cast<uint16_t>(Capability::kDeny)) == 0 &&
           (bits & static_cast<uint16_t>(c)) != 0;
  }
  void add(Capability c) { bits |= static_cast<uint16_t>(c); }
  bool operator==(const Capabilities&) const = default;
  // "create, read" style, for errors and `token capabilities`.
  std::vector<std::string> names() const;
};

// Parses a capability name ("read"); errors name the bad value.
core::Result<Capability> parseCapability(std::string_view name);

// Vault's per-path request constraints. Parameter names are kept lowercased, as Vault does.
struct Constraints {
  nlohmann::json allowed_parameters;  // Null: none; else {name: [values]}, `*` for any name.
  nlohmann::json denied_parameters;   // The same shape.
  std::vector<std::string> required_parameters;
  int64_t min_wrapping_ttl = 0;  // Seconds; 0: none.
  int64_t max_wrapping_ttl = 0;

  bool empty() const {
    return allowed_parameters.is_null() && denied_parameters.is_null() &&
           required_parameters.empty() && min_wrapping_ttl == 0 && max_wrapping_ttl == 0;
  }
  bool operator==(const Constraints&) const = default;
  // Adds `o`'s constraints the way Vault merges the same path from several policies.
  void merge(const Constraints& o);
};

struct PathRule {
  std::string pattern;
  Capabilities capabilities;
  Constraints constraints;
};

// What the rule that decides a path gives: its capabilities and constraints.
struct Permissions {
  Capabilities capabilities;
  Constraints constraints;
};

struct Policy {
  std::string name;
  std::vector<PathRule> rules;

  // From the JSON form of `path "<pattern>" { capabilities = [...] }`: {"path": {pattern:
  // {"capabilities": [...]}}}; each level may also be an array of such objects (the shape of
  // repeated HCL blocks). Vault's other fields are accepted: a top-level `name` (the name the
  // policy is written under wins, as in Vault), and per path `comment`, `policy` (the old
  // form), the parameter constraints and the wrapping TTLs. Errors name the policy, the pattern
  // and the field.
  static core::Result<Policy> fromJson(std::string name, const nlohmann::json& j);
  // From policy text as Vault's API takes it: HCL, or JSON when it starts with `{`.
  static core::Result<Policy> fromText(std::string name, std::string_view text);
  nlohmann::json toJson() const;
};

// Whether `pattern` matches `path` (both without a leading slash).
bool globMatch(std::string_view pattern, std::string_view path);

// Whether pattern `a` takes precedence over pattern `b` when both match a path (Vault's order:
// later first wildcard, no trailing `*`, fewer `+` segments, longer, lexicographically larger).
bool morePrecise(std::string_view a, std::string_view b);

// What `policies` give on `path`. A null entry is skipped.
Permissions resolvePermissions(const std::vector<const Policy*>& policies, std::string_view path);
// Just the capabilities.
Capabilities resolve(const std::vector<const Policy*>& policies, std::string_view path);

// Vault's AllowOperation: whether `p` allows an operation that needs `needed` with the request
// parameters `data` (an object: a write's body, a read's query; null or empty: none). Beyond the
// capability: a path with a wrapping TTL needs a wrapped request, which Tessera never has, so it
// refuses everything there; for read, create, update and patch, every required parameter must be
// present, no parameter may have a denied value, and with allowed parameters every parameter
// must be allowed with an allowed value (`*` as a name allows any name; a value `"a*"`,
// `"*a"` or `"*a*"` is a glob; an empty list allows any value; a list value must have every
// element allowed, and any denied element denies it).
bool allowsRequest(const Permissions& p, Capability needed, const nlohmann::json& data);

// The parameters `allowsRequest` checks, as Vault's request data: a read's query parameters,
// a create's, update's or patch's body, nothing for the other operations.
nlohmann::json requestParameters(Capability needed, const nlohmann::json& body,
                                 const std::map<std::string, std::string>& query);

// Policy names: 1-128 of lowercase letters, digits, `-`, `_` and `.`, starting with a letter,
// digit or `_` (Vault's names, lowercased).
bool validPolicyName(std::string_view name);

// Whether a token holding `holder` has at least the power `candidate` gives: every capability
// any rule of `candidate` gives on any path, `holder` gives on that path too (token roles, docs/
// server.md "Token roles"). Conservative where patterns overlap in ways it cannot decide
// cheaply: then it says no. Returns OK, or PERMISSION_DENIED naming the first rule that goes
// beyond the holder's power.
core::Status checkWithinPower(const std::vector<const Policy*>& holder, const Policy& candidate);

// Checks a pattern's syntax (after a leading slash is dropped): non-empty, `*` only at the end,
// `+` only as a whole segment, no `+*`.
core::Status validatePattern(std::string_view pattern);

}  // namespace tessera::server
