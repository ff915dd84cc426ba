// JSON codecs for the domain types, shared by every reader of workloads: scenario files
// (src/sim) and the API (src/server), so both accept the same fields with the same errors.
//
//   JSON fields of a task request, all optional:
//     "cpuMilli": 8000, "memoryMiB": 65536,
//     "gpu": {"count": 1, "milli": 500, "memoryMiB": 20480, "mig": "3g.40gb",
//             "models": ["H100-80GB"], "isolation": "hardware" | "process" | "none"}
//   "gpu" alone means one whole GPU; "milli" < 1000 or "memoryMiB" without "milli" ask for a
//   share with process isolation; "mig" asks for a MIG instance.
//     "nodeSelector": {"pool": "team-1", "zone": "a"}   (labels a node must carry)
#pragma once

#include <functional>

#include "core/json_node.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "model/task.h"

namespace tessera::model {

// Reads the task-request fields of `w` (an object that may hold other fields too) into `r` and
// validates the result; errors name the field. `available`, when given, says whether the pool
// has a model: a request naming a model that no node has is refused.
core::Status parseTaskRequest(const core::JsonNode& w, const GpuCatalogue& catalogue,
                              const std::function<bool(GpuModelId)>& available, TaskRequest& r);

}  // namespace tessera::model
