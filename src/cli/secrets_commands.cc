#include "cli/secrets_commands.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "api/client.h"
#include "cli/client_session.h"

namespace tessera::cli {

using api::ApiClient;
using api::ClientConfig;
using api::pathSegment;
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// operator: the seal. init, unseal and status need no token (the server has none to check
// before it is initialized); seal, rotate and rewrap need a root token.

struct OperatorFlags {
  CommonFlags common;
  int shares = 5;
  int threshold = 3;
  std::string key;
  bool reset = false;
  std::vector<std::string> shares_given;  // generate-root
  std::string ttl = "15m";
};

core::Result<std::unique_ptr<ApiClient>> tokenlessClient(const CommonFlags& f) {
  return ApiClient::create(clientConfig(f));
}

void printSeal(const json& s) {
  printKeyValues({{"Seal Type", cell(s.value("type", json()))},
                  {"Initialized", s.value("initialized", false) ? "true" : "false"},
                  {"Sealed", s.value("sealed", true) ? "true" : "false"},
                  {"Total Shares", std::to_string(s.value("n", 0))},
                  {"Threshold", std::to_string(s.value("t", 0))},
                  {"Unseal Progress",
                   std::to_string(s.value("progress", 0)) + "/" + std::to_string(s.value("t", 0))},
                  {"Key Term", std::to_string(s.value("term", 0))}});
}

core::Status operatorInit(const OperatorFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> c, tokenlessClient(f.common));
  TESSERA_ASSIGN_OR_RETURN(
      json r, c->call("PUT", "/v1/sys/init",
                      {{"secret_shares", f.shares}, {"secret_threshold", f.threshold}}));
  if (f.common.format == "json") {
    printJson(r);
    return core::Status::ok();
  }
  const json keys = r.value("keys", json::array());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::cout << "Unseal Key " << i + 1 << ": " << keys[i].get<std::string>() << "\n";
  }
  std::cout << "\nSecrets initialized with " << f.shares << " key shares and a key threshold of "
            << f.threshold << ". Give each share to a different person; the server forgets them."
            << "\nAfter a restart it starts sealed: " << f.threshold
            << " shares unseal it (`tessera operator unseal`).\n";
  return core::Status::ok();
}

core::Status operatorUnseal(const OperatorFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> c, tokenlessClient(f.common));
  json body = {{"reset", f.reset}};
  if (!f.reset) {
    std::string key = f.key;
    if (key.empty() || key == "-") {
      if (isatty(STDIN_FILENO) != 0) {
        std::cerr << "Unseal Key (will be hidden): " << std::flush;
      }
      std::getline(std::cin, key);
    }
    key = trim(key);
    if (key.empty()) {
      return core::invalidArgument("operator unseal: no key share given");
    }
    body["key"] = key;
  }
  TESSERA_ASSIGN_OR_RETURN(json r, c->call("PUT", "/v1/sys/unseal", body));
  if (f.common.format == "json") {
    printJson(r);
  } else {
    printSeal(r);
  }
  return core::Status::ok();
}

core::Status operatorStatus(const OperatorFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> c, tokenlessClient(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r, c->call("GET", "/v1/sys/seal-status"));
  if (f.common.format == "json") {
    printJson(r);
  } else {
    printSeal(r);
  }
  return core::Status::ok();
}

// seal, rotate, rewrap: PUT sys/<op> with a token.
core::Status operatorCall(const OperatorFlags& f, const std::string& op) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("PUT", "/v1/sys/" + op, json::object()));
  if (s->json()) {
    printJson(r);
  } else if (op == "seal") {
    std::cout << "Sealed: secrets are unavailable until unsealed.\n";
  } else if (op == "rotate") {
    std::cout << "Key term " << r["data"].value("term", 0)
              << " is active; older terms stay readable. Run `tessera operator rewrap` to "
                 "re-seal older values under it.\n";
  } else {
    std::cout << "Rewrapped " << r["data"].value("rewrapped", 0) << " value(s).\n";
  }
  return core::Status::ok();
}

