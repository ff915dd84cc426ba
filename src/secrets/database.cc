#include "secrets/database.h"

#include <libpq-fe.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "core/strings.h"
#include "secrets/postgres.h"

namespace tessera::secrets {
namespace {

using nlohmann::json;

constexpr int64_t kDefaultTtlSeconds = 3600;
constexpr int64_t kDefaultMaxTtlSeconds = int64_t{24} * 3600;
constexpr int64_t kMaxDurationSeconds = 100LL * 365 * 86400;
constexpr size_t kMaxNameBytes = 64;
constexpr size_t kMaxUserBytes = 63;  // PostgreSQL's NAMEDATALEN - 1.
constexpr size_t kUserRandomChars = 10;
constexpr size_t kPasswordChars = 32;
constexpr std::string_view kLower = "abcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::string_view kMixed =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

std::string tenantPrefix(const std::string& tenant) { return "/secrets/" + tenant + "/db/"; }
std::string configPrefix(const std::string& tenant) { return tenantPrefix(tenant) + "config/"; }
std::string rolePrefix(const std::string& tenant) { return tenantPrefix(tenant) + "roles/"; }

// `message` with each occurrence of `secret` replaced by "***".
std::string scrub(std::string message, const std::string& secret) {
  if (secret.empty()) {
    return message;
  }
  for (size_t at = message.find(secret); at != std::string::npos;
       at = message.find(secret, at + 3)) {
    message.replace(at, secret.size(), "***");
  }
  return message;
}

core::Status checkTenant(const std::string& tenant) { return checkEngineTenant(tenant, "db"); }

// What a connection record holds.
struct ConnConfig {
  std::string url;
  std::string username;
  std::string password;
  std::vector<std::string> allowed_roles;
  bool verify = true;

  ConnConfig() = default;
  ConnConfig(const ConnConfig&) = default;
  ConnConfig& operator=(const ConnConfig&) = default;
  ~ConnConfig() { OPENSSL_cleanse(password.data(), password.size()); }

  json toJson(bool with_password) const {
    json j = {{"connection_url", url},
              {"username", username},
              {"allowed_roles", allowed_roles},
              {"verify_connection", verify}};
    if (with_password) {
      j["password"] = password;
    }
    return j;
  }
  static core::Result<ConnConfig> fromStored(const json& j) {
    try {
      ConnConfig c;
      c.url = j.at("connection_url").get<std::string>();
      c.username = j.at("username").get<std::string>();
      c.password = j.at("password").get<std::string>();
      c.allowed_roles = j.at("allowed_roles").get<std::vector<std::string>>();
      c.verify = j.at("verify_connection").get<bool>();
      return c;
    } catch (const json::exception&) {
      return core::internalError("db: a stored connection is malformed");
    }
  }
  bool allows(const std::string& role) const {
    return std::any_of(allowed_roles.begin(), allowed_roles.end(),
                       [&](const std::string& r) { return r == "*" || r == role; });
  }
};

// What a role record holds.
struct RoleConfig {
  std::string db_name;
  std::vector<std::string> creation;
  std::vector<std::string> revocation;
  std::vector<std::string> renew;
  int64_t default_ttl_s = kDefaultTtlSeconds;
  int64_t max_ttl_s = kDefaultMaxTtlSeconds;

