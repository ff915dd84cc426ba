// Helpers for scheduler tests: tiny hand-made clusters and requests.
#pragma once

#include <string>
#include <vector>

#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "model/task.h"

namespace tessera::sched::testing {

inline model::Node node(const model::GpuCatalogue& cat, const std::string& name, int64_t cpu_cores,
                        int64_t mem_gib, const std::string& gpu_model, int gpus) {
  return model::makeNode(name, core::MilliCpu{cpu_cores * 1000}, core::MiB{mem_gib * 1024}, cat,
                         *cat.find(gpu_model), gpus);
}

inline model::TaskRequest cpuTask(int64_t cpu_milli, int64_t mem_mib = 0) {
  model::TaskRequest r;
  r.cpu = core::MilliCpu{cpu_milli};
  r.memory = core::MiB{mem_mib};
  return r;
}

inline model::TaskRequest gpuTask(int64_t cpu_milli, int count, int64_t milli_per_gpu = 1000,
                                  int64_t mem_mib = 0) {
  model::TaskRequest r = cpuTask(cpu_milli, mem_mib);
  r.gpu_count = count;
  r.gpu_milli = core::MilliGpu{milli_per_gpu};
  r.isolation = milli_per_gpu < 1000 ? model::Isolation::kProcess : model::Isolation::kHardware;
  return r;
}

inline model::TaskRequest migTask(const std::string& profile, int64_t cpu_milli = 1000) {
  model::TaskRequest r = cpuTask(cpu_milli);
  r.gpu_count = 1;
  r.mig_profile = profile;
  return r;
}

}  // namespace tessera::sched::testing
