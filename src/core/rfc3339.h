// Times as RFC 3339 text in UTC, the one formatter of the project: API answers
// ("2026-12-02T05:12:42Z"), audit records and anything that must order by text
// ("2026-12-02T05:12:42.123Z").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace tessera::core {

std::string formatRfc3339(WallTime t);        // Whole seconds.
std::string formatRfc3339Millis(WallTime t);  // Milliseconds, always three digits.
// Reads what the two formatters write ("Z", whole seconds or 1 to 9 digits of fraction, read
// to the millisecond); nullopt for anything else.
std::optional<WallTime> parseRfc3339(std::string_view text);

}  // namespace tessera::core
