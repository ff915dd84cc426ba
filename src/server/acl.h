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
//     matches exactly one non-empty path segment.
//   - Of all patterns that match, only the most specific applies (Vault's five-rule order,
//     `morePrecise`); the same pattern in several policies gives the union of their
//     capabilities.
// Paths are relative to the scope the policy lives in: a tenant's policies are evaluated on the
// path inside that tenant ("workloads/x", not "tenants/t/workloads/x"), so no tenant policy can
// name anything outside its tenant. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::server {

enum class Capability : uint8_t {
  kCreate = 1 << 0,
  kRead = 1 << 1,
  kUpdate = 1 << 2,
  kPatch = 1 << 3,
  kDelete = 1 << 4,
  kList = 1 << 5,
  kSudo = 1 << 6,
  kDeny = 1 << 7,
};

// A set of capabilities.
struct Capabilities {
  uint8_t bits = 0;

  bool allows(Capability c) const {
    return (bits & static_cast<uint8_t>(Capability::kDeny)) == 0 &&
           (bits & static_cast<uint8_t>(c)) != 0;
  }
  void add(Capability c) { bits |= static_cast<uint8_t>(c); }
  bool operator==(const Capabilities&) const = default;
  // "create, read" style, for errors and `token capabilities`.
  std::vector<std::string> names() const;
};

// Parses a capability name ("read"); errors name the bad value.
core::Result<Capability> parseCapability(std::string_view name);

struct PathRule {
  std::string pattern;
  Capabilities capabilities;
};

struct Policy {
  std::string name;
  std::vector<PathRule> rules;

  // From the JSON form of `path "<pattern>" { capabilities = [...] }`: {"path": {pattern:
  // {"capabilities": [...]}}}; each level may also be an array of such objects (the shape of
  // repeated HCL blocks). Errors name the policy, the pattern and the field.
  static core::Result<Policy> fromJson(std::string name, const nlohmann::json& j);
  nlohmann::json toJson() const;
};

// Whether `pattern` matches `path` (both without a leading slash).
bool globMatch(std::string_view pattern, std::string_view path);

// Whether pattern `a` takes precedence over pattern `b` when both match a path (Vault's order:
// later first wildcard, no trailing `*`, fewer `+` segments, longer, lexicographically larger).
bool morePrecise(std::string_view a, std::string_view b);

// The capabilities `policies` give on `path`. A null entry is skipped.
Capabilities resolve(const std::vector<const Policy*>& policies, std::string_view path);

// Whether a token holding `holder` has at least the power `candidate` gives: every capability
// any rule of `candidate` gives on any path, `holder` gives on that path too (token roles, docs/
// server.md "Token roles"). Conservative where patterns overlap in ways it cannot decide
// cheaply: then it says no. Returns OK, or PERMISSION_DENIED naming the first rule that goes
// beyond the holder's power.
core::Status checkWithinPower(const std::vector<const Policy*>& holder, const Policy& candidate);

// Checks a pattern's syntax: non-empty, no leading slash, `*` only at the end, `+` only as a
// whole segment.
core::Status validatePattern(std::string_view pattern);

}  // namespace tessera::server
