// What the client commands share (client_commands.cc, secrets_commands.cc): the common flags and
// how they resolve, a command's session with the server and its scope, and output helpers.
#pragma once

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/client.h"
#include "core/status.h"

namespace tessera::cli {

using api::ApiClient;
using api::ClientConfig;
using api::pathSegment;

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr const char* kDefaultAddress = "https://127.0.0.1:8200";
inline constexpr const char* kTokenFileName = ".tessera-token";

// ---------------------------------------------------------------------------------------------
// Settings: flags, then the environment, then defaults.

struct CommonFlags {
  std::string address;
  std::string token;
  std::string ca_cert;
  std::string client_cert;
  std::string client_key;
  std::string tenant;
  std::string format = "table";
};

// Which of the common flags a command takes: `login` gets its token as an argument, and
// `tenant ...` lives in the admin scope only.
struct FlagSet {
  bool token = true;
  bool tenant = true;
};

inline void addCommonFlags(CLI::App* cmd, CommonFlags& f, FlagSet which = {}) {
  cmd->add_option("--address", f.address,
                  "Server address (default: $TESSERA_ADDR, else https://127.0.0.1:8200)");
  if (which.token) {
    cmd->add_option("--token", f.token,
                    "Token (default: $TESSERA_TOKEN, else the one `tessera login` stored in "
                    "~/.tessera-token)");
  }
  cmd->add_option("--ca-cert", f.ca_cert,
                  "PEM file of the CA that signed the server's certificate (default: "
                  "$TESSERA_CACERT, else the system's CAs)");
  cmd->add_option("--client-cert", f.client_cert,
                  "PEM client certificate for a listener that requires one (mTLS; default: "
                  "$TESSERA_CLIENT_CERT)");
  cmd->add_option("--client-key", f.client_key,
                  "PEM key of --client-cert (default: $TESSERA_CLIENT_KEY)");
  if (which.tenant) {
    cmd->add_option("--tenant", f.tenant,
                    "Tenant scope (default: $TESSERA_TENANT, else a tenant token's own tenant)");
  }
  cmd->add_option("--format", f.format, "Output format: table or json (also -format=json)")
      ->check(CLI::IsMember({"table", "json"}));
}

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

inline std::string orEnv(const std::string& flag, const char* name) {
  return flag.empty() ? env(name) : flag;
}

inline std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(s.find_last_not_of(ws) + 1);
  s.erase(0, s.find_first_not_of(ws));
  return s;
}

inline std::string homeDir() {
  std::string home = env("HOME");
  if (home.empty()) {
    if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
      home = pw->pw_dir;
    }
  }
  return home;
}

inline std::string tokenFilePath() { return homeDir() + "/" + kTokenFileName; }

// The token `tessera login` stored, or "" when there is none.
inline std::string storedToken() {
  std::ifstream in(tokenFilePath());
  if (!in) {
    return "";
  }
  std::string t((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return trim(t);
}

// Writes `text` to `path`, readable by its owner only (it holds a token), replacing any previous
// file whole or leaving it as it was.
inline core::Status writePrivateFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return core::Status(core::StatusCode::kUnavailable,
                        "cannot write " + tmp + ": " + std::strerror(errno));
  }
  const bool ok = ::fchmod(fd, 0600) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : saved);
    ::unlink(tmp.c_str());
    return core::Status(core::StatusCode::kUnavailable, "cannot write " + path + ": " + why);
  }
  return core::Status::ok();
}

// Writes the token file readable by its owner only, replacing any previous one whole.
inline core::Status storeToken(const std::string& token) {
  return writePrivateFile(tokenFilePath(), token + "\n");
}

// ---------------------------------------------------------------------------------------------
// A command's connection to the server and its scope.

