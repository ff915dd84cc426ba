#include "server/acl.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <utility>

#include "core/hcl.h"
#include "server/request.h"

namespace tessera::server {
namespace {

constexpr std::array<std::pair<std::string_view, Capability>, 9> kNames = {{
    {"create", Capability::kCreate},
    {"read", Capability::kRead},
    {"update", Capability::kUpdate},
    {"patch", Capability::kPatch},
    {"delete", Capability::kDelete},
    {"list", Capability::kList},
    {"sudo", Capability::kSudo},
    {"deny", Capability::kDeny},
    {"recover", Capability::kRecover},
}};

constexpr uint16_t kDenyBit = static_cast<uint16_t>(Capability::kDeny);

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
    if ((bits & static_cast<uint16_t>(c)) != 0) {
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
                               "' (expected create, read, update, patch, delete, list, sudo, "
                               "recover or deny)");
}

core::Status validatePattern(std::string_view p) {
  if (p.empty()) {
    return core::invalidArgument("empty path pattern");
  }
  if (p.front() == '/') {
    return core::invalidArgument("path pattern '" + std::string(p) +
                                 "' must not start with '/' (a policy's leading '/' is dropped)");
  }
  if (p.find("{{") != std::string_view::npos) {
    // Vault's identity templating needs identity entities, which Tessera does not have; read
    // literally, the pattern would silently match nothing.
    return core::invalidArgument("path pattern '" + std::string(p) +
                                 "': identity templating ({{...}}) is not supported");
  }
  if (p.find("+*") != std::string_view::npos) {
    return core::invalidArgument("path pattern '" + std::string(p) +
                                 "': invalid use of wildcards ('+*' is forbidden)");
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

namespace {

// Vault's merge of two lists of parameter values: an empty list (any value) absorbs the other.
void mergeParameters(nlohmann::json& into, const nlohmann::json& from) {
  if (from.is_null() || from.empty()) {
    return;
  }
  if (into.is_null() || into.empty()) {
    into = from;
    return;
  }
  for (const auto& [key, values] : from.items()) {
    if (!into.contains(key)) {
      into[key] = values;
    } else if (values.empty() || into[key].empty()) {
      into[key] = nlohmann::json::array();
    } else {
      for (const nlohmann::json& v : values) {
        into[key].push_back(v);
      }
    }
  }
}

// strutil.GlobbedStringsMatch: a leading and/or trailing `*` of `item` is a glob.
bool globbedStringsMatch(const std::string& item, const std::string& val) {
  if (item.size() < 2) {
    return item == "*" || item == val;
  }
  const bool pre = item.front() == '*';
  const bool suf = item.back() == '*';
  if (pre && suf) {
    return val.find(item.substr(1, item.size() - 2)) != std::string::npos;
  }
  if (pre) {
    const std::string tail = item.substr(1);
    return val.size() >= tail.size() &&
           val.compare(val.size() - tail.size(), tail.size(), tail) == 0;
  }
  if (suf) {
    const std::string head = item.substr(0, item.size() - 1);
    return val.compare(0, head.size(), head) == 0;
  }
  return item == val;
}

bool valueInParameterList(const nlohmann::json& v, const nlohmann::json& list) {
  for (const nlohmann::json& el : list) {
    if (el.is_string() && v.is_string()) {
      if (globbedStringsMatch(el.get<std::string>(), v.get<std::string>())) {
        return true;
      }
    } else if (el == v) {
      return true;
    }
  }
  return false;
}

// Vault's comma-separated string form of a list ("a,b"), element by element.
std::vector<nlohmann::json> commaElements(const nlohmann::json& v) {
  std::vector<nlohmann::json> out;
  const std::string s = v.get<std::string>();
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    std::string e = s.substr(start, comma - start);
    const size_t b = e.find_first_not_of(" \t");
    const size_t l = e.find_last_not_of(" \t");
    out.emplace_back(b == std::string::npos ? std::string() : e.substr(b, l - b + 1));
    start = comma + 1;
  }
  return out;
}

bool valueInAllowed(const nlohmann::json& v, const nlohmann::json& list) {
  if (list.empty() || valueInParameterList(v, list)) {
    return true;
  }
  if (v.is_array() || v.is_string()) {
    const std::vector<nlohmann::json> elements =
        v.is_array() ? std::vector<nlohmann::json>(v.begin(), v.end()) : commaElements(v);
    return std::all_of(elements.begin(), elements.end(),
                       [&](const nlohmann::json& e) { return valueInParameterList(e, list); });
  }
  return false;
}

bool valueInDenied(const nlohmann::json& v, const nlohmann::json& list) {
  if (list.empty() || valueInParameterList(v, list)) {
    return true;
  }
  if (v.is_array() || v.is_string()) {
    const std::vector<nlohmann::json> elements =
        v.is_array() ? std::vector<nlohmann::json>(v.begin(), v.end()) : commaElements(v);
    return std::any_of(elements.begin(), elements.end(),
                       [&](const nlohmann::json& e) { return valueInParameterList(e, list); });
  }
  return false;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

void Constraints::merge(const Constraints& o) {
  mergeParameters(allowed_parameters, o.allowed_parameters);
  mergeParameters(denied_parameters, o.denied_parameters);
  for (const std::string& r : o.required_parameters) {
    if (std::find(required_parameters.begin(), required_parameters.end(), r) ==
        required_parameters.end()) {
      required_parameters.push_back(r);
    }
  }
  // Vault keeps the lowest minimum and the highest maximum.
  if (o.min_wrapping_ttl > 0 && (min_wrapping_ttl == 0 || o.min_wrapping_ttl < min_wrapping_ttl)) {
    min_wrapping_ttl = o.min_wrapping_ttl;
  }
  if (o.max_wrapping_ttl > 0 && o.max_wrapping_ttl > max_wrapping_ttl) {
    max_wrapping_ttl = o.max_wrapping_ttl;
  }
}

Permissions resolvePermissions(const std::vector<const Policy*>& policies, std::string_view path) {
  // Every matching pattern with what its rules give together.
  std::map<std::string, Permissions> matched;
  const bool slash = !path.empty() && path.back() == '/';
  const std::string_view trimmed = slash ? path.substr(0, path.size() - 1) : path;
  for (const Policy* p : policies) {
    if (p == nullptr) {
      continue;
    }
    for (const PathRule& r : p->rules) {
      if (globMatch(r.pattern, path) || (slash && globMatch(r.pattern, trimmed))) {
        Permissions& m = matched[r.pattern];
        m.capabilities.bits |= r.capabilities.bits;
        m.constraints.merge(r.constraints);
      }
    }
  }
  for (auto& [pattern, m] : matched) {
    if (m.capabilities.bits & kDenyBit) {
      m = Permissions{};
      m.capabilities.bits = kDenyBit;  // Deny wins over everything.
    }
  }
  auto best = [&](auto&& pred) -> const std::string* {
    const std::string* out = nullptr;
    for (const auto& [pattern, m] : matched) {
      if (pred(m) && (out == nullptr || morePrecise(pattern, *out))) {
        out = &pattern;
      }
    }
    return out;
  };
  const std::string* chosen = nullptr;
  if (slash) {
    // Vault's LIST rule (resolveACLPermsForListOp): the most specific rule granting `list`,
    // unless a more specific one denies.
    const std::string* deny =
        best([](const Permissions& m) { return m.capabilities.bits & kDenyBit; });
    const std::string* list =
        best([](const Permissions& m) { return m.capabilities.allows(Capability::kList); });
    if (deny != nullptr && (list == nullptr || morePrecise(*deny, *list))) {
      chosen = deny;
    } else if (list != nullptr) {
      chosen = list;
    }
  }
  if (chosen == nullptr) {
    chosen = best([](const Permissions&) { return true; });
  }
  return chosen == nullptr ? Permissions{} : matched[*chosen];  // Deny by default.
}

Capabilities resolve(const std::vector<const Policy*>& policies, std::string_view path) {
  return resolvePermissions(policies, path).capabilities;
}

bool allowsRequest(const Permissions& p, Capability needed, const nlohmann::json& data) {
  if (!p.capabilities.allows(needed)) {
    return false;
  }
  const Constraints& c = p.constraints;
  if (c.min_wrapping_ttl > 0 || c.max_wrapping_ttl > 0) {
    return false;  // Vault refuses an unwrapped request there; Tessera never wraps.
  }
  if (needed != Capability::kRead && needed != Capability::kCreate &&
      needed != Capability::kUpdate && needed != Capability::kPatch &&
      needed != Capability::kRecover) {
    return true;
  }
  std::map<std::string, const nlohmann::json*> params;
  if (data.is_object()) {
    for (const auto& [k, v] : data.items()) {
      params[lower(k)] = &v;
    }
  }
  for (const std::string& r : c.required_parameters) {
    if (!params.contains(lower(r))) {
      return false;
    }
  }
  if (params.empty()) {
    return true;
  }
  if (c.denied_parameters.is_object() && !c.denied_parameters.empty()) {
    if (c.denied_parameters.contains("*")) {
      return false;
    }
    for (const auto& [k, v] : params) {
      if (c.denied_parameters.contains(k) && valueInDenied(*v, c.denied_parameters[k])) {
        return false;
      }
    }
  }
  if (!c.allowed_parameters.is_object() || c.allowed_parameters.empty()) {
    return true;
  }
  const bool all = c.allowed_parameters.contains("*");
  if (all && c.allowed_parameters.size() == 1) {
    return true;
  }
  for (const auto& [k, v] : params) {
    if (!c.allowed_parameters.contains(k)) {
      if (!all) {
        return false;
      }
      continue;
    }
    if (!valueInAllowed(*v, c.allowed_parameters[k])) {
      return false;
    }
  }
  return true;
}

nlohmann::json requestParameters(Capability needed, const nlohmann::json& body,
                                 const std::map<std::string, std::string>& query) {
  if (needed == Capability::kRead) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : query) {
      out[k] = v;
    }
    return out;
  }
  if (needed == Capability::kCreate || needed == Capability::kUpdate ||
      needed == Capability::kPatch) {
    return body;
  }
  return nlohmann::json::object();
}

bool validPolicyName(std::string_view name) {
  if (name.empty() || name.size() > 128) {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool first = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!first && !(i > 0 && (c == '-' || c == '.'))) {
      return false;
    }
  }
  return true;
}

namespace {

// allowed_parameters / denied_parameters: {name: [values]} (HCL may also give a single value).
core::Result<nlohmann::json> parseParameters(const nlohmann::json& v, const std::string& at) {
  if (!v.is_object()) {
    return core::invalidArgument(at + ": expected an object of parameter names to lists of values");
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, values] : v.items()) {
    if (key.empty()) {
      return core::invalidArgument(at + ": an empty parameter name");
    }
    nlohmann::json list = values.is_array() ? values : nlohmann::json::array({values});
    for (const nlohmann::json& e : list) {
      if (e.is_object()) {
        return core::invalidArgument(at + "." + key +
                                     ": values must be strings, numbers, bools or lists");
      }
    }
    nlohmann::json& slot = out[lower(key)];
    if (slot.is_null()) {
      slot = nlohmann::json::array();
    }
    for (nlohmann::json& e : list) {
      slot.push_back(std::move(e));
    }
  }
  return out;
}

// Vault's parsePaths: the old `policy` form adds these capabilities.
core::Result<std::vector<std::string_view>> oldPolicy(const nlohmann::json& v,
                                                      const std::string& at) {
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  if (s == "deny") {
    return std::vector<std::string_view>{"deny"};
  }
  if (s == "read") {
    return std::vector<std::string_view>{"read", "list"};
  }
  if (s == "write") {
    return std::vector<std::string_view>{"create", "read", "update", "delete", "list"};
  }
  if (s == "sudo") {
    return std::vector<std::string_view>{"create", "read", "update", "delete", "list", "sudo"};
  }
  return core::invalidArgument(at + ": invalid policy " + v.dump() +
                               " (expected \"deny\", \"read\", \"write\" or \"sudo\")");
}

core::Status parseRuleFields(const nlohmann::json& fields, const std::string& at, PathRule& rule) {
  for (const auto& [field, v] : fields.items()) {
    if (field == "comment") {
      continue;
    }
    if (field == "capabilities" || field == "policy") {
      std::vector<std::string_view> names;
      std::vector<std::string> owned;
      if (field == "policy") {
        TESSERA_ASSIGN_OR_RETURN(names, oldPolicy(v, at + ": policy"));
      } else {
        if (!v.is_array()) {
          return core::invalidArgument(at + ": capabilities must be a list of strings");
        }
        for (const nlohmann::json& c : v) {
          if (!c.is_string()) {
            return core::invalidArgument(at + ": capabilities must be a list of strings");
          }
          owned.push_back(c.get<std::string>());
        }
        names.assign(owned.begin(), owned.end());
      }
      for (std::string_view n : names) {
        auto cap = parseCapability(n);
        if (!cap.isOk()) {
          return cap.status().withContext(at);
        }
        rule.capabilities.add(*cap);
      }
    } else if (field == "allowed_parameters" || field == "denied_parameters") {
      TESSERA_ASSIGN_OR_RETURN(nlohmann::json params, parseParameters(v, at + ": " + field));
      nlohmann::json& into = field == "allowed_parameters" ? rule.constraints.allowed_parameters
                                                           : rule.constraints.denied_parameters;
      Constraints more;
      (field == "allowed_parameters" ? more.allowed_parameters : more.denied_parameters) = params;
      if (into.is_null()) {
        into = std::move(params);
      } else {
        rule.constraints.merge(more);
      }
    } else if (field == "required_parameters") {
      if (!v.is_array()) {
        return core::invalidArgument(at + ": required_parameters must be a list of strings");
      }
      for (const nlohmann::json& e : v) {
        if (!e.is_string() || e.get<std::string>().empty()) {
          return core::invalidArgument(at + ": required_parameters must be a list of names");
        }
        rule.constraints.required_parameters.push_back(e.get<std::string>());
      }
    } else if (field == "min_wrapping_ttl" || field == "max_wrapping_ttl") {
      auto secs = parseDurationSeconds(v, at + ": " + field);
      if (!secs.isOk()) {
        return secs.status();
      }
      (field == "min_wrapping_ttl" ? rule.constraints.min_wrapping_ttl
                                   : rule.constraints.max_wrapping_ttl) = *secs;
    } else if (field == "mfa_methods" || field == "control_group") {
      // Vault Enterprise's; loading the rule without them would give more than it says.
      return core::invalidArgument(at + ": '" + field +
                                   "' is a Vault Enterprise feature that Tessera does not have");
    } else {
      return core::invalidArgument(at + ": unknown field '" + field + "'");
    }
  }
  const Constraints& c = rule.constraints;
  if (c.min_wrapping_ttl != 0 && c.max_wrapping_ttl != 0 &&
      c.max_wrapping_ttl < c.min_wrapping_ttl) {
    return core::invalidArgument(at + ": max_wrapping_ttl cannot be less than min_wrapping_ttl");
  }
  return core::Status::ok();
}

}  // namespace

