// Named node shapes for simulations and for agents without real GPUs: `dgx-h100`, `dgx-h200`,
// `a100-8x` (DGX A100 640GB) and `a100-40gb-8x` (DGX A100 320GB). Each node is one NVLink domain.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"

namespace tessera::model {

// The names `makeProfileNode` accepts, in documentation order.
const std::vector<std::string>& nodeProfileNames();

// A node of the named profile. `nvlink_domain` is the node's own domain id.
core::Result<Node> makeProfileNode(std::string_view profile, std::string name,
                                   const GpuCatalogue& catalogue, int nvlink_domain);

}  // namespace tessera::model