// The connection settings every client command shares: flags, then the environment, then
// defaults (the token is the Session's business).
inline ClientConfig clientConfig(const CommonFlags& flags) {
  ClientConfig c;
  c.address = orEnv(flags.address, "TESSERA_ADDR");
  if (c.address.empty()) {
    c.address = kDefaultAddress;
  }
  c.ca_cert_file = orEnv(flags.ca_cert, "TESSERA_CACERT");
  c.client_cert_file = orEnv(flags.client_cert, "TESSERA_CLIENT_CERT");
  c.client_key_file = orEnv(flags.client_key, "TESSERA_CLIENT_KEY");
  return c;
}

class Session {
 public:
  // Resolves the flags and the environment; `token`, when given, replaces both (login).
  static core::Result<std::unique_ptr<Session>> open(const CommonFlags& flags,
                                                     std::optional<std::string> token = {}) {
    ClientConfig c = clientConfig(flags);
    c.token = token ? *token : orEnv(flags.token, "TESSERA_TOKEN");
    if (c.token.empty()) {
      c.token = storedToken();
    }
    if (c.token.empty()) {
      return core::invalidArgument(
          "no token: set TESSERA_TOKEN, pass --token, or run `tessera login TOKEN` first");
    }
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> client, ApiClient::create(c));
    auto s = std::unique_ptr<Session>(new Session());
    s->client_ = std::move(client);
    s->explicit_tenant_ = orEnv(flags.tenant, "TESSERA_TENANT");
    s->json_ = flags.format == "json";
    return s;
  }

  bool json() const { return json_; }

  // On a listener chrooted to a tenant (its answers say so), that tenant's paths are /v1/<rest>:
  // the tenant paths commands write are rooted there. A tenant path sent before the first
  // answer told (a 404 there) is sent once more, rooted.
  core::Result<nlohmann::json> call(std::string_view method, const std::string& target,
                                    const nlohmann::json& body = nullptr) {
    const std::string sent = rooted(target);
    auto r = client_->call(method, sent, body);
    if (!r.isOk() && r.status().code() == core::StatusCode::kNotFound && rooted(target) != sent) {
      r = client_->call(method, rooted(target), body);
    }
    if (!r.isOk()) {
      return adminHint(target, r.status());
    }
    return r;
  }

  // "/v1/<rest>" in the admin scope (""), "/v1/tenants/<t>/<rest>" in tenant t's.
  static std::string path(const std::string& tenant, const std::string& rest) {
    return tenant.empty() ? "/v1/" + rest : "/v1/tenants/" + pathSegment(tenant) + "/" + rest;
  }

  // The calling token as lookup-self describes it (asked once per command).
  core::Result<nlohmann::json> self() {
    if (!self_) {
      TESSERA_ASSIGN_OR_RETURN(nlohmann::json r,
                               call("GET", path(explicit_tenant_, "auth/token/lookup-self")));
      self_ = r.value("data", nlohmann::json::object());
    }
    return *self_;
  }

  // The scope requests go to: the tenant named by --tenant or TESSERA_TENANT, else the
  // token's own tenant; "" is the admin scope.
  core::Result<std::string> scope() {
    if (!explicit_tenant_.empty()) {
      return explicit_tenant_;
    }
    TESSERA_ASSIGN_OR_RETURN(nlohmann::json me, self());
    return me.value("tenant", std::string());
  }

  // scope(), for things that exist only inside a tenant (workloads).
  core::Result<std::string> tenant(std::string_view what) {
    TESSERA_ASSIGN_OR_RETURN(std::string t, scope());
    if (t.empty()) {
      return core::invalidArgument(std::string(what) +
                                   " belong to a tenant: set TESSERA_TENANT or pass --tenant "
                                   "(this is an admin token)");
    }
    return t;
  }

  // `target` as this session sends it: rooted on a listener chrooted to a tenant (known once
  // the server has answered once).
  std::string rooted(const std::string& target) const {
    const std::string& chroot = client_->chrootTenant();
    const std::string prefix = "/v1/tenants/" + pathSegment(chroot) + "/";
    if (!chroot.empty() && target.rfind(prefix, 0) == 0) {
      return "/v1/" + target.substr(prefix.size());
    }
    return target;  // Another tenant's path stays as it is: the listener answers 404.
  }

 private:
  Session() = default;

  // A tenant token on an admin path gets a bare 404 (the server does not tell a tenant what lies
  // outside it); the person at the terminal is told what went wrong instead.
  core::Status adminHint(const std::string& target, const core::Status& failed) {
    // Tenant paths are /v1/tenants/<t>/<rest>; /v1/tenants and /v1/tenants/<t> are the admin's.
    const std::string tenants = "/v1/tenants/";
    const bool tenant_path =
        target.rfind(tenants, 0) == 0 && target.find('/', tenants.size()) != std::string::npos;
    const bool admin_path = target.rfind("/v1/", 0) == 0 && !tenant_path &&
                            target.find("auth/token/lookup-self") == std::string::npos;
    const auto code = failed.code();
    if (!admin_path || !client_->chrootTenant().empty() ||
        (code != core::StatusCode::kNotFound && code != core::StatusCode::kPermissionDenied)) {
      return failed;
    }
    auto me = self();
    if (!me.isOk() || me->value("tenant", std::string()).empty()) {
      return failed;
    }
    return core::Status(core::StatusCode::kPermissionDenied,
                        "this is an admin command, and your token belongs to tenant '" +
                            me->value("tenant", std::string()) +
                            "': use an admin (root) token (--token or TESSERA_TOKEN)");
  }

  std::unique_ptr<ApiClient> client_;
  std::string explicit_tenant_;
  bool json_ = false;
  std::optional<nlohmann::json> self_;
};

