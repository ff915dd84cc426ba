#include "core/strings.h"

namespace tessera::core {

std::vector<std::string> splitList(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) {
      item.remove_prefix(1);
    }
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) {
      item.remove_suffix(1);
    }
    if (!item.empty()) {
      out.emplace_back(item);
    }
    start = end + 1;
  }
  return out;
}

std::string hexEncode(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

int hexDigitValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

bool isValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t more = 0;  // Continuation bytes that follow.
    if (c >= 0x80) {
      if ((c >> 5) == 0x6 && c >= 0xC2) {
        more = 1;
      } else if ((c >> 4) == 0xE) {
        more = 2;
      } else if ((c >> 3) == 0x1E && c <= 0xF4) {
        more = 3;
      } else {
        return false;
      }
    }
    if (more >= s.size() - i) {
      return false;
    }
    for (size_t k = 1; k <= more; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) {
        return false;
      }
    }
    i += more + 1;
  }
  return true;
}

}  // namespace tessera::core