  json toJson() const {
    return {{"db_name", db_name},
            {"creation_statements", creation},
            {"revocation_statements", revocation},
            {"renew_statements", renew},
            {"default_ttl", default_ttl_s},
            {"max_ttl", max_ttl_s}};
  }
  static core::Result<RoleConfig> fromStored(const json& j) {
    try {
      RoleConfig r;
      r.db_name = j.at("db_name").get<std::string>();
      r.creation = j.at("creation_statements").get<std::vector<std::string>>();
      r.revocation = j.at("revocation_statements").get<std::vector<std::string>>();
      r.renew = j.at("renew_statements").get<std::vector<std::string>>();
      r.default_ttl_s = j.at("default_ttl").get<int64_t>();
      r.max_ttl_s = j.at("max_ttl").get<int64_t>();
      return r;
    } catch (const json::exception&) {
      return core::internalError("db: a stored role is malformed");
    }
  }
};

}  // namespace

core::Result<int64_t> parseSeconds(const json& v, const std::string& field,
                                   std::string_view engine) {
  const std::string expected = std::string(engine) + ": \"" + field +
                               "\" must be whole seconds or a duration such as \"90s\", \"30m\", "
                               "\"1h30m\" or \"7d\"";
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n < 0 || n > kMaxDurationSeconds) {
      return core::invalidArgument(expected);
    }
    return n;
  }
  if (!v.is_string()) {
    return core::invalidArgument(expected);
  }
  const std::string s = v.get<std::string>();
  if (s.empty()) {
    return core::invalidArgument(expected);
  }
  if (s.find_first_not_of("0123456789") == std::string::npos) {
    int64_t n = 0;
    auto [after, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || n > kMaxDurationSeconds) {
      return core::invalidArgument(expected);
    }
    return n;
  }
  // One or more <digits><unit>, units s, m, h, d.
  const char* p = s.data();
  const char* const end = s.data() + s.size();
  int64_t total = 0;
  while (p != end) {
    int64_t n = 0;
    auto [after, ec] = std::from_chars(p, end, n);
    if (ec != std::errc() || after == p || after == end) {
      return core::invalidArgument(expected);  // No number, or "1h30" without a unit.
    }
    p = after;
    int64_t unit = 0;
    switch (*p++) {
      case 's':
        unit = 1;
        break;
      case 'm':
        unit = 60;
        break;
      case 'h':
        unit = 3600;
        break;
      case 'd':
        unit = 86400;
        break;
      default:
        return core::invalidArgument(expected);
    }
    if (p != end && std::isdigit(static_cast<unsigned char>(*p)) == 0) {
      return core::invalidArgument(expected);  // "ms", "us", "ns", "min", ...
    }
    if (n < 0 || n > (kMaxDurationSeconds - total) / unit) {
      return core::invalidArgument(expected);
    }
    total += n * unit;
  }
  return total;
}

namespace {

// The templates statements may hold; anything else in {{...}} is refused.
constexpr std::array<std::string_view, 4> kTemplates = {"name", "username", "password",
                                                        "expiration"};

// A list of SQL statements (or one string), none empty, with known templates only.
core::Result<std::vector<std::string>> parseStatements(const json& v, const std::string& field) {
  const std::string expected = "db: \"" + field + "\" must be a list of SQL statements";
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const json& s : v) {
      if (!s.is_string()) {
        return core::invalidArgument(expected);
      }
      out.push_back(s.get<std::string>());
    }
  } else {
    return core::invalidArgument(expected);
  }
  for (const std::string& s : out) {
    if (s.find_first_not_of(" \t\r\n;") == std::string::npos) {
      return core::invalidArgument("db: \"" + field + "\" holds an empty statement");
    }
    if (s.find('\0') != std::string::npos) {
      return core::invalidArgument("db: \"" + field + "\" holds a NUL byte");
    }
    for (size_t at = s.find("{{"); at != std::string::npos; at = s.find("{{", at + 2)) {
      const size_t close = s.find("}}", at + 2);
      const std::string name =
          close == std::string::npos ? s.substr(at + 2) : s.substr(at + 2, close - at - 2);
      if (close == std::string::npos ||
          std::find(kTemplates.begin(), kTemplates.end(), name) == kTemplates.end()) {
        return core::invalidArgument("db: \"" + field + "\" uses an unknown template \"{{" +
                                     name.substr(0, 32) +
                                     "}}\" (known: {{name}}, {{password}}, {{expiration}})");
      }
    }
  }
  return out;
}

// `sql` with each {{key}} replaced by its value (substituted as is: callers pass only generated
// values).
std::string render(const std::string& sql, const std::map<std::string, std::string>& values) {
  std::string out;
  size_t at = 0;
  for (size_t open = sql.find("{{"); open != std::string::npos; open = sql.find("{{", at)) {
    const size_t close = sql.find("}}", open + 2);
    if (close == std::string::npos) {
      break;
    }
    auto it = values.find(sql.substr(open + 2, close - open - 2));
    out.append(sql, at, open - at);
    if (it != values.end()) {
      out += it->second;
    } else {
      out.append(sql, open, close + 2 - open);
    }
    at = close + 2;
  }
  out.append(sql, at);
  return out;
}

