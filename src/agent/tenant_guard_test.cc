#include "agent/tenant_guard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "core/clock.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;

class Server : public ControlPlaneClient {
 public:
  core::Result<std::vector<TaskAssignment>> heartbeat(
      const std::string&, const NodeGpus&, const std::vector<TaskReport>& reports) override {
    received.insert(received.end(), reports.begin(), reports.end());
    if (down) {
      return core::unavailable("connection refused");
    }
    return assigned;
  }
  // Tenant `tenant`'s task `id` at `generation`.
  void assign(const std::string& tenant, const std::string& id, uint32_t generation = 1) {
    TaskAssignment a;
    a.spec.id = id;
    a.spec.tenant = tenant;
    a.spec.command = {"true"};
    a.generation = generation;
    std::erase_if(assigned, [&](const TaskAssignment& o) { return o.spec.id == id; });
    assigned.push_back(a);
  }
  void unassign(const std::string& id) {
    std::erase_if(assigned, [&](const TaskAssignment& a) { return a.spec.id == id; });
  }
  bool down = false;
  std::vector<TaskAssignment> assigned;
  std::vector<TaskReport> received;
};

class Tasks : public Runtime {
 public:
  core::Status start(const TaskSpec& spec) override {
    live.insert(spec.id);
    started.push_back(spec.id);
    return core::Status::ok();
  }
  core::Status stop(const std::string& id, std::chrono::milliseconds) override {
    return live.contains(id) ? core::Status::ok() : core::notFound(id);
  }
  std::vector<std::string> running() const override { return {live.begin(), live.end()}; }
  std::set<std::string> live;  // Started (or adopted) and not ended.
  std::vector<std::string> started;
};

class TenantGuardTest : public ::testing::Test {
 protected:
  // The tasks of the guard's answer it refused, by id, with why.
  std::map<std::string, std::string> refused() {
    auto answer = guard_.heartbeat("gpu-a", NodeGpus{}, {});
    EXPECT_TRUE(answer.isOk());
    std::map<std::string, std::string> out;
    for (const TaskAssignment& a : *answer) {
      if (!a.invalid.empty()) {
        out[a.spec.id] = a.invalid;
      }
    }
    return out;
  }
  std::set<std::string> refusedIds() {
    std::set<std::string> out;
    for (const auto& [id, why] : refused()) {
      out.insert(id);
    }
    return out;
  }

  Server server_;
  Tasks tasks_;
  TenantGuard guard_{server_, tasks_, "gpu-a"};
};

TEST_F(TenantGuardTest, OneTenantAtATimeWhileItsTasksAreAssignedOrRunning) {
  // An idle node: the first tenant in the answer takes it; the other's task is refused.
  server_.assign("a", "a.train.0");
  server_.assign("a", "a.train.1");
  server_.assign("b", "b.steal.0");
  const auto first = refused();
  ASSERT_EQ(first.size(), 1U);
  const std::string why = first.at("b.steal.0");
  EXPECT_NE(why.find("node gpu-a runs the tasks of one tenant at a time"), std::string::npos)
      << why;
  EXPECT_NE(why.find("tenant 'a' has tasks here"), std::string::npos) << why;
  EXPECT_NE(why.find("--node-mode single-tenant"), std::string::npos) << why;
  // A's tasks run; A's new task comes in, B's new one does not.
  tasks_.live = {"a.train.0", "a.train.1"};
  server_.assign("a", "a.eval.0");
  server_.assign("b", "b.other.0");
  EXPECT_EQ(refusedIds(), (std::set<std::string>{"b.steal.0", "b.other.0"}));
  // A's tasks are taken off the node but still stopping: they hold it.
  server_.unassign("a.train.0");
  server_.unassign("a.train.1");
  server_.unassign("a.eval.0");
  server_.unassign("b.steal.0");
  server_.unassign("b.other.0");
  server_.assign("b", "b.later.0");
  EXPECT_EQ(refusedIds(), (std::set<std::string>{"b.later.0"}));
  // Once they have ended, B may take the node; refused at that generation stays refused.
  tasks_.live.clear();
  server_.assign("b", "b.next.0");
  EXPECT_EQ(refusedIds(), (std::set<std::string>{"b.later.0"}));
  // Placed again (a new generation), it is let through.
  server_.assign("b", "b.later.0", 2);
  EXPECT_EQ(refusedIds(), (std::set<std::string>{}));
  // And now A waits.
  server_.assign("a", "a.back.0");
  EXPECT_EQ(refusedIds(), (std::set<std::string>{"a.back.0"}));
}

