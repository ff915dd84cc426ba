// Resource vectors for quotas and fair share: GPU (milli-GPU), CPU (milli-cores), memory (MiB)
// and, where a queue sets one, GPU per model (milli-GPU of that model).
//
//   ResourceSpace space = ResourceSpace::withModels(catalogue, {h200, a100});
//   Amounts quota = space.zeros();
//   quota[kGpuDim] = 16000;                 // 16 GPUs of any model
//   quota[space.modelDim(h200)] = 8000;     // of which up to 8 H200 are guaranteed
//
// All arithmetic is integer.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "model/gpu_catalogue.h"
#include "model/ids.h"

namespace tessera::sched {

inline constexpr size_t kGpuDim = 0;
inline constexpr size_t kCpuDim = 1;
inline constexpr size_t kMemoryDim = 2;
inline constexpr size_t kFixedDims = 3;
// "No limit". Large enough for any cluster, small enough that sums of a few do not overflow.
inline constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 64;

using Amounts = std::vector<int64_t>;

// The dimensions in use: the three fixed ones, then one per GPU model that some queue
// constrains.
class ResourceSpace {
 public:
  ResourceSpace() = default;
  static ResourceSpace withModels(const model::GpuCatalogue& catalogue,
                                  std::vector<model::GpuModelId> models);

  size_t size() const { return kFixedDims + models_.size(); }
  Amounts zeros() const { return Amounts(size(), 0); }
  Amounts unlimited() const { return Amounts(size(), kUnlimited); }
  // The dimension of a model's GPUs, or SIZE_MAX when no queue constrains that model.
  size_t modelDim(model::GpuModelId m) const;
  const std::vector<model::GpuModelId>& models() const { return models_; }
  // "gpu", "cpu", "memory" or "gpu:H200-141GB".
  std::string name(size_t dim) const;
  // The unit of a dimension for messages: "milli-GPU", "milli-CPU", "MiB".
  static std::string_view unit(size_t dim);

 private:
  std::vector<model::GpuModelId> models_;
  std::vector<std::string> model_names_;
  std::vector<size_t> dim_of_model_;  // By model id; SIZE_MAX if absent.
};

// a += b, a -= b, elementwise; a <= b in every dimension.
void addTo(Amounts& a, const Amounts& b);
void subtractFrom(Amounts& a, const Amounts& b);
bool fitsWithin(const Amounts& a, const Amounts& b);

}  // namespace tessera::sched
