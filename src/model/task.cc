#include "model/task.h"

#include "model/node.h"

namespace tessera::model {

std::string_view isolationName(Isolation i) {
  switch (i) {
    case Isolation::kHardware:
      return "hardware";
    case Isolation::kProcess:
      return "process";
    case Isolation::kNone:
      return "none";
  }
  return "unknown";
}

core::Status validateTaskRequest(const TaskRequest& req) {
  for (size_t i = 0; i < req.node_selector.size(); ++i) {
    const auto& [key, value] = req.node_selector[i];
    TESSERA_RETURN_IF_ERROR(validateLabel(key, value));
    if (i > 0 && req.node_selector[i - 1].first >= key) {
      return core::invalidArgument("node selector: keys must be sorted and distinct");
    }
  }
  if (req.cpu.value() < 0) {
    return core::invalidArgument("cpu must not be negative");
  }
  if (req.memory.value() < 0) {
    return core::invalidArgument("memory must not be negative");
  }
  if (req.gpu_count < 0 || req.gpu_count > 64) {
    return core::invalidArgument("gpu count " + std::to_string(req.gpu_count) +
                                 " is outside 0..64");
  }
  if (req.gpu_memory.value() < 0) {
    return core::invalidArgument("gpu memory must not be negative");
  }
  if (req.gpu_count == 0) {
    if (req.gpu_milli.value() != 0 || req.gpu_memory.value() != 0 || req.isMig()) {
      return core::invalidArgument(
          "a task with no GPUs cannot ask for GPU share, GPU memory or a "
          "MIG profile");
    }
    return core::Status::ok();
  }
  if (req.isMig()) {
    if (req.gpu_count != 1) {
      return core::invalidArgument("a MIG request takes exactly one slice (gpu count 1)");
    }
    return core::Status::ok();
  }
  if (req.gpu_milli.value() <= 0 || req.gpu_milli > core::kWholeGpu) {
    return core::invalidArgument("gpu share " + std::to_string(req.gpu_milli.value()) +
                                 " milli is outside 1..1000");
  }
  if (req.gpu_milli < core::kWholeGpu && req.gpu_count != 1) {
    return core::invalidArgument("a fractional GPU share (" +
                                 std::to_string(req.gpu_milli.value()) +
                                 " milli) is only allowed with gpu count 1");
  }
  if (req.isFractional() && req.isolation == Isolation::kHardware) {
    return core::invalidArgument(
        "a fractional GPU cannot give hardware isolation; ask for a MIG "
        "profile or a whole GPU, or accept 'process' isolation");
  }
  return core::Status::ok();
}

}  // namespace tessera::model