TEST_F(TenantGuardTest, RunningTasksAreNeverRefusedAndUnknownOnesHoldTheNode) {
  // Adopted after a restart, two tenants' tasks run (an older agent, or another mode): they are
  // left alone (refusing them would drop their credentials), and no one else gets in.
  tasks_.live = {"a.x.0", "b.y.0"};
  server_.assign("a", "a.x.0");
  server_.assign("b", "b.y.0");
  server_.assign("a", "a.new.0");
  EXPECT_EQ(refusedIds(), (std::set<std::string>{"a.new.0"}));
  // A task still running that the server no longer assigns and this guard never saw: its
  // tenant is unknown, so it holds the node for everybody.
  server_.assigned.clear();
  tasks_.live = {"c.stray.0"};
  server_.assign("a", "a.wait.0");
  const auto why = refused();
  ASSERT_TRUE(why.contains("a.wait.0"));
  EXPECT_NE(why.at("a.wait.0").find("a task adopted from before a restart"), std::string::npos)
      << why.at("a.wait.0");
}

TEST_F(TenantGuardTest, TasksRefusedForOtherReasonsHoldNothingAndErrorsPassThrough) {
  server_.assign("a", "a.bad.0");
  server_.assigned.back().invalid = "no Unix user 'tessera-a'";
  server_.assign("b", "b.ok.0");
  const auto why = refused();
  EXPECT_EQ(why.at("a.bad.0"), "no Unix user 'tessera-a'");
  EXPECT_FALSE(why.contains("b.ok.0"));
  server_.down = true;
  auto answer = guard_.heartbeat("gpu-a", NodeGpus{}, {});
  ASSERT_FALSE(answer.isOk());
  EXPECT_EQ(answer.status().message(), "connection refused");
}

TEST_F(TenantGuardTest, TheAgentReportsARefusedTaskFailedToStartWithWhy) {
  core::FakeClock clock;
  AgentOptions options;
  options.parallel_starts = 1;
  Agent agent("gpu-a", NodeGpus{}, guard_, tasks_, clock, options);
  server_.assign("a", "a.train.0");
  server_.assign("b", "b.steal.0");
  ASSERT_TRUE(agent.tick().isOk());
  EXPECT_EQ(tasks_.started, std::vector<std::string>{"a.train.0"});
  ASSERT_TRUE(agent.tick().isOk());  // Sends the reports.
  bool reported = false;
  for (const TaskReport& r : server_.received) {
    if (r.id == "b.steal.0") {
      reported = true;
      EXPECT_EQ(r.state, TaskReport::State::kFailedToStart);
      EXPECT_NE(r.error.find("one tenant at a time"), std::string::npos) << r.error;
    }
  }
  EXPECT_TRUE(reported);
}

