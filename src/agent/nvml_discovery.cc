#include "agent/nvml_discovery.h"

#include <cstdio>
#include <string_view>
#include <utility>

#include "agent/nvml_library.h"

namespace tessera::agent {
namespace {

constexpr int kP2pCapsIndexNvlink = 2;
constexpr int kP2pStatusOk = 0;
constexpr unsigned kBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE, ..._NAME_V2_...

// A NUL-terminated string from a fixed buffer NVML filled (never reads past it).
std::string fromBuffer(const char* buf, size_t size) {
  size_t n = 0;
  while (n < size && buf[n] != '\0') {
    ++n;
  }
  return {buf, n};
}

// "12.4" from NVML's 12040.
std::string cudaVersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

PcieLink pcieLinkFrom(int level) {
  switch (level) {
    case 0:
      return PcieLink::kSame;
    case 10:
      return PcieLink::kSwitch;
    case 20:
      return PcieLink::kSwitches;
    case 30:
      return PcieLink::kHostBridge;
    case 40:
      return PcieLink::kNuma;
    case 50:
      return PcieLink::kSystem;
    default:
      return PcieLink::kUnknown;
  }
}

// Reads one device's (GPU or MIG) identity: UUID, name and memory. Errors name the call.
core::Status readIdentity(const NvmlLibrary& lib, NvmlDevice dev, const std::string& where,
                          std::string* uuid, std::string* name, int64_t* memory_mib) {
  char buf[kBufferSize] = {};
  if (NvmlReturn rc = lib.uuid(dev, buf, sizeof buf); rc != kNvmlSuccess) {
    return core::unavailable("nvml: " + where + ": " + lib.explain("nvmlDeviceGetUUID", rc));
  }
  *uuid = fromBuffer(buf, sizeof buf);
  char nbuf[kBufferSize] = {};
  if (NvmlReturn rc = lib.name(dev, nbuf, sizeof nbuf); rc != kNvmlSuccess) {
    return core::unavailable("nvml: " + where + ": " + lib.explain("nvmlDeviceGetName", rc));
  }
  *name = fromBuffer(nbuf, sizeof nbuf);
  NvmlMemory mem{};
  if (NvmlReturn rc = lib.memory(dev, &mem); rc != kNvmlSuccess) {
    return core::unavailable("nvml: " + where + ": " + lib.explain("nvmlDeviceGetMemoryInfo", rc));
  }
  *memory_mib = static_cast<int64_t>(mem.total >> 20);
  if (uuid->empty()) {
    return core::unavailable("nvml: " + where + ": nvmlDeviceGetUUID gave an empty UUID");
  }
  return core::Status::ok();
}

// The MIG devices of a GPU in MIG mode. A failure here is a warning: the GPU stays usable whole.
void readMigDevices(const NvmlLibrary& lib, NvmlDevice dev, Gpu& gpu,
                    std::vector<std::string>& warnings) {
  const std::string where = "GPU " + std::to_string(gpu.index);
  if (lib.max_mig == nullptr || lib.mig_by_index == nullptr) {
    warnings.push_back("nvml: " + where +
                       ": MIG is on but the library cannot list MIG devices (old driver)");
    return;
  }
  unsigned max = 0;
  if (NvmlReturn rc = lib.max_mig(dev, &max); rc != kNvmlSuccess) {
    warnings.push_back("nvml: " + where + ": " + lib.explain("nvmlDeviceGetMaxMigDeviceCount", rc));
    return;
  }
  for (unsigned i = 0; i < max; ++i) {
    NvmlDevice mig{};
    const NvmlReturn rc = lib.mig_by_index(dev, i, &mig);
    if (rc == kNvmlNotFound) {
      continue;  // Indices have gaps where no instance exists.
    }
    const std::string mwhere = where + " MIG device " + std::to_string(i);
    if (rc != kNvmlSuccess) {
      warnings.push_back("nvml: " + mwhere + ": " +
                         lib.explain("nvmlDeviceGetMigDeviceHandleByIndex", rc));
      continue;
    }
    MigDevice m;
    m.index = static_cast<int>(i);
    core::Status st = readIdentity(lib, mig, mwhere, &m.uuid, &m.name, &m.memory_mib);
    if (!st.isOk()) {
      warnings.push_back(st.message());
      continue;
    }
    m.profile = migProfileFromName(m.name);
    unsigned id = 0;
    if (lib.gi_id != nullptr && lib.gi_id(mig, &id) == kNvmlSuccess) {
      m.gpu_instance_id = static_cast<int>(id);
    }
    if (lib.ci_id != nullptr && lib.ci_id(mig, &id) == kNvmlSuccess) {
      m.compute_instance_id = static_cast<int>(id);
    }
    gpu.mig_devices.push_back(std::move(m));
  }
}

}  // namespace

NvmlDiscovery::NvmlDiscovery(std::string library) : library_(std::move(library)) {}

NvmlDiscovery::~NvmlDiscovery() = default;

std::string NvmlDiscovery::describe() const { return "nvml (" + library_ + ")"; }

core::Result<NodeGpus> NvmlDiscovery::discover() {
  if (lib_ == nullptr) {
    TESSERA_ASSIGN_OR_RETURN(lib_, NvmlLibrary::open(library_));
  }
  const NvmlLibrary& lib = *lib_;
  // NVML is shut down again when this returns.
  TESSERA_ASSIGN_OR_RETURN(const std::unique_ptr<NvmlSession> session, NvmlSession::begin(lib));

  NodeGpus out;
  out.backend = "nvml";
  char buf[kBufferSize] = {};
  if (NvmlReturn rc = lib.driver_version(buf, sizeof buf); rc == kNvmlSuccess) {
    out.driver_version = fromBuffer(buf, sizeof buf);
  } else {
    out.warnings.push_back("nvml: " + lib.explain("nvmlSystemGetDriverVersion", rc));
  }
  if (lib.cuda_version != nullptr) {
    int v = 0;
    if (NvmlReturn rc = lib.cuda_version(&v); rc == kNvmlSuccess && v > 0) {
      out.cuda_version = cudaVersionText(v);
    } else if (rc != kNvmlSuccess) {
      out.warnings.push_back("nvml: " + lib.explain("nvmlSystemGetCudaDriverVersion_v2", rc));
    }
  }
  unsigned count = 0;
  if (NvmlReturn rc = lib.count(&count); rc != kNvmlSuccess) {
    return core::unavailable("nvml: " + lib.explain("nvmlDeviceGetCount_v2", rc));
  }
  constexpr unsigned kMaxGpus = 64;  // model::kMaxGpusPerNode.
  if (count > kMaxGpus) {
    return core::failedPrecondition("nvml: " + std::to_string(count) +
                                    " GPUs; a node may have at most 64");
  }
  std::vector<NvmlDevice> handles(count);
  for (unsigned i = 0; i < count; ++i) {
    const std::string where = "GPU " + std::to_string(i);
    if (NvmlReturn rc = lib.by_index(i, &handles[i]); rc != kNvmlSuccess) {
      return core::unavailable("nvml: " + where + ": " +
                               lib.explain("nvmlDeviceGetHandleByIndex_v2", rc));
    }
    Gpu g;
    g.index = static_cast<int>(i);
    TESSERA_RETURN_IF_ERROR(readIdentity(lib, handles[i], where, &g.uuid, &g.name, &g.memory_mib));
    g.model = modelFromProductName(g.name, g.memory_mib);
    if (g.model.empty()) {
      out.warnings.push_back("nvml: " + where + ": '" + g.name +
                             "' is not in the GPU catalogue; it is reported by its name");
    }
    if (lib.pci != nullptr) {
      NvmlPciInfo pci{};
      if (NvmlReturn rc = lib.pci(handles[i], &pci); rc == kNvmlSuccess) {
        g.pci_bus_id = fromBuffer(pci.busId, sizeof pci.busId);
      } else {
        out.warnings.push_back("nvml: " + where + ": " +
                               lib.explain("nvmlDeviceGetPciInfo_v3", rc));
      }
    }
    if (lib.minor != nullptr) {
      unsigned minor = 0;
      if (NvmlReturn rc = lib.minor(handles[i], &minor); rc == kNvmlSuccess) {
        g.minor = static_cast<int>(minor);
      } else {
        out.warnings.push_back("nvml: " + where + ": " +
                               lib.explain("nvmlDeviceGetMinorNumber", rc));
      }
    }
    if (lib.mig_mode != nullptr) {
      unsigned current = 0;
      unsigned pending = 0;
      const NvmlReturn rc = lib.mig_mode(handles[i], &current, &pending);
      if (rc == kNvmlSuccess) {
        g.mig_capable = true;
        g.mig_enabled = current == 1;
        g.mig_pending = pending == 1;
      } else if (rc != kNvmlNotSupported) {
        out.warnings.push_back("nvml: " + where + ": " + lib.explain("nvmlDeviceGetMigMode", rc));
      }
      if (g.mig_enabled) {
        readMigDevices(lib, handles[i], g, out.warnings);
      }
    }
    out.gpus.push_back(std::move(g));
  }
  // Pairwise topology: the PCIe common ancestor and NVLink peer-to-peer.
  out.pcie.assign(count, std::vector<PcieLink>(count, PcieLink::kUnknown));
  out.nvlink.assign(count, std::vector<bool>(count, false));
  bool pcie_warned = false;
  bool nvlink_warned = false;
  for (unsigned i = 0; i < count; ++i) {
    out.pcie[i][i] = PcieLink::kSame;
    for (unsigned j = i + 1; j < count; ++j) {
      if (lib.common_ancestor != nullptr) {
        int level = 0;
        const NvmlReturn rc = lib.common_ancestor(handles[i], handles[j], &level);
        if (rc == kNvmlSuccess) {
          out.pcie[i][j] = out.pcie[j][i] = pcieLinkFrom(level);
        } else if (!pcie_warned) {
          pcie_warned = true;
          out.warnings.push_back("nvml: GPUs " + std::to_string(i) + " and " + std::to_string(j) +
                                 ": " + lib.explain("nvmlDeviceGetTopologyCommonAncestor", rc));
        }
      }
      if (lib.p2p != nullptr) {
        int status = -1;
        const NvmlReturn rc = lib.p2p(handles[i], handles[j], kP2pCapsIndexNvlink, &status);
        if (rc == kNvmlSuccess) {
          out.nvlink[i][j] = out.nvlink[j][i] = status == kP2pStatusOk;
        } else if (!nvlink_warned) {
          nvlink_warned = true;
          out.warnings.push_back("nvml: GPUs " + std::to_string(i) + " and " + std::to_string(j) +
                                 ": " + lib.explain("nvmlDeviceGetP2PStatus", rc));
        }
      }
    }
  }
  if (count > 1 && lib.common_ancestor == nullptr) {
    out.warnings.emplace_back(
        "nvml: the library has no nvmlDeviceGetTopologyCommonAncestor; PCIe distances are "
        "unknown");
  }
  if (count > 1 && lib.p2p == nullptr) {
    out.warnings.emplace_back("nvml: the library has no nvmlDeviceGetP2PStatus; NVLink is unknown");
  }
  return out;
}

}  // namespace tessera::agent
