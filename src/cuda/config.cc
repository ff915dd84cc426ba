#include "cuda/config.h"

#include <limits>
#include <map>

namespace tessera::cuda {
namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

// Reads the leading digits of text into value; returns how many there were, or npos when the
// number does not fit in 64 bits.
size_t readDigits(std::string_view text, std::uint64_t& value) {
  value = 0;
  size_t i = 0;
  for (; i < text.size() && isDigit(text[i]); ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
      return std::string_view::npos;
    }
    value = value * 10 + digit;
  }
  return i;
}

std::string setting(const char* name, std::string_view value, const std::string& why) {
  return std::string(name) + "='" + std::string(value) + "': " + why;
}

}  // namespace

ParsedValue parseByteSize(std::string_view text) {
  if (text.empty()) {
    return {0, "is empty (unset it for no limit)"};
  }
  std::uint64_t number = 0;
  const size_t digits = readDigits(text, number);
  if (digits == std::string_view::npos) {
    return {0, "is too large"};
  }
  if (digits == 0) {
    return {0, "is not a byte count (examples: 8192M, 8G, 1073741824)"};
  }
  const std::string_view unit = text.substr(digits);
  int shift = 0;
  if (!unit.empty()) {
    static constexpr std::string_view kUnits = "kmgt";
    const size_t index = kUnits.find(lower(unit[0]));
    const std::string_view rest = unit.substr(1);
    if (index == std::string_view::npos || !(rest.empty() || equalsIgnoringCase(rest, "ib"))) {
      return {0, "has an unknown unit '" + std::string(unit) +
                     "' (use K, M, G or T, powers of 1024, or a plain byte count)"};
    }
    shift = 10 * static_cast<int>(index + 1);
  }
  if (number > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
    return {0, "is too large"};
  }
  if (number == 0) {
    return {0, "must be more than 0 (unset it for no limit)"};
  }
  return {number << shift, ""};
}

ParsedValue parseWholeNumber(std::string_view text, std::uint64_t min, std::uint64_t max) {
  const std::string range = std::to_string(min) + " to " + std::to_string(max);
  std::uint64_t number = 0;
  const size_t digits = readDigits(text, number);
  if (digits == std::string_view::npos) {
    return {0, "must be " + range};
  }
  if (text.empty() || digits != text.size()) {
    return {0, "is not a whole number from " + range};
  }
  if (number < min || number > max) {
    return {0, "must be " + range};
  }
  return {number, ""};
}

namespace {

template <typename Lookup>
SettingsResult readWith(const Lookup& getenv_fn) {
  SettingsResult result;
  if (const char* v = getenv_fn("TESSERA_CUDA_MEMORY_LIMIT"); v != nullptr) {
    const ParsedValue p = parseByteSize(v);
    if (!p.error.empty()) {
      result.error = setting("TESSERA_CUDA_MEMORY_LIMIT", v, p.error);
      return result;
    }
    result.settings.memory_limit_bytes = p.value;
  }
  if (const char* v = getenv_fn("TESSERA_CUDA_COMPUTE_SHARE"); v != nullptr) {
    const ParsedValue p = parseWholeNumber(v, 1, 100);
    if (!p.error.empty()) {
      result.error = setting("TESSERA_CUDA_COMPUTE_SHARE", v, p.error + " (percent of GPU time)");
      return result;
    }
    result.settings.compute_share_percent = static_cast<int>(p.value);
  }
  if (const char* v = getenv_fn("TESSERA_CUDA_PERIOD_MS"); v != nullptr) {
    const ParsedValue p = parseWholeNumber(v, 1, 10'000);
    if (!p.error.empty()) {
      result.error = setting("TESSERA_CUDA_PERIOD_MS", v, p.error + " (milliseconds)");
      return result;
    }
    result.settings.period_ns = static_cast<std::int64_t>(p.value) * 1'000'000;
  }
  if (const char* v = getenv_fn("TESSERA_CUDA_COMPUTE_GUARANTEE"); v != nullptr) {
    const ParsedValue p = parseWholeNumber(v, 1, 100);
    if (!p.error.empty()) {
      result.error =
          setting("TESSERA_CUDA_COMPUTE_GUARANTEE", v, p.error + " (percent of GPU time)");
      return result;
    }
    result.settings.compute_guarantee_percent = static_cast<int>(p.value);
  }
  return result;
}

}  // namespace

SettingsResult readSettings(const char* (*getenv_fn)(const char*)) { return readWith(getenv_fn); }

SettingsResult readSettingsFile(std::string_view text, const std::string& path) {
  std::map<std::string, std::string, std::less<>> values;
  int number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++number;
    if (line.empty() || line.front() == '#') {
      continue;
    }
    const size_t eq = line.find('=');
    const std::string name(line.substr(0, eq));
    if (eq == std::string_view::npos ||
        (name != "TESSERA_CUDA_MEMORY_LIMIT" && name != "TESSERA_CUDA_COMPUTE_SHARE" &&
         name != "TESSERA_CUDA_PERIOD_MS" && name != "TESSERA_CUDA_COMPUTE_GUARANTEE")) {
      SettingsResult bad;
      bad.error = path + ":" + std::to_string(number) + ": '" + std::string(line) +
                  "' is not one of TESSERA_CUDA_MEMORY_LIMIT, TESSERA_CUDA_COMPUTE_SHARE, "
                  "TESSERA_CUDA_COMPUTE_GUARANTEE or TESSERA_CUDA_PERIOD_MS with '=' and a value";
      return bad;
    }
    values[name] = std::string(line.substr(eq + 1));
  }
  SettingsResult r = readWith([&](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
  if (!r.error.empty()) {
    r.error = path + ": " + r.error;
  }
  return r;
}

}  // namespace tessera::cuda