// ---------------------------------------------------------------------------------------------
// Output.

inline void printJson(const nlohmann::json& j) { std::cout << j.dump(2) << "\n"; }

// Columns padded to their widest cell, two spaces apart.
class Table {
 public:
  Table() = default;
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out, const std::string& indent = "") const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      width.resize(std::max(width.size(), row.size()), 0);
      for (size_t i = 0; i < row.size(); ++i) {
        width[i] = std::max(width[i], row[i].size());
      }
    }
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) {
          line += std::string(width[i] - row[i].size() + 2, ' ');
        }
      }
      out << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// Vault's two-column output.
inline void printKeyValues(const std::vector<std::pair<std::string, std::string>>& kvs) {
  Table t({"Key", "Value"});
  t.add({"---", "-----"});
  for (const auto& [k, v] : kvs) {
    t.add({k, v});
  }
  t.print(std::cout);
}

inline void printKeys(const nlohmann::json& keys, const std::string& none) {
  if (!keys.is_array() || keys.empty()) {
    std::cout << none << "\n";
    return;
  }
  std::cout << "Keys\n----\n";
  for (const nlohmann::json& k : keys) {
    std::cout << (k.is_string() ? k.get<std::string>() : k.dump()) << "\n";
  }
}

// A value for a table cell: strings as they are, lists joined, nothing as "-".
inline std::string cell(const nlohmann::json& v) {
  if (v.is_string()) {
    return v.get<std::string>();
  }
  if (v.is_null()) {
    return "-";
  }
  if (v.is_array()) {
    std::string out;
    for (const nlohmann::json& e : v) {
      out += (out.empty() ? "" : ", ") + cell(e);
    }
    return out.empty() ? "-" : out;
  }
  return v.dump();
}

inline int finish(const core::Status& s) {
  if (s.isOk()) {
    return 0;
  }
  std::cerr << "error: " << s.message() << "\n";
  return s.code() == core::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

inline core::Status badInput(const core::Status& s) {
  return s.isOk() ? s : core::invalidArgument(s.message());
}

template <typename Flags>
inline void bind(CLI::App* cmd, std::shared_ptr<Flags> flags, core::Status (*fn)(const Flags&),
                 int* rc) {
  cmd->callback([flags, fn, rc] { *rc = finish(fn(*flags)); });
}

}  // namespace tessera::cli
