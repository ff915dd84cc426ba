#include "model/node.h"

namespace tessera::model {

core::Status validateNode(const Node& node) {
  if (node.name.empty()) {
    return core::invalidArgument("node has an empty name");
  }
  if (node.cpu.value() < 0 || node.memory.value() < 0) {
    return core::invalidArgument("node '" + node.name + "' has negative CPU or memory");
  }
  if (static_cast<int>(node.gpus.size()) > kMaxGpusPerNode) {
    return core::invalidArgument("node '" + node.name + "' has " +
                                 std::to_string(node.gpus.size()) + " GPUs; at most " +
                                 std::to_string(kMaxGpusPerNode) + " are supported");
  }
  return core::Status::ok();
}

Node makeNode(std::string name, core::MilliCpu cpu, core::MiB memory, const GpuCatalogue& catalogue,
              GpuModelId model, int count) {
  Node n{std::move(name), cpu, memory, {}, -1};
  n.gpus.assign(count, GpuDevice{model, catalogue.model(model).memory});
  return n;
}

}  // namespace tessera::model