// For VALID UNTIL: "YYYY-MM-DD HH:MM:SS+00" (UTC), rounded up to the second so the password
// works until the lease ends.
std::string formatExpiration(core::WallTime t) {
  const auto since = t.time_since_epoch();
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
  if (secs < since) {
    ++secs;
  }
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  std::array<char, 40> buf{};
  const size_t n = std::strftime(buf.data(), buf.size(), "%Y-%m-%d %H:%M:%S+00", &tm);
  return std::string(buf.data(), n);
}

// `n` characters of `alphabet` from OpenSSL's CSPRNG, without modulo bias.
core::Result<std::string> randomChars(size_t n, std::string_view alphabet) {
  const unsigned limit = 256 - (256 % alphabet.size());
  std::string out;
  out.reserve(n);
  std::array<unsigned char, 64> buf{};
  while (out.size() < n) {
    if (RAND_bytes(buf.data(), static_cast<int>(buf.size())) != 1) {
      return core::unavailable("db: no randomness for a credential");
    }
    for (unsigned char b : buf) {
      if (b < limit && out.size() < n) {
        out.push_back(alphabet[b % alphabet.size()]);
      }
    }
  }
  OPENSSL_cleanse(buf.data(), buf.size());
  return out;
}

// Lower case, with anything but [a-z0-9_-] as '_', so the name is safe inside "..." in SQL.
std::string userPart(std::string_view text, size_t max_bytes) {
  std::string out;
  for (char c : text.substr(0, max_bytes)) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '-' ? l : '_');
  }
  return out;
}

// "v-<tenant>-<role>-<10 random>", at most 63 bytes: tenant and role share what is left, each
// getting at least half of it when both are long.
core::Result<std::string> generateUsername(const std::string& tenant, const std::string& role) {
  constexpr size_t kFixed = 4 + kUserRandomChars;  // "v-", two '-', the random part.
  constexpr size_t kBudget = kMaxUserBytes - kFixed;
  const size_t tenant_bytes =
      std::min(tenant.size(), std::max(kBudget / 2, kBudget - std::min(kBudget, role.size())));
  const size_t role_bytes = std::min(role.size(), kBudget - tenant_bytes);
  TESSERA_ASSIGN_OR_RETURN(std::string suffix, randomChars(kUserRandomChars, kLower));
  return "v-" + userPart(tenant, tenant_bytes) + "-" + userPart(role, role_bytes) + "-" + suffix;
}

// A value for a libpq key=value string: single-quoted, with ' and \ escaped.
std::string conninfoValue(std::string_view v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\') {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// The options `url` sets (key=value or URL), as libpq reads them. A Vault-style
// "{{username}}" / "{{password}}" placeholder counts as unset. Invalid argument if `url` is
// malformed or holds a password.
core::Result<std::vector<std::pair<std::string, std::string>>> parseConnectionUrl(
    const std::string& url) {
  if (url.find('\0') != std::string::npos) {
    return core::invalidArgument("db: \"connection_url\" holds a NUL byte");
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    std::string why = error == nullptr ? "out of memory" : error;
    PQfreemem(error);
    while (!why.empty() && std::isspace(static_cast<unsigned char>(why.back())) != 0) {
      why.pop_back();
    }
    // The URL holds no password we know of, but it may hold one we were not meant to see.
    return core::invalidArgument("db: malformed \"connection_url\" '" + redactConninfo(url) +
                                 "': " + redactConninfo(why));
  }
  std::vector<std::pair<std::string, std::string>> out;
  bool has_password = false;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) {
      continue;
    }
    const std::string_view key = o->keyword;
    const std::string_view val = o->val;
    if (key == "password" || key == "sslpassword") {
      has_password = has_password || val != "{{password}}";
      continue;
    }
    if (key == "user" || key == "connect_timeout") {
      continue;  // The config's username wins; connect() has its own timeout.
    }
    out.emplace_back(std::string(key), std::string(val));
  }
  PQconninfoFree(options);
  if (has_password) {
    return core::invalidArgument(
        "db: \"connection_url\" must not hold a password; give it in \"password\"");
  }
  return out;
}

