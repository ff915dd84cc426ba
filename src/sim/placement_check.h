// An independent checker for placements-*.csv files: replays every placed pod against the node
// list and verifies that no node's CPU or memory and no GPU's share is ever over-committed,
// that GPU indices exist, and that each pod got as many GPUs as it asked for. It shares no code
// with the scheduler (only the CSV reader), so a scheduler bug cannot hide itself here.
#pragma once

#include <string>

#include "core/status.h"

namespace tessera::sim {

struct PlacementCheckStats {
  size_t placed = 0;
  size_t failed = 0;
};

// Returns the first violation as an error naming the placements file and line.
core::Result<PlacementCheckStats> checkPlacements(const std::string& nodes_csv,
                                                  const std::string& placements_csv);

}  // namespace tessera::sim
