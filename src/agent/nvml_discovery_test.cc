// NvmlDiscovery against a fake libnvidia-ml.so.1 (tests/fake_nvml) whose answers a JSON script
// in $FAKE_NVML_SCRIPT decides, failures included.
#include "agent/nvml_discovery.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tessera::agent {
namespace {

using nlohmann::json;

const std::string kFull = std::string(FAKE_NVML_DIR) + "/full/libnvidia-ml.so.1";
const std::string kMinimal = std::string(FAKE_NVML_DIR) + "/minimal/libnvidia-ml.so.1";
const std::string kBroken = std::string(FAKE_NVML_DIR) + "/broken/libnvidia-ml.so.1";

json h100(int i, const std::string& uuid) {
  return {{"uuid", uuid},
          {"name", "NVIDIA H100 80GB HBM3"},
          {"memory_mib", 81559},
          {"pci_bus_id", "00000000:" + std::string(i == 0 ? "18" : "2A") + ":00.0"},
          {"minor", i}};
}

// Two H100s on one switch, joined by NVLink; GPU 0 in MIG mode with two MIG devices at
// indices 0 and 3 (NVML leaves gaps).
json twoGpus() {
  json g0 = h100(0, "GPU-11111111-2222-3333-4444-555555555555");
  g0["mig"] = {{"current", 1},
               {"pending", 1},
               {"max_devices", 7},
               {"devices",
                {{{"index", 0},
                  {"uuid", "MIG-aaaaaaaa-0000-0000-0000-000000000001"},
                  {"name", "NVIDIA H100 80GB HBM3 MIG 3g.40gb"},
                  {"memory_mib", 40448},
                  {"gpu_instance_id", 2},
                  {"compute_instance_id", 0}},
                 {{"index", 3},
                  {"uuid", "MIG-aaaaaaaa-0000-0000-0000-000000000002"},
                  {"name", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"},
                  {"memory_mib", 9984},
                  {"gpu_instance_id", 9},
                  {"compute_instance_id", 0}}}}};
  json g1 = h100(1, "GPU-66666666-7777-8888-9999-000000000000");
  g1["mig"] = {{"current", 0}, {"pending", 0}, {"max_devices", 7}, {"devices", json::array()}};
  return {{"driver_version", "550.54.15"},
          {"cuda_version", 12040},
          {"gpus", {g0, g1}},
          {"topology", {{0, 10}, {10, 0}}},
          {"p2p_nvlink", {{0, 0}, {0, 0}}}};
}

class NvmlDiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = (std::filesystem::temp_directory_path() /
               ("tessera-fake-nvml-" + std::to_string(::getpid()) + ".json"))
                  .string();
    ::setenv("FAKE_NVML_SCRIPT", script_.c_str(), 1);
  }
  void TearDown() override {
    std::filesystem::remove(script_);
    ::unsetenv("FAKE_NVML_SCRIPT");
  }
  void script(const json& j) { std::ofstream(script_) << j.dump(2); }

  std::string script_;
};

