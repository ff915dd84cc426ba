// Shamir's secret sharing over GF(2^8) (the AES field, as Vault's `shamir` package): a secret is
// split into `shares` pieces, any `threshold` of which give it back and fewer give nothing.
// Used for the unseal key (`tessera operator init -key-shares=5 -key-threshold=3`).
//
//   auto shares = splitSecret(key, 5, 3);              // 5 strings, each secret.size() + 1 bytes
//   auto back = combineShares({s[0], s[3], s[4]});     // == key
//
// Each share is the polynomials' values at its x (one byte per secret byte), followed by x itself
// (1..255). Combining checks that the shares agree in length and have distinct x; it cannot
// tell a wrong share from a right one (the caller checks the result, e.g. by opening something
// sealed with it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::secrets {

// 2 <= threshold <= shares <= 255; a non-empty secret.
core::Result<std::vector<std::string>> splitSecret(std::string_view secret, int shares,
                                                   int threshold);
// At least two shares of one split; with fewer than its threshold the answer is wrong (not an
// error: nothing in the shares says what the threshold was).
core::Result<std::string> combineShares(const std::vector<std::string>& shares);

// Lowercase hex, and back (for shares and keys people copy); invalid argument on a bad digit.
std::string toHex(std::string_view bytes);
core::Result<std::string> fromHex(std::string_view hex);

}  // namespace tessera::secrets
