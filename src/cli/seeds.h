// Parsing of seed lists given on the command line: "42-51", "1,5,9", "7" or a mix "1,3-5".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::cli {

core::Result<std::vector<uint64_t>> parseSeeds(const std::string& text);

}  // namespace tessera::cli