core::Status operatorGenerateRoot(const OperatorFlags& f) {
  std::vector<std::string> shares = f.shares_given;
  if (shares.empty()) {
    if (isatty(STDIN_FILENO) != 0) {
      std::cerr << "Unseal key shares, one per line, then end of input (Ctrl-D):\n";
    }
    for (std::string line; std::getline(std::cin, line);) {
      if (!trim(line).empty()) {
        shares.push_back(trim(line));
      }
    }
  }
  if (shares.empty()) {
    return core::invalidArgument("operator generate-root: no unseal key shares given");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> c, tokenlessClient(f.common));
  TESSERA_ASSIGN_OR_RETURN(
      json r, c->call("PUT", "/v1/sys/generate-root", {{"keys", shares}, {"ttl", f.ttl}}));
  const json d = r.value("data", json::object());
  if (f.common.format == "json") {
    printJson(d);
    return core::Status::ok();
  }
  std::cout << "Root token (expires in " << d.value("ttl", 0)
            << " s, not renewable; revoke it when done):\n  " << d.value("token", "") << "\n";
  return core::Status::ok();
}

core::Status operatorSeal(const OperatorFlags& f) { return operatorCall(f, "seal"); }
core::Status operatorRotate(const OperatorFlags& f) { return operatorCall(f, "rotate"); }
core::Status operatorRewrap(const OperatorFlags& f) { return operatorCall(f, "rewrap"); }

// ---------------------------------------------------------------------------------------------
// secrets kv

struct KvFlags {
  CommonFlags common;
  std::string path;
  std::vector<std::string> pairs;  // key=value; value "@FILE" reads a file, "-" stdin.
  int64_t cas = -1;
  int64_t version = 0;
  std::string field;
  std::vector<int64_t> versions;
  std::string op;  // metadata: get, put, delete.
  int64_t max_versions = -1;
  std::string cas_required;  // "", "true", "false"
};

std::string kvPath(const std::string& scope, const std::string& op, const std::string& path) {
  std::string out = "secrets/kv/" + op;
  if (!path.empty()) {
    out += "/" + path;
  }
  return Session::path(scope, out);
}

// `vault kv get|put -format=json`'s envelope around an answer's data, so that scripts written
// against Vault's CLI read the same fields (`.data.data.password`, `.data.metadata.version`).
json vaultEnvelope(const json& r) {
  return {{"request_id", r.value("request_id", "")},
          {"lease_id", ""},
          {"lease_duration", 0},
          {"renewable", false},
          {"data", r.value("data", json())},
          {"warnings", nullptr},
          {"mount_type", "kv"}};
}

core::Result<json> pairsObject(const std::vector<std::string>& pairs) {
  json data = json::object();
  for (const std::string& p : pairs) {
    const size_t eq = p.find('=');
    if (eq == std::string::npos || eq == 0) {
      return core::invalidArgument("'" + p + "' is not KEY=VALUE");
    }
    std::string value = p.substr(eq + 1);
    if (value == "-") {
      value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else if (!value.empty() && value[0] == '@') {
      std::ifstream in(value.substr(1), std::ios::binary);
      if (!in) {
        return core::invalidArgument("cannot read " + value.substr(1));
      }
      value.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    data[p.substr(0, eq)] = value;
  }
  return data;
}

// `kv put` (a whole new version) and `kv patch` (the current one with these fields changed).
core::Status kvWrite(const KvFlags& f, bool patch) {
  const char* what = patch ? "secrets kv patch" : "secrets kv put";
  if (f.pairs.empty()) {
    return core::invalidArgument(std::string(what) + ": give at least one KEY=VALUE");
  }
  TESSERA_ASSIGN_OR_RETURN(json data, pairsObject(f.pairs));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("secrets"));
  json body = {{"data", data}};
  if (f.cas >= 0) {
    body["options"] = {{"cas", f.cas}};
  }
  TESSERA_ASSIGN_OR_RETURN(json r,
                           s->call(patch ? "PATCH" : "PUT", kvPath(scope, "data", f.path), body));
  if (s->json()) {
    printJson(vaultEnvelope(r));
  } else {
    const json d = r.value("data", json::object());
    if (d.is_object() && d.contains("version")) {
      std::cout << "Wrote version " << d.value("version", 0) << " of " << f.path << "\n";
    } else {
      // A write sent again after its answer was lost: applied once, its answer not kept.
      std::cout << "Wrote " << f.path << "\n";
      for (const json& w : r.value("warnings", json::array())) {
        std::cerr << "warning: " << (w.is_string() ? w.get<std::string>() : w.dump()) << "\n";
      }
    }
  }
  return core::Status::ok();
}

core::Status kvPut(const KvFlags& f) { return kvWrite(f, false); }
core::Status kvPatch(const KvFlags& f) { return kvWrite(f, true); }

core::Status kvGet(const KvFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("secrets"));
  std::string target = kvPath(scope, "data", f.path);
  if (f.version > 0) {
    target += "?version=" + std::to_string(f.version);
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", target));
  const json data = r.value("data", json::object());
  const json fields = data.value("data", json::object());
  if (!f.field.empty()) {
    if (!fields.contains(f.field)) {
      return core::notFound("no field '" + f.field + "' in " + f.path);
    }
    std::cout << (fields[f.field].is_string() ? fields[f.field].get<std::string>()
                                              : fields[f.field].dump())
              << "\n";
    return core::Status::ok();
  }
  if (s->json()) {
    printJson(vaultEnvelope(r));
    return core::Status::ok();
  }
  const json meta = data.value("metadata", json::object());
  std::cout << "version " << meta.value("version", 0) << ", written "
            << meta.value("created_time", "") << "\n";
  std::vector<std::pair<std::string, std::string>> kvs;
  for (const auto& [k, v] : fields.items()) {
    kvs.emplace_back(k, cell(v));
  }
  printKeyValues(kvs);
  return core::Status::ok();
}

core::Status kvVersionsOp(const KvFlags& f, const std::string& op) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("secrets"));
  if (op == "delete" && f.versions.empty()) {
    TESSERA_RETURN_IF_ERROR(s->call("DELETE", kvPath(scope, "data", f.path)).status());
  } else {
    if (f.versions.empty()) {
      return core::invalidArgument("secrets kv " + op + ": --versions is required");
    }
    TESSERA_RETURN_IF_ERROR(
        s->call("PUT", kvPath(scope, op, f.path), {{"versions", f.versions}}).status());
  }
  if (!s->json()) {
    std::cout << "Done: " << op << " " << f.path << "\n";
  }
  return core::Status::ok();
}

