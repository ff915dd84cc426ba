#include "agent/gpu_discovery.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "agent/sim_discovery.h"
#include "model/gpu_catalogue.h"
#include "model/node_profiles.h"

namespace tessera::agent {
namespace {

TEST(ModelFromProductName, KnowsTheNamesNvmlReports) {
  EXPECT_EQ(modelFromProductName("NVIDIA H100 80GB HBM3", 81559), "H100-80GB");
  EXPECT_EQ(modelFromProductName("NVIDIA H100 NVL", 95830), "");  // 94 GB: not in the catalogue.
  EXPECT_EQ(modelFromProductName("NVIDIA H200", 143771), "H200-141GB");
  EXPECT_EQ(modelFromProductName("NVIDIA A100-SXM4-80GB", 81920), "A100-80GB");
  EXPECT_EQ(modelFromProductName("NVIDIA A100-SXM4-40GB", 40960), "A100-40GB");
  EXPECT_EQ(modelFromProductName("NVIDIA A100 80GB PCIe", 81920), "A100-80GB");
  EXPECT_EQ(modelFromProductName("NVIDIA L40S", 46068), "L40S");
  EXPECT_EQ(modelFromProductName("Tesla T4", 15360), "T4");
  EXPECT_EQ(modelFromProductName("NVIDIA A10", 23028), "A10");
  EXPECT_EQ(modelFromProductName("NVIDIA T400", 2048), "");
  EXPECT_EQ(modelFromProductName("NVIDIA GeForce RTX 4090", 24564), "");
}

TEST(ModelFromProductName, RoundTripsEveryProductNameTheSimulatorUses) {
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  for (const model::NodeProfile& p : model::builtinNodeProfiles()) {
    const model::GpuModelInfo& info = cat.model(*cat.find(p.gpu_model));
    EXPECT_EQ(modelFromProductName(productNameOf(info.name), info.memory.value()), info.name)
        << p.name;
  }
}

TEST(MigProfileFromName, TakesTheProfileAtTheEnd) {
  EXPECT_EQ(migProfileFromName("NVIDIA H100 80GB HBM3 MIG 3g.40gb"), "3g.40gb");
  EXPECT_EQ(migProfileFromName("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"), "1g.10gb+me");
  EXPECT_EQ(migProfileFromName("NVIDIA H100 80GB HBM3"), "");
  EXPECT_EQ(migProfileFromName("MIG 3g.40gb trailing"), "");
}

TEST(SimDiscovery, DgxH100HasEightNvlinkedH100sWithStableDistinctUuids) {
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  SimDiscovery sim(*model::findNodeProfile("dgx-h100"), "node-1", cat);
  EXPECT_EQ(sim.describe(), "sim (dgx-h100)");
  auto found = sim.discover();
  ASSERT_TRUE(found.isOk()) << found.status().message();
  ASSERT_EQ(found->gpus.size(), 8U);
  EXPECT_EQ(found->backend, "sim:dgx-h100");
  std::set<std::string> uuids;
  for (const Gpu& g : found->gpus) {
    EXPECT_EQ(g.model, "H100-80GB");
    EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g.memory_mib, 81559);
    EXPECT_TRUE(g.mig_capable);
    EXPECT_FALSE(g.mig_enabled);
    EXPECT_EQ(g.minor, g.index);
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0U) << g.uuid;
    EXPECT_EQ(g.uuid.size(), 40U) << g.uuid;  // "GPU-" + 36.
    uuids.insert(g.uuid);
  }
  EXPECT_EQ(uuids.size(), 8U);
  EXPECT_EQ(found->gpus[0].pci_bus_id, "00000000:18:00.0");
  EXPECT_TRUE(found->nvlink[0][7]);
  EXPECT_FALSE(found->nvlink[3][3]);
  EXPECT_EQ(found->pcie[0][1], PcieLink::kSwitch);
  EXPECT_EQ(found->pcie[0][2], PcieLink::kNuma);
  EXPECT_EQ(found->pcie[0][4], PcieLink::kSystem);
  EXPECT_EQ(found->pcie[4][0], PcieLink::kSystem);
  // The same node gives the same UUIDs; another node others.
  SimDiscovery again(*model::findNodeProfile("dgx-h100"), "node-1", cat);
  EXPECT_EQ(again.discover()->gpus[5].uuid, found->gpus[5].uuid);
  SimDiscovery other(*model::findNodeProfile("dgx-h100"), "node-2", cat);
  EXPECT_NE(other.discover()->gpus[5].uuid, found->gpus[5].uuid);
  // Pinned: UUIDs must not change between releases (running tasks are matched by them).
  EXPECT_EQ(simGpuUuid("node-1", 0), found->gpus[0].uuid);
  EXPECT_EQ(simGpuUuid("node-1", 0), simGpuUuid("node-1", 0));
}

