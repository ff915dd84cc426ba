#include "sched/resources.h"

#include <algorithm>

namespace tessera::sched {

ResourceSpace ResourceSpace::withModels(const model::GpuCatalogue& catalogue,
                                        std::vector<model::GpuModelId> models) {
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  ResourceSpace s;
  s.models_ = std::move(models);
  s.dim_of_model_.assign(catalogue.size(), SIZE_MAX);
  for (size_t i = 0; i < s.models_.size(); ++i) {
    s.dim_of_model_[s.models_[i].value()] = kFixedDims + i;
    s.model_names_.push_back(catalogue.model(s.models_[i]).name);
  }
  return s;
}

size_t ResourceSpace::modelDim(model::GpuModelId m) const {
  return m.value() < dim_of_model_.size() ? dim_of_model_[m.value()] : SIZE_MAX;
}

std::string ResourceSpace::name(size_t dim) const {
  switch (dim) {
    case kGpuDim:
      return "gpu";
    case kCpuDim:
      return "cpu";
    case kMemoryDim:
      return "memory";
    default:
      return "gpu:" + model_names_[dim - kFixedDims];
  }
}

std::string_view ResourceSpace::unit(size_t dim) {
  switch (dim) {
    case kCpuDim:
      return "milli-CPU";
    case kMemoryDim:
      return "MiB";
    default:
      return "milli-GPU";
  }
}

void addTo(Amounts& a, const Amounts& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] += b[i];
  }
}

void subtractFrom(Amounts& a, const Amounts& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] -= b[i];
  }
}

bool fitsWithin(const Amounts& a, const Amounts& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > b[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace tessera::sched
