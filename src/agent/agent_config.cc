#include "agent/agent_config.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "agent/nvml_discovery.h"
#include "agent/sim_discovery.h"
#include "core/hcl.h"
#include "core/json_node.h"
#include "model/node_profiles.h"

namespace tessera::agent {
namespace {

// The named profile: a built-in one, or one of `profile_file`'s.
core::Result<model::NodeProfile> findProfile(const std::string& name,
                                             const std::string& profile_file,
                                             const model::GpuCatalogue& catalogue) {
  if (!profile_file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<model::NodeProfile> profiles,
                             model::readNodeProfiles(profile_file, catalogue));
    for (const model::NodeProfile& p : profiles) {
      if (p.name == name) {
        return p;
      }
    }
  }
  if (std::optional<model::NodeProfile> p = model::findNodeProfile(name)) {
    return *p;
  }
  std::string known;
  for (const std::string& n : model::nodeProfileNames()) {
    known += (known.empty() ? "" : ", ") + n;
  }
  return core::invalidArgument("unknown node profile '" + name + "' (built in: " + known +
                               (profile_file.empty() ? "" : "; or one of " + profile_file) + ")");
}

core::Result<NodeGpus> simulate(const std::string& profile, const GpuConfig& config,
                                const std::string& node_name,
                                const model::GpuCatalogue& catalogue) {
  TESSERA_ASSIGN_OR_RETURN(model::NodeProfile p,
                           findProfile(profile, config.profile_file, catalogue));
  return SimDiscovery(p, node_name, catalogue, config.sim_mig).discover();
}

}  // namespace

core::Result<NodeMode> parseNodeMode(const std::string& name) {
  for (NodeMode m : {NodeMode::kShared, NodeMode::kSingleTenant, NodeMode::kDevelopment}) {
    if (name == nodeModeName(m)) {
      return m;
    }
  }
  return core::invalidArgument("node mode '" + name +
                               "' is not one of shared, single-tenant, development");
}

std::string_view nodeModeName(NodeMode mode) {
  switch (mode) {
    case NodeMode::kShared:
      return "shared";
    case NodeMode::kSingleTenant:
      return "single-tenant";
    case NodeMode::kDevelopment:
      return "development";
  }
  return "shared";
}

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

std::string agentInstance(const std::string& node, const std::string& work_dir) {
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016zx", std::hash<std::string>{}(work_dir));
  return node + "-" + std::string(suffix, 8);
}

core::Status validateGpuConfig(const GpuConfig& config) {
  if (config.backend != "nvml" && config.backend != "sim") {
    return core::invalidArgument("gpus.backend: '" + config.backend +
                                 "' is not a backend (nvml or sim)");
  }
  if (config.backend == "sim" && config.profile.empty()) {
    return core::invalidArgument("gpus.profile: the sim backend needs a node profile");
  }
  if (config.backend == "nvml" && config.nvml_library.empty()) {
    return core::invalidArgument("gpus.nvml_library: empty");
  }
  if (config.mig_mode != "fixed" && config.mig_mode != "managed") {
    return core::invalidArgument("gpus.mig_mode: '" + config.mig_mode +
                                 "' is not a MIG mode policy (fixed or managed)");
  }
  return core::Status::ok();
}

