// The server's configuration: reading server.hcl (readServerConfig), the nodes it declares, and
// what keeps a configuration from starting (configStartProblems).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "audit/auditor.h"
#include "audit/crypto.h"
#include "audit/file_sink.h"
#include "core/files.h"
#include "core/hcl.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/strings.h"
#include "model/node_profiles.h"
#include "secrets/service.h"
#include "server/certs.h"
#include "server/control_plane.h"
#include "server/fenced_store.h"
#include "server/http_server.h"
#include "server/idempotency.h"
#include "server/leader.h"
#include "server/node_records.h"
#include "server/request.h"
#include "server/route.h"
#include "server/server.h"
#include "store/etcd_store.h"
#include "store/sqlite_store.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// Builds the declared nodes, numbered on from those in `nodes`.
core::Status addNodes(const std::string& spec, const char* field,
                      const model::GpuCatalogue& catalogue, std::vector<model::Node>& nodes) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<NodeDecl> decls, parseNodeList(spec, field));
  std::set<std::string> names;
  for (const model::Node& n : nodes) {
    names.insert(n.name);
  }
  for (const NodeDecl& d : decls) {
    if (!names.insert(d.name).second) {
      return core::invalidArgument(std::string("nodes: ") + field + ": node '" + d.name +
                                   "' is declared twice");
    }
    auto n = model::makeProfileNode(d.profile, d.name, catalogue, static_cast<int>(nodes.size()));
    if (!n.isOk()) {
      return n.status().withContext(std::string("nodes: ") + field);
    }
    nodes.push_back(std::move(n).value());
  }
  return core::Status::ok();
}

}  // namespace

core::Result<std::vector<model::Node>> declaredNodes(const ServerConfig& config,
                                                     const model::GpuCatalogue& catalogue) {
  std::vector<model::Node> nodes;
  TESSERA_RETURN_IF_ERROR(addNodes(config.simulated_nodes, "simulated", catalogue, nodes));
  TESSERA_RETURN_IF_ERROR(addNodes(config.agent_nodes, "agents", catalogue, nodes));
  for (const auto& [name, labels] : config.node_labels) {
    auto it = std::find_if(nodes.begin(), nodes.end(),
                           [&](const model::Node& n) { return n.name == name; });
    if (it == nodes.end()) {
      return core::invalidArgument("nodes: labels: no declared node '" + name + "'");
    }
    it->labels = labels;
    TESSERA_RETURN_IF_ERROR(model::validateNode(*it).withContext("nodes: labels"));
  }
  return nodes;
}

namespace {

// "" when the server can create (or write) `path`, else why not.
std::string whyNotWritable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    return ::access(path.c_str(), W_OK) == 0 ? "" : "'" + path + "' cannot be written";
  }
  const fs::path folder = fs::absolute(path, ec).parent_path();
  if (!fs::is_directory(folder, ec)) {
    return "'" + path + "': its folder " + folder.string() + " does not exist";
  }
  return ::access(folder.c_str(), W_OK | X_OK) == 0
             ? ""
             : "'" + path + "': its folder " + folder.string() + " cannot be written";
}

}  // namespace

std::vector<std::string> configStartProblems(const ServerConfig& config) {
  std::vector<std::string> problems;
  for (const ListenerConfig& l : config.listeners) {
    if (core::Status st = HttpServer::checkListener(l); !st.isOk()) {
      problems.push_back(st.message());
    }
  }
  auto writable = [&](const std::string& what, const std::string& path) {
    if (std::string why = whyNotWritable(path); !why.empty()) {
      problems.push_back(what + ": " + why);
    }
  };
  auto readable = [&](const std::string& what, const std::string& path) {
    if (!std::ifstream(path)) {
      problems.push_back(what + ": '" + path + "' cannot be read");
    }
  };
  if (!config.etcd) {
    writable("storage \"sqlite\" path", config.storage_path);
  }
  if (config.seal == "file") {
    const std::string key =
        config.seal_key_file.empty() ? config.storage_path + ".unseal-key" : config.seal_key_file;
    std::error_code ec;
    if (std::filesystem::exists(key, ec)) {
      readable("secrets key_file", key);
    } else {
      writable("secrets key_file", key);
    }
  }
  for (const ServerConfig::AuditFile& a : config.audit) {
    writable("audit path", a.path);
    writable("audit salt_file", a.salt_file);
    if (a.signing_key_file.empty()) {
      writable("audit signing key", a.path + ".signing-key.pem");
    } else if (a.signing_key_file != "none") {
      readable("audit signing_key_file", a.signing_key_file);
    }
    if (a.checkpoint_copy_file != "none") {
      writable("audit checkpoint_copy_file",
               a.checkpoint_copy_file.empty() ? a.path + ".checkpoint" : a.checkpoint_copy_file);
    }
  }
  return problems;
}

