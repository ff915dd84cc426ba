// MIG layouts through the fake NVML (tests/fake_nvml), whose GPU and compute instances show up
// as MIG devices in discovery, as on a real GPU.
#include "agent/mig_manager.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "agent/nvml_discovery.h"
#include "agent/nvml_library.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
const std::string kFull = std::string(FAKE_NVML_DIR) + "/full/libnvidia-ml.so.1";

// H100-80GB's GPU instance profiles as NVML numbers them (index, id), with the catalogue's
// slices, memory, limits and starts.
json h100Profiles() {
  auto p = [](int index, int id, const char* name, int compute, int memory, int mib, int max,
              json starts) {
    return json{{"index", index},
                {"id", id},
                {"name", name},
                {"compute_slices", compute},
                {"memory_slices", memory},
                {"memory_mib", mib},
                {"max_instances", max},
                {"starts", starts}};
  };
  return {p(0, 19, "1g.10gb", 1, 1, 9984, 7, {0, 1, 2, 3, 4, 5, 6}),
          p(7, 20, "1g.10gb+me", 1, 1, 9984, 1, {0, 1, 2, 3, 4, 5, 6}),
          p(9, 15, "1g.20gb", 1, 2, 20090, 4, {0, 2, 4, 6}),
          p(1, 14, "2g.20gb", 2, 2, 20090, 3, {0, 2, 4}),
          p(2, 9, "3g.40gb", 3, 4, 40448, 2, {0, 4}),
          p(3, 5, "4g.40gb", 4, 4, 40448, 1, {0}),
          p(4, 0, "7g.80gb", 7, 8, 81152, 1, {0})};
}

class MigManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = (std::filesystem::temp_directory_path() /
               ("tessera-fake-mig-" + std::to_string(::getpid()) + ".json"))
                  .string();
    ::setenv("FAKE_NVML_SCRIPT", script_.c_str(), 1);
  }
  void TearDown() override {
    if (holder_ != nullptr) {
      holder_->shutdown();
    }
    holder_.reset();
    std::filesystem::remove(script_);
    ::unsetenv("FAKE_NVML_SCRIPT");
  }
  // Writes the script and keeps NVML initialized, so that the fake keeps its state between the
  // manager's and discovery's own init and shutdown (NVML counts inits).
  void start(const json& gpu0, const json& gpu1 = nullptr) {
    json gpus = {gpu0};
    if (!gpu1.is_null()) {
      gpus.push_back(gpu1);
    }
    std::ofstream(script_) << json{{"driver_version", "550.54.15"}, {"gpus", gpus}}.dump();
    auto lib = NvmlLibrary::open(kFull);
    ASSERT_TRUE(lib.isOk()) << lib.status().message();
    holder_ = *lib;
    ASSERT_EQ(holder_->init(), kNvmlSuccess);
  }
  static json h100(int i, json mig) {
    return {{"uuid", "GPU-" + std::to_string(i)},
            {"name", "NVIDIA H100 80GB HBM3"},
            {"memory_mib", 81559},
            {"mig", std::move(mig)}};
  }
  std::vector<MigDevice> migDevices(int gpu) {
    auto found = NvmlDiscovery(kFull).discover();
    EXPECT_TRUE(found.isOk()) << found.status().message();
    return found.isOk() ? found->gpus[static_cast<size_t>(gpu)].mig_devices
                        : std::vector<MigDevice>{};
  }

  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  std::string script_;
  std::shared_ptr<NvmlLibrary> holder_;
};

TEST(MigProfileIndices, FollowNvml) {
  EXPECT_EQ(nvmlGpuInstanceProfileIndex(0), 0);  // 1g
  EXPECT_EQ(nvmlGpuInstanceProfileIndex(1), 7);  // 1g+me: REV1
  EXPECT_EQ(nvmlGpuInstanceProfileIndex(2), 9);  // 1g, double memory: REV2
  EXPECT_EQ(nvmlGpuInstanceProfileIndex(4), 2);  // 3g
  EXPECT_EQ(nvmlGpuInstanceProfileIndex(6), 4);  // 7g
  EXPECT_EQ(nvmlGpuInstanceProfileIndex(7), -1);
  EXPECT_EQ(nvmlComputeInstanceProfileIndex(7), 4);
  EXPECT_EQ(nvmlComputeInstanceProfileIndex(5), -1);
}