core::Status kvDelete(const KvFlags& f) { return kvVersionsOp(f, "delete"); }
core::Status kvUndelete(const KvFlags& f) { return kvVersionsOp(f, "undelete"); }
core::Status kvDestroy(const KvFlags& f) { return kvVersionsOp(f, "destroy"); }

core::Status kvMetadata(const KvFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("secrets"));
  const std::string target = kvPath(scope, "metadata", f.path);
  if (f.op == "delete") {
    TESSERA_RETURN_IF_ERROR(s->call("DELETE", target).status());
    if (!s->json()) {
      std::cout << "Deleted " << f.path << " and every version of it\n";
    }
    return core::Status::ok();
  }
  if (f.op == "put") {
    json body = json::object();
    if (f.max_versions >= 0) {
      body["max_versions"] = f.max_versions;
    }
    if (!f.cas_required.empty()) {
      body["cas_required"] = f.cas_required == "true";
    }
    TESSERA_RETURN_IF_ERROR(s->call("PUT", target, body).status());
    return core::Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", target));
  const json m = r.value("data", json::object());
  if (s->json()) {
    printJson(m);
    return core::Status::ok();
  }
  printKeyValues({{"current_version", cell(m.value("current_version", json()))},
                  {"oldest_version", cell(m.value("oldest_version", json()))},
                  {"max_versions", cell(m.value("max_versions", json()))},
                  {"cas_required", cell(m.value("cas_required", json()))},
                  {"created_time", cell(m.value("created_time", json()))},
                  {"updated_time", cell(m.value("updated_time", json()))}});
  Table t({"Version", "Created", "Deleted", "Destroyed"});
  const json versions = m.value("versions", json::object());
  for (const auto& [n, v] : versions.items()) {
    t.add({n, cell(v.value("created_time", json())), cell(v.value("deletion_time", json())),
           cell(v.value("destroyed", json()))});
  }
  std::cout << "\n";
  t.print(std::cout);
  return core::Status::ok();
}

core::Status kvList(const KvFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("secrets"));
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("LIST", kvPath(scope, "metadata", f.path)));
  const json keys = r.value("data", json::object()).value("keys", json::array());
  if (s->json()) {
    printJson(keys);
  } else {
    printKeys(keys, "No secrets.");
  }
  return core::Status::ok();
}

// ---------------------------------------------------------------------------------------------
// secrets db

struct DbFlags {
  CommonFlags common;
  std::string what;  // config or role
  std::string op;    // write, read, delete, list
  std::string name;
  std::vector<std::string> pairs;
  std::string ttl;
};

