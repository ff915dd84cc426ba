// Strong ids of the domain objects.
#pragma once

#include <cstdint>
#include <string>

#include "core/strong_id.h"

namespace tessera::model {

struct TenantTag {};
struct NodeTag {};
struct TaskTag {};
struct GpuModelTag {};

// Tenants are interned to small integers inside the scheduler; 0 means "no tenant" (the
// simulator's single anonymous tenant).
using TenantId = core::StrongId<TenantTag, uint32_t>;
// Index of a node in its cluster, dense from 0.
using NodeId = core::StrongId<NodeTag, uint32_t>;
using TaskId = core::StrongId<TaskTag, uint64_t>;
// Index of a GPU model in a `GpuCatalogue`.
using GpuModelId = core::StrongId<GpuModelTag, uint16_t>;

}  // namespace tessera::model
