// Readers for the Alibaba GPU-sharing trace ("openb", cluster-trace-gpu-v2023) used by the FGD
// paper: a node list and a pod list, as CSV.
//
// Node list columns: sn,cpu_milli,memory_mib,gpu,model (extra columns are ignored).
// Pod list columns:  name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]
//   gpu_spec: accepted GPU models separated by '|', empty = any.
//
// Every error names the file and line: "pods.csv:17: column 'num_gpu' value -1 is negative".
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "model/task.h"
#include "sched/frag.h"

namespace tessera::sim {

struct OpenbPod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int32_t gpu_milli = 0;                  // Per GPU.
  std::vector<model::GpuModelId> models;  // Empty = any.

  int64_t totalGpuMilli() const { return static_cast<int64_t>(num_gpu) * gpu_milli; }
  model::TaskRequest toRequest() const;
  sched::PodShape shape() const;
};

// Reads a node list. GPU models are looked up in (or added to) `catalogue`.
core::Result<std::vector<model::Node>> readOpenbNodes(const std::string& path,
                                                      model::GpuCatalogue& catalogue);

// Reads a pod list. Every model a pod names in gpu_spec must be the model of some node.
core::Result<std::vector<OpenbPod>> readOpenbPods(const std::string& path,
                                                  const model::GpuCatalogue& catalogue,
                                                  const std::vector<model::Node>& nodes);

}  // namespace tessera::sim