core::Status dbManage(const DbFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("secrets"));
  const std::string base = "secrets/db/" + std::string(f.what == "role" ? "roles" : "config");
  if (f.op == "list") {
    TESSERA_ASSIGN_OR_RETURN(json r, s->call("LIST", Session::path(scope, base)));
    const json keys = r.value("data", json::object()).value("keys", json::array());
    if (s->json()) {
      printJson(keys);
    } else {
      printKeys(keys, f.what == "role" ? "No roles." : "No connections.");
    }
    return core::Status::ok();
  }
  if (f.name.empty()) {
    return core::invalidArgument("secrets db " + f.what + " " + f.op + ": NAME is required");
  }
  const std::string target = Session::path(scope, base + "/" + pathSegment(f.name));
  if (f.op == "write") {
    TESSERA_ASSIGN_OR_RETURN(json body, pairsObject(f.pairs));
    if (body.contains("verify_connection")) {
      body["verify_connection"] = body["verify_connection"] != "false";
    }
    TESSERA_RETURN_IF_ERROR(s->call("PUT", target, body).status());
    if (!s->json()) {
      std::cout << "Wrote " << f.what << " " << f.name << "\n";
    }
    return core::Status::ok();
  }
  if (f.op == "delete") {
    TESSERA_RETURN_IF_ERROR(s->call("DELETE", target).status());
    if (!s->json()) {
      std::cout << "Deleted " << f.what << " " << f.name << "\n";
    }
    return core::Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", target));
  const json d = r.value("data", json::object());
  if (s->json()) {
    printJson(d);
    return core::Status::ok();
  }
  std::vector<std::pair<std::string, std::string>> kvs;
  for (const auto& [k, v] : d.items()) {
    kvs.emplace_back(k, cell(v));
  }
  printKeyValues(kvs);
  return core::Status::ok();
}

core::Status dbCreds(const DbFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("secrets"));
  std::string target = Session::path(scope, "secrets/db/creds/" + pathSegment(f.name));
  if (!f.ttl.empty()) {
    target += "?ttl=" + pathSegment(f.ttl);
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", target));
  if (s->json()) {
    printJson(r);
    return core::Status::ok();
  }
  const json d = r.value("data", json::object());
  printKeyValues({{"lease_id", cell(r.value("lease_id", json()))},
                  {"lease_duration", cell(r.value("lease_duration", json())) + "s"},
                  {"lease_renewable", cell(r.value("renewable", json()))},
                  {"username", cell(d.value("username", json()))},
                  {"password", cell(d.value("password", json()))}});
  return core::Status::ok();
}

// ---------------------------------------------------------------------------------------------
// lease

struct LeaseFlags {
  CommonFlags common;
  std::string id;
  std::string increment;
  bool prefix = false;
};

core::Status leaseLookup(const LeaseFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("leases"));
  TESSERA_ASSIGN_OR_RETURN(
      json r, s->call("PUT", Session::path(scope, "leases/lookup"), {{"lease_id", f.id}}));
  const json d = r.value("data", json::object());
  if (s->json()) {
    printJson(d);
    return core::Status::ok();
  }
  printKeyValues({{"lease_id", cell(d.value("lease_id", json()))},
                  {"state", cell(d.value("state", json()))},
                  {"ttl", cell(d.value("ttl", json())) + "s"},
                  {"expire_time", cell(d.value("expire_time", json()))},
                  {"max_expire_time", cell(d.value("max_expire_time", json()))},
                  {"renewable", cell(d.value("renewable", json()))},
                  {"last_error", cell(d.value("last_error", json()))}});
  return core::Status::ok();
}

core::Status leaseRenew(const LeaseFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("leases"));
  json body = {{"lease_id", f.id}};
  if (!f.increment.empty()) {
    body["increment"] = f.increment;
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("PUT", Session::path(scope, "leases/renew"), body));
  if (s->json()) {
    printJson(r);
  } else {
    std::cout << "Lease " << f.id << " renewed: " << r.value("lease_duration", 0) << "s left\n";
  }
  return core::Status::ok();
}

core::Status leaseRevoke(const LeaseFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("leases"));
  if (f.prefix) {
    TESSERA_ASSIGN_OR_RETURN(
        json r,
        s->call("PUT", Session::path(scope, "leases/revoke-prefix/" + f.id), json::object()));
    std::cout << "Revoked " << r["data"].value("revoked", 0) << " lease(s) under " << f.id << "\n";
    return core::Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(
      json r, s->call("PUT", Session::path(scope, "leases/revoke"), {{"lease_id", f.id}}));
  if (r.contains("warnings")) {
    std::cout << "Revocation queued (the first attempt failed; it is retried): "
              << cell(r["warnings"]) << "\n";
  } else {
    std::cout << "Revoked " << f.id << "\n";
  }
  return core::Status::ok();
}

