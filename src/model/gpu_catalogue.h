// The GPU model catalogue: every GPU model Tessera knows, with its memory and MIG profiles.
//
// Built-in MIG-capable models: H100-80GB, H200-141GB, A100-40GB, A100-80GB (profile tables
// from NVIDIA's MIG user guide; see docs/architecture.md). Built-in plain models: the Alibaba
// trace's G1, G2, G3, T4, P100, V100M16, V100M32, A10. A node list may name any other model:
// `intern` adds it as a plain model of unknown memory.
//
//   GpuCatalogue cat = GpuCatalogue::builtin();
//   GpuModelId h100 = *cat.find("H100-80GB");
//   const MigProfile* p = cat.model(h100).findMigProfile("3g.40gb");
//
// Not thread-safe for `intern`; reads are safe when nothing interns concurrently.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "model/ids.h"

namespace tessera::model {

// A100, H100 and H200 have 8 memory slices and 7 compute slices.
inline constexpr int kMigMemorySlices = 8;
inline constexpr int kMigComputeSlices = 7;
inline constexpr int kMaxMigProfiles = 8;

struct MigProfile {
  std::string name;         // As nvidia-smi prints it, e.g. "3g.40gb" or "1g.10gb+me".
  int compute_slices = 0;   // Of 7.
  int memory_slices = 0;    // Of 8: the size of a placement.
  core::MiB memory{0};      // Usable memory of one instance.
  int max_instances = 0;    // At most this many instances of the profile on one GPU.
  std::vector<int> starts;  // Memory slices at which an instance may start.

  // The milli-GPU an instance accounts for in utilisation reports: its compute share.
  core::MilliGpu computeShare() const {
    return core::MilliGpu{1000 * compute_slices / kMigComputeSlices};
  }
};

struct GpuModelInfo {
  std::string name;
  core::MiB memory{0};  // 0 when unknown (the trace's undisclosed G1/G2/G3, unknown names).
  std::vector<MigProfile> mig_profiles;  // Empty when the model has no MIG.

  bool supportsMig() const { return !mig_profiles.empty(); }
  // Index into `mig_profiles`, or -1.
  int findMigProfile(std::string_view profile_name) const;
};

class GpuCatalogue {
 public:
  // The built-in models listed above.
  static GpuCatalogue builtin();

  // Looks a model up by name (case-insensitive; "H100" and "H200" are aliases of the 80 GB
  // and 141 GB parts).
  std::optional<GpuModelId> find(std::string_view name) const;
  // Returns the id of `name`, adding it as a plain model of unknown memory when it is new.
  // Fails for an empty or overlong name.
  core::Result<GpuModelId> intern(std::string_view name);

  const GpuModelInfo& model(GpuModelId id) const { return models_[id.value()]; }
  size_t size() const { return models_.size(); }

 private:
  std::vector<GpuModelInfo> models_;
};

// One placed MIG GPU instance: profile index (into the model's `mig_profiles`) and start slice.
struct MigInstance {
  int profile = 0;
  int start = 0;
  auto operator<=>(const MigInstance&) const = default;
};

// Checks that a set of instances can coexist on one GPU of `model`: every start is allowed for
// its profile, the memory-slice ranges are pairwise disjoint, and no profile exceeds its
// instance limit. The error says which instance breaks which rule.
core::Status validateMigLayout(const GpuModelInfo& model, std::span<const MigInstance> layout);

// Occupancy of one GPU's MIG slices, kept incrementally by the scheduler.
struct MigOccupancy {
  uint8_t used_slices = 0;                       // Bit i set: memory slice i is taken.
  std::array<uint8_t, kMaxMigProfiles> count{};  // Instances per profile.

  bool empty() const { return used_slices == 0; }
  int usedComputeSlices(const GpuModelInfo& model) const;
};

// True when an instance of `profile` can start at `start` given `occ`.
bool migSlotFree(const GpuModelInfo& model, const MigOccupancy& occ, int profile, int start);

// The start slice to use for a new instance of `profile`, or -1 when no valid slot is free.
// Among free slots it picks the one that keeps the most compute slices placeable for every
// profile afterwards (so a 1g does not land where it blocks a later 3g), then the highest start.
// Slots that overlap `avoid` (memory slices of instances worth keeping) come after those that
// do not.
int chooseMigSlot(const GpuModelInfo& model, const MigOccupancy& occ, int profile,
                  unsigned avoid = 0);

void addMigInstance(const GpuModelInfo& model, MigOccupancy& occ, int profile, int start);
// The memory slices an instance of `profile` at `start` takes (bit i: slice i).
unsigned migSlices(const GpuModelInfo& model, int profile, int start);
void removeMigInstance(const GpuModelInfo& model, MigOccupancy& occ, int profile, int start);

}  // namespace tessera::model
