#include "cli/seeds.h"

#include <charconv>

#include "core/strings.h"

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

core::Result<std::vector<uint64_t>> parseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  for (const std::string& item : core::splitList(text)) {
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