TEST_F(NvmlDiscoveryTest, ReadsGpusMigDevicesVersionsAndTopology) {
  script(twoGpus());
  NvmlDiscovery nvml(kFull);
  auto found = nvml.discover();
  ASSERT_TRUE(found.isOk()) << found.status().message();
  EXPECT_EQ(found->backend, "nvml");
  EXPECT_EQ(found->driver_version, "550.54.15");
  EXPECT_EQ(found->cuda_version, "12.4");
  ASSERT_EQ(found->gpus.size(), 2U);
  const Gpu& g0 = found->gpus[0];
  EXPECT_EQ(g0.uuid, "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(g0.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g0.model, "H100-80GB");
  EXPECT_EQ(g0.memory_mib, 81559);
  EXPECT_EQ(g0.pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(g0.minor, 0);
  EXPECT_TRUE(g0.mig_capable);
  EXPECT_TRUE(g0.mig_enabled);
  ASSERT_EQ(g0.mig_devices.size(), 2U);
  EXPECT_EQ(g0.mig_devices[0].uuid, "MIG-aaaaaaaa-0000-0000-0000-000000000001");
  EXPECT_EQ(g0.mig_devices[0].profile, "3g.40gb");
  EXPECT_EQ(g0.mig_devices[0].memory_mib, 40448);
  EXPECT_EQ(g0.mig_devices[0].gpu_instance_id, 2);
  EXPECT_EQ(g0.mig_devices[1].index, 3);
  EXPECT_EQ(g0.mig_devices[1].profile, "1g.10gb");
  EXPECT_EQ(g0.mig_devices[1].gpu_instance_id, 9);
  const Gpu& g1 = found->gpus[1];
  EXPECT_TRUE(g1.mig_capable);
  EXPECT_FALSE(g1.mig_enabled);
  EXPECT_TRUE(g1.mig_devices.empty());
  EXPECT_EQ(g1.minor, 1);
  EXPECT_EQ(found->pcie[0][1], PcieLink::kSwitch);
  EXPECT_EQ(found->pcie[1][0], PcieLink::kSwitch);
  EXPECT_TRUE(found->nvlink[0][1]);
  EXPECT_TRUE(found->warnings.empty()) << found->warnings[0];
  // Discovery can run again (NVML was shut down and is initialized anew), and sees changes.
  json changed = twoGpus();
  changed["p2p_nvlink"] = {{0, 5}, {5, 0}};  // Not OK: no NVLink between them.
  changed["topology"] = {{0, 50}, {50, 0}};
  script(changed);
  auto again = nvml.discover();
  ASSERT_TRUE(again.isOk()) << again.status().message();
  EXPECT_FALSE(again->nvlink[0][1]);
  EXPECT_EQ(again->pcie[0][1], PcieLink::kSystem);
}

TEST_F(NvmlDiscoveryTest, AGpuWithoutMigAndUnknownModelsAreReportedNotFatal) {
  json s = twoGpus();
  s["gpus"][1].erase("mig");  // NOT_SUPPORTED: a GPU without MIG.
  s["gpus"][1]["name"] = "NVIDIA GeForce RTX 4090";
  s["gpus"][1]["memory_mib"] = 24564;
  script(s);
  auto found = NvmlDiscovery(kFull).discover();
  ASSERT_TRUE(found.isOk()) << found.status().message();
  EXPECT_FALSE(found->gpus[1].mig_capable);
  EXPECT_EQ(found->gpus[1].model, "");
  ASSERT_EQ(found->warnings.size(), 1U);
  EXPECT_NE(found->warnings[0].find("RTX 4090"), std::string::npos) << found->warnings[0];
  EXPECT_NE(found->warnings[0].find("not in the GPU catalogue"), std::string::npos);
}

TEST_F(NvmlDiscoveryTest, FailingCallsAreClearErrorsOrWarnings) {
  // Init fails: an error that names the call and NVML's text.
  json s = twoGpus();
  s["errors"] = {{"nvmlInit_v2", 9}};
  script(s);
  auto init = NvmlDiscovery(kFull).discover();
  ASSERT_FALSE(init.isOk());
  EXPECT_NE(init.status().message().find("nvmlInit_v2: Driver Not Loaded (9)"), std::string::npos)
      << init.status().message();
  // A lost GPU: its identity cannot be read, so the node is not reported half-known.
  s["errors"] = {{"nvmlDeviceGetUUID#1", 15}};
  script(s);
  auto lost = NvmlDiscovery(kFull).discover();
  ASSERT_FALSE(lost.isOk());
  EXPECT_NE(lost.status().message().find("GPU 1: nvmlDeviceGetUUID: GPU is lost (15)"),
            std::string::npos)
      << lost.status().message();
  // Optional facts that fail are warnings; the GPU is still there.
  s["errors"] = {{"nvmlDeviceGetMigMode#0", 999},
                 {"nvmlDeviceGetPciInfo_v3", 4},
                 {"nvmlDeviceGetTopologyCommonAncestor", 999}};
  script(s);
  auto partial = NvmlDiscovery(kFull).discover();
  ASSERT_TRUE(partial.isOk()) << partial.status().message();
  EXPECT_FALSE(partial->gpus[0].mig_capable);
  EXPECT_EQ(partial->gpus[0].pci_bus_id, "");
  EXPECT_EQ(partial->pcie[0][1], PcieLink::kUnknown);
  std::string all;
  for (const std::string& w : partial->warnings) {
    all += w + "\n";
  }
  EXPECT_NE(all.find("GPU 0: nvmlDeviceGetMigMode: Unknown Error (999)"), std::string::npos) << all;
  EXPECT_NE(all.find("GPU 1: nvmlDeviceGetPciInfo_v3: Insufficient Permissions (4)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("nvmlDeviceGetTopologyCommonAncestor"), std::string::npos) << all;
  // A MIG device that cannot be read is left out with a warning; the other stays.
  s["errors"] = {{"nvmlDeviceGetMigDeviceHandleByIndex#0", 999}};
  script(s);
  auto mig = NvmlDiscovery(kFull).discover();
  ASSERT_TRUE(mig.isOk()) << mig.status().message();
  EXPECT_TRUE(mig->gpus[0].mig_devices.empty());
  EXPECT_FALSE(mig->warnings.empty());
}

TEST_F(NvmlDiscoveryTest, AnOldLibraryWithoutOptionalFunctionsStillDiscovers) {
  script(twoGpus());
  auto found = NvmlDiscovery(kMinimal).discover();
  ASSERT_TRUE(found.isOk()) << found.status().message();
  ASSERT_EQ(found->gpus.size(), 2U);
  EXPECT_EQ(found->gpus[0].uuid, "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(found->gpus[0].minor, -1);
  EXPECT_FALSE(found->gpus[0].mig_capable);
  EXPECT_EQ(found->cuda_version, "");
  EXPECT_EQ(found->pcie[0][1], PcieLink::kUnknown);
  EXPECT_FALSE(found->nvlink[0][1]);
  ASSERT_EQ(found->warnings.size(), 2U);  // Topology and NVLink unknown.
}

TEST_F(NvmlDiscoveryTest, MissingLibraryOrRequiredFunctionIsAClearError) {
  script(twoGpus());
  auto missing = NvmlDiscovery("/nonexistent/libnvidia-ml.so.1").discover();
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("cannot load /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("NVIDIA driver"), std::string::npos);
  auto broken = NvmlDiscovery(kBroken).discover();
  ASSERT_FALSE(broken.isOk());
  EXPECT_NE(broken.status().message().find("lacks nvmlDeviceGetCount_v2"), std::string::npos)
      << broken.status().message();
  EXPECT_EQ(NvmlDiscovery(kFull).describe(), "nvml (" + kFull + ")");
}

TEST_F(NvmlDiscoveryTest, NoScriptMeansNoDriver) {
  ::unsetenv("FAKE_NVML_SCRIPT");
  auto found = NvmlDiscovery(kFull).discover();
  ASSERT_FALSE(found.isOk());
  EXPECT_NE(found.status().message().find("nvmlInit_v2"), std::string::npos)
      << found.status().message();
}

}  // namespace
}  // namespace tessera::agent