core::Result<Policy> Policy::fromJson(std::string name, const nlohmann::json& j) {
  Policy policy;
  policy.name = std::move(name);
  const std::string where = "policy '" + policy.name + "'";
  if (!j.is_object() || !j.contains("path")) {
    return core::invalidArgument(where + ": expected {\"path\": {\"<pattern>\": {...}}}");
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "name") {
      if (!value.is_string()) {
        return core::invalidArgument(where + ": name must be a string");
      }
    } else if (key != "path") {
      return core::invalidArgument(where + ": unknown field '" + key + "'");
    }
  }
  TESSERA_RETURN_IF_ERROR(
      forEachObject(j["path"], where + ": path", [&](const nlohmann::json& paths) {
        for (const auto& [raw, body] : paths.items()) {
          const std::string at = where + ": path \"" + raw + "\"";
          // Vault: "paths in Vault start after the / in the API path".
          const std::string pattern = !raw.empty() && raw.front() == '/' ? raw.substr(1) : raw;
          TESSERA_RETURN_IF_ERROR(validatePattern(pattern).withContext(where));
          PathRule rule;
          rule.pattern = pattern;
          TESSERA_RETURN_IF_ERROR(forEachObject(body, at, [&](const nlohmann::json& fields) {
            return parseRuleFields(fields, at, rule);
          }));
          if (rule.capabilities.bits & kDenyBit) {
            // Vault: a deny drops every other capability and constraint of the rule.
            rule.capabilities.bits = kDenyBit;
            rule.constraints = Constraints{};
          }
          policy.rules.push_back(std::move(rule));
        }
        return core::Status::ok();
      }));
  return policy;
}

