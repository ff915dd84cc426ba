// Cgroups against fake hierarchies in a temporary folder: which files get which values. (The
// kernel's side, on this machine's real v1 hierarchy, is in runtime_test.cc.)
#include "agent/cgroups.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "agent/device_filter.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

class CgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tessera-cgroups-" + std::to_string(::getpid()));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void touch(const fs::path& p, const std::string& text = "") {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path root_;
};

TEST_F(CgroupsTest, V2WritesCpuMaxMemoryMaxAndEnablesControllersDownTheTree) {
  touch(root_ / "cgroup.controllers", "cpu memory");
  touch(root_ / "self", "0::/agent.service\n");
  const fs::path self = root_ / "agent.service";
  const fs::path group = self / "tessera/node-1/t1";
  for (const fs::path& level : {self, self / "tessera", self / "tessera/node-1"}) {
    touch(level / "cgroup.subtree_control");
  }
  touch(self / "cgroup.controllers", "cpuset cpu io memory pids\n");
  for (const char* f : {"cpu.max", "memory.max", "memory.swap.max", "pids.max", "cgroup.procs"}) {
    touch(group / f);
  }
  touch(group / "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n");
  auto cg = Cgroups::detect("tessera/node-1", root_.string(), (root_ / "self").string());
  ASSERT_TRUE(cg.isOk()) << cg.status().message();
  EXPECT_EQ(cg->version(), 2);
  EXPECT_EQ(cg->devicesEnforced(), probeDeviceFilter().isOk());
  CgroupLimits limits;
  limits.cpu_milli = 1500;
  limits.memory_mib = 64;
  limits.pids_max = 100;
  auto g = cg->create("t1", limits);
  ASSERT_TRUE(g.isOk()) << g.status().message();
  EXPECT_EQ(read(group / "cpu.max"), "150000 100000");
  EXPECT_EQ(read(group / "memory.max"), std::to_string(64 << 20));
  EXPECT_EQ(read(group / "memory.swap.max"), "0");
  EXPECT_EQ(read(group / "pids.max"), "100");
  for (const fs::path& level : {self, self / "tessera", self / "tessera/node-1"}) {
    EXPECT_EQ(read(level / "cgroup.subtree_control"), "+cpu +memory +pids") << level;
  }
  EXPECT_EQ(g->joinPaths(), std::vector<std::string>{(group / "cgroup.procs").string()});
  // The task's view of its cgroups (agent/sandbox.h) is the whole hierarchy: nothing beside
  // or above the agent's own group shows either (another agent's tasks on the machine).
  EXPECT_EQ(g->view_roots, std::vector<std::string>{root_.string()});
  EXPECT_EQ(g->oomKills(), 1);
  // No limits: "max".
  auto unlimited = cg->create("t1", {});
  ASSERT_TRUE(unlimited.isOk());
  EXPECT_EQ(read(group / "cpu.max"), "max 100000");
  EXPECT_EQ(read(group / "memory.max"), "max");
  EXPECT_EQ(read(group / "pids.max"), "max");
  // A hierarchy without the memory controller: a memory limit cannot be kept, so it is refused.
  touch(self / "cgroup.controllers", "cpu pids\n");
  cg = Cgroups::detect("tessera/node-1", root_.string(), (root_ / "self").string());
  ASSERT_TRUE(cg.isOk());
  auto refused = cg->create("t1", limits);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("the memory controller is not available"),
            std::string::npos)
      << refused.status().message();
}

