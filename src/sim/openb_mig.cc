#include "sim/openb_mig.h"

#include <algorithm>
#include <tuple>

#include "core/units.h"

namespace tessera::sim {
namespace {

constexpr int64_t kWhole = core::kWholeGpu.value();

}  // namespace

std::string_view migLayoutName(MigLayout l) {
  switch (l) {
    case MigLayout::kNone:
      return "none";
    case MigLayout::kFixed:
      return "fixed";
    case MigLayout::kDynamic:
      return "dynamic";
  }
  return "?";
}

core::Result<MigLayout> parseMigLayout(std::string_view s) {
  for (MigLayout l : {MigLayout::kNone, MigLayout::kFixed, MigLayout::kDynamic}) {
    if (s == migLayoutName(l)) {
      return l;
    }
  }
  return core::invalidArgument("--mig '" + std::string(s) +
                               "' is not a MIG layout (known: none, fixed, dynamic)");
}

core::Result<std::vector<std::pair<std::string, std::string>>> parseMigMap(std::string_view s) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos <= s.size() && !s.empty()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string_view item = s.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size() ||
        item.find('=', eq + 1) != std::string_view::npos) {
      return core::invalidArgument("--mig-map item '" + std::string(item) +
                                   "' is not FROM=TO (e.g. G3=A100-80GB)");
    }
    out.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    pos = comma + 1;
  }
  return out;
}

int64_t migMemoryNeed(const model::GpuModelInfo& model, int32_t milli) {
  int64_t whole = 0;
  for (const model::MigProfile& p : model.mig_profiles) {
    if (p.compute_slices == model::kMigComputeSlices) {
      whole = std::max(whole, p.memory.value());
    }
  }
  return (whole * milli + kWhole - 1) / kWhole;
}

std::optional<int> smallestMigProfile(const model::GpuModelInfo& model, int32_t milli,
                                      std::span<const int> allowed) {
  if (milli <= 0 || milli >= kWhole || !model.supportsMig()) {
    return std::nullopt;
  }
  const auto compute =
      static_cast<int>((int64_t{model::kMigComputeSlices} * milli + kWhole - 1) / kWhole);  // ceil
  const int64_t memory = migMemoryNeed(model, milli);
  std::optional<int> best;
  auto key = [&](int i) {
    const model::MigProfile& p = model.mig_profiles[i];
    return std::tuple(p.memory_slices, p.compute_slices, i);
  };
  for (int i = 0; i < static_cast<int>(model.mig_profiles.size()); ++i) {
    const model::MigProfile& p = model.mig_profiles[i];
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), i) == allowed.end()) {
      continue;
    }
    if (p.name.find("+me") != std::string::npos || p.compute_slices < compute ||
        p.memory.value() < memory) {
      continue;
    }
    if (!best || key(i) < key(*best)) {
      best = i;
    }
  }
  return best;
}

}  // namespace tessera::sim
