// Files that hold secrets (keys, salts, the store) are their owner's alone: mode 0600.
//
//   if (auto was = core::restrictToOwner("/var/lib/tessera/tessera.db"); was.isOk() && *was) {
//     core::logWarn("tessera.db was mode {:04o}; now 0600", **was);
//   }
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace tessera::core {

// When the file at `path` exists and group or others have any permission on it, takes those away
// (0644 becomes 0600) and returns the mode it had; nullopt when it was its owner's alone already,
// or is not there. An error says why it could not be checked or changed.
Result<std::optional<unsigned>> restrictToOwner(const std::string& path);

// The file's permission bits when group or others have any (it is not its owner's alone);
// nullopt when they have none, or the file is not there.
std::optional<unsigned> openToOthers(const std::string& path);

// Replaces the file at `path` with `data`, atomically (a temporary file beside it, synced, then
// renamed over it), created with `mode`: a reader sees the old contents or the new, never part.
Status writeFileAtomic(const std::string& path, const std::string& data, unsigned mode);

}  // namespace tessera::core