// The admin's connection string: the URL's options, then user and password.
core::Result<std::string> adminConninfo(const ConnConfig& c) {
  TESSERA_ASSIGN_OR_RETURN(auto options, parseConnectionUrl(c.url));
  std::string out;
  for (const auto& [key, val] : options) {
    out += key + "=" + conninfoValue(val) + " ";
  }
  out += "user=" + conninfoValue(c.username);
  if (!c.password.empty()) {
    out += " password=" + conninfoValue(c.password);
  }
  return out;
}

// Runs `statements` in one transaction; rolls back on the first error. `what` names them in the
// error: "<what> statement 2 failed: postgres: ...".
core::Status runInTransaction(PgConnection& db, const std::vector<std::string>& statements,
                              const std::string& what) {
  TESSERA_RETURN_IF_ERROR(db.execScript("BEGIN").status());
  for (size_t i = 0; i < statements.size(); ++i) {
    auto r = db.execScript(statements[i]);
    if (!r.isOk()) {
      (void)db.execScript("ROLLBACK");
      return r.status().withContext(what + " statement " + std::to_string(i + 1) + " failed");
    }
  }
  auto committed = db.execScript("COMMIT");
  if (!committed.isOk()) {
    (void)db.execScript("ROLLBACK");
    return committed.status().withContext(what + " statements failed at COMMIT");
  }
  return core::Status::ok();
}

// Drops `username` and what it owns in the connection's database, first ending its sessions;
// or runs `revocation` (templated with {{name}}) instead. A user that does not exist is done.
core::Status dropUser(PgConnection& db, const std::string& username,
                      const std::vector<std::string>& revocation, const std::string& role) {
  TESSERA_ASSIGN_OR_RETURN(PgResult exists,
                           db.exec("SELECT 1 FROM pg_roles WHERE rolname = $1", {username}));
  if (exists.rows.empty()) {
    return core::Status::ok();
  }
  if (!revocation.empty()) {
    std::vector<std::string> rendered;
    rendered.reserve(revocation.size());
    for (const std::string& s : revocation) {
      rendered.push_back(render(s, {{"name", username}, {"username", username}}));
    }
    return runInTransaction(db, rendered, "role '" + role + "': revocation");
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string ident, quoteIdent(username));
  TESSERA_ASSIGN_OR_RETURN(const std::string literal, quoteLiteral(username));
  // No new sessions from here on, then end the open ones.
  TESSERA_RETURN_IF_ERROR(db.exec("ALTER ROLE " + ident + " NOLOGIN").status());
  TESSERA_RETURN_IF_ERROR(
      db.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = " + literal)
          .status());
  return runInTransaction(db,
                          {"REASSIGN OWNED BY " + ident + " TO CURRENT_USER",
                           "DROP OWNED BY " + ident, "DROP ROLE IF EXISTS " + ident},
                          "default revocation");
}

// What a "db" lease names.
struct LeaseTarget {
  std::string connection;
  std::string username;
  std::string role;  // May be empty or gone: the default statements serve then.
};

// Lease records are stored unsealed, so a changed record must not make the engine drop or alter
// any role but one it generated: "v-" and [a-z0-9_-], at most 63 bytes. Invalid argument
// (permanent for the lease manager) otherwise.
core::Result<LeaseTarget> leaseTarget(const Lease& lease) {
  auto field = [&](const char* name) {
    const auto it = lease.data.find(name);
    return it != lease.data.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  LeaseTarget t{field("connection"), field("username"), field("role")};
  const bool generated =
      t.username.size() > 2 && t.username.size() <= kMaxUserBytes &&
      t.username.rfind("v-", 0) == 0 &&
      std::all_of(t.username.begin(), t.username.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
      });
  if (t.connection.empty() || !generated) {
    return core::invalidArgument("db: lease '" + lease.id +
                                 "' does not name a connection and a generated user");
  }
  return t;
}

core::Result<std::vector<std::string>> listNames(store::Store& store, const std::string& prefix) {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store.range(prefix, store::prefixEnd(prefix)));
  std::vector<std::string> names;
  names.reserve(r.kvs.size());
  for (const store::KeyValue& kv : r.kvs) {
    names.push_back(kv.key.substr(prefix.size()));
  }
  return names;
}

