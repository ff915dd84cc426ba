#include "model/gpu_catalogue.h"

#include <gtest/gtest.h>

namespace tessera::model {
namespace {

TEST(GpuCatalogueTest, BuiltinModels) {
  GpuCatalogue cat = GpuCatalogue::builtin();
  for (const char* name : {"H100-80GB", "H200-141GB", "A100-40GB", "A100-80GB"}) {
    auto id = cat.find(name);
    ASSERT_TRUE(id.has_value()) << name;
    EXPECT_TRUE(cat.model(*id).supportsMig()) << name;
    EXPECT_EQ(cat.model(*id).mig_profiles.size(), 7U) << name;
  }
  for (const char* name : {"G1", "G2", "G3", "T4", "P100", "V100M16", "V100M32", "A10"}) {
    auto id = cat.find(name);
    ASSERT_TRUE(id.has_value()) << name;
    EXPECT_FALSE(cat.model(*id).supportsMig()) << name;
  }
  EXPECT_EQ(cat.model(*cat.find("V100M32")).memory, core::MiB{32768});
  EXPECT_EQ(cat.model(*cat.find("G2")).memory, core::MiB{0});  // Undisclosed.
}

TEST(GpuCatalogueTest, LookupIsCaseInsensitiveWithAliases) {
  GpuCatalogue cat = GpuCatalogue::builtin();
  EXPECT_EQ(cat.find("h100"), cat.find("H100-80GB"));
  EXPECT_EQ(cat.find("H200"), cat.find("H200-141GB"));
  EXPECT_EQ(cat.find("t4"), cat.find("T4"));
  EXPECT_FALSE(cat.find("B200").has_value());
}

TEST(GpuCatalogueTest, InternAddsUnknownPlainModelsOnce) {
  GpuCatalogue cat = GpuCatalogue::builtin();
  size_t before = cat.size();
  auto a = cat.intern("RTX-6000");
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(cat.size(), before + 1);
  EXPECT_EQ(cat.intern("rtx-6000").value(), a.value());
  EXPECT_EQ(cat.size(), before + 1);
  EXPECT_FALSE(cat.model(a.value()).supportsMig());
  EXPECT_EQ(cat.model(a.value()).memory, core::MiB{0});
  EXPECT_EQ(cat.intern("T4").value(), *cat.find("T4"));
  EXPECT_FALSE(cat.intern("").isOk());
  EXPECT_FALSE(cat.intern(std::string(65, 'x')).isOk());
}

struct ProfileRow {
  const char* model;
  const char* profile;
  int compute;
  int memory_slices;
  int max_instances;
  std::vector<int> starts;
};

// The MIG user guide tables (shared/reference/gpu-sharing-enforcement.md section 5).
TEST(GpuCatalogueTest, MigProfileTables) {
  const ProfileRow rows[] = {
      {"H100-80GB", "1g.10gb", 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"H100-80GB", "1g.10gb+me", 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}},
      {"H100-80GB", "1g.20gb", 1, 2, 4, {0, 2, 4, 6}},
      {"H100-80GB", "2g.20gb", 2, 2, 3, {0, 2, 4}},
      {"H100-80GB", "3g.40gb", 3, 4, 2, {0, 4}},
      {"H100-80GB", "4g.40gb", 4, 4, 1, {0}},
      {"H100-80GB", "7g.80gb", 7, 8, 1, {0}},
      {"H200-141GB", "1g.18gb", 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"H200-141GB", "1g.35gb", 1, 2, 4, {0, 2, 4, 6}},
      {"H200-141GB", "2g.35gb", 2, 2, 3, {0, 2, 4}},
      {"H200-141GB", "3g.71gb", 3, 4, 2, {0, 4}},
      {"H200-141GB", "4g.71gb", 4, 4, 1, {0}},
      {"H200-141GB", "7g.141gb", 7, 8, 1, {0}},
      {"A100-40GB", "1g.5gb", 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"A100-40GB", "3g.20gb", 3, 4, 2, {0, 4}},
      {"A100-80GB", "7g.80gb", 7, 8, 1, {0}},
  };
  GpuCatalogue cat = GpuCatalogue::builtin();
  for (const ProfileRow& r : rows) {
    const GpuModelInfo& m = cat.model(*cat.find(r.model));
    int i = m.findMigProfile(r.profile);
    ASSERT_GE(i, 0) << r.model << " " << r.profile;
    const MigProfile& p = m.mig_profiles[i];
    EXPECT_EQ(p.compute_slices, r.compute) << r.profile;
    EXPECT_EQ(p.memory_slices, r.memory_slices) << r.profile;
    EXPECT_EQ(p.max_instances, r.max_instances) << r.profile;
    EXPECT_EQ(p.starts, r.starts) << r.profile;
    EXPECT_GT(p.memory.value(), 0) << r.profile;
  }
  EXPECT_EQ(cat.model(*cat.find("H100-80GB")).findMigProfile("3g.71gb"), -1);
}

}  // namespace
}  // namespace tessera::model
