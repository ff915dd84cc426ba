#include "sched/frag.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "model/node.h"

namespace tessera::sched {

std::vector<TypicalPod> typicalPods(std::span<const PodShape> shapes, double coverage) {
  std::map<PodShape, double> counts;
  for (const PodShape& s : shapes) {
    counts[s] += 1;
  }
  std::vector<std::pair<PodShape, double>> weighted(counts.begin(), counts.end());
  return typicalPods(std::move(weighted), coverage);
}

std::vector<TypicalPod> typicalPods(std::vector<std::pair<PodShape, double>> weighted,
                                    double coverage) {
  // Most popular first; among equals the larger shape first (the FGD artifact's order).
  std::stable_sort(weighted.begin(), weighted.end(), [](const auto& x, const auto& y) {
    const PodShape& a = x.first;
    const PodShape& b = y.first;
    if (x.second != y.second) {
      return x.second > y.second;
    }
    if (a.cpu_milli != b.cpu_milli) {
      return a.cpu_milli > b.cpu_milli;
    }
    if (a.milli != b.milli) {
      return a.milli > b.milli;
    }
    if (a.gpu_count != b.gpu_count) {
      return a.gpu_count > b.gpu_count;
    }
    return a.models > b.models;
  });
  double total = 0;
  for (const auto& [shape, weight] : weighted) {
    total += weight;
  }
  const double expected = coverage * total;
  double covered = 0;
  std::vector<TypicalPod> kept;
  for (auto& [shape, weight] : weighted) {
    if (covered >= expected || weight <= 0) {
      break;
    }
    kept.push_back({std::move(shape), std::llround(weight), weight});
    covered += weight;
  }
  for (TypicalPod& t : kept) {
    t.freq /= covered;
  }
  return kept;
}

double FragModel::cpuPerGpuMilli() const {
  double cpu = 0;
  double milli = 0;
  for (const TypicalPod& t : typical_) {
    if (t.shape.gpu_count > 0 && t.shape.milli > 0) {
      cpu += t.freq * static_cast<double>(t.shape.cpu_milli);
      milli += t.freq * static_cast<double>(t.shape.milli) * t.shape.gpu_count;
    }
  }
  return milli > 0 ? cpu / milli : 0;
}

FragModel::FragModel(std::vector<TypicalPod> typical, size_t model_count)
    : typical_(std::move(typical)) {
  std::map<std::vector<model::GpuModelId>, uint32_t> access_ids;
  for (const TypicalPod& t : typical_) {
    if (t.shape.gpu_count == 0 || t.shape.milli == 0) {
      cpu_only_freq_ += t.freq;
      continue;
    }
    uint32_t access = UINT32_MAX;
    if (!t.shape.models.empty()) {
      auto [it, inserted] =
          access_ids.emplace(t.shape.models, static_cast<uint32_t>(access_.size()));
      if (inserted) {
        std::vector<uint8_t> ok(model_count, 0);
        for (model::GpuModelId m : t.shape.models) {
          if (m.value() < model_count) {
            ok[m.value()] = 1;
          }
        }
        access_.push_back(std::move(ok));
      }
      access = it->second;
    }
    entries_.push_back({t.shape.cpu_milli, t.shape.milli, t.shape.gpu_count, t.freq, access});
  }
}

double FragModel::frag(int64_t cpu_left, std::span<const int32_t> gpu_left,
                       model::GpuModelId model) const {
  int64_t total = 0;
  for (int32_t l : gpu_left) {
    total += l;
  }
  if (total == 0) {
    return 0;
  }
  const double t = static_cast<double>(total);
  double f = cpu_only_freq_ * t;
  for (const Entry& e : entries_) {
    bool usable = cpu_left >= e.cpu_milli;
    if (usable && e.access_index != UINT32_MAX) {
      const std::vector<uint8_t>& ok = access_[e.access_index];
      usable = model.value() < ok.size() && ok[model.value()] != 0;
    }
    if (usable) {
      int fitting = 0;
      int64_t small = 0;  // Free share on GPUs too small for the pod.
      for (int32_t l : gpu_left) {
        if (l >= e.milli) {
          ++fitting;
        } else {
          small += l;
        }
      }
      if (fitting >= e.gpu_count) {
        f += e.freq * static_cast<double>(small);
        continue;
      }
    }
    f += e.freq * t;
  }
  return f;
}

double FragModel::nodeFrag(const ClusterState& state, NodeIndex node) const {
  std::span<const GpuState> gpus = state.gpus(node);
  if (gpus.empty()) {
    return 0;
  }
  int32_t left[model::kMaxGpusPerNode];
  const size_t n = std::min(gpus.size(), static_cast<size_t>(model::kMaxGpusPerNode));
  for (size_t i = 0; i < n; ++i) {
    left[i] = gpus[i].free_milli;
  }
  return frag(state.nodeState(node).free_cpu_milli, {left, n}, gpus[0].model);
}

}  // namespace tessera::sched