core::Result<AgentConfig> readAgentConfig(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json doc, core::parseConfigFile(path));
  core::JsonNode top(doc, "", path);
  TESSERA_RETURN_IF_ERROR(
      top.checkKeys({"node_name", "node_mode", "gpus", "container", "registry"}));
  AgentConfig c;
  if (top.has("node_name")) {
    TESSERA_ASSIGN_OR_RETURN(c.node_name, top.child("node_name").str());
  }
  if (top.has("node_mode")) {
    TESSERA_ASSIGN_OR_RETURN(const std::string mode, top.child("node_mode").str());
    auto parsed = parseNodeMode(mode);
    if (!parsed.isOk()) {
      return core::invalidArgument(path + ": node_mode: " + parsed.status().message());
    }
    c.node_mode = *parsed;
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> gpus, core::hclBlocks(doc, "gpus", 0, path));
  if (gpus.size() > 1) {
    return core::invalidArgument(path + ": one gpus { ... } block at most");
  }
  if (!gpus.empty()) {
    core::JsonNode g(*gpus[0].body, "gpus", path);
    TESSERA_RETURN_IF_ERROR(g.checkKeys({"backend", "nvml_library", "profile", "profile_file",
                                         "fallback_profile", "sim_mig", "mig_mode"}));
    for (const auto& [key, field] :
         {std::pair<const char*, std::string*>{"backend", &c.gpus.backend},
          {"nvml_library", &c.gpus.nvml_library},
          {"profile", &c.gpus.profile},
          {"profile_file", &c.gpus.profile_file},
          {"fallback_profile", &c.gpus.fallback_profile},
          {"mig_mode", &c.gpus.mig_mode}}) {
      if (g.has(key)) {
        TESSERA_ASSIGN_OR_RETURN(*field, g.child(key).str());
      }
    }
    if (g.has("sim_mig")) {
      const core::JsonNode list = g.child("sim_mig");
      if (!list.value().is_array()) {
        return list.error("expected a list of GPU indexes ([6, 7])");
      }
      for (size_t i = 0; i < list.value().size(); ++i) {
        TESSERA_ASSIGN_OR_RETURN(const int64_t gpu, list.at(i).integer(0, 63));
        c.gpus.sim_mig.push_back(static_cast<int>(gpu));
      }
    }
  }
  if (core::Status s = validateGpuConfig(c.gpus); !s.isOk()) {
    return core::invalidArgument(path + ": " + s.message());
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> containers,
                           core::hclBlocks(doc, "container", 0, path));
  if (containers.size() > 1) {
    return core::invalidArgument(path + ": one container { ... } block at most");
  }
  if (!containers.empty()) {
    core::JsonNode b(*containers[0].body, "container", path);
    TESSERA_RETURN_IF_ERROR(
        b.checkKeys({"runtime", "path", "cdi_dir", "cdi_dynamic_dir", "image_cache_max_mib",
                     "user_namespace", "pull_retries", "pull_backoff_seconds"}));
    if (b.has("pull_retries")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t n, b.child("pull_retries").integer(0, 20));
      c.container.pull_retries = static_cast<int>(n);
    }
    if (b.has("pull_backoff_seconds")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t s, b.child("pull_backoff_seconds").integer(1, 600));
      c.container.pull_backoff = std::chrono::seconds(s);
    }
    if (b.has("user_namespace")) {
      TESSERA_ASSIGN_OR_RETURN(c.container.user_namespace, b.child("user_namespace").boolean());
    }
    if (b.has("image_cache_max_mib")) {
      TESSERA_ASSIGN_OR_RETURN(c.container.image_cache_max_mib,
                               b.child("image_cache_max_mib").integer(0, int64_t{1} << 30));
    }
    for (const auto& [key, field] :
         {std::pair<const char*, std::string*>{"runtime", &c.container.runtime},
          {"path", &c.container.runtime_path},
          {"cdi_dir", &c.container.cdi_dir},
          {"cdi_dynamic_dir", &c.container.cdi_dir_dynamic}}) {
      if (b.has(key)) {
        TESSERA_ASSIGN_OR_RETURN(*field, b.child(key).str());
      }
    }
    if (c.container.runtime != "runc" && c.container.runtime != "crun") {
      return b.child("runtime").error("expected runc or crun");
    }
  }
  // registry "127.0.0.1:5000" { ca_file = "/etc/tessera/registry-ca.pem" }
  // registry "docker.io" { mirror = ["https://mirror.example"] }
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> registries,
                           core::hclBlocks(doc, "registry", 1, path));
  for (const core::HclBlock& r : registries) {
    const std::string name = r.labels[0];
    core::JsonNode b(*r.body, "registry \"" + name + "\"", path);
    auto ref = model::parseImageRef(name + "/x");
    if (!ref.isOk() || ref->registry != name) {
      return core::invalidArgument(path + ": registry \"" + name +
                                   "\": expected a registry host[:port] as image references "
                                   "name it (\"docker.io\", \"nvcr.io\", \"10.0.0.5:5000\")");
    }
    if (c.container.registries.hosts.contains(name)) {
      return core::invalidArgument(path + ": registry \"" + name + "\" is configured twice");
    }
    TESSERA_RETURN_IF_ERROR(b.checkKeys({"ca_file", "mirror"}));
    RegistryHostConfig h;
    if (b.has("ca_file")) {
      TESSERA_ASSIGN_OR_RETURN(h.ca_file, b.child("ca_file").str());
      std::error_code ec;
      if (!std::filesystem::is_regular_file(h.ca_file, ec)) {
        return b.child("ca_file").error("no such file: " + h.ca_file);
      }
    }
    if (b.has("mirror")) {
      const core::JsonNode m = b.child("mirror");
      std::vector<core::JsonNode> items;
      if (m.value().is_string()) {
        items.push_back(m);
      } else if (m.value().is_array()) {
        for (size_t i = 0; i < m.value().size(); ++i) {
          items.push_back(m.at(i));
        }
      } else {
        return m.error("expected an address or a list of them (\"https://mirror.example\")");
      }
      for (const core::JsonNode& item : items) {
        TESSERA_ASSIGN_OR_RETURN(std::string url, item.str());
        const bool scheme = url.starts_with("https://") || url.starts_with("http://");
        const std::string rest = scheme ? url.substr(url.find("//") + 2) : "";
        if (!scheme || rest.empty() || rest.find_first_of("/?#@ ") != std::string::npos) {
          return item.error("expected https://host[:port] (or http:// for a plain-HTTP mirror)");
        }
        h.mirrors.push_back(std::move(url));
      }
    }
    c.container.registries.hosts[name] = std::move(h);
  }
  return c;
}

core::Result<NodeGpus> discoverGpus(const GpuConfig& config, const std::string& node_name,
                                    const model::GpuCatalogue& catalogue,
                                    std::vector<std::string>* log) {
  TESSERA_RETURN_IF_ERROR(validateGpuConfig(config));
  if (config.backend == "sim") {
    return simulate(config.profile, config, node_name, catalogue);
  }
  NvmlDiscovery nvml(config.nvml_library);
  core::Result<NodeGpus> found = nvml.discover();
  if (found.isOk() || config.fallback_profile.empty()) {
    return found;
  }
  if (log != nullptr) {
    log->push_back(found.status().message() + "; simulating node profile '" +
                   config.fallback_profile + "' instead (gpus.fallback_profile)");
  }
  return simulate(config.fallback_profile, config, node_name, catalogue);
}

}  // namespace tessera::agent
