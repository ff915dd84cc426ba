#include "server/acl.h"

#include <algorithm>
#include <array>
#include <map>
#include <utility>

namespace tessera::server {
namespace {

constexpr std::array<std::pair<std::string_view, Capability>, 8> kNames = {{
    {"create", Capability::kCreate},
    {"read", Capability::kRead},
    {"update", Capability::kUpdate},
    {"patch", Capability::kPatch},
    {"delete", Capability::kDelete},
    {"list", Capability::kList},
    {"sudo", Capability::kSudo},
    {"deny", Capability::kDeny},
}};

bool isSegmentPlus(std::string_view p, size_t i) {
  return p[i] == '+' && (i == 0 || p[i - 1] == '/') && (i + 1 == p.size() || p[i + 1] == '/');
}

size_t firstWildcard(std::string_view p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if ((p[i] == '*' && i + 1 == p.size()) || isSegmentPlus(p, i)) {
      return i;
    }
  }
  return p.size();
}

size_t plusSegments(std::string_view p) {
  size_t n = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    n += isSegmentPlus(p, i) ? 1 : 0;
  }
  return n;
}

// Each level of the policy JSON may be an object or an array of objects (repeated HCL blocks).
template <typename F>
core::Status forEachObject(const nlohmann::json& j, const std::string& where, F&& f) {
  if (j.is_object()) {
    return f(j);
  }
  if (j.is_array()) {
    for (const nlohmann::json& e : j) {
      if (!e.is_object()) {
        return core::invalidArgument(where + ": expected an object");
      }
      TESSERA_RETURN_IF_ERROR(f(e));
    }
    return core::Status::ok();
  }
  return core::invalidArgument(where + ": expected an object");
}

}  // namespace

std::vector<std::string> Capabilities::names() const {
  std::vector<std::string> out;
  for (const auto& [name, c] : kNames) {
    if ((bits & static_cast<uint8_t>(c)) != 0) {
      out.emplace_back(name);
    }
  }
  return out;
}

core::Result<Capability> parseCapability(std::string_view name) {
  for (const auto& [n, c] : kNames) {
    if (n == name) {
      return c;
    }
  }
  return core::invalidArgument("unknown capability '" + std::string(name) +
                               "' (expected create, read, update, patch, delete, list, sudo or "
                               "deny)");
}

core::Status validatePattern(std::string_view p) {
  if (p.empty()) {
    return core::invalidArgument("empty path pattern");
  }
  if (p.front() == '/') {
    return core::invalidArgument("path pattern '" + std::string(p) + "' must not start with '/'");
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '*' && i + 1 != p.size()) {
      return core::invalidArgument("path pattern '" + std::string(p) +
                                   "': '*' is allowed only as the last character");
    }
    if (p[i] == '+' && !isSegmentPlus(p, i)) {
      return core::invalidArgument("path pattern '" + std::string(p) +
                                   "': '+' must be a whole path segment");
    }
  }
  return core::Status::ok();
}

bool globMatch(std::string_view pat, std::string_view path) {
  size_t i = 0;
  size_t j = 0;
  while (i < pat.size()) {
    if (pat[i] == '*' && i + 1 == pat.size()) {
      return true;  // The rest of the path, whatever it is.
    }
    if (isSegmentPlus(pat, i)) {
      size_t end = path.find('/', j);
      if (end == std::string_view::npos) {
        end = path.size();
      }
      if (end == j) {
        return false;  // An empty segment is not a segment.
      }
      j = end;
      ++i;
      continue;
    }
    if (j >= path.size() || path[j] != pat[i]) {
      return false;
    }
    ++i;
    ++j;
  }
  return j == path.size();
}

bool morePrecise(std::string_view a, std::string_view b) {
  const size_t wa = firstWildcard(a);
  const size_t wb = firstWildcard(b);
  if (wa != wb) {
    return wa > wb;  // A later first wildcard is more precise.
  }
  const bool sa = !a.empty() && a.back() == '*';
  const bool sb = !b.empty() && b.back() == '*';
  if (sa != sb) {
    return !sa;
  }
  const size_t pa = plusSegments(a);
  const size_t pb = plusSegments(b);
  if (pa != pb) {
    return pa < pb;
  }
  if (a.size() != b.size()) {
    return a.size() > b.size();
  }
  return a > b;
}

Capabilities resolve(const std::vector<const Policy*>& policies, std::string_view path) {
  const std::string* best = nullptr;
  for (const Policy* p : policies) {
    if (p == nullptr) {
      continue;
    }
    for (const PathRule& r : p->rules) {
      if (globMatch(r.pattern, path) && (best == nullptr || morePrecise(r.pattern, *best))) {
        best = &r.pattern;
      }
    }
  }
  Capabilities out;
  if (best == nullptr) {
    return out;  // Deny by default.
  }
  for (const Policy* p : policies) {
    if (p == nullptr) {
      continue;
    }
    for (const PathRule& r : p->rules) {
      if (r.pattern == *best) {
        out.bits |= r.capabilities.bits;
      }
    }
  }
  if (out.bits & static_cast<uint8_t>(Capability::kDeny)) {
    out.bits = static_cast<uint8_t>(Capability::kDeny);  // Deny wins over everything.
  }
  return out;
}