core::Result<std::optional<ConnConfig>> loadConnection(store::Store& store, const KeyManager& keys,
                                                       const std::string& tenant,
                                                       const std::string& name) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<json> j,
                           loadSealed(store, keys, tenant, configPrefix(tenant) + name, "db"));
  if (!j) {
    return std::optional<ConnConfig>();
  }
  auto c = ConnConfig::fromStored(*j);
  if (auto pw = j->find("password"); pw != j->end() && pw->is_string()) {
    auto& text = pw->get_ref<std::string&>();
    OPENSSL_cleanse(text.data(), text.size());
  }
  TESSERA_RETURN_IF_ERROR(c.status());
  return std::optional<ConnConfig>(std::move(c).value());
}

core::Result<std::optional<RoleConfig>> loadRole(store::Store& store, const KeyManager& keys,
                                                 const std::string& tenant,
                                                 const std::string& name) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<json> j,
                           loadSealed(store, keys, tenant, rolePrefix(tenant) + name, "db"));
  if (!j) {
    return std::optional<RoleConfig>();
  }
  TESSERA_ASSIGN_OR_RETURN(RoleConfig r, RoleConfig::fromStored(*j));
  return std::optional<RoleConfig>(std::move(r));
}

// An admin session on the connection's server. Unavailable if it cannot be reached or refuses
// the login; the message never holds the password.
core::Result<std::unique_ptr<PgConnection>> connectAdmin(const ConnConfig& c,
                                                         const std::string& name,
                                                         std::chrono::milliseconds timeout) {
  std::string conninfo;
  {
    auto built = adminConninfo(c);
    if (!built.isOk()) {
      return built.status().withContext("db: connection '" + name + "'");
    }
    conninfo = std::move(built).value();
  }
  auto db = PgConnection::connect(conninfo, timeout);
  OPENSSL_cleanse(conninfo.data(), conninfo.size());
  if (!db.isOk()) {
    return core::Status(
        db.status().code(),
        scrub("db: connection '" + name + "': " + db.status().message(), c.password));
  }
  return std::move(db).value();
}

// Everything revoking or extending a lease needs, with an admin session open. Failed precondition
// if the connection is gone.
struct Target {
  std::string username;
  std::string role;
  std::vector<std::string> revocation;
  std::vector<std::string> renew;
  std::unique_ptr<PgConnection> db;
};

core::Result<Target> loadTarget(store::Store& store, const KeyManager& keys,
                                std::chrono::milliseconds timeout, const Lease& lease) {
  TESSERA_ASSIGN_OR_RETURN(LeaseTarget t, leaseTarget(lease));
  TESSERA_ASSIGN_OR_RETURN(std::optional<ConnConfig> c,
                           loadConnection(store, keys, lease.tenant, t.connection));
  if (!c) {
    return core::failedPrecondition("db: connection '" + t.connection +
                                    "' no longer exists; drop user '" + t.username +
                                    "' by hand, then force-revoke the lease");
  }
  Target out;
  out.username = t.username;
  out.role = t.role;
  if (!t.role.empty() && DatabaseEngine::checkName("role", t.role).isOk()) {
    TESSERA_ASSIGN_OR_RETURN(std::optional<RoleConfig> r,
                             loadRole(store, keys, lease.tenant, t.role));
    if (r) {
      out.revocation = std::move(r->revocation);
      out.renew = std::move(r->renew);
    }
  }
  TESSERA_ASSIGN_OR_RETURN(out.db, connectAdmin(*c, t.connection, timeout));
  return out;
}

}  // namespace

DatabaseEngine::DatabaseEngine(store::Store& store, const KeyManager& keys, LeaseManager& leases,
                               const core::Clock& clock, DatabaseOptions options)
    : store_(store), keys_(keys), leases_(leases), clock_(clock), options_(options) {}

core::Status DatabaseEngine::checkName(std::string_view what, const std::string& name) {
  const bool ok = !name.empty() && name.size() <= kMaxNameBytes &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                  });
  if (!ok) {
    return core::invalidArgument("db: bad " + std::string(what) + " name '" +
                                 name.substr(0, kMaxNameBytes) +
                                 "' (1 to 64 of a-z, 0-9, '_' and '-')");
  }
  return core::Status::ok();
}