TEST_F(MigManagerTest, ReplacesTheLayoutAndKeepsWhatStays) {
  // One 7g.80gb instance now; the scheduler wants two 3g.40gb.
  start(h100(0, {{"current", 1},
                 {"profiles", h100Profiles()},
                 {"instances", {{{"profile_id", 0}, {"start", 0}, {"compute", 1}}}}}));
  ASSERT_EQ(migDevices(0).size(), 1U);
  NvmlMigManager mig(kFull, cat_);
  const int p3g = cat_.model(*cat_.find("H100-80GB")).findMigProfile("3g.40gb");
  auto uuids = mig.apply(0, "H100-80GB", {{p3g, 0}, {p3g, 4}});
  ASSERT_TRUE(uuids.isOk()) << uuids.status().message();
  std::vector<MigDevice> after = migDevices(0);
  ASSERT_EQ(after.size(), 2U);
  std::set<std::string> listed;
  for (const MigDevice& m : after) {
    EXPECT_EQ(m.profile, "3g.40gb");
    EXPECT_EQ(m.memory_mib, 40448);
    listed.insert(m.uuid);
  }
  // Each instance's UUID is its MIG device's, as discovery (nvidia-smi -L) lists it.
  ASSERT_EQ(uuids->size(), 2U);
  EXPECT_EQ(listed, (std::set<std::string>{uuids->at({p3g, 0}).uuid, uuids->at({p3g, 4}).uuid}));
  EXPECT_GE(uuids->at({p3g, 0}).gpu_instance_id, 0);  // Names its capability nodes.
  EXPECT_NE(uuids->at({p3g, 0}).gpu_instance_id, uuids->at({p3g, 4}).gpu_instance_id);
  // The same layout again changes nothing: the same instances, the same UUIDs.
  auto same = mig.apply(0, "H100-80GB", {{p3g, 4}, {p3g, 0}});
  ASSERT_TRUE(same.isOk()) << same.status().message();
  EXPECT_EQ(same->at({p3g, 0}).uuid, uuids->at({p3g, 0}).uuid);
  EXPECT_EQ(same->at({p3g, 4}).uuid, uuids->at({p3g, 4}).uuid);
  std::vector<MigDevice> again = migDevices(0);
  ASSERT_EQ(again.size(), 2U);
  EXPECT_EQ(again[0].uuid, after[0].uuid);
  EXPECT_EQ(again[1].uuid, after[1].uuid);
  // Keeping one and changing the other: 3g.40gb at 0 stays, 4 slices become two 2g.20gb.
  const int p2g = cat_.model(*cat_.find("H100-80GB")).findMigProfile("2g.20gb");
  ASSERT_TRUE(mig.apply(0, "H100-80GB", {{p3g, 0}, {p2g, 4}}).isOk());
  std::vector<MigDevice> mixed = migDevices(0);
  ASSERT_EQ(mixed.size(), 2U);
  int kept = 0;
  for (const MigDevice& m : mixed) {
    kept += m.uuid == after[0].uuid || m.uuid == after[1].uuid ? 1 : 0;
  }
  EXPECT_EQ(kept, 1);
  // An empty layout is in nobody's way: the instances stay, idle, for later tasks.
  ASSERT_TRUE(mig.apply(0, "H100-80GB", {}).isOk());
  EXPECT_EQ(migDevices(0).size(), 2U);
}

// #40 item 6: an instance a finished task left is not destroyed by a layout that does not need
// its slices, and the next task of its profile runs in it: the same MIG device, no re-layout.
// A layout that needs its slices destroys it.
TEST_F(MigManagerTest, AnInstanceLeftByAFinishedTaskIsReusedWithoutRelayout) {
  start(h100(0, {{"current", 1}, {"profiles", h100Profiles()}}));
  NvmlMigManager mig(kFull, cat_);
  const model::GpuModelInfo& h100 = cat_.model(*cat_.find("H100-80GB"));
  const int p3g = h100.findMigProfile("3g.40gb");
  const int p1g = h100.findMigProfile("1g.10gb");
  auto first = mig.apply(0, "H100-80GB", {{p3g, 0}});  // Task A.
  ASSERT_TRUE(first.isOk()) << first.status().message();
  const std::string a = first->at({p3g, 0}).uuid;
  // A ended; task B starts in the other half: A's instance is not named, and stays.
  auto second = mig.apply(0, "H100-80GB", {{p3g, 4}});
  ASSERT_TRUE(second.isOk()) << second.status().message();
  std::vector<MigDevice> now = migDevices(0);
  ASSERT_EQ(now.size(), 2U);
  EXPECT_TRUE(now[0].uuid == a || now[1].uuid == a);
  // Task C of A's profile, in A's instance: the same device.
  auto third = mig.apply(0, "H100-80GB", {{p3g, 4}, {p3g, 0}});
  ASSERT_TRUE(third.isOk()) << third.status().message();
  EXPECT_EQ(third->at({p3g, 0}).uuid, a);
  EXPECT_EQ(third->at({p3g, 4}).uuid, second->at({p3g, 4}).uuid);
  // C ended too; a 1g slice in its slices re-lays them out: the 3g instance goes.
  auto fourth = mig.apply(0, "H100-80GB", {{p3g, 4}, {p1g, 0}});
  ASSERT_TRUE(fourth.isOk()) << fourth.status().message();
  now = migDevices(0);
  ASSERT_EQ(now.size(), 2U);
  EXPECT_TRUE(now[0].uuid != a && now[1].uuid != a);
}

