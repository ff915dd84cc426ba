#include "model/node_profiles.h"

namespace tessera::model {
namespace {

struct Profile {
  const char* name;
  const char* gpu_model;
  int gpus;
  int64_t cpu_cores;  // Hardware threads.
  int64_t memory_gib;
};

// NVIDIA DGX datasheets: H100/H200 with 2x Xeon 8480C (112 cores, 224 threads) and 2 TiB;
// A100 with 2x EPYC 7742 (128 cores, 256 threads) and 1 TiB (640GB model) or 1 TiB (320GB).
constexpr Profile kProfiles[] = {
    {"dgx-h100", "H100-80GB", 8, 224, 2048},
    {"dgx-h200", "H200-141GB", 8, 224, 2048},
    {"a100-8x", "A100-80GB", 8, 256, 1024},
    {"a100-40gb-8x", "A100-40GB", 8, 256, 1024},
};

}  // namespace

const std::vector<std::string>& nodeProfileNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Profile& p : kProfiles) {
      v.emplace_back(p.name);
    }
    return v;
  }();
  return names;
}

core::Result<Node> makeProfileNode(std::string_view profile, std::string name,
                                   const GpuCatalogue& catalogue, int nvlink_domain) {
  for (const Profile& p : kProfiles) {
    if (profile == p.name) {
      auto model = catalogue.find(p.gpu_model);
      if (!model) {
        return core::internalError(std::string("profile GPU model missing: ") + p.gpu_model);
      }
      Node n = makeNode(std::move(name), core::MilliCpu{p.cpu_cores * 1000},
                        core::MiB{p.memory_gib * 1024}, catalogue, *model, p.gpus);
      n.nvlink_domain = nvlink_domain;
      return n;
    }
  }
  std::string known;
  for (const std::string& n : nodeProfileNames()) {
    known += (known.empty() ? "" : ", ") + n;
  }
  return core::invalidArgument("unknown node profile '" + std::string(profile) +
                               "' (known: " + known + ")");
}

}  // namespace tessera::model
