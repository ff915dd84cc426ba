// Wall times as Unix milliseconds, the form secrets records store them in.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/clock.h"

namespace tessera::secrets::internal {

inline int64_t toMs(core::WallTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

inline core::WallTime fromMs(int64_t ms) {
  return core::WallTime(
      std::chrono::duration_cast<core::WallTime::duration>(std::chrono::milliseconds(ms)));
}

}  // namespace tessera::secrets::internal