TEST(NodeModeTest, OnlyASharedNodeThatCannotSwitchUsersIsGuarded) {
  const struct {
    NodeMode mode;
    bool switch_users;
    bool guarded;
    const char* says;
  } cases[] = {
      {NodeMode::kShared, true, false, "each tenant's tasks run as its own Unix user"},
      {NodeMode::kShared, false, true, "tasks of one tenant at a time"},
      {NodeMode::kSingleTenant, true, false, "each tenant's tasks run as its own Unix user"},
      {NodeMode::kSingleTenant, false, false, "tenants are NOT isolated"},
      {NodeMode::kDevelopment, true, false, "each tenant's tasks run as its own Unix user"},
      {NodeMode::kDevelopment, false, false, "tenants are NOT isolated"},
  };
  for (const auto& c : cases) {
    const std::string line = describeIsolation(c.mode, c.switch_users, "tessera-{tenant}", "me");
    EXPECT_EQ(needsTenantGuard(c.mode, c.switch_users), c.guarded) << line;
    EXPECT_NE(line.find(c.says), std::string::npos) << line;
    EXPECT_NE(line.find(std::string("node mode ") + std::string(nodeModeName(c.mode))),
              std::string::npos)
        << line;
  }
  for (const char* name : {"shared", "single-tenant", "development"}) {
    auto m = parseNodeMode(name);
    ASSERT_TRUE(m.isOk());
    EXPECT_EQ(nodeModeName(*m), name);
  }
  EXPECT_FALSE(parseNodeMode("trusted").isOk());
}

TEST(NodeModeTest, TheAgentsConfigSaysWhatTheNodeIsFor) {
  const std::string path = ::testing::TempDir() + "agent-mode-" + std::to_string(::getpid());
  std::ofstream(path + ".hcl") << "node_name = \"gpu-a\"\nnode_mode = \"single-tenant\"\n"
                               << "gpus { backend = \"sim\"  profile = \"t4-2x\" }\n";
  auto config = readAgentConfig(path + ".hcl");
  ASSERT_TRUE(config.isOk()) << config.status().message();
  EXPECT_EQ(config->node_mode, NodeMode::kSingleTenant);
  std::ofstream(path + ".hcl") << "node_mode = \"trusted\"\n";
  auto bad = readAgentConfig(path + ".hcl");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("node_mode: node mode 'trusted' is not one of shared, "
                                        "single-tenant, development"),
            std::string::npos)
      << bad.status().message();
  std::ofstream(path + ".hcl") << "gpus { backend = \"sim\"  profile = \"t4-2x\" }\n";
  EXPECT_EQ(readAgentConfig(path + ".hcl")->node_mode, NodeMode::kShared);  // The default.
  std::remove((path + ".hcl").c_str());
}

TEST(AgentConfigTest, TheContainerBlockChoosesTheRuntime) {
  const std::string path =
      ::testing::TempDir() + "agent-container-" + std::to_string(::getpid()) + ".hcl";
  std::ofstream(path) << "gpus { backend = \"sim\"  profile = \"t4-2x\" }\n"
                      << "container {\n  runtime = \"crun\"\n  path = \"/opt/crun\"\n"
                      << "  cdi_dir = \"/var/run/cdi\"\n"
                      << "  pull_retries = 2\n  pull_backoff_seconds = 3\n}\n";
  auto config = readAgentConfig(path);
  ASSERT_TRUE(config.isOk()) << config.status().message();
  EXPECT_EQ(config->container.runtime, "crun");
  EXPECT_EQ(config->container.runtime_path, "/opt/crun");
  EXPECT_EQ(config->container.cdi_dir, "/var/run/cdi");
  EXPECT_EQ(config->container.pull_retries, 2);
  EXPECT_EQ(config->container.pull_backoff, std::chrono::seconds(3));
  std::ofstream(path) << "container { pull_backoff_seconds = 0 }\n";
  auto zero = readAgentConfig(path);
  ASSERT_FALSE(zero.isOk());
  EXPECT_NE(zero.status().message().find("pull_backoff_seconds"), std::string::npos)
      << zero.status().message();
  std::ofstream(path) << "container { runtime = \"docker\" }\n";
  auto bad = readAgentConfig(path);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("expected runc or crun"), std::string::npos)
      << bad.status().message();
  std::ofstream(path) << "gpus { backend = \"sim\"  profile = \"t4-2x\" }\n";
  EXPECT_EQ(readAgentConfig(path)->container.runtime, "runc");  // The defaults.
  EXPECT_EQ(readAgentConfig(path)->container.pull_retries, 5);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessera::agent