namespace {

// One block of a type that takes no label, or none.
core::Result<const json*> singleBlock(const json& config, const char* type,
                                      const std::string& source) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> blocks,
                           core::hclBlocks(config, type, 0, source));
  if (blocks.size() > 1) {
    return core::invalidArgument(source + ": only one '" + type + "' block is allowed");
  }
  return blocks.empty() ? nullptr : blocks[0].body;
}

core::Result<int64_t> intField(const core::JsonNode& n, const char* field, int64_t lo, int64_t hi,
                               int64_t def) {
  return n.has(field) ? n.child(field).integer(lo, hi) : core::Result<int64_t>(def);
}

core::Result<std::string> strField(const core::JsonNode& n, const char* field,
                                   const std::string& def) {
  return n.has(field) ? n.child(field).str() : core::Result<std::string>(def);
}

core::Result<int64_t> durationField(const core::JsonNode& n, const char* field, int64_t def) {
  if (!n.has(field)) {
    return def;
  }
  const json& v = n.child(field).value();
  if (v.is_number_integer()) {
    return n.child(field).integer(1, INT64_MAX / 1000000000);
  }
  TESSERA_ASSIGN_OR_RETURN(std::string s, n.child(field).str());
  const char unit = s.back();
  const int64_t mult = unit == 's'   ? 1
                       : unit == 'm' ? 60
                       : unit == 'h' ? 3600
                       : unit == 'd' ? 86400
                                     : 0;
  try {
    const int64_t value = std::stoll(mult != 0 ? s.substr(0, s.size() - 1) : s);
    if (value > 0) {
      return value * (mult != 0 ? mult : 1);
    }
  } catch (const std::exception&) {
  }
  return n.child(field).error("expected a duration like \"1h\" or \"30m\"");
}

}  // namespace

core::Result<std::vector<NodeDecl>> parseNodeList(const std::string& spec, const char* field) {
  std::vector<NodeDecl> out;
  for (const std::string& item : core::splitList(spec, ',')) {
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      const std::string name = item.substr(0, eq);
      if (!validName(name)) {
        return core::invalidArgument(std::string("nodes: ") + field + ": '" + name +
                                     "' is not a valid node name (lowercase letters, digits, "
                                     "'-')");
      }
      out.push_back({name, item.substr(eq + 1)});
      continue;
    }
    const size_t colon = item.find(':');
    const std::string profile = item.substr(0, colon);
    int count = 1;
    if (colon != std::string::npos) {
      try {
        count = std::stoi(item.substr(colon + 1));
      } catch (const std::exception&) {
        count = -1;
      }
    }
    if (count < 1 || count > 10000) {
      return core::invalidArgument(std::string("nodes: ") + field +
                                   ": expected PROFILE:COUNT or NAME=PROFILE, got '" + item + "'");
    }
    for (int i = 0; i < count; ++i) {
      out.push_back({profile + "-" + std::to_string(i), profile});
    }
  }
  return out;
}

int defaultTenantConcurrency(unsigned cores, int workers) {
  const int half_cores = static_cast<int>(cores / 2);
  return std::max(2, std::min(half_cores, workers / 2));
}