core::Status DatabaseEngine::putConnection(const std::string& tenant, const std::string& name,
                                           const json& body) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkName("connection", name));
  if (!body.is_object()) {
    return core::invalidArgument("db: the connection body must be an object");
  }
  ConnConfig c;
  try {
    for (const auto& [k, v] : body.items()) {
      if (k == "connection_url" || k == "username" || k == "password") {
        if (!v.is_string()) {
          return core::invalidArgument("db: \"" + k + "\" must be a string");
        }
        (k == "connection_url" ? c.url
         : k == "username"     ? c.username
                               : c.password) = v.get<std::string>();
      } else if (k == "allowed_roles") {
        std::vector<std::string> roles;
        if (v.is_string()) {
          roles = core::splitList(v.get<std::string>());
        } else if (v.is_array()) {
          for (const json& r : v) {
            if (!r.is_string()) {
              return core::invalidArgument("db: \"allowed_roles\" must be a list of role names");
            }
            roles.push_back(r.get<std::string>());
          }
        } else {
          return core::invalidArgument("db: \"allowed_roles\" must be a list of role names");
        }
        for (const std::string& r : roles) {
          if (r != "*") {
            TESSERA_RETURN_IF_ERROR(checkName("role", r).withContext("\"allowed_roles\""));
          }
        }
        c.allowed_roles = std::move(roles);
      } else if (k == "verify_connection") {
        if (!v.is_boolean()) {
          return core::invalidArgument("db: \"verify_connection\" must be true or false");
        }
        c.verify = v.get<bool>();
      } else {
        return core::invalidArgument("db: unknown connection field \"" + k.substr(0, 64) + "\"");
      }
    }
  } catch (const json::exception& e) {
    return core::invalidArgument(std::string("db: bad connection body: ") + e.what());
  }
  if (c.url.empty()) {
    return core::invalidArgument("db: \"connection_url\" is required");
  }
  if (c.username.empty()) {
    return core::invalidArgument("db: \"username\" is required");
  }
  if (c.username.find('\0') != std::string::npos || c.password.find('\0') != std::string::npos) {
    return core::invalidArgument("db: \"username\" and \"password\" must not hold NUL bytes");
  }
  TESSERA_RETURN_IF_ERROR(parseConnectionUrl(c.url).status());
  if (c.verify) {
    auto db = connectAdmin(c, name, options_.connect_timeout);
    if (!db.isOk()) {
      return core::invalidArgument(
          db.status().message() +
          " (check the address and credentials, or set verify_connection to false)");
    }
  }
  return storeSealed(store_, keys_, tenant, configPrefix(tenant) + name, c.toJson(true));
}

core::Result<json> DatabaseEngine::readConnection(const std::string& tenant,
                                                  const std::string& name) const {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkName("connection", name));
  TESSERA_ASSIGN_OR_RETURN(std::optional<ConnConfig> c,
                           loadConnection(store_, keys_, tenant, name));
  if (!c) {
    return core::notFound("db: no connection '" + name + "'");
  }
  return c->toJson(false);
}

core::Status DatabaseEngine::deleteConnection(const std::string& tenant, const std::string& name) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkName("connection", name));
  TESSERA_ASSIGN_OR_RETURN(store::DeleteResult d, store_.deleteRange(configPrefix(tenant) + name));
  if (d.deleted == 0) {
    return core::notFound("db: no connection '" + name + "'");
  }
  return core::Status::ok();
}

core::Result<std::vector<std::string>> DatabaseEngine::listConnections(
    const std::string& tenant) const {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  return listNames(store_, configPrefix(tenant));
}

