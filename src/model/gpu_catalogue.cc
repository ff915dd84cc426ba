#include "model/gpu_catalogue.h"

#include <algorithm>
#include <cctype>

namespace tessera::model {
namespace {

using core::MiB;

std::vector<int> range(int from, int to_inclusive, int step = 1) {
  std::vector<int> v;
  for (int i = from; i <= to_inclusive; i += step) {
    v.push_back(i);
  }
  return v;
}

// The seven GH100/GA100 profile shapes, in the order of the NVIDIA tables:
// 1g, 1g+me, 1g double memory, 2g, 3g, 4g, 7g.
std::vector<MigProfile> migTable(const std::array<std::string, 7>& names,
                                 const std::array<int64_t, 7>& memory_mib) {
  return {
      {names[0], 1, 1, MiB{memory_mib[0]}, 7, range(0, 6)},
      {names[1], 1, 1, MiB{memory_mib[1]}, 1, range(0, 6)},
      {names[2], 1, 2, MiB{memory_mib[2]}, 4, {0, 2, 4, 6}},
      {names[3], 2, 2, MiB{memory_mib[3]}, 3, {0, 2, 4}},
      {names[4], 3, 4, MiB{memory_mib[4]}, 2, {0, 4}},
      {names[5], 4, 4, MiB{memory_mib[5]}, 1, {0}},
      {names[6], 7, 8, MiB{memory_mib[6]}, 1, {0}},
  };
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

int GpuModelInfo::findMigProfile(std::string_view profile_name) const {
  for (size_t i = 0; i < mig_profiles.size(); ++i) {
    if (mig_profiles[i].name == profile_name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

GpuCatalogue GpuCatalogue::builtin() {
  GpuCatalogue c;
  // Memory sizes in MiB as `nvidia-smi mig -lgip` reports them (GiB x 1024). H200 3g/4g sizes
  // are not published; they are taken as half of the 7g instance, as on H100.
  c.models_.push_back(
      {"H100-80GB", MiB{81559},
       migTable({"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
                {9984, 9984, 20090, 20090, 40448, 40448, 81152})});
  c.models_.push_back(
      {"H200-141GB", MiB{143771},
       migTable({"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
                {16384, 16384, 33280, 33280, 71424, 71424, 143360})});
  c.models_.push_back(
      {"A100-40GB", MiB{40960},
       migTable({"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
                {4864, 4864, 9856, 9856, 19968, 19968, 40192})});
  c.models_.push_back(
      {"A100-80GB", MiB{81920},
       migTable({"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
                {9856, 9856, 19968, 19968, 40192, 40192, 80384})});
  // Plain models of the Alibaba GPU-sharing trace. G1/G2/G3 are undisclosed: memory unknown.
  for (const char* name : {"G1", "G2", "G3"}) {
    c.models_.push_back({name, MiB{0}, {}});
  }
  c.models_.push_back({"T4", MiB{16384}, {}});
  c.models_.push_back({"P100", MiB{16384}, {}});
  c.models_.push_back({"V100M16", MiB{16384}, {}});
  c.models_.push_back({"V100M32", MiB{32768}, {}});
  c.models_.push_back({"A10", MiB{24576}, {}});
  c.models_.push_back({"L40S", MiB{46068}, {}});  // 48 GB GDDR6 with ECC, as nvidia-smi shows.
  return c;
}

std::optional<GpuModelId> GpuCatalogue::find(std::string_view name) const {
  std::string want = lower(name);
  if (want == "h100") {
    want = "h100-80gb";
  } else if (want == "h200") {
    want = "h200-141gb";
  }
  for (size_t i = 0; i < models_.size(); ++i) {
    if (lower(models_[i].name) == want) {
      return GpuModelId{static_cast<uint16_t>(i)};
    }
  }
  return std::nullopt;
}

core::Result<GpuModelId> GpuCatalogue::intern(std::string_view name) {
  if (name.empty()) {
    return core::invalidArgument("GPU model name is empty");
  }
  if (name.size() > 64) {
    return core::invalidArgument("GPU model name '" + std::string(name.substr(0, 64)) +
                                 "...' is longer than 64 characters");
  }
  if (auto id = find(name)) {
    return *id;
  }
  if (models_.size() >= 65535) {
    return core::invalidArgument("too many distinct GPU models");
  }
  models_.push_back({std::string(name), core::MiB{0}, {}});
  return GpuModelId{static_cast<uint16_t>(models_.size() - 1)};
}

core::Status validateMigLayout(const GpuModelInfo& model, std::span<const MigInstance> layout) {
  if (!model.supportsMig()) {
    return core::invalidArgument("GPU model " + model.name + " does not support MIG");
  }
  uint32_t used = 0;
  std::vector<int> counts(model.mig_profiles.size(), 0);
  for (size_t i = 0; i < layout.size(); ++i) {
    const MigInstance& inst = layout[i];
    if (inst.profile < 0 || inst.profile >= static_cast<int>(model.mig_profiles.size())) {
      return core::invalidArgument("instance " + std::to_string(i) + " names profile index " +
                                   std::to_string(inst.profile) + ", unknown on " + model.name);
    }
    const MigProfile& p = model.mig_profiles[inst.profile];
    if (std::find(p.starts.begin(), p.starts.end(), inst.start) == p.starts.end()) {
      return core::invalidArgument("instance " + std::to_string(i) + ": " + p.name +
                                   " cannot start at memory slice " + std::to_string(inst.start));
    }
    const uint32_t mask = ((1U << p.memory_slices) - 1) << inst.start;
    if ((used & mask) != 0) {
      return core::invalidArgument("instance " + std::to_string(i) + ": " + p.name + " at " +
                                   std::to_string(inst.start) +
                                   " overlaps memory slices already taken");
    }
    used |= mask;
    if (++counts[inst.profile] > p.max_instances) {
      return core::invalidArgument("more than " + std::to_string(p.max_instances) +
                                   " instances of " + p.name + " on one " + model.name);
    }
  }
  return core::Status::ok();
}

int MigOccupancy::usedComputeSlices(const GpuModelInfo& model) const {
  int total = 0;
  for (size_t p = 0; p < model.mig_profiles.size(); ++p) {
    total += count[p] * model.mig_profiles[p].compute_slices;
  }
  return total;
}

bool migSlotFree(const GpuModelInfo& model, const MigOccupancy& occ, int profile, int start) {
  const MigProfile& p = model.mig_profiles[profile];
  if (occ.count[profile] >= p.max_instances) {
    return false;
  }
  if (std::find(p.starts.begin(), p.starts.end(), start) == p.starts.end()) {
    return false;
  }
  const unsigned mask = ((1U << p.memory_slices) - 1) << start;
  return (occ.used_slices & mask) == 0;
}

namespace {

// How many (profile, start) placements remain possible: a cheap measure of how much a layout
// still allows.
int freePlacements(const GpuModelInfo& model, const MigOccupancy& occ) {
  int n = 0;
  for (size_t q = 0; q < model.mig_profiles.size(); ++q) {
    for (int s : model.mig_profiles[q].starts) {
      if (migSlotFree(model, occ, static_cast<int>(q), s)) {
        n += model.mig_profiles[q].compute_slices;
      }
    }
  }
  return n;
}

}  // namespace

int chooseMigSlot(const GpuModelInfo& model, const MigOccupancy& occ, int profile, unsigned avoid) {
  int best_start = -1;
  int best_value = -1;
  for (int s : model.mig_profiles[profile].starts) {
    if (!migSlotFree(model, occ, profile, s)) {
      continue;
    }
    MigOccupancy after = occ;
    addMigInstance(model, after, profile, s);
    // Keeping what `avoid` holds outranks any count of placements (at most 8 x 7 of them).
    const int value =
        freePlacements(model, after) + ((migSlices(model, profile, s) & avoid) == 0 ? 1 << 16 : 0);
    if (value > best_value || (value == best_value && s > best_start)) {
      best_value = value;
      best_start = s;
    }
  }
  return best_start;
}

unsigned migSlices(const GpuModelInfo& model, int profile, int start) {
  return ((1U << model.mig_profiles[profile].memory_slices) - 1) << start;
}

void addMigInstance(const GpuModelInfo& model, MigOccupancy& occ, int profile, int start) {
  const MigProfile& p = model.mig_profiles[profile];
  occ.used_slices |= static_cast<uint8_t>(((1U << p.memory_slices) - 1) << start);
  ++occ.count[profile];
}

void removeMigInstance(const GpuModelInfo& model, MigOccupancy& occ, int profile, int start) {
  const MigProfile& p = model.mig_profiles[profile];
  occ.used_slices &= static_cast<uint8_t>(~(((1U << p.memory_slices) - 1) << start));
  --occ.count[profile];
}

}  // namespace tessera::model
