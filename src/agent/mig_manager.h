// Applying the MIG layout the scheduler chose for a GPU: its GPU instances, each with one
// compute instance that uses all of it (one MIG device per instance, as the scheduler counts
// them). `NvmlMigManager` does it through NVML on a real GPU; `RecordingMigManager` records the
// layouts for simulated nodes, so the logic above it is tested without hardware.
//
//   NvmlMigManager mig("libnvidia-ml.so.1", catalogue);
//   TESSERA_RETURN_IF_ERROR(mig.apply(0, "H100-80GB", {{4, 0}, {4, 4}}));  // 2 x 3g.40gb
//
// Rules: MIG mode must already be on (turning it on resets the GPU: an operator's step), and
// the GPU must be idle (no compute process): a layout never changes under running work.
// Instances that the new layout keeps are left alone; the others are destroyed first.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpu_catalogue.h"

namespace tessera::agent {

class NvmlLibrary;

class MigManager {
 public:
  virtual ~MigManager() = default;
  // Makes GPU `gpu`'s MIG instances exactly `layout` (catalogue profile indices of `model` and
  // start slices). An invalid layout, a GPU without MIG mode on, or a busy GPU is refused.
  virtual core::Status apply(int gpu, const std::string& model,
                             const std::vector<model::MigInstance>& layout) = 0;
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
  core::Status apply(int gpu, const std::string& model,
                     const std::vector<model::MigInstance>& layout) override;

 private:
  std::string library_;
  const model::GpuCatalogue& catalogue_;
  std::shared_ptr<NvmlLibrary> lib_;
};

class RecordingMigManager : public MigManager {
 public:
  explicit RecordingMigManager(const model::GpuCatalogue& catalogue) : catalogue_(catalogue) {}
  core::Status apply(int gpu, const std::string& model,
                     const std::vector<model::MigInstance>& layout) override;
  // The last layout applied to each GPU.
  std::map<int, std::vector<model::MigInstance>> layouts() const;

 private:
  const model::GpuCatalogue& catalogue_;
  mutable std::mutex mu_;
  std::map<int, std::vector<model::MigInstance>> layouts_;
};

}  // namespace tessera::agent