core::Result<Policy> Policy::fromJson(std::string name, const nlohmann::json& j) {
  Policy policy;
  policy.name = std::move(name);
  const std::string where = "policy '" + policy.name + "'";
  if (!j.is_object() || !j.contains("path")) {
    return core::invalidArgument(where + ": expected {\"path\": {\"<pattern>\": {...}}}");
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "path") {
      return core::invalidArgument(where + ": unknown field '" + key + "'");
    }
  }
  TESSERA_RETURN_IF_ERROR(
      forEachObject(j["path"], where + ": path", [&](const nlohmann::json& paths) {
        for (const auto& [pattern, body] : paths.items()) {
          const std::string at = where + ": path \"" + pattern + "\"";
          TESSERA_RETURN_IF_ERROR(validatePattern(pattern).withContext(where));
          PathRule rule;
          rule.pattern = pattern;
          TESSERA_RETURN_IF_ERROR(forEachObject(body, at, [&](const nlohmann::json& fields) {
            for (const auto& [field, v] : fields.items()) {
              if (field != "capabilities") {
                return core::invalidArgument(at + ": unknown field '" + field + "'");
              }
              if (!v.is_array()) {
                return core::invalidArgument(at + ": capabilities must be a list of strings");
              }
              for (const nlohmann::json& c : v) {
                if (!c.is_string()) {
                  return core::invalidArgument(at + ": capabilities must be a list of strings");
                }
                auto cap = parseCapability(c.get<std::string>());
                if (!cap.isOk()) {
                  return cap.status().withContext(at);
                }
                rule.capabilities.add(*cap);
              }
            }
            return core::Status::ok();
          }));
          policy.rules.push_back(std::move(rule));
        }
        return core::Status::ok();
      }));
  return policy;
}

nlohmann::json Policy::toJson() const {
  nlohmann::json paths = nlohmann::json::object();
  for (const PathRule& r : rules) {
    nlohmann::json& caps = paths[r.pattern]["capabilities"];
    if (!caps.is_array()) {
      caps = nlohmann::json::array();
    }
    for (const std::string& n : r.capabilities.names()) {
      caps.push_back(n);
    }
  }
  return {{"path", paths}};
}

namespace {

// The pattern up to its first wildcard: every path it matches starts with it.
std::string_view literalPrefix(std::string_view pattern) {
  const size_t w = pattern.find_first_of("*+");
  return pattern.substr(0, w == std::string_view::npos ? pattern.size() : w);
}

// Whether every path `inner` matches, `outer` matches too. A `+` of `inner`, read literally,
// is matched only by a `+` or a `*` of `outer`, which match any segment; a trailing `*` of
// `inner` needs a trailing `*` of `outer` that already matches what comes before it.
bool containsPattern(std::string_view outer, std::string_view inner) {
  if (outer == inner) {
    return true;
  }
  if (!inner.empty() && inner.back() == '*') {
    return !outer.empty() && outer.back() == '*' &&
           globMatch(outer, inner.substr(0, inner.size() - 1));
  }
  return globMatch(outer, inner);
}

// Whether some path may match both: unless their literal prefixes part, assume so.
bool mayOverlap(std::string_view a, std::string_view b) {
  const std::string_view pa = literalPrefix(a);
  const std::string_view pb = literalPrefix(b);
  const size_t n = std::min(pa.size(), pb.size());
  if (pa.substr(0, n) != pb.substr(0, n)) {
    return false;
  }
  // Two wildcard-free patterns overlap only when equal.
  return (pa.size() != a.size() || pb.size() != b.size()) || a == b;
}

uint8_t effective(uint8_t bits) {
  return (bits & static_cast<uint8_t>(Capability::kDeny)) != 0 ? 0 : bits;
}

}  // namespace

core::Status checkWithinPower(const std::vector<const Policy*>& holder, const Policy& candidate) {
  std::map<std::string, uint8_t> held;  // Pattern -> union of its capabilities.
  for (const Policy* p : holder) {
    if (p == nullptr) {
      continue;
    }
    for (const PathRule& r : p->rules) {
      held[r.pattern] |= r.capabilities.bits;
    }
  }
  for (const PathRule& rule : candidate.rules) {
    const uint8_t needed = effective(rule.capabilities.bits);
    if (needed == 0) {
      continue;  // A deny (or nothing) gives no power.
    }
    auto beyond = [&](const std::string& why) {
      Capabilities c{needed};
      std::string names;
      for (const std::string& n : c.names()) {
        names += (names.empty() ? "" : ", ") + n;
      }
      return core::Status(core::StatusCode::kPermissionDenied,
                          "policy '" + candidate.name + "' gives " + names + " on '" +
                              rule.pattern + "', more than the calling token has: " + why);
    };
    // The most precise held pattern that matches every path of the rule's.
    const std::string* cover = nullptr;
    for (const auto& [pattern, bits] : held) {
      if (containsPattern(pattern, rule.pattern) &&
          (cover == nullptr || morePrecise(pattern, *cover))) {
        cover = &pattern;
      }
    }
    if (cover == nullptr) {
      return beyond("no rule of its policies covers all those paths");
    }
    if ((effective(held[*cover]) & needed) != needed) {
      return beyond("its rule '" + *cover + "' gives less there");
    }
    // A more precise held pattern decides the paths it matches: it must give as much.
    for (const auto& [pattern, bits] : held) {
      if (pattern != *cover && morePrecise(pattern, *cover) && mayOverlap(pattern, rule.pattern) &&
          (effective(bits) & needed) != needed) {
        return beyond("its rule '" + pattern + "' gives less on some of those paths");
      }
    }
  }
  return core::Status::ok();
}

}  // namespace tessera::server
