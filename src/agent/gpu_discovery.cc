#include "agent/gpu_discovery.h"

#include <cctype>
#include <regex>

namespace tessera::agent {
namespace {

// Whether `word` occurs in `s` with no letter or digit on either side ("T4" in "Tesla T4", not
// in "T400"; "A10" in "NVIDIA A10", not in "A100").
bool hasWord(const std::string& s, const std::string& word) {
  for (size_t at = s.find(word); at != std::string::npos; at = s.find(word, at + 1)) {
    const bool left = at == 0 || std::isalnum(static_cast<unsigned char>(s[at - 1])) == 0;
    const size_t end = at + word.size();
    const bool right = end == s.size() || std::isalnum(static_cast<unsigned char>(s[end])) == 0;
    if (left && right) {
      return true;
    }
  }
  return false;
}

}  // namespace

const char* pcieLinkName(PcieLink link) {
  switch (link) {
    case PcieLink::kSame:
      return "same-board";
    case PcieLink::kSwitch:
      return "switch";
    case PcieLink::kSwitches:
      return "switches";
    case PcieLink::kHostBridge:
      return "host-bridge";
    case PcieLink::kNuma:
      return "numa-node";
    case PcieLink::kSystem:
      return "system";
    case PcieLink::kUnknown:
      break;
  }
  return "unknown";
}

std::string topologyLabel(const NodeGpus& gpus, size_t i, size_t j) {
  if (i == j) {
    return "X";
  }
  if (i < gpus.nvlink.size() && j < gpus.nvlink[i].size() && gpus.nvlink[i][j]) {
    return "NV";
  }
  const PcieLink link =
      i < gpus.pcie.size() && j < gpus.pcie[i].size() ? gpus.pcie[i][j] : PcieLink::kUnknown;
  switch (link) {
    case PcieLink::kSame:
      return "X";
    case PcieLink::kSwitch:
      return "PIX";
    case PcieLink::kSwitches:
      return "PXB";
    case PcieLink::kHostBridge:
      return "PHB";
    case PcieLink::kNuma:
      return "NODE";
    case PcieLink::kSystem:
      return "SYS";
    case PcieLink::kUnknown:
      break;
  }
  return "?";
}

nlohmann::json toJson(const NodeGpus& gpus) {
  nlohmann::json list = nlohmann::json::array();
  for (const Gpu& g : gpus.gpus) {
    nlohmann::json mig = nlohmann::json::array();
    for (const MigDevice& m : g.mig_devices) {
      mig.push_back({{"index", m.index},
                     {"uuid", m.uuid},
                     {"name", m.name},
                     {"profile", m.profile},
                     {"memory_mib", m.memory_mib},
                     {"gpu_instance_id", m.gpu_instance_id},
                     {"compute_instance_id", m.compute_instance_id}});
    }
    nlohmann::json idle = nlohmann::json::array();
    for (const model::MigInstance& m : g.mig_idle) {
      idle.push_back({{"profile", m.profile}, {"start", m.start}});
    }
    list.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"name", g.name},
                    {"model", g.model},
                    {"memory_mib", g.memory_mib},
                    {"pci_bus_id", g.pci_bus_id},
                    {"minor", g.minor},
                    {"mig_capable", g.mig_capable},
                    {"mig_enabled", g.mig_enabled},
                    {"mig_pending", g.mig_pending},
                    {"mig_devices", mig}});
    if (!idle.empty()) {
      list.back()["mig_idle"] = std::move(idle);
    }
    if (g.mig_managed) {
      list.back()["mig_managed"] = true;
    }
  }
  nlohmann::json topology = nlohmann::json::array();
  for (size_t i = 0; i < gpus.gpus.size(); ++i) {
    nlohmann::json row = nlohmann::json::array();
    for (size_t j = 0; j < gpus.gpus.size(); ++j) {
      row.push_back(topologyLabel(gpus, i, j));
    }
    topology.push_back(row);
  }
  return {{"backend", gpus.backend},
          {"driver_version", gpus.driver_version},
          {"cuda_version", gpus.cuda_version},
          {"gpus", list},
          {"topology", topology},
          {"warnings", gpus.warnings}};
}

std::string modelFromProductName(const std::string& name, int64_t memory_mib) {
  // H100 NVL (94 GB) and H100 PCIe 80GB report "H100"; only the 80 GB parts are in the catalogue.
  if (hasWord(name, "H100")) {
    return memory_mib > 0 && memory_mib < int64_t{90} * 1024 ? "H100-80GB" : "";
  }
  if (hasWord(name, "H200")) {
    return "H200-141GB";
  }
  if (name.find("A100") != std::string::npos) {  // "A100-SXM4-80GB", "A100 80GB PCIe".
    return memory_mib > int64_t{60} * 1024 ? "A100-80GB" : "A100-40GB";
  }
  if (hasWord(name, "L40S")) {
    return "L40S";
  }
  if (hasWord(name, "T4")) {
    return "T4";
  }
  if (hasWord(name, "A10")) {
    return "A10";
  }
  if (name.find("V100") != std::string::npos) {
    return memory_mib > int64_t{20} * 1024 ? "V100M32" : "V100M16";
  }
  if (name.find("P100") != std::string::npos) {
    return "P100";
  }
  return "";
}

std::string migProfileFromName(const std::string& name) {
  static const std::regex profile(R"(MIG ([0-9]+g\.[0-9]+gb(\+me)?)$)");
  std::smatch m;
  if (std::regex_search(name, m, profile)) {
    return m[1].str();
  }
  return "";
}

}  // namespace tessera::agent
