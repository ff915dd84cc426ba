#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "model/gpu_catalogue.h"

namespace tessera::model {
namespace {

struct Placed {
  const char* profile;
  int start;
};

std::vector<MigInstance> layoutOf(const GpuModelInfo& m, const std::vector<Placed>& placed) {
  std::vector<MigInstance> out;
  for (const Placed& p : placed) {
    int i = m.findMigProfile(p.profile);
    EXPECT_GE(i, 0) << p.profile;
    out.push_back({i, p.start});
  }
  return out;
}

struct LayoutCase {
  const char* name;
  std::vector<Placed> placed;
  bool valid;
};

// Examples from the MIG user guide and shared/reference/gpu-sharing-enforcement.md section 5.4,
// written for H100-80GB.
TEST(MigLayoutTest, KnownLayoutsH100) {
  const LayoutCase cases[] = {
      {"7g alone", {{"7g.80gb", 0}}, true},
      {"4g+3g", {{"4g.40gb", 0}, {"3g.40gb", 4}}, true},
      {"3g+3g", {{"3g.40gb", 0}, {"3g.40gb", 4}}, true},
      {"3-2-1-1", {{"3g.40gb", 4}, {"2g.20gb", 0}, {"1g.10gb", 2}, {"1g.10gb", 3}}, true},
      {"2g+5x1g",
       {{"2g.20gb", 0},
        {"1g.10gb", 2},
        {"1g.10gb", 3},
        {"1g.10gb", 4},
        {"1g.10gb", 5},
        {"1g.10gb", 6}},
       true},
      {"7x1g",
       {{"1g.10gb", 0},
        {"1g.10gb", 1},
        {"1g.10gb", 2},
        {"1g.10gb", 3},
        {"1g.10gb", 4},
        {"1g.10gb", 5},
        {"1g.10gb", 6}},
       true},
      {"4x1g.20gb", {{"1g.20gb", 0}, {"1g.20gb", 2}, {"1g.20gb", 4}, {"1g.20gb", 6}}, true},
      {"3x2g+1g.20gb", {{"2g.20gb", 0}, {"2g.20gb", 2}, {"2g.20gb", 4}, {"1g.20gb", 6}}, true},
      {"4g+2g+1g", {{"4g.40gb", 0}, {"2g.20gb", 4}, {"1g.10gb", 6}}, true},
      {"1g+me with 1g", {{"1g.10gb+me", 0}, {"1g.10gb", 1}}, true},
      // Invalid.
      {"4g+4g", {{"4g.40gb", 0}, {"4g.40gb", 4}}, false},
      {"7g plus 1g", {{"7g.80gb", 0}, {"1g.10gb", 6}}, false},
      {"1g at 1 and 5 plus 3g at 0", {{"1g.10gb", 1}, {"1g.10gb", 5}, {"3g.40gb", 0}}, false},
      {"1g at 1 and 5 plus 3g at 4", {{"1g.10gb", 1}, {"1g.10gb", 5}, {"3g.40gb", 4}}, false},
      {"3g at 0 then 2g+2g", {{"3g.40gb", 0}, {"2g.20gb", 4}, {"2g.20gb", 6}}, false},
      {"1g at slice 7", {{"1g.10gb", 7}}, false},
      {"2g at odd start", {{"2g.20gb", 1}}, false},
      {"3g at 2", {{"3g.40gb", 2}}, false},
      {"4g at 4", {{"4g.40gb", 4}}, false},
      {"two +me", {{"1g.10gb+me", 0}, {"1g.10gb+me", 1}}, false},
      {"same slot twice", {{"1g.10gb", 3}, {"1g.10gb", 3}}, false},
  };
  GpuCatalogue cat = GpuCatalogue::builtin();
  const GpuModelInfo& h100 = cat.model(*cat.find("H100-80GB"));
  for (const LayoutCase& c : cases) {
    auto layout = layoutOf(h100, c.placed);
    EXPECT_EQ(validateMigLayout(h100, layout).isOk(), c.valid) << c.name;
  }
}

// Every valid layout of H100 and H200, enumerated independently of the validator: a layout is a
// set of (profile, start) placements. We walk all subsets of the possible placements, prune
// those whose ranges overlap, and check (a) the validator accepts exactly the subsets that also
// respect instance limits, and (b) no valid layout uses more than 7 compute slices, which is a
// property of the hardware the tables must reproduce.
TEST(MigLayoutTest, EveryValidLayoutH100AndH200) {
  GpuCatalogue cat = GpuCatalogue::builtin();
  for (const char* model_name : {"H100-80GB", "H200-141GB"}) {
    const GpuModelInfo& m = cat.model(*cat.find(model_name));
    std::vector<MigInstance> all;
    for (size_t p = 0; p < m.mig_profiles.size(); ++p) {
      for (int s : m.mig_profiles[p].starts) {
        all.push_back({static_cast<int>(p), s});
      }
    }
    int valid_count = 0;
    int rejected_for_limits = 0;
    int max_compute = 0;
    std::vector<MigInstance> chosen;
    std::function<void(size_t, unsigned)> walk = [&](size_t i, unsigned used) {
      if (i == all.size()) {
        std::vector<int> counts(m.mig_profiles.size(), 0);
        bool within = true;
        int compute = 0;
        for (const MigInstance& inst : chosen) {
          within &= ++counts[inst.profile] <= m.mig_profiles[inst.profile].max_instances;
          compute += m.mig_profiles[inst.profile].compute_slices;
        }
        core::Status st = validateMigLayout(m, chosen);
        EXPECT_EQ(st.isOk(), within) << model_name << " layout of " << chosen.size();
        if (within) {
          ++valid_count;
          max_compute = std::max(max_compute, compute);
          // The incremental occupancy agrees with the validator, in any insertion order.
          MigOccupancy occ;
          for (const MigInstance& inst : chosen) {
            EXPECT_TRUE(migSlotFree(m, occ, inst.profile, inst.start));
            addMigInstance(m, occ, inst.profile, inst.start);
          }
          EXPECT_EQ(occ.usedComputeSlices(m), compute);
          for (const MigInstance& inst : chosen) {
            removeMigInstance(m, occ, inst.profile, inst.start);
          }
          EXPECT_TRUE(occ.empty());
        } else {
          ++rejected_for_limits;
        }
        return;
      }
      walk(i + 1, used);  // Without placement i.
      const MigProfile& p = m.mig_profiles[all[i].profile];
      unsigned mask = ((1U << p.memory_slices) - 1) << all[i].start;
      if ((used & mask) == 0) {
        chosen.push_back(all[i]);
        walk(i + 1, used | mask);
        chosen.pop_back();
      }
    };
    walk(0, 0);
    EXPECT_GT(valid_count, 100) << model_name;
    EXPECT_GT(rejected_for_limits, 0) << model_name;  // Two +me instances, for one.
    EXPECT_EQ(max_compute, kMigComputeSlices) << model_name;
  }
}

TEST(MigLayoutTest, OverlapAndStartErrorsNameTheInstance) {
  GpuCatalogue cat = GpuCatalogue::builtin();
  const GpuModelInfo& h200 = cat.model(*cat.find("H200-141GB"));
  auto st = validateMigLayout(h200, layoutOf(h200, {{"3g.71gb", 0}, {"2g.35gb", 2}}));
  EXPECT_EQ(st.message(), "instance 1: 2g.35gb at 2 overlaps memory slices already taken");
  st = validateMigLayout(h200, layoutOf(h200, {{"3g.71gb", 2}}));
  EXPECT_EQ(st.message(), "instance 0: 3g.71gb cannot start at memory slice 2");
  const GpuModelInfo& t4 = cat.model(*cat.find("T4"));
  EXPECT_FALSE(validateMigLayout(t4, {}).isOk());
}

int placeMany(const GpuModelInfo& m, const char* profile) {
  int p = m.findMigProfile(profile);
  MigOccupancy occ;
  int n = 0;
  while (true) {
    int s = chooseMigSlot(m, occ, p);
    if (s < 0) {
      return n;
    }
    addMigInstance(m, occ, p, s);
    ++n;
  }
}

TEST(MigLayoutTest, RepeatedPlacementReachesTheInstanceLimit) {
  GpuCatalogue cat = GpuCatalogue::builtin();
  const GpuModelInfo& h100 = cat.model(*cat.find("H100-80GB"));
  EXPECT_EQ(placeMany(h100, "1g.10gb"), 7);
  EXPECT_EQ(placeMany(h100, "1g.10gb+me"), 1);
  EXPECT_EQ(placeMany(h100, "1g.20gb"), 4);
  EXPECT_EQ(placeMany(h100, "2g.20gb"), 3);
  EXPECT_EQ(placeMany(h100, "3g.40gb"), 2);
  EXPECT_EQ(placeMany(h100, "4g.40gb"), 1);
  EXPECT_EQ(placeMany(h100, "7g.80gb"), 1);
}

TEST(MigLayoutTest, SlotChoiceKeepsLargeProfilesPlaceable) {
  GpuCatalogue cat = GpuCatalogue::builtin();
  const GpuModelInfo& h100 = cat.model(*cat.find("H100-80GB"));
  const int g1 = h100.findMigProfile("1g.10gb");
  const int g3 = h100.findMigProfile("3g.40gb");
  const int g4 = h100.findMigProfile("4g.40gb");
  MigOccupancy occ;
  // A first 1g goes high, leaving slice 0 free for a 4g.
  int s = chooseMigSlot(h100, occ, g1);
  EXPECT_GE(s, 4);
  addMigInstance(h100, occ, g1, s);
  EXPECT_GE(chooseMigSlot(h100, occ, g4), 0);
  // A second 1g joins the first rather than blocking the other half.
  s = chooseMigSlot(h100, occ, g1);
  EXPECT_GE(s, 4);
  addMigInstance(h100, occ, g1, s);
  EXPECT_EQ(chooseMigSlot(h100, occ, g3), 0);
  EXPECT_EQ(chooseMigSlot(h100, occ, g4), 0);
}

}  // namespace
}  // namespace tessera::model
