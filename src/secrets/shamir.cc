#include "secrets/shamir.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <array>
#include <set>

#include "core/strings.h"

namespace tessera::secrets {
namespace {

// Logarithms and exponentials of GF(2^8) with the AES polynomial x^8 + x^4 + x^3 + x + 1 and the
// generator 3.
struct Tables {
  std::array<uint8_t, 256> log{};
  std::array<uint8_t, 510> exp{};
  Tables() {
    unsigned x = 1;
    for (unsigned i = 0; i < 255; ++i) {
      exp[i] = static_cast<uint8_t>(x);
      exp[i + 255] = static_cast<uint8_t>(x);
      log[x] = static_cast<uint8_t>(i);
      // x *= 3: x * 2 (with reduction) xor x.
      unsigned twice = x << 1;
      if ((twice & 0x100) != 0) {
        twice ^= 0x11b;
      }
      x = twice ^ x;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

uint8_t mul(uint8_t a, uint8_t b) {
  if (a == 0 || b == 0) {
    return 0;
  }
  const Tables& t = tables();
  return t.exp[t.log[a] + t.log[b]];
}

uint8_t div(uint8_t a, uint8_t b) {  // b != 0
  if (a == 0) {
    return 0;
  }
  const Tables& t = tables();
  return t.exp[t.log[a] + 255 - t.log[b]];
}

}  // namespace

core::Result<std::vector<std::string>> splitSecret(std::string_view secret, int shares,
                                                   int threshold) {
  if (secret.empty()) {
    return core::invalidArgument("shamir: cannot split an empty secret");
  }
  if (threshold < 2 || threshold > shares || shares > 255) {
    return core::invalidArgument("shamir: need 2 <= threshold <= shares <= 255 (got threshold " +
                                 std::to_string(threshold) + ", shares " + std::to_string(shares) +
                                 ")");
  }
  std::vector<std::string> out(static_cast<size_t>(shares), std::string(secret.size() + 1, '\0'));
  std::vector<uint8_t> coeffs(static_cast<size_t>(threshold));
  for (size_t i = 0; i < secret.size(); ++i) {
    coeffs[0] = static_cast<uint8_t>(secret[i]);
    if (RAND_bytes(coeffs.data() + 1, threshold - 1) != 1) {
      return core::unavailable("shamir: no randomness");
    }
    for (int s = 0; s < shares; ++s) {
      const auto x = static_cast<uint8_t>(s + 1);
      uint8_t y = 0;  // Horner: ((c[t-1] x + c[t-2]) x + ...) x + c[0].
      for (size_t k = coeffs.size(); k-- > 0;) {
        y = static_cast<uint8_t>(mul(y, x) ^ coeffs[k]);
      }
      out[static_cast<size_t>(s)][i] = static_cast<char>(y);
    }
  }
  OPENSSL_cleanse(coeffs.data(), coeffs.size());
  for (int s = 0; s < shares; ++s) {
    out[static_cast<size_t>(s)].back() = static_cast<char>(s + 1);
  }
  return out;
}

core::Result<std::string> combineShares(const std::vector<std::string>& shares) {
  if (shares.size() < 2) {
    return core::invalidArgument("shamir: need at least 2 shares");
  }
  const size_t len = shares[0].size();
  if (len < 2) {
    return core::invalidArgument("shamir: a share is too short");
  }
  std::set<uint8_t> xs;
  for (const std::string& s : shares) {
    if (s.size() != len) {
      return core::invalidArgument("shamir: the shares differ in length (from different splits?)");
    }
    const auto x = static_cast<uint8_t>(s.back());
    if (x == 0 || !xs.insert(x).second) {
      return core::invalidArgument("shamir: the same share was given twice");
    }
  }
  std::string secret(len - 1, '\0');
  for (size_t i = 0; i + 1 < len; ++i) {
    uint8_t value = 0;  // Lagrange interpolation at x = 0.
    for (size_t j = 0; j < shares.size(); ++j) {
      const auto xj = static_cast<uint8_t>(shares[j].back());
      uint8_t basis = 1;
      for (size_t m = 0; m < shares.size(); ++m) {
        if (m != j) {
          const auto xm = static_cast<uint8_t>(shares[m].back());
          basis = mul(basis, div(xm, static_cast<uint8_t>(xm ^ xj)));
        }
      }
      value ^= mul(static_cast<uint8_t>(shares[j][i]), basis);
    }
    secret[i] = static_cast<char>(value);
  }
  return secret;
}

std::string toHex(std::string_view bytes) {
  return core::hexEncode(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

core::Result<std::string> fromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return core::invalidArgument("not hex: odd number of digits");
  }
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = core::hexDigitValue(hex[2 * i]);
    const int lo = core::hexDigitValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return core::invalidArgument("not hex: bad digit at " +
                                   std::to_string(2 * i + (hi < 0 ? 0 : 1)));
    }
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

}  // namespace tessera::secrets