core::Status DatabaseEngine::putRole(const std::string& tenant, const std::string& name,
                                     const json& body) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkName("role", name));
  if (!body.is_object()) {
    return core::invalidArgument("db: the role body must be an object");
  }
  RoleConfig r;
  std::optional<int64_t> default_ttl;
  std::optional<int64_t> max_ttl;
  bool has_creation = false;
  try {
    for (const auto& [k, v] : body.items()) {
      if (k == "db_name") {
        if (!v.is_string()) {
          return core::invalidArgument("db: \"db_name\" must be a connection name");
        }
        r.db_name = v.get<std::string>();
        TESSERA_RETURN_IF_ERROR(checkName("connection", r.db_name).withContext("\"db_name\""));
      } else if (k == "creation_statements") {
        TESSERA_ASSIGN_OR_RETURN(r.creation, parseStatements(v, k));
        has_creation = true;
      } else if (k == "revocation_statements") {
        TESSERA_ASSIGN_OR_RETURN(r.revocation, parseStatements(v, k));
      } else if (k == "renew_statements") {
        TESSERA_ASSIGN_OR_RETURN(r.renew, parseStatements(v, k));
      } else if (k == "default_ttl") {
        TESSERA_ASSIGN_OR_RETURN(default_ttl, parseSeconds(v, k, "db"));
      } else if (k == "max_ttl") {
        TESSERA_ASSIGN_OR_RETURN(max_ttl, parseSeconds(v, k, "db"));
      } else {
        return core::invalidArgument("db: unknown role field \"" + k.substr(0, 64) + "\"");
      }
    }
  } catch (const json::exception& e) {
    return core::invalidArgument(std::string("db: bad role body: ") + e.what());
  }
  if (r.db_name.empty()) {
    return core::invalidArgument("db: \"db_name\" is required");
  }
  if (!has_creation || r.creation.empty()) {
    return core::invalidArgument("db: \"creation_statements\" is required");
  }
  // 0 means the default, as in Vault.
  r.max_ttl_s = max_ttl.value_or(0) > 0 ? *max_ttl : kDefaultMaxTtlSeconds;
  if (default_ttl.value_or(0) > 0) {
    if (*default_ttl > r.max_ttl_s) {
      return core::invalidArgument("db: \"default_ttl\" (" + std::to_string(*default_ttl) +
                                   " s) must not exceed \"max_ttl\" (" +
                                   std::to_string(r.max_ttl_s) + " s)");
    }
    r.default_ttl_s = *default_ttl;
  } else {
    r.default_ttl_s = std::min(kDefaultTtlSeconds, r.max_ttl_s);
  }
  return storeSealed(store_, keys_, tenant, rolePrefix(tenant) + name, r.toJson());
}

core::Result<json> DatabaseEngine::readRole(const std::string& tenant,
                                            const std::string& name) const {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkName("role", name));
  TESSERA_ASSIGN_OR_RETURN(std::optional<RoleConfig> r, loadRole(store_, keys_, tenant, name));
  if (!r) {
    return core::notFound("db: no role '" + name + "'");
  }
  return r->toJson();
}

core::Status DatabaseEngine::deleteRole(const std::string& tenant, const std::string& name) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkName("role", name));
  TESSERA_ASSIGN_OR_RETURN(store::DeleteResult d, store_.deleteRange(rolePrefix(tenant) + name));
  if (d.deleted == 0) {
    return core::notFound("db: no role '" + name + "'");
  }
  return core::Status::ok();
}

core::Result<std::vector<std::string>> DatabaseEngine::listRoles(const std::string& tenant) const {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  return listNames(store_, rolePrefix(tenant));
}