TEST_F(CgroupsTest, V1WritesEachControllersFilesAndTheDeviceRules) {
  touch(root_ / "self", "5:pids:/job\n4:memory:/job\n3:devices:/\n2:cpu,cpuacct:/\n");
  const fs::path cpu = root_ / "cpu,cpuacct/tessera/t1";
  const fs::path mem = root_ / "memory/job/tessera/t1";
  const fs::path dev = root_ / "devices/tessera/t1";
  const fs::path pids = root_ / "pids/job/tessera/t1";
  touch(pids / "pids.max");
  for (const char* f : {"cpu.cfs_period_us", "cpu.cfs_quota_us", "cgroup.procs"}) {
    touch(cpu / f);
  }
  for (const char* f : {"memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "cgroup.procs"}) {
    touch(mem / f);
  }
  touch(mem / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  for (const char* f : {"devices.deny", "devices.allow", "cgroup.procs"}) {
    touch(dev / f);
  }
  auto cg = Cgroups::detect("tessera", root_.string(), (root_ / "self").string());
  ASSERT_TRUE(cg.isOk()) << cg.status().message();
  EXPECT_EQ(cg->version(), 1);
  EXPECT_TRUE(cg->devicesEnforced());
  EXPECT_EQ(cg->describe(), "cgroup v1 (cpu, memory, pids, devices)");
  CgroupLimits limits;
  limits.cpu_milli = 2000;
  limits.memory_mib = 32;
  limits.pids_max = 512;
  limits.restrict_devices = true;
  limits.devices = {{195, 3}};
  auto g = cg->create("t1", limits);
  ASSERT_TRUE(g.isOk()) << g.status().message();
  EXPECT_EQ(read(cpu / "cpu.cfs_period_us"), "100000");
  EXPECT_EQ(read(cpu / "cpu.cfs_quota_us"), "200000");
  EXPECT_EQ(read(mem / "memory.limit_in_bytes"), std::to_string(32 << 20));
  EXPECT_EQ(read(mem / "memory.memsw.limit_in_bytes"), std::to_string(32 << 20));
  EXPECT_EQ(read(dev / "devices.deny"), "a");
  // Each rule is its own write; the fake file keeps the last one, the GPU's.
  EXPECT_EQ(read(dev / "devices.allow"), "c 195:3 rwm");
  EXPECT_EQ(read(pids / "pids.max"), "512");
  EXPECT_EQ(g->joinPaths().size(), 4U);
  EXPECT_EQ(g->oomKills(), 0);
  // In the task's view each hierarchy, from where it is mounted, shows its group alone.
  ASSERT_EQ(g->view_roots.size(), g->dirs.size());
  const std::set<std::string> hierarchies = {
      (root_ / "cpu,cpuacct").string(), (root_ / "memory").string(), (root_ / "devices").string(),
      (root_ / "pids").string()};
  for (size_t i = 0; i < g->dirs.size(); ++i) {
    EXPECT_TRUE(hierarchies.contains(g->view_roots[i])) << g->view_roots[i];
    EXPECT_EQ(g->dirs[i].rfind(g->view_roots[i] + "/", 0), 0U) << g->dirs[i];
  }
  EXPECT_EQ(std::set<std::string>(g->view_roots.begin(), g->view_roots.end()), hierarchies);
  // A task without device rules (a container's are its runtime's) still gets a devices group,
  // with no rule written, so that its view of the hierarchy holds no other task's group.
  limits.restrict_devices = false;
  for (const char* f :
       {"cpu,cpuacct/tessera/t2/cpu.cfs_period_us", "cpu,cpuacct/tessera/t2/cpu.cfs_quota_us",
        "memory/job/tessera/t2/memory.limit_in_bytes", "pids/job/tessera/t2/pids.max"}) {
    touch(root_ / f);
  }
  auto open = cg->create("t2", limits);
  ASSERT_TRUE(open.isOk()) << open.status().message();
  const fs::path dev2 = root_ / "devices/tessera/t2";
  EXPECT_NE(std::find(open->dirs.begin(), open->dirs.end(), dev2.string()), open->dirs.end());
  EXPECT_FALSE(fs::exists(dev2 / "devices.deny"));
  EXPECT_EQ(open->view_roots.size(), 4U);
}

TEST_F(CgroupsTest, BadNamesAndMissingHierarchiesAreErrors) {
  touch(root_ / "self", "0::/\n");
  EXPECT_FALSE(Cgroups::detect("tessera", root_.string(), (root_ / "self").string()).isOk());
  EXPECT_FALSE(Cgroups::detect("../up", root_.string(), (root_ / "self").string()).isOk());
  EXPECT_FALSE(Cgroups::detect("tessera", root_.string(), (root_ / "nope").string()).isOk());
  touch(root_ / "cgroup.controllers", "cpu memory");
  auto cg = Cgroups::detect("tessera", root_.string(), (root_ / "self").string());
  ASSERT_TRUE(cg.isOk());
  EXPECT_FALSE(cg->create("../x", {}).isOk());
  EXPECT_FALSE(cg->create("", {}).isOk());
}

}  // namespace
}  // namespace tessera::agent