core::Status leaseList(const LeaseFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("leases"));
  std::string target = Session::path(scope, "leases");
  if (!f.id.empty()) {
    target += "?prefix=" + pathSegment(f.id);
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("LIST", target));
  const json keys = r.value("data", json::object()).value("keys", json::array());
  if (s->json()) {
    printJson(keys);
  } else {
    printKeys(keys, "No leases.");
  }
  return core::Status::ok();
}

// ---------------------------------------------------------------------------------------------
// grant

struct GrantFlags {
  CommonFlags common;
  std::string to;
  std::string on;  // tenants/<owner>/<path>
  std::string policy = "read";
  std::string ttl;
  std::string id;
};

void printGrant(const json& g) {
  printKeyValues({{"id", cell(g.value("id", json()))},
                  {"to", cell(g.value("grantee", json()))},
                  {"on", cell(g.value("on", json()))},
                  {"policy", cell(g.value("policy", json()))},
                  {"expire_time", cell(g.value("expire_time", json()))},
                  {"ttl", cell(g.value("ttl", json())) + "s"}});
}

core::Status grantCreate(const GrantFlags& f) {
  // --on secrets/<path> (of the token's own tenant, or $TESSERA_TENANT), or
  // tenants/<owner>/secrets/<path>: the grant is the owner's.
  const std::string prefix = "tenants/";
  std::string owner;
  std::string on = f.on;
  if (f.on.rfind(prefix, 0) == 0) {
    const size_t slash = f.on.find('/', prefix.size());
    if (slash == std::string::npos) {
      return core::invalidArgument(
          "grant create: --on: expected secrets/<path> (your own tenant's), or "
          "tenants/<tenant>/secrets/<path>, like secrets/kv/data/app/config");
    }
    owner = f.on.substr(prefix.size(), slash - prefix.size());
    on = f.on.substr(slash + 1);
  }
  if (f.ttl.empty()) {
    return core::invalidArgument("grant create: --ttl is required (like 4h); no grant is forever");
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  if (owner.empty()) {
    TESSERA_ASSIGN_OR_RETURN(owner, s->tenant("grants"));
  }
  TESSERA_ASSIGN_OR_RETURN(
      json r, s->call("POST", Session::path(owner, "grants"),
                      {{"to", f.to}, {"on", on}, {"policy", f.policy}, {"ttl", f.ttl}}));
  const json g = r.value("data", json::object());
  if (s->json()) {
    printJson(g);
  } else {
    printGrant(g);
  }
  return core::Status::ok();
}

core::Status grantList(const GrantFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("grants"));
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", Session::path(scope, "grants")));
  const json grants = r.value("data", json::object()).value("grants", json::array());
  if (s->json()) {
    printJson(grants);
    return core::Status::ok();
  }
  if (grants.empty()) {
    std::cout << "No grants.\n";
    return core::Status::ok();
  }
  Table t({"ID", "OWNER", "TO", "ON", "POLICY", "EXPIRES", "TTL"});
  for (const json& g : grants) {
    t.add({cell(g.value("id", json())), cell(g.value("owner", json())),
           cell(g.value("grantee", json())), cell(g.value("on", json())),
           cell(g.value("policy", json())), cell(g.value("expire_time", json())),
           cell(g.value("ttl", json())) + "s"});
  }
  t.print(std::cout);
  return core::Status::ok();
}

core::Status grantRevoke(const GrantFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string scope, s->tenant("grants"));
  TESSERA_RETURN_IF_ERROR(
      s->call("DELETE", Session::path(scope, "grants/" + pathSegment(f.id))).status());
  if (!s->json()) {
    std::cout << "Revoked grant " << f.id << "\n";
  }
  return core::Status::ok();
}

// ---------------------------------------------------------------------------------------------
// doctor

struct DoctorFlags {
  CommonFlags common;
  std::string threshold = "24h";
};