core::Result<DbCredential> DatabaseEngine::createCredential(const std::string& tenant,
                                                            const std::string& role,
                                                            core::Duration ttl) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkName("role", role));
  if (ttl < core::Duration::zero()) {
    return core::invalidArgument("db: a negative TTL");
  }
  TESSERA_ASSIGN_OR_RETURN(std::optional<RoleConfig> r, loadRole(store_, keys_, tenant, role));
  if (!r) {
    return core::notFound("db: no role '" + role + "'");
  }
  TESSERA_ASSIGN_OR_RETURN(std::optional<ConnConfig> c,
                           loadConnection(store_, keys_, tenant, r->db_name));
  if (!c) {
    return core::failedPrecondition("db: role '" + role + "' uses connection '" + r->db_name +
                                    "', which does not exist");
  }
  if (!c->allows(role)) {
    return core::permissionDenied("db: connection '" + r->db_name + "' does not allow role '" +
                                  role + "' (see its allowed_roles)");
  }
  const core::Duration max_ttl = std::chrono::seconds(r->max_ttl_s);
  if (ttl == core::Duration::zero()) {
    ttl = std::chrono::seconds(r->default_ttl_s);
  }
  ttl = std::min(ttl, max_ttl);

  TESSERA_ASSIGN_OR_RETURN(std::string username, generateUsername(tenant, role));
  TESSERA_ASSIGN_OR_RETURN(std::string password, randomChars(kPasswordChars, kMixed));
  const std::string expiration = formatExpiration(
      clock_.wallNow() + std::chrono::duration_cast<core::WallTime::duration>(ttl));

  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<PgConnection> db,
                           connectAdmin(*c, r->db_name, options_.connect_timeout));
  TESSERA_ASSIGN_OR_RETURN(std::string verifier, db->encryptPassword(password, username));
  std::vector<std::string> statements;
  statements.reserve(r->creation.size());
  for (const std::string& s : r->creation) {
    statements.push_back(render(s, {{"name", username},
                                    {"username", username},
                                    {"password", verifier},
                                    {"expiration", expiration}}));
  }
  TESSERA_RETURN_IF_ERROR(runInTransaction(*db, statements, "db: role '" + role + "': creation"));

  auto lease = leases_.create(tenant, "db/creds/" + role, std::string(kDatabaseLeaseKind),
                              {{"connection", r->db_name}, {"role", role}, {"username", username}},
                              ttl, max_ttl);
  if (!lease.isOk()) {
    // No credential without a lease: nothing would ever revoke it.
    const core::Status dropped = dropUser(*db, username, r->revocation, role);
    OPENSSL_cleanse(password.data(), password.size());
    std::string message = "db: the lease for user '" + username +
                          "' could not be written: " + lease.status().message();
    if (!dropped.isOk()) {
      message += "; dropping the user failed too, drop it by hand: " + dropped.message();
    }
    return core::Status(lease.status().code(), std::move(message));
  }
  return DbCredential{std::move(username), std::move(password), std::move(lease).value()};
}

core::Status DatabaseEngine::revoke(const Lease& lease) {
  TESSERA_ASSIGN_OR_RETURN(Target t, loadTarget(store_, keys_, options_.connect_timeout, lease));
  return dropUser(*t.db, t.username, t.revocation, t.role)
      .withContext("db: revoking user '" + t.username + "'");
}

core::Status DatabaseEngine::extend(const Lease& lease, core::WallTime expires) {
  TESSERA_ASSIGN_OR_RETURN(Target t, loadTarget(store_, keys_, options_.connect_timeout, lease));
  const std::string expiration = formatExpiration(expires);
  if (!t.renew.empty()) {
    std::vector<std::string> rendered;
    rendered.reserve(t.renew.size());
    for (const std::string& sql : t.renew) {
      rendered.push_back(render(
          sql, {{"name", t.username}, {"username", t.username}, {"expiration", expiration}}));
    }
    return runInTransaction(*t.db, rendered, "db: role '" + t.role + "': renew");
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string ident, quoteIdent(t.username));
  TESSERA_ASSIGN_OR_RETURN(const std::string until, quoteLiteral(expiration));
  return t.db->exec("ALTER ROLE " + ident + " VALID UNTIL " + until)
      .status()
      .withContext("db: extending user '" + t.username + "'");
}

core::Status checkEngineTenant(const std::string& tenant, std::string_view engine) {
  if (tenant.empty() || tenant.find('/') != std::string::npos) {
    return core::invalidArgument(std::string(engine) + ": bad tenant name '" + tenant + "'");
  }
  return core::Status::ok();
}

core::Result<std::optional<json>> loadSealed(store::Store& store, const KeyManager& keys,
                                             const std::string& tenant, const std::string& key,
                                             std::string_view engine) {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store.range(key));
  if (r.kvs.empty()) {
    return std::optional<json>();
  }
  TESSERA_ASSIGN_OR_RETURN(std::string plain, keys.decrypt(tenant, key, r.kvs[0].value));
  json j = json::parse(plain, nullptr, /*allow_exceptions=*/false);
  OPENSSL_cleanse(plain.data(), plain.size());
  if (j.is_discarded()) {
    return core::internalError(std::string(engine) + ": the record at " + key + " is not JSON");
  }
  return std::optional<json>(std::move(j));
}

core::Status storeSealed(store::Store& store, const KeyManager& keys, const std::string& tenant,
                         const std::string& key, const json& value) {
  std::string plain = value.dump();
  auto sealed = keys.encrypt(tenant, key, plain);
  OPENSSL_cleanse(plain.data(), plain.size());
  TESSERA_RETURN_IF_ERROR(sealed.status());
  return store.put(key, *sealed).status();
}

}  // namespace tessera::secrets
