// Applying the MIG layout the scheduler chose for a GPU: its GPU instances, each with one
// compute instance that uses all of it (one MIG device per instance, as the scheduler counts
// them). `NvmlMigManager` does it through NVML on a real GPU; `RecordingMigManager` records the
// layouts for simulated nodes, so the logic above it is tested without hardware.
//
//   NvmlMigManager mig("libnvidia-ml.so.1", catalogue);
//   TESSERA_RETURN_IF_ERROR(mig.apply(0, "H100-80GB", {{4, 0}, {4, 4}}));  // 2 x 3g.40gb
//
// Rules: MIG mode must already be on; the agent turns it on or off (setMigMode) only on nodes
// whose operator allows it, and only on an idle GPU (NVML resets it).
// Instances that the new layout keeps are left alone, whatever runs in them; those in the way of
// its new instances (sharing memory slices) are destroyed first, which NVML refuses for an
// instance in use (IN_USE): the caller keeps every instance its running tasks use in the
// layout, so work never loses its instance. Instances out of its way stay (left idle by tasks
// that ended: the next task of their profile runs in one with no re-layout).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"

namespace tessera::agent {

class NvmlLibrary;
class NvmlSession;
struct NvmlDevice;

// The MIG device of each instance of a layout: its UUID ("MIG-...", what a task's
// CUDA_VISIBLE_DEVICES names) and its GPU and compute instance ids (which name the MIG
// capability device nodes a process of it opens).
using MigUuids = std::map<model::MigInstance, MigDevice>;

class MigManager {
 public:
  virtual ~MigManager() = default;
  // Makes GPU `gpu`'s MIG instances hold `layout` (catalogue profile indices of `model` and
  // start slices; what is in its way goes, see above) and returns the MIG device of every
  // instance on the GPU then: the layout's and the idle ones it left (an idle instance without a
  // compute instance has an empty UUID). An invalid layout, or a GPU without MIG mode on, is
  // refused.
  virtual core::Result<MigUuids> apply(int gpu, const std::string& model,
                                       const std::vector<model::MigInstance>& layout) = 0;
  // Turns GPU `gpu`'s MIG mode on or off (for nodes whose operator lets the agent do so:
  // `gpus { mig_mode = "managed" }`). NVML resets the GPU to do it, so it is refused while any
  // process uses the GPU; turning it off destroys the GPU's instances first (refused if one is
  // in use). Nothing to do if the mode already is `on`.
  virtual core::Status setMigMode(int gpu, const std::string& model, bool on) = 0;
};

// The NVML profile index of a catalogue MIG profile (its position in the model's table):
// 1g -> 0, 1g+me -> 7 (REV1), 1g with double memory -> 9 (REV2), 2g -> 1, 3g -> 2, 4g -> 3,
// 7g -> 4; -1 for a position past the table.
int nvmlGpuInstanceProfileIndex(int catalogue_profile);
// The NVML compute instance profile index that uses `compute_slices` slices; -1 if none.
int nvmlComputeInstanceProfileIndex(int compute_slices);

class NvmlMigManager : public MigManager {
 public:
  NvmlMigManager(std::string library, const model::GpuCatalogue& catalogue);
  ~NvmlMigManager() override;
  core::Result<MigUuids> apply(int gpu, const std::string& model,
                               const std::vector<model::MigInstance>& layout) override;
  core::Status setMigMode(int gpu, const std::string& model, bool on) override;

 private:
  // NVML loaded and initialized (kept for the manager's life), and GPU `gpu`'s handle.
  core::Result<NvmlDevice> device(int gpu);

  std::string library_;
  const model::GpuCatalogue& catalogue_;
  std::shared_ptr<NvmlLibrary> lib_;
  std::unique_ptr<NvmlSession> session_;  // After lib_: it goes first.
};

// For simulated GPUs: records each GPU's layout and names its instances with UUIDs made from
// `node`, the GPU, the profile and the start, so the same instance keeps its UUID and two
// nodes never share one.
class RecordingMigManager : public MigManager {
 public:
  explicit RecordingMigManager(const model::GpuCatalogue& catalogue, std::string node = "")
      : catalogue_(catalogue), node_(std::move(node)) {}
  core::Result<MigUuids> apply(int gpu, const std::string& model,
                               const std::vector<model::MigInstance>& layout) override;
  // Records the mode; turning it off forgets the GPU's instances. Never refused: a simulated
  // GPU runs no processes.
  core::Status setMigMode(int gpu, const std::string& model, bool on) override;
  // Each GPU's instances: the last layout applied and those before it that it left alone.
  std::map<int, std::vector<model::MigInstance>> layouts() const;
  // The GPUs whose MIG mode was set, and to what; and how many times a mode changed.
  std::map<int, bool> modes() const;
  int modeChanges() const;

 private:
  const model::GpuCatalogue& catalogue_;
  const std::string node_;
  mutable std::mutex mu_;
  std::map<int, std::vector<model::MigInstance>> layouts_;
  std::map<int, bool> modes_;
  int mode_changes_ = 0;
};

}  // namespace tessera::agent