// A GPU with work in one instance takes another beside it (a layout keeps what it keeps).
TEST_F(MigManagerTest, AddsInstancesBesideBusyOnesAndRefusesMigOffAndInvalidLayouts) {
  json busy = h100(0, {{"current", 1},
                       {"profiles", h100Profiles()},
                       {"instances", {{{"profile_id", 9}, {"start", 0}, {"compute", 1}}}}});
  busy["processes"] = {4242};
  start(busy, h100(1, {{"current", 0}, {"profiles", h100Profiles()}}));
  NvmlMigManager mig(kFull, cat_);
  const int p3g = cat_.model(*cat_.find("H100-80GB")).findMigProfile("3g.40gb");
  const int p4g = cat_.model(*cat_.find("H100-80GB")).findMigProfile("4g.40gb");
  const std::string running = migDevices(0).at(0).uuid;
  auto added = mig.apply(0, "H100-80GB", {{p3g, 0}, {p3g, 4}});
  ASSERT_TRUE(added.isOk()) << added.status().message();
  EXPECT_EQ(added->at({p3g, 0}).uuid, running);  // The busy instance is kept as it is.
  EXPECT_EQ(migDevices(0).size(), 2U);
  core::Status s = mig.apply(1, "H100-80GB", {{p3g, 0}}).status();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("GPU 1: MIG mode is off"), std::string::npos) << s.message();
  s = mig.apply(1, "H100-80GB", {{p3g, 0}, {p4g, 0}}).status();  // Overlapping slices.
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("mig: GPU 1"), std::string::npos) << s.message();
  EXPECT_FALSE(mig.apply(0, "T4", {}).isOk());  // No MIG at all.
  NvmlMigManager missing("/nonexistent/libnvidia-ml.so.1", cat_);
  EXPECT_NE(missing.apply(0, "H100-80GB", {}).status().message().find("cannot load"),
            std::string::npos);
}

// A managed node's agent turns MIG mode on and off itself: only on an idle GPU (NVML resets it),
// and turning it off takes the GPU's idle instances away first.
TEST_F(MigManagerTest, TurnsMigModeOnAndOffOnlyWhileTheGpuIsIdle) {
  json busy = h100(1, {{"current", 0}, {"profiles", h100Profiles()}});
  busy["processes"] = {4242, 4243};
  start(h100(0, {{"current", 0}, {"profiles", h100Profiles()}}), busy);
  NvmlMigManager mig(kFull, cat_);
  const int p3g = cat_.model(*cat_.find("H100-80GB")).findMigProfile("3g.40gb");
  const auto mode = [&](int gpu) {
    NvmlDevice dev{};
    EXPECT_EQ(holder_->by_index(static_cast<unsigned>(gpu), &dev), kNvmlSuccess);
    unsigned current = 9;
    unsigned pending = 9;
    EXPECT_EQ(holder_->mig_mode(dev, &current, &pending), kNvmlSuccess);
    return std::pair{current, pending};
  };
  ASSERT_FALSE(mig.apply(0, "H100-80GB", {{p3g, 0}}).isOk());  // Off: no instances.
  ASSERT_TRUE(mig.setMigMode(0, "H100-80GB", true).isOk());
  EXPECT_EQ(mode(0), (std::pair{1U, 1U}));
  auto made = mig.apply(0, "H100-80GB", {{p3g, 0}, {p3g, 4}});
  ASSERT_TRUE(made.isOk()) << made.status().message();
  EXPECT_EQ(migDevices(0).size(), 2U);
  EXPECT_TRUE(mig.setMigMode(0, "H100-80GB", true).isOk());  // Already on: nothing happens.
  EXPECT_EQ(migDevices(0).size(), 2U);
  // Off again: both idle instances go, then the mode.
  const core::Status off = mig.setMigMode(0, "H100-80GB", false);
  ASSERT_TRUE(off.isOk()) << off.message();
  EXPECT_EQ(mode(0), (std::pair{0U, 0U}));
  // A GPU with processes keeps its mode, and the reason says why; NVML was not asked to reset.
  const core::Status refused = mig.setMigMode(1, "H100-80GB", true);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.message().find(
                "GPU 1: MIG mode stays off: 2 process(es) use the GPU, and turning it on resets "
                "the GPU"),
            std::string::npos)
      << refused.message();
  EXPECT_EQ(mode(1), (std::pair{0U, 0U}));
}