TEST(SimDiscovery, EveryBuiltInProfileDiscovers) {
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  for (const std::string name : {"dgx-h100", "dgx-h200", "a100-8x", "l40s-4x", "t4-2x"}) {
    const auto profile = model::findNodeProfile(name);
    ASSERT_TRUE(profile.has_value()) << name;
    SimDiscovery sim(*profile, "n", cat);
    auto found = sim.discover();
    ASSERT_TRUE(found.isOk()) << name << ": " << found.status().message();
    EXPECT_EQ(static_cast<int>(found->gpus.size()), profile->gpus) << name;
    EXPECT_EQ(found->gpus[0].model, profile->gpu_model) << name;
    if (found->gpus.size() > 1) {
      EXPECT_EQ(found->nvlink[0][1], profile->nvlink) << name;
    }
  }
  EXPECT_FALSE(model::findNodeProfile("l40s-4x")->nvlink);
  EXPECT_FALSE(model::findNodeProfile("t4-2x")->nvlink);
  EXPECT_FALSE(model::findNodeProfile("nope").has_value());
}

class ProfileFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("tessera-profiles-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
};

TEST_F(ProfileFileTest, ReadsProfilesAndTheySimulate) {
  const std::string path = write("p.hcl", R"(
# Two lab machines.
profile "lab-box" {
  gpu_model  = "A100-40GB"
  gpus       = 4
  cpu_cores  = 64
  memory_gib = 512
}
profile "big" {
  gpu_model = "H200-141GB"
  gpus = 8
  cpu_cores = 224
  memory_gib = 2048
  nvlink = true
}
)");
  auto profiles = model::readNodeProfiles(path, cat_);
  ASSERT_TRUE(profiles.isOk()) << profiles.status().message();
  ASSERT_EQ(profiles->size(), 2U);
  EXPECT_EQ((*profiles)[0].name, "lab-box");
  EXPECT_EQ((*profiles)[0].gpus, 4);
  EXPECT_FALSE((*profiles)[0].nvlink);
  EXPECT_TRUE((*profiles)[1].nvlink);
  SimDiscovery sim((*profiles)[0], "lab-1", cat_);
  auto found = sim.discover();
  ASSERT_TRUE(found.isOk());
  EXPECT_EQ(found->gpus.size(), 4U);
  EXPECT_EQ(found->gpus[3].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_FALSE(found->nvlink[0][1]);
  auto node = model::makeProfileNode((*profiles)[0], "lab-1", cat_, 7);
  ASSERT_TRUE(node.isOk());
  EXPECT_EQ(node->nvlink_domain, -1);  // No NVLink: no domain.
  EXPECT_EQ(node->cpu.value(), 64000);
}

TEST_F(ProfileFileTest, BadProfilesSayWhatAndWhere) {
  auto expectError = [&](const std::string& text, const std::string& want) {
    const std::string path = write("bad.hcl", text);
    auto got = model::readNodeProfiles(path, cat_);
    ASSERT_FALSE(got.isOk()) << text;
    EXPECT_NE(got.status().message().find(want), std::string::npos) << got.status().message();
    EXPECT_NE(got.status().message().find("bad.hcl"), std::string::npos) << got.status().message();
  };
  expectError("profile \"x\" { gpu_model = \"B300\"\n gpus = 1\n cpu_cores = 1\n memory_gib = 1 }",
              "unknown GPU model 'B300'");
  expectError("profile \"x\" { gpu_model = \"T4\"\n cpu_cores = 1\n memory_gib = 1 }",
              "missing 'gpus'");
  expectError("profile \"x\" { gpu_model = \"T4\"\n gpus = 65\n cpu_cores = 1\n memory_gib = 1 }",
              "outside 0..64");
  expectError(
      "profile \"x\" { gpu_model = \"T4\"\n gpus = 1\n cpu_cores = 1\n memory_gib = 1\n"
      " colour = \"red\" }",
      "unknown field 'colour'");
  expectError(
      "profile \"x\" { gpu_model = \"T4\"\n gpus = 1\n cpu_cores = 1\n memory_gib = 1 }\n"
      "profile \"x\" { gpu_model = \"T4\"\n gpus = 1\n cpu_cores = 1\n memory_gib = 1 }",
      "defined twice");
  expectError("# nothing\n", "no profile");
  expectError("profile \"x\" {\n", "bad.hcl:");
}

}  // namespace
}  // namespace tessera::agent
