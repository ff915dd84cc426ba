#include "model/node_profiles.h"

#include "core/hcl.h"
#include "core/json_node.h"

namespace tessera::model {

const std::vector<NodeProfile>& builtinNodeProfiles() {
  // NVIDIA DGX datasheets: H100/H200 with 2x Xeon 8480C (112 cores, 224 threads) and 2 TiB;
  // A100 with 2x EPYC 7742 (128 cores, 256 threads) and 1 TiB. The L40S and T4 machines are
  // typical PCIe servers (no NVLink): 2x 32-core EPYC with 512 GiB, one 16-core Xeon with 128 GiB.
  static const std::vector<NodeProfile> profiles = {
      {"dgx-h100", "H100-80GB", 8, 224, 2048, true},
      {"dgx-h200", "H200-141GB", 8, 224, 2048, true},
      {"a100-8x", "A100-80GB", 8, 256, 1024, true},
      {"a100-40gb-8x", "A100-40GB", 8, 256, 1024, true},
      {"l40s-4x", "L40S", 4, 128, 512, false},
      {"t4-2x", "T4", 2, 32, 128, false},
  };
  return profiles;
}

const std::vector<std::string>& nodeProfileNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const NodeProfile& p : builtinNodeProfiles()) {
      v.push_back(p.name);
    }
    return v;
  }();
  return names;
}

std::optional<NodeProfile> findNodeProfile(std::string_view name) {
  for (const NodeProfile& p : builtinNodeProfiles()) {
    if (p.name == name) {
      return p;
    }
  }
  return std::nullopt;
}

core::Result<std::vector<NodeProfile>> readNodeProfiles(const std::string& path,
                                                        const GpuCatalogue& catalogue) {
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json doc, core::parseConfigFile(path));
  core::JsonNode top(doc, "", path);
  TESSERA_RETURN_IF_ERROR(top.checkKeys({"profile"}));
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::HclBlock> blocks,
                           core::hclBlocks(doc, "profile", 1, path));
  if (blocks.empty()) {
    return core::invalidArgument(path + ": no profile \"NAME\" { ... } block");
  }
  std::vector<NodeProfile> out;
  for (const core::HclBlock& b : blocks) {
    NodeProfile p;
    p.name = b.labels[0];
    const std::string at = "profile." + p.name;
    for (const NodeProfile& seen : out) {
      if (seen.name == p.name) {
        return core::invalidArgument(path + ": " + at + ": defined twice");
      }
    }
    core::JsonNode n(*b.body, at, path);
    TESSERA_RETURN_IF_ERROR(
        n.checkKeys({"gpu_model", "gpus", "cpu_cores", "memory_gib", "nvlink"}));
    for (const char* required : {"gpu_model", "gpus", "cpu_cores", "memory_gib"}) {
      if (!n.has(required)) {
        return n.error(std::string("missing '") + required + "'");
      }
    }
    TESSERA_ASSIGN_OR_RETURN(p.gpu_model, n.child("gpu_model").str());
    if (!catalogue.find(p.gpu_model)) {
      return n.child("gpu_model").error("unknown GPU model '" + p.gpu_model + "'");
    }
    TESSERA_ASSIGN_OR_RETURN(int64_t gpus, n.child("gpus").integer(0, kMaxGpusPerNode));
    p.gpus = static_cast<int>(gpus);
    TESSERA_ASSIGN_OR_RETURN(p.cpu_cores, n.child("cpu_cores").integer(1, 1 << 20));
    TESSERA_ASSIGN_OR_RETURN(p.memory_gib, n.child("memory_gib").integer(1, int64_t{1} << 30));
    if (n.has("nvlink")) {
      TESSERA_ASSIGN_OR_RETURN(p.nvlink, n.child("nvlink").boolean());
    }
    out.push_back(std::move(p));
  }
  return out;
}

core::Result<Node> makeProfileNode(const NodeProfile& profile, std::string name,
                                   const GpuCatalogue& catalogue, int nvlink_domain) {
  auto model = catalogue.find(profile.gpu_model);
  if (!model) {
    return core::invalidArgument("profile '" + profile.name + "': unknown GPU model '" +
                                 profile.gpu_model + "'");
  }
  Node n = makeNode(std::move(name), core::MilliCpu{profile.cpu_cores * 1000},
                    core::MiB{profile.memory_gib * 1024}, catalogue, *model, profile.gpus);
  n.nvlink_domain = profile.nvlink ? nvlink_domain : -1;
  return n;
}

core::Result<Node> makeProfileNode(std::string_view profile, std::string name,
                                   const GpuCatalogue& catalogue, int nvlink_domain) {
  if (std::optional<NodeProfile> p = findNodeProfile(profile)) {
    return makeProfileNode(*p, std::move(name), catalogue, nvlink_domain);
  }
  std::string known;
  for (const std::string& n : nodeProfileNames()) {
    known += (known.empty() ? "" : ", ") + n;
  }
  return core::invalidArgument("unknown node profile '" + std::string(profile) +
                               "' (known: " + known + ")");
}

}  // namespace tessera::model