core::Result<Policy> Policy::fromText(std::string name, std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  auto doc = first != std::string_view::npos && text[first] == '{'
                 ? core::parseJsonConfig(text, "policy")
                 : core::parseHcl(text, "policy");
  if (!doc.isOk()) {
    return core::invalidArgument("policy '" + name + "': " + doc.status().message());
  }
  return fromJson(std::move(name), *doc);
}

nlohmann::json Policy::toJson() const {
  nlohmann::json paths = nlohmann::json::object();
  for (const PathRule& r : rules) {
    nlohmann::json& rule = paths[r.pattern];
    nlohmann::json& caps = rule["capabilities"];
    if (!caps.is_array()) {
      caps = nlohmann::json::array();
    }
    for (const std::string& n : r.capabilities.names()) {
      caps.push_back(n);
    }
    const Constraints& c = r.constraints;
    if (!c.allowed_parameters.is_null()) {
      rule["allowed_parameters"] = c.allowed_parameters;
    }
    if (!c.denied_parameters.is_null()) {
      rule["denied_parameters"] = c.denied_parameters;
    }
    if (!c.required_parameters.empty()) {
      rule["required_parameters"] = c.required_parameters;
    }
    if (c.min_wrapping_ttl != 0) {
      rule["min_wrapping_ttl"] = c.min_wrapping_ttl;
    }
    if (c.max_wrapping_ttl != 0) {
      rule["max_wrapping_ttl"] = c.max_wrapping_ttl;
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

uint16_t effective(uint16_t bits) { return (bits & kDenyBit) != 0 ? 0 : bits; }

}  // namespace

core::Status checkWithinPower(const std::vector<const Policy*>& holder, const Policy& candidate) {
  std::map<std::string, uint16_t> held;  // Pattern -> union of its capabilities.
  std::map<std::string, Constraints> held_constraints;
  for (const Policy* p : holder) {
    if (p == nullptr) {
      continue;
    }
    for (const PathRule& r : p->rules) {
      held[r.pattern] |= r.capabilities.bits;
      held_constraints[r.pattern].merge(r.constraints);
    }
  }
  for (const PathRule& rule : candidate.rules) {
    const uint16_t needed = effective(rule.capabilities.bits);
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
    // Constraints on the holder's side bind it; a candidate must carry the same ones (anything
    // else may allow a parameter the holder may not send, and telling is not cheap).
    if (!held_constraints[*cover].empty() && !(held_constraints[*cover] == rule.constraints)) {
      return beyond("its rule '" + *cover + "' constrains parameters or wrapping there");
    }
    // A more precise held pattern decides the paths it matches: it must give as much.
    for (const auto& [pattern, bits] : held) {
      if (pattern != *cover && morePrecise(pattern, *cover) && mayOverlap(pattern, rule.pattern) &&
          ((effective(bits) & needed) != needed ||
           (!held_constraints[pattern].empty() &&
            !(held_constraints[pattern] == rule.constraints)))) {
        return beyond("its rule '" + pattern + "' gives less on some of those paths");
      }
    }
  }
  return core::Status::ok();
}

}  // namespace tessera::server
