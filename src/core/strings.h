// Small string helpers shared by command-line and file parsers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::core {

// Splits `text` at `sep`, trims spaces and tabs from each item and drops empty items:
// splitList("a, b,,c", ',') == {"a", "b", "c"}.
std::vector<std::string> splitList(std::string_view text, char sep = ',');

}  // namespace tessera::core