core::Result<ServerConfig> readServerConfig(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(json doc, core::parseConfigFile(path));
  ServerConfig c;
  core::JsonNode top(doc, "", path);
  TESSERA_RETURN_IF_ERROR(top.checkKeys({"storage", "listener", "audit", "scheduler", "nodes",
                                         "limits", "tokens", "secrets", "audit_durable_answers",
                                         "io_threads", "workers", "ha", "audit_refusals"}));
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> storage,
                           core::hclBlocks(doc, "storage", 1, path));
  if (storage.size() != 1 || (storage[0].labels[0] != "sqlite" && storage[0].labels[0] != "etcd")) {
    return core::invalidArgument(path +
                                 ": expected one storage \"sqlite\" { path = ... } or storage "
                                 "\"etcd\" { endpoints = [...] } block");
  }
  if (storage[0].labels[0] == "etcd") {
    core::JsonNode s(*storage[0].body, "storage.etcd", path);
    TESSERA_RETURN_IF_ERROR(
        s.checkKeys({"endpoints", "ca_file", "cert_file", "key_file", "prefix"}));
    store::EtcdStoreOptions e;
    const json* endpoints = s.has("endpoints") ? &s.child("endpoints").value() : nullptr;
    if (endpoints == nullptr || !endpoints->is_array() || endpoints->empty()) {
      return s.error("'endpoints' must be a non-empty list of etcd client URLs");
    }
    for (size_t i = 0; i < endpoints->size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(std::string url, s.child("endpoints").at(i).str());
      e.endpoints.push_back(std::move(url));
    }
    for (auto [field, out] : {std::pair{"ca_file", &e.ca_file},
                              {"cert_file", &e.cert_file},
                              {"key_file", &e.key_file},
                              {"prefix", &e.prefix}}) {
      if (s.has(field)) {
        TESSERA_ASSIGN_OR_RETURN(*out, s.child(field).str());
      }
    }
    c.etcd = std::move(e);
  } else {
    const std::string where = path + ": storage \"sqlite\"";
    core::JsonNode s(*storage[0].body, "storage.sqlite", path);
    TESSERA_RETURN_IF_ERROR(s.checkKeys({"path"}));
    if (!s.has("path")) {
      return core::invalidArgument(where + ": missing 'path'");
    }
    TESSERA_ASSIGN_OR_RETURN(c.storage_path, s.child("path").str());
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> listeners,
                           core::hclBlocks(doc, "listener", 1, path));
  if (listeners.empty()) {
    return core::invalidArgument(path + ": at least one listener \"tcp\" { ... } block is needed");
  }
  for (size_t i = 0; i < listeners.size(); ++i) {
    const std::string at = "listener[" + std::to_string(i) + "]";
    if (listeners[i].labels[0] != "tcp") {
      return core::invalidArgument(path + ": " + at + ": only listener \"tcp\" exists");
    }
    core::JsonNode l(*listeners[i].body, at, path);
    TESSERA_RETURN_IF_ERROR(l.checkKeys({"address", "chroot_tenant", "tls_cert_file",
                                         "tls_key_file", "tls_client_ca_file", "max_request_size",
                                         "request_timeout_ms", "tls_disable"}));
    ListenerConfig lc;
    TESSERA_ASSIGN_OR_RETURN(lc.address, strField(l, "address", "127.0.0.1:8200"));
    TESSERA_ASSIGN_OR_RETURN(lc.chroot_tenant, strField(l, "chroot_tenant", ""));
    TESSERA_ASSIGN_OR_RETURN(lc.tls_cert_file, strField(l, "tls_cert_file", ""));
    TESSERA_ASSIGN_OR_RETURN(lc.tls_key_file, strField(l, "tls_key_file", ""));
    TESSERA_ASSIGN_OR_RETURN(lc.tls_client_ca_file, strField(l, "tls_client_ca_file", ""));
    TESSERA_ASSIGN_OR_RETURN(int64_t max_body,
                             intField(l, "max_request_size", 1, int64_t{1} << 30, 1 << 20));
    lc.max_body_bytes = static_cast<size_t>(max_body);
    TESSERA_ASSIGN_OR_RETURN(int64_t timeout,
                             intField(l, "request_timeout_ms", 10, 3600000, 30000));
    lc.request_timeout = std::chrono::milliseconds(timeout);
    bool tls_disable = false;
    if (l.has("tls_disable")) {
      TESSERA_ASSIGN_OR_RETURN(tls_disable, l.child("tls_disable").boolean());
    }
    if (lc.tls_cert_file.empty() && !tls_disable) {
      return l.error(
          "tls_cert_file and tls_key_file are required (set tls_disable = true only "
          "for a loopback test listener)");
    }
    if (tls_disable && lc.address.rfind("127.", 0) != 0 && lc.address.rfind("[::1]", 0) != 0) {
      return l.error("tls_disable is allowed only on a loopback address");
    }
    if (!lc.chroot_tenant.empty() && !validName(lc.chroot_tenant)) {
      return l.child("chroot_tenant").error("not a valid tenant name");
    }
    c.listeners.push_back(std::move(lc));
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> audits,
                           core::hclBlocks(doc, "audit", 1, path));
  if (audits.empty()) {
    return core::invalidArgument(path +
                                 ": an audit \"file\" { path = ... } block is required: Tessera "
                                 "does not run without an audit log");
  }
  for (size_t i = 0; i < audits.size(); ++i) {
    const std::string at = "audit[" + std::to_string(i) + "]";
    if (audits[i].labels[0] != "file") {
      return core::invalidArgument(path + ": " + at + ": only audit \"file\" exists");
    }
    core::JsonNode a(*audits[i].body, at, path);
    TESSERA_RETURN_IF_ERROR(
        a.checkKeys({"path", "salt_file", "signing_key_file", "checkpoint_every", "flush_delay_ms",
                     "checkpoint_interval_ms", "checkpoint_copy_file", "rotate_bytes",
                     "rotate_interval", "retain_files"}));
    ServerConfig::AuditFile af;
    if (!a.has("path")) {
      return a.error("missing 'path'");
    }
    TESSERA_ASSIGN_OR_RETURN(af.path, a.child("path").str());
    TESSERA_ASSIGN_OR_RETURN(af.salt_file, strField(a, "salt_file", af.path + ".salt"));
    TESSERA_ASSIGN_OR_RETURN(af.signing_key_file, strField(a, "signing_key_file", ""));
    TESSERA_ASSIGN_OR_RETURN(int64_t every, intField(a, "checkpoint_every", 0, 1000000000, 1000));
    af.checkpoint_every = static_cast<uint64_t>(every);
    TESSERA_ASSIGN_OR_RETURN(af.flush_delay_ms, intField(a, "flush_delay_ms", 0, 1000, 50));
    TESSERA_ASSIGN_OR_RETURN(af.checkpoint_interval_ms,
                             intField(a, "checkpoint_interval_ms", 0, 3600000, 5000));
    TESSERA_ASSIGN_OR_RETURN(af.checkpoint_copy_file, strField(a, "checkpoint_copy_file", ""));
    TESSERA_ASSIGN_OR_RETURN(int64_t rotate_bytes,
                             intField(a, "rotate_bytes", 0, int64_t{1} << 50, 100 << 20));
    af.rotate_bytes = static_cast<uint64_t>(rotate_bytes);
    if (a.has("rotate_interval") &&
        (a.child("rotate_interval").value() == 0 || a.child("rotate_interval").value() == "0")) {
      af.rotate_interval_s = 0;  // Never by age.
    } else {
      TESSERA_ASSIGN_OR_RETURN(af.rotate_interval_s,
                               durationField(a, "rotate_interval", af.rotate_interval_s));
    }
    TESSERA_ASSIGN_OR_RETURN(af.retain_files, intField(a, "retain_files", 0, 1000000, 0));
    c.audit.push_back(std::move(af));
  }
  TESSERA_ASSIGN_OR_RETURN(const json* refusals, singleBlock(doc, "audit_refusals", path));
  if (refusals != nullptr) {
    core::JsonNode r(*refusals, "audit_refusals", path);
    TESSERA_RETURN_IF_ERROR(r.checkKeys(
        {"per_source_rate", "per_source_burst", "unauthenticated_rate", "unauthenticated_burst"}));
    for (const auto& [field, out, def] :
         {std::tuple{"per_source_rate", &c.refusals.per_source_rate, 10},
          std::tuple{"per_source_burst", &c.refusals.per_source_burst, 100},
          std::tuple{"unauthenticated_rate", &c.refusals.unauthenticated_rate, 100},
          std::tuple{"unauthenticated_burst", &c.refusals.unauthenticated_burst, 1000}}) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v, intField(r, field, 1, 1000000, def));
      *out = static_cast<double>(v);
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const json* sched, singleBlock(doc, "scheduler", path));
  if (sched != nullptr) {
    core::JsonNode s(*sched, "scheduler", path);
    TESSERA_RETURN_IF_ERROR(
        s.checkKeys({"policy", "pass_interval_ms", "reclaim_patience_s", "max_moves_per_pass",
                     "max_unsaved_gpu_seconds", "cpu_per_free_gpu_milli", "task_default_cpu_milli",
                     "task_default_memory_mib", "profile_min_tasks", "profile_half_life_s"}));
    TESSERA_ASSIGN_OR_RETURN(c.policy, strField(s, "policy", c.policy));
    TESSERA_ASSIGN_OR_RETURN(int64_t ms, intField(s, "pass_interval_ms", 1, 60000, 200));
    c.pass_interval_ms = static_cast<int>(ms);
    TESSERA_ASSIGN_OR_RETURN(c.reclaim_patience_s,
                             intField(s, "reclaim_patience_s", 0, 7 * 86400, 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t moves, intField(s, "max_moves_per_pass", 0, 1000, 8));
    c.max_moves_per_pass = static_cast<int>(moves);
    TESSERA_ASSIGN_OR_RETURN(c.max_unsaved_gpu_seconds,
                             intField(s, "max_unsaved_gpu_seconds", 0, 1000000000, 3600));
    TESSERA_ASSIGN_OR_RETURN(c.cpu_per_free_gpu_milli,
                             intField(s, "cpu_per_free_gpu_milli", 0, 1000000000, 0));
    TESSERA_ASSIGN_OR_RETURN(c.profile_min_tasks,
                             intField(s, "profile_min_tasks", 1, 1000000000, 100));
    TESSERA_ASSIGN_OR_RETURN(c.profile_half_life_s,
                             intField(s, "profile_half_life_s", 60, int64_t{365} * 86400, 86400));
    TESSERA_ASSIGN_OR_RETURN(
        c.task_default_cpu_milli,
        intField(s, "task_default_cpu_milli", 1, 1000000000, c.task_default_cpu_milli));
    TESSERA_ASSIGN_OR_RETURN(
        c.task_default_memory_mib,
        intField(s, "task_default_memory_mib", 1, int64_t{1} << 30, c.task_default_memory_mib));
  }
  TESSERA_ASSIGN_OR_RETURN(const json* ha, singleBlock(doc, "ha", path));
  if (ha != nullptr) {
    core::JsonNode h(*ha, "ha", path);
    TESSERA_RETURN_IF_ERROR(h.checkKeys({"api_addr", "lease_ttl_ms"}));
    ServerConfig::Ha c_ha;
    TESSERA_ASSIGN_OR_RETURN(c_ha.api_addr, strField(h, "api_addr", ""));
    if (c_ha.api_addr.rfind("https://", 0) != 0 && c_ha.api_addr.rfind("http://", 0) != 0) {
      return h.error(
          "api_addr: how clients reach this replica, like \"https://10.0.0.1:8200\" (standbys "
          "send clients to the leader's)");
    }
    TESSERA_ASSIGN_OR_RETURN(c_ha.lease_ttl_ms, intField(h, "lease_ttl_ms", 1000, 60000, 2000));
    if (!c.etcd) {
      return h.error("several replicas share an etcd store: use storage \"etcd\" with ha");
    }
    c.ha = c_ha;
  }
  TESSERA_ASSIGN_OR_RETURN(const json* nodes, singleBlock(doc, "nodes", path));
  if (nodes != nullptr) {
    core::JsonNode n(*nodes, "nodes", path);
    TESSERA_RETURN_IF_ERROR(
        n.checkKeys({"simulated", "agents", "lease_ttl_ms", "labels", "credential_ttl_s"}));
    TESSERA_ASSIGN_OR_RETURN(c.node_credential_ttl_s,
                             intField(n, "credential_ttl_s", 2, 86400, c.node_credential_ttl_s));
    if (n.has("labels")) {
      const json& all = (*nodes)["labels"];
      if (!all.is_object()) {
        return n.child("labels").error("expected { \"<node>\" = { <label> = \"<value>\" } }");
      }
      for (const auto& [node, labels] : all.items()) {
        if (!labels.is_object()) {
          return n.child("labels").child(node.c_str()).error("expected { <label> = \"<value>\" }");
        }
        for (const auto& [key, value] : labels.items()) {
          if (!value.is_string()) {
            return n.child("labels")
                .child(node.c_str())
                .error("label '" + key + "': expected a string");
          }
          TESSERA_RETURN_IF_ERROR(model::validateLabel(key, value.get<std::string>())
                                      .withContext(path + ": nodes.labels." + node));
          c.node_labels[node][key] = value.get<std::string>();
        }
      }
    }
    // Simulated nodes only where asked for: "" or "none" is none.
    if (n.has("simulated")) {
      const json& v = (*nodes)["simulated"];
      if (!v.is_string()) {
        return n.child("simulated")
            .error(
                "expected a string: PROFILE:COUNT or NAME=PROFILE, "
                "comma-separated, or \"none\"");
      }
      c.simulated_nodes = v.get<std::string>() == "none" ? "" : v.get<std::string>();
    }
    if (n.has("agents")) {
      TESSERA_ASSIGN_OR_RETURN(c.agent_nodes, strField(n, "agents", ""));
    }
    TESSERA_ASSIGN_OR_RETURN(c.node_lease_ttl_ms,
                             intField(n, "lease_ttl_ms", 1000, 3600000, c.node_lease_ttl_ms));
  }
  TESSERA_ASSIGN_OR_RETURN(const json* limits, singleBlock(doc, "limits", path));
  if (limits != nullptr) {
    core::JsonNode l(*limits, "limits", path);
    TESSERA_RETURN_IF_ERROR(l.checkKeys(
        {"tenant_rate", "tenant_burst", "tenant_concurrency", "max_workloads", "max_pending",
         "max_queues", "max_tokens", "max_policies", "max_secrets", "max_bytes", "min_free_disk_mb",
         "reject_delay_ms", "workload_retention_seconds"}));
    TESSERA_ASSIGN_OR_RETURN(int64_t rate, intField(l, "tenant_rate", 1, 10000000, 1000));
    TESSERA_ASSIGN_OR_RETURN(int64_t burst, intField(l, "tenant_burst", 1, 10000000, 2000));
    c.tenant_rate = static_cast<double>(rate);
    c.tenant_burst = static_cast<double>(burst);
    TESSERA_ASSIGN_OR_RETURN(c.max_workloads, intField(l, "max_workloads", 1, 100000000, 10000));
    TESSERA_ASSIGN_OR_RETURN(c.max_pending, intField(l, "max_pending", 1, 100000000, 1000));
    TESSERA_ASSIGN_OR_RETURN(c.max_queues, intField(l, "max_queues", 0, 10000, 32));
    TESSERA_ASSIGN_OR_RETURN(c.max_tokens, intField(l, "max_tokens", 1, 10000000, 10000));
    TESSERA_ASSIGN_OR_RETURN(c.max_policies, intField(l, "max_policies", 1, 100000, 256));
    TESSERA_ASSIGN_OR_RETURN(c.max_secrets, intField(l, "max_secrets", 0, 10000000, 10000));
    TESSERA_ASSIGN_OR_RETURN(c.max_bytes,
                             intField(l, "max_bytes", 1024, int64_t{1} << 40, c.max_bytes));
    TESSERA_ASSIGN_OR_RETURN(c.workload_retention_s,
                             intField(l, "workload_retention_seconds", 0, int64_t{10} * 365 * 86400,
                                      c.workload_retention_s));
    TESSERA_ASSIGN_OR_RETURN(c.min_free_disk_mb,
                             intField(l, "min_free_disk_mb", 0, 1 << 30, c.min_free_disk_mb));
    TESSERA_ASSIGN_OR_RETURN(int64_t conc, intField(l, "tenant_concurrency", 1, 10000, 0));
    c.tenant_max_in_flight = static_cast<int>(conc);
    TESSERA_ASSIGN_OR_RETURN(c.reject_delay_ms, intField(l, "reject_delay_ms", 0, 10000, 100));
  }
  TESSERA_ASSIGN_OR_RETURN(const json* tokens, singleBlock(doc, "tokens", path));
  if (tokens != nullptr) {
    core::JsonNode t(*tokens, "tokens", path);
    TESSERA_RETURN_IF_ERROR(t.checkKeys({"default_ttl", "max_ttl"}));
    TESSERA_ASSIGN_OR_RETURN(c.default_ttl_s, durationField(t, "default_ttl", c.default_ttl_s));
    TESSERA_ASSIGN_OR_RETURN(c.max_ttl_s, durationField(t, "max_ttl", c.max_ttl_s));
    if (c.default_ttl_s > c.max_ttl_s) {
      return t.error("default_ttl is above max_ttl");
    }
  }

  TESSERA_ASSIGN_OR_RETURN(const json* secrets, singleBlock(doc, "secrets", path));
  if (secrets != nullptr) {
    core::JsonNode s(*secrets, "secrets", path);
    TESSERA_RETURN_IF_ERROR(s.checkKeys({"seal", "key_file", "oidc_issuer", "identity_ttl"}));
    TESSERA_ASSIGN_OR_RETURN(c.oidc_issuer, strField(s, "oidc_issuer", ""));
    TESSERA_ASSIGN_OR_RETURN(c.identity_ttl_s, durationField(s, "identity_ttl", c.identity_ttl_s));
    if (c.identity_ttl_s < 60 || c.identity_ttl_s > int64_t{24} * 3600) {
      return s.error("identity_ttl must be between 1m and 24h");
    }
    TESSERA_ASSIGN_OR_RETURN(c.seal, strField(s, "seal", "file"));
    if (c.seal != "file" && c.seal != "shamir") {
      return s.error("seal must be \"file\" or \"shamir\", not \"" + c.seal + "\"");
    }
    TESSERA_ASSIGN_OR_RETURN(c.seal_key_file, strField(s, "key_file", ""));
    if (c.seal == "shamir" && !c.seal_key_file.empty()) {
      return s.error("key_file is for seal = \"file\"; Shamir shares are never stored");
    }
  }
  if (c.etcd && c.seal == "file" && c.seal_key_file.empty()) {
    return core::invalidArgument(
        path +
        ": storage \"etcd\" needs secrets { key_file = ... } (the unseal key is never "
        "kept in the store; every server on the cluster needs the same file) or seal = "
        "\"shamir\"");
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string durable_answers,
                           strField(top, "audit_durable_answers", "secrets"));
  if (durable_answers != "secrets" && durable_answers != "all") {
    return top.child("audit_durable_answers")
        .error("expected \"secrets\" or \"all\", not \"" + durable_answers + "\"");
  }
  c.audit_durable_every_answer = durable_answers == "all";
  if (top.has("io_threads")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t n, top.child("io_threads").integer(1, 256));
    c.io_threads = static_cast<int>(n);
  }
  if (top.has("workers")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t n, top.child("workers").integer(1, 1024));
    c.workers = static_cast<int>(n);
  }
  // What the server's start builds from the nodes block fails here too, so that -validate
  // refuses what start would.
  if (auto declared = declaredNodes(c, model::GpuCatalogue::builtin()); !declared.isOk()) {
    return declared.status().withContext(path);
  }
  return c;
}

}  // namespace tessera::server