core::Status doctor(const DoctorFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r,
                           s->call("GET", "/v1/sys/doctor?threshold=" + pathSegment(f.threshold)));
  const json findings = r.value("data", json::object()).value("findings", json::array());
  if (s->json()) {
    printJson(findings);
    return findings.empty()
               ? core::Status::ok()
               : core::failedPrecondition(std::to_string(findings.size()) + " finding(s)");
  }
  if (findings.empty()) {
    std::cout << "No token, grant or lease lives longer than " << f.threshold << ".\n";
    return core::Status::ok();
  }
  Table t({"KIND", "TENANT", "ID", "NAME", "WHY"});
  for (const json& x : findings) {
    const std::string tenant = x.value("tenant", "");
    t.add({cell(x.value("kind", json())), tenant.empty() ? "(admin)" : tenant,
           cell(x.value("id", json())), cell(x.value("name", json())),
           cell(x.value("why", json()))});
  }
  t.print(std::cout);
  // Findings fail the command, so that `tessera doctor` can gate a CI job.
  return core::failedPrecondition(std::to_string(findings.size()) +
                                  " credential(s) live longer than " + f.threshold +
                                  ": shorten or revoke them");
}

}  // namespace

void addSecretsCommands(CLI::App& app, int* rc) {
  CLI::App* op = app.add_subcommand(
      "operator", "The secrets barrier: init, unseal, seal, status, rotate, rewrap");
  op->require_subcommand(1);
  const FlagSet admin{.tenant = false};
  const FlagSet tokenless{.token = false, .tenant = false};
  {
    auto f = std::make_shared<OperatorFlags>();
    CLI::App* c = op->add_subcommand(
        "init", "Initialize a server with seal = \"shamir\": prints the unseal key shares once");
    addCommonFlags(c, f->common, tokenless);
    c->add_option("--key-shares", f->shares,
                  "Shares to split the unseal key into (also -key-shares=N)")
        ->check(CLI::Range(1, 255));
    c->add_option("--key-threshold", f->threshold,
                  "Shares needed to unseal (also -key-threshold=N)")
        ->check(CLI::Range(1, 255));
    bind(c, f, &operatorInit, rc);
  }
  {
    auto f = std::make_shared<OperatorFlags>();
    CLI::App* c = op->add_subcommand(
        "unseal", "Give one unseal key share; at the threshold the server unseals");
    addCommonFlags(c, f->common, tokenless);
    c->add_option("KEY", f->key, "The share (default, or `-`: read from standard input)");
    c->add_flag("--reset", f->reset, "Forget the shares given so far");
    bind(c, f, &operatorUnseal, rc);
  }
  {
    auto f = std::make_shared<OperatorFlags>();
    CLI::App* c = op->add_subcommand(
        "generate-root",
        "A short-lived root token, for a quorum of unseal key shares (in key-file mode, the key "
        "file's contents)");
    addCommonFlags(c, f->common, tokenless);
    c->add_option("SHARES", f->shares_given, "The shares (default: read from standard input)");
    c->add_option("--ttl", f->ttl, "How long the token lives, 1m to 1h")->capture_default_str();
    bind(c, f, &operatorGenerateRoot, rc);
  }
  {
    auto f = std::make_shared<OperatorFlags>();
    CLI::App* c = op->add_subcommand("status", "Whether the server is initialized and sealed");
    addCommonFlags(c, f->common, tokenless);
    bind(c, f, &operatorStatus, rc);
  }
  {
    auto f = std::make_shared<OperatorFlags>();
    CLI::App* c = op->add_subcommand(
        "seal", "Forget the keys in memory: secrets are unavailable until unsealed (root)");
    addCommonFlags(c, f->common, admin);
    bind(c, f, &operatorSeal, rc);
  }
  {
    auto f = std::make_shared<OperatorFlags>();
    CLI::App* c = op->add_subcommand(
        "rotate", "Start a new key term for new writes; older terms stay readable (root)");
    addCommonFlags(c, f->common, admin);
    bind(c, f, &operatorRotate, rc);
  }
  {
    auto f = std::make_shared<OperatorFlags>();
    CLI::App* c = op->add_subcommand(
        "rewrap", "Re-seal every value written under an older key term with the active one (root)");
    addCommonFlags(c, f->common, admin);
    bind(c, f, &operatorRewrap, rc);
  }

  CLI::App* secrets = app.add_subcommand("secrets", "The tenant's secrets: kv, db");
  secrets->require_subcommand(1);
  CLI::App* kv = secrets->add_subcommand(
      "kv",
      "Versioned key-value secrets (Vault KV v2): put, get, delete, undelete, destroy, "
      "metadata, list");
  kv->require_subcommand(1);
  auto path_arg = [](CLI::App* c, KvFlags& f) {
    c->add_option("PATH", f.path, "The secret's path, like app/db")->required();
  };
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand("put",
                                     "Write a new version: PATH KEY=VALUE... "
                                     "(VALUE @FILE reads a file, - standard input)");
    addCommonFlags(c, f->common);
    path_arg(c, *f);
    c->add_option("PAIRS", f->pairs, "KEY=VALUE fields");
    c->add_option("--cas", f->cas,
                  "Write only if the current version is this (0: only if the key is new)");
    bind(c, f, &kvPut, rc);
  }
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand(
        "patch",
        "Write a new version from the current one with these fields changed: PATH KEY=VALUE... "
        "(fields not named keep their values)");
    addCommonFlags(c, f->common);
    path_arg(c, *f);
    c->add_option("PAIRS", f->pairs, "KEY=VALUE fields");
    c->add_option("--cas", f->cas, "Write only if the current version is this");
    bind(c, f, &kvPatch, rc);
  }
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand("get", "Read the current (or --version) version");
    addCommonFlags(c, f->common);
    path_arg(c, *f);
    c->add_option("--version", f->version, "The version to read (default: the current one)");
    c->add_option("--field", f->field, "Print only this field's value");
    bind(c, f, &kvGet, rc);
  }
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand(
        "delete", "Soft-delete the current version (or --versions); undelete brings it back");
    addCommonFlags(c, f->common);
    path_arg(c, *f);
    c->add_option("--versions", f->versions, "Versions to delete")->delimiter(',');
    bind(c, f, &kvDelete, rc);
  }
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand("undelete", "Bring soft-deleted versions back");
    addCommonFlags(c, f->common);
    path_arg(c, *f);
    c->add_option("--versions", f->versions, "Versions to undelete")->delimiter(',')->required();
    bind(c, f, &kvUndelete, rc);
  }
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand("destroy", "Erase versions' data for good");
    addCommonFlags(c, f->common);
    path_arg(c, *f);
    c->add_option("--versions", f->versions, "Versions to destroy")->delimiter(',')->required();
    bind(c, f, &kvDestroy, rc);
  }
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand(
        "metadata",
        "get: versions and settings; put: --max-versions, --cas-required; delete: "
        "the key and every version");
    addCommonFlags(c, f->common);
    c->add_option("OP", f->op, "get, put or delete")
        ->required()
        ->check(CLI::IsMember({"get", "put", "delete"}));
    path_arg(c, *f);
    c->add_option("--max-versions", f->max_versions, "Versions kept (0: the tenant's setting)");
    c->add_option("--cas-required", f->cas_required, "true or false")
        ->check(CLI::IsMember({"true", "false"}));
    bind(c, f, &kvMetadata, rc);
  }
  {
    auto f = std::make_shared<KvFlags>();
    CLI::App* c = kv->add_subcommand("list", "The names under a prefix (folders end in /)");
    addCommonFlags(c, f->common);
    c->add_option("PREFIX", f->path, "A folder, like app/ (default: the top)");
    bind(c, f, &kvList, rc);
  }

  CLI::App* db = secrets->add_subcommand(
      "db", "Dynamic PostgreSQL credentials: connections, roles, and creds with a lease");
  db->require_subcommand(1);
  for (const char* what : {"config", "role"}) {
    CLI::App* w = db->add_subcommand(
        what, std::string(what) == "config"
                  ? "Connections: write NAME connection_url=... username=... password=... "
                    "allowed_roles=r1,r2 [verify_connection=false]; read, delete, list"
                  : "Roles: write NAME db_name=CONN creation_statements=@create.sql "
                    "[revocation_statements=@drop.sql] default_ttl=1h max_ttl=24h; read, "
                    "delete, list");
    w->require_subcommand(1);
    for (const char* op : {"write", "read", "delete", "list"}) {
      auto f = std::make_shared<DbFlags>();
      f->what = what;
      f->op = op;
      CLI::App* c = w->add_subcommand(op, std::string(op) + " a " + what);
      addCommonFlags(c, f->common);
      if (std::string(op) != "list") {
        c->add_option("NAME", f->name, "Its name")->required();
      }
      if (std::string(op) == "write") {
        c->add_option("FIELDS", f->pairs, "KEY=VALUE fields (VALUE @FILE reads a file)");
      }
      bind(c, f, &dbManage, rc);
    }
  }
  {
    auto f = std::make_shared<DbFlags>();
    CLI::App* c = db->add_subcommand(
        "creds", "A new PostgreSQL user for ROLE, with a lease: revoked (dropped) when it ends");
    addCommonFlags(c, f->common);
    c->add_option("ROLE", f->name, "The role")->required();
    c->add_option("--ttl", f->ttl, "Lease TTL, like 30m (default: the role's)");
    bind(c, f, &dbCreds, rc);
  }

  {
    auto f = std::make_shared<DoctorFlags>();
    CLI::App* c = app.add_subcommand(
        "doctor", "Tokens, grants and leases that live long or forever (root or sudo)");
    addCommonFlags(c, f->common, admin);
    c->add_option("--threshold", f->threshold, "What counts as long, like 24h")
        ->capture_default_str();
    c->footer(
        "Exit status: 0 when nothing is found, 1 when something is (or the check failed), so "
        "`tessera doctor` can gate a CI job.");
    bind(c, f, &doctor, rc);
  }

  CLI::App* grant = app.add_subcommand(
      "grant", "Time-bound access for another tenant to some of this tenant's secrets");
  grant->require_subcommand(1);
  {
    auto f = std::make_shared<GrantFlags>();
    CLI::App* c =
        grant->add_subcommand("create",
                              "Let --to's tokens use --on for --ttl (e.g. --to team-1 --on "
                              "tenants/team-2/secrets/kv/data/projects/x --policy read --ttl 4h)");
    addCommonFlags(c, f->common);
    c->add_option("--to", f->to, "The tenant that gets access")->required();
    c->add_option("--on", f->on,
                  "secrets/<path> of your own tenant (like secrets/kv/data/app/config), or "
                  "tenants/<owner>/secrets/<path>")
        ->required();
    c->add_option("--policy", f->policy,
                  "read (read, list), write (also create, update, delete), or the name of one "
                  "of the owner's policies (judged at each use)")
        ->capture_default_str();
    c->add_option("--ttl", f->ttl, "How long, like 4h (required: no grant is forever)")->required();
    bind(c, f, &grantCreate, rc);
  }
  {
    auto f = std::make_shared<GrantFlags>();
    CLI::App* c = grant->add_subcommand("list", "Grants the tenant gave or received");
    addCommonFlags(c, f->common);
    bind(c, f, &grantList, rc);
  }
  {
    auto f = std::make_shared<GrantFlags>();
    CLI::App* c = grant->add_subcommand("revoke", "End a grant the tenant gave, now");
    addCommonFlags(c, f->common);
    c->add_option("ID", f->id, "The grant's id")->required();
    bind(c, f, &grantRevoke, rc);
  }

  CLI::App* lease = app.add_subcommand(
      "lease", "The tenant's leases on dynamic credentials: lookup, renew, revoke, list");
  lease->require_subcommand(1);
  {
    auto f = std::make_shared<LeaseFlags>();
    CLI::App* c = lease->add_subcommand("lookup", "A lease's state, TTL and expiry");
    addCommonFlags(c, f->common);
    c->add_option("LEASE_ID", f->id, "The lease id")->required();
    bind(c, f, &leaseLookup, rc);
  }
  {
    auto f = std::make_shared<LeaseFlags>();
    CLI::App* c = lease->add_subcommand(
        "renew", "Extend a lease to now + --increment (default: its TTL), up to its max TTL");
    addCommonFlags(c, f->common);
    c->add_option("LEASE_ID", f->id, "The lease id")->required();
    c->add_option("--increment", f->increment, "Like 30m or 3600");
    bind(c, f, &leaseRenew, rc);
  }
  {
    auto f = std::make_shared<LeaseFlags>();
    CLI::App* c = lease->add_subcommand(
        "revoke",
        "Revoke a lease now (the credential stops working), or every lease under "
        "a --prefix");
    addCommonFlags(c, f->common);
    c->add_option("LEASE_ID", f->id, "The lease id, or with --prefix a prefix")->required();
    c->add_flag("--prefix", f->prefix, "Revoke every lease whose id starts with LEASE_ID");
    bind(c, f, &leaseRevoke, rc);
  }
  {
    auto f = std::make_shared<LeaseFlags>();
    CLI::App* c = lease->add_subcommand("list", "The tenant's lease ids");
    addCommonFlags(c, f->common);
    c->add_option("PREFIX", f->id, "Only ids starting with this");
    bind(c, f, &leaseList, rc);
  }
}

}  // namespace tessera::cli
