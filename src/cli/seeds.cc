#include "cli/seeds.h"

#include <charconv>

namespace tessera::cli {
namespace {

core::Result<uint64_t> parseOne(const std::string& item, const std::string& whole) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
  if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
    return core::invalidArgument("--seeds '" + whole + "': '" + item +
                                 "' is not a non-negative integer");
  }
  return v;
}

}  // namespace

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) {
      comma = text.size();
    }
    std::string item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') {
      item.erase(item.begin());
    }
    while (!item.empty() && item.back() == ' ') {
      item.pop_back();
    }
    if (!item.empty()) {
      out.push_back(item);
    }
    start = comma + 1;
  }
  return out;
}

core::Result<std::vector<uint64_t>> parseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  for (const std::string& item : splitList(text)) {
    size_t dash = item.find('-');
    if (dash == std::string::npos) {
      TESSERA_ASSIGN_OR_RETURN(uint64_t v, parseOne(item, text));
      seeds.push_back(v);
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(uint64_t lo, parseOne(item.substr(0, dash), text));
    TESSERA_ASSIGN_OR_RETURN(uint64_t hi, parseOne(item.substr(dash + 1), text));
    if (hi < lo) {
      return core::invalidArgument("--seeds '" + text + "': range '" + item + "' is empty");
    }
    if (hi - lo >= 100000) {
      return core::invalidArgument("--seeds '" + text + "': range '" + item +
                                   "' has more than 100000 seeds");
    }
    for (uint64_t s = lo; s <= hi; ++s) {
      seeds.push_back(s);
    }
  }
  if (seeds.empty()) {
    return core::invalidArgument("--seeds is empty");
  }
  return seeds;
}

}  // namespace tessera::cli
