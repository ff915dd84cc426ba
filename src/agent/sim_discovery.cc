#include "agent/sim_discovery.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tessera::agent {
namespace {

// FNV-1a, 64 bits: stable across machines and runs (std::hash is not).
uint64_t fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = 14695981039346656037ull ^ seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// SplitMix64's finalizer: spreads FNV's output so that neighbouring GPUs' UUIDs look unrelated.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// PCI buses of a DGX H100's eight GPUs; other profiles count up from 0x10.
constexpr unsigned kDgxBuses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

}  // namespace

std::string simGpuUuid(const std::string& node, int index) {
  const std::string key = "tessera-sim/" + node + "/" + std::to_string(index);
  const uint64_t a = mix(fnv1a(key, 0));
  const uint64_t b = mix(fnv1a(key, 0x9e3779b97f4a7c15ull));
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffull));
  return buf;
}

std::string productNameOf(const std::string& model) {
  static const std::pair<const char*, const char*> names[] = {
      {"H100-80GB", "NVIDIA H100 80GB HBM3"},
      {"H200-141GB", "NVIDIA H200"},
      {"A100-80GB", "NVIDIA A100-SXM4-80GB"},
      {"A100-40GB", "NVIDIA A100-SXM4-40GB"},
      {"L40S", "NVIDIA L40S"},
      {"T4", "Tesla T4"},
      {"V100M16", "Tesla V100-SXM2-16GB"},
      {"V100M32", "Tesla V100-SXM2-32GB"},
      {"P100", "Tesla P100-PCIE-16GB"},
      {"A10", "NVIDIA A10"},
  };
  for (const auto& [m, name] : names) {
    if (model == m) {
      return name;
    }
  }
  return "NVIDIA " + model;
}

SimDiscovery::SimDiscovery(model::NodeProfile profile, std::string node_name,
                           const model::GpuCatalogue& catalogue, std::vector<int> mig_on)
    : profile_(std::move(profile)),
      node_(std::move(node_name)),
      catalogue_(catalogue),
      mig_on_(std::move(mig_on)) {}

std::string SimDiscovery::describe() const { return "sim (" + profile_.name + ")"; }

core::Result<NodeGpus> SimDiscovery::discover() {
  const std::optional<model::GpuModelId> id = catalogue_.find(profile_.gpu_model);
  if (!id) {
    return core::invalidArgument("sim: profile '" + profile_.name + "': unknown GPU model '" +
                                 profile_.gpu_model + "'");
  }
  const model::GpuModelInfo& info = catalogue_.model(*id);
  NodeGpus out;
  out.backend = "sim:" + profile_.name;
  out.driver_version = "sim";
  out.cuda_version = "12.4";
  const int n = profile_.gpus;
  for (int i = 0; i < n; ++i) {
    Gpu g;
    g.index = i;
    g.uuid = simGpuUuid(node_, i);
    g.name = productNameOf(info.name);
    g.model = info.name;
    g.memory_mib = info.memory.value();
    const unsigned bus = n == 8 ? kDgxBuses[i] : static_cast<unsigned>(0x10 + 0x10 * i);
    char pci[32];
    std::snprintf(pci, sizeof pci, "00000000:%02X:00.0", bus & 0xff);
    g.pci_bus_id = pci;
    g.minor = i;
    g.mig_capable = !info.mig_profiles.empty();
    g.mig_enabled = std::find(mig_on_.begin(), mig_on_.end(), i) != mig_on_.end();
    out.gpus.push_back(std::move(g));
  }
  for (int i : mig_on_) {
    if (i < 0 || i >= n) {
      return core::invalidArgument("sim: MIG mode on for GPU " + std::to_string(i) + ", but " +
                                   profile_.name + " has GPUs 0-" + std::to_string(n - 1));
    }
    if (!out.gpus[static_cast<size_t>(i)].mig_capable) {
      return core::invalidArgument("sim: MIG mode on for GPU " + std::to_string(i) + ", but a " +
                                   info.name + " has no MIG");
    }
  }
  // Two GPUs per PCIe switch, half of them on each of two NUMA nodes.
  out.pcie.assign(n, std::vector<PcieLink>(n, PcieLink::kSame));
  out.nvlink.assign(n, std::vector<bool>(n, false));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) {
        continue;
      }
      const bool same_numa = n < 2 || (i * 2 / n) == (j * 2 / n);
      out.pcie[i][j] =
          i / 2 == j / 2 ? PcieLink::kSwitch : (same_numa ? PcieLink::kNuma : PcieLink::kSystem);
      out.nvlink[i][j] = profile_.nvlink;
    }
  }
  return out;
}

}  // namespace tessera::agent
