// Small string helpers shared by command-line and file parsers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::core {

// Splits `text` at `sep`, trims spaces and tabs from each item and drops empty items:
// splitList("a, b,,c", ',') == {"a", "b", "c"}.
std::vector<std::string> splitList(std::string_view text, char sep = ',');

// Lower-case hex of `n` bytes: hexEncode("\x01\xab", 2) == "01ab".
std::string hexEncode(const unsigned char* data, size_t n);

// The value of one hex digit (either case), or -1 if `c` is not one.
int hexDigitValue(char c);

// Whether `s` is well-formed UTF-8 (no overlong two-byte forms, no sequence cut short).
bool isValidUtf8(std::string_view s);

}  // namespace tessera::core