TEST(RecordingMigManager, RecordsModeChangesAndForgetsInstancesWhenMigGoesOff) {
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  RecordingMigManager mig(cat, "n0");
  const int p3g = cat.model(*cat.find("H100-80GB")).findMigProfile("3g.40gb");
  ASSERT_TRUE(mig.setMigMode(2, "H100-80GB", true).isOk());
  ASSERT_TRUE(mig.apply(2, "H100-80GB", {{p3g, 0}}).isOk());
  EXPECT_TRUE(mig.setMigMode(2, "H100-80GB", true).isOk());
  EXPECT_EQ(mig.modeChanges(), 1);
  ASSERT_TRUE(mig.setMigMode(2, "H100-80GB", false).isOk());
  EXPECT_EQ(mig.modeChanges(), 2);
  EXPECT_EQ(mig.modes(), (std::map<int, bool>{{2, false}}));
  EXPECT_FALSE(mig.layouts().contains(2));
}

TEST_F(MigManagerTest, AFailingNvmlCallIsNamedWithTheInstance) {
  json gpu = h100(0, {{"current", 1}, {"profiles", h100Profiles()}});
  start(gpu);
  // Re-script with a failure (the holder keeps the state, so write it before re-starting).
  holder_->shutdown();
  holder_.reset();
  std::ofstream(script_) << json{{"driver_version", "1"},
                                 {"gpus", {gpu}},
                                 {"errors", {{"nvmlDeviceCreateGpuInstanceWithPlacement", 999}}}}
                                .dump();
  NvmlMigManager mig(kFull, cat_);
  const int p7g = cat_.model(*cat_.find("H100-80GB")).findMigProfile("7g.80gb");
  core::Status s = mig.apply(0, "H100-80GB", {{p7g, 0}}).status();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("nvmlDeviceCreateGpuInstanceWithPlacement: Unknown Error (999) for "
                             "7g.80gb at slice 0"),
            std::string::npos)
      << s.message();
}

TEST(RecordingMigManager, RecordsValidLayoutsOnly) {
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  RecordingMigManager mig(cat, "node-a");
  const int p3g = cat.model(*cat.find("H200-141GB")).findMigProfile("3g.71gb");
  auto uuids = mig.apply(2, "H200-141GB", {{p3g, 4}, {p3g, 0}});
  ASSERT_TRUE(uuids.isOk()) << uuids.status().message();
  const std::vector<model::MigInstance> want = {{p3g, 0}, {p3g, 4}};
  EXPECT_EQ(mig.layouts().at(2), want);
  // A UUID per instance, the same each time, another on another node.
  ASSERT_EQ(uuids->size(), 2U);
  EXPECT_TRUE(uuids->at({p3g, 0}).uuid.starts_with("MIG-")) << uuids->at({p3g, 0}).uuid;
  EXPECT_NE(uuids->at({p3g, 0}).uuid, uuids->at({p3g, 4}).uuid);
  EXPECT_EQ(mig.apply(2, "H200-141GB", {{p3g, 0}, {p3g, 4}})->at({p3g, 4}).uuid,
            uuids->at({p3g, 4}).uuid);
  RecordingMigManager other(cat, "node-b");
  EXPECT_NE(other.apply(2, "H200-141GB", {{p3g, 0}})->at({p3g, 0}).uuid, uuids->at({p3g, 0}).uuid);
  EXPECT_FALSE(mig.apply(2, "H200-141GB", {{p3g, 1}}).isOk());  // 3g starts at 0 or 4.
  EXPECT_EQ(mig.layouts().at(2), want);
  // As a real GPU: a new instance replaces only what is in its way.
  const int p1g = cat.model(*cat.find("H200-141GB")).findMigProfile("1g.18gb");
  ASSERT_TRUE(mig.apply(2, "H200-141GB", {{p1g, 0}}).isOk());
  EXPECT_EQ(mig.layouts().at(2), (std::vector<model::MigInstance>{{p1g, 0}, {p3g, 4}}));
}

}  // namespace
}  // namespace tessera::agent
