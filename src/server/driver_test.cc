#include "server/driver.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <thread>

#include "model/node_profiles.h"
#include "server/workload_record.h"

namespace tessera::server {
namespace {

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<model::Node> nodes;
    for (int i = 0; i < 2; ++i) {
      std::string name = "n";  // Not "n" + to_string(i): GCC 12 warns falsely (-Wrestrict).
      name += std::to_string(i);
      nodes.push_back(*model::makeProfileNode("dgx-h100", name, cat_, i));
    }
    auto d = SchedulerDriver::create(cat_, std::move(nodes), clock_, {},
                                     [this](const std::map<std::string, WorkloadStatus>& c) {
                                       for (const auto& [k, v] : c) {
                                         seen_[k] = std::string(phaseName(v.phase));
                                         for (const std::string& e : v.events) {
                                           events_[k].push_back(e);
                                         }
                                       }
                                       return core::Status::ok();
                                     });
    ASSERT_TRUE(d.isOk()) << d.status().message();
    driver_ = std::move(d).value();
    ASSERT_TRUE(driver_->addTenantQueue("team-1", 8000, sched::kNoGpuLimit, 1, 100).isOk());
    ASSERT_TRUE(driver_->addTenantQueue("team-2", 8000, sched::kNoGpuLimit, 1, 100).isOk());
  }
  SubmitCommand cmd(const std::string& tenant, const std::string& name, int tasks, int gpus,
                    core::Duration duration = {}) {
    SubmitCommand c;
    c.tenant = tenant;
    c.name = name;
    c.spec.tasks = tasks;
    c.spec.min_available = tasks;
    c.spec.request.cpu = core::MilliCpu{4000};
    c.spec.request.memory = core::MiB{1024};
    c.spec.request.gpu_count = gpus;
    c.spec.request.gpu_milli = core::kWholeGpu;
    c.duration = duration;
    return c;
  }

  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  core::FakeClock clock_;
  std::unique_ptr<SchedulerDriver> driver_;
  std::map<std::string, std::string> seen_;
  std::map<std::string, std::vector<std::string>> events_;
};

// Issue #36: a GPU limit of 0 is zero. A gang that needs more GPUs at once than a limit on its
// path allows could never start, and is refused at admission with the arithmetic.
// A workload admitted while a node could hold it waits for room (a passing reason); once the
// only node its selector matches is removed, nothing but a new node can end the wait, and its
// reason says that first.
TEST(DriverReasonTest, AWaitOnlyANewNodeCanEndOutranksAPassingOne) {
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  core::FakeClock clock;
  std::vector<model::Node> nodes;
  nodes.push_back(*model::makeProfileNode("dgx-h100", "n0", cat, 0));
  nodes.push_back(*model::makeProfileNode("t4-2x", "gpu-a", cat, 1));
  nodes.back().labels = {{"zone", "a"}};
  DriverOptions o;
  o.agent_nodes = {"gpu-a"};  // Waits for its agent: in service, holding nothing yet.
  auto d = SchedulerDriver::create(
      cat, std::move(nodes), clock, o,
      [](const std::map<std::string, WorkloadStatus>&) { return core::Status::ok(); });
  ASSERT_TRUE(d.isOk()) << d.status().message();
  SchedulerDriver& driver = **d;
  ASSERT_TRUE(driver.addTenantQueue("t", 8000, sched::kNoGpuLimit, 1, 100).isOk());
  SubmitCommand c;
  c.tenant = "t";
  c.name = "w";
  c.spec.request.cpu = core::MilliCpu{1000};
  c.spec.request.memory = core::MiB{1024};
  c.spec.request.gpu_count = 1;
  c.spec.request.gpu_milli = core::kWholeGpu;
  c.spec.request.node_selector = {{"zone", "a"}};
  ASSERT_TRUE(driver.check(c).isOk()) << driver.check(c).message();
  ASSERT_TRUE(driver.submit(c).isOk());
  driver.runOnce();
  std::string reason = driver.status("t", "w")->reason;
  EXPECT_EQ(reason.rfind("no-capacity: ", 0), 0U) << reason;
  ASSERT_TRUE(driver.removeNode("gpu-a").isOk());
  driver.runOnce();
  EXPECT_EQ(driver.status("t", "w")->phase, WorkloadPhase::kPending);
  reason = driver.status("t", "w")->reason;
  EXPECT_EQ(reason,
            "unplaceable: no node in service could ever hold it (nodeSelector: no node has the "
            "labels zone=a); it waits for one that can to join")
      << reason;
  // Submitted now, the same workload is refused: admission and the reason agree.
  c.name = "w2";
  EXPECT_NE(driver.check(c).message().find("nodeSelector: no node has the labels zone=a"),
            std::string::npos);
}

TEST_F(DriverTest, AdmissionRefusesAGangBeyondAGpuLimitAndZeroMeansNone) {
  ASSERT_TRUE(driver_->addTenantQueue("frozen", 0, 0, 1, 100).isOk());
  ASSERT_TRUE(driver_->addTenantQueue("capped", 0, 2000, 1, 100).isOk());
  ASSERT_TRUE(driver_->putTeamQueue("team-1", "interns", 0, 0, 1, 100).isOk());
  ASSERT_TRUE(driver_->putTeamQueue("team-1", "research", 0, 500, 1, 100).isOk());
  auto mig = [&](const std::string& tenant, const std::string& profile) {
    SubmitCommand c = cmd(tenant, "mig", 1, 1);
    c.spec.request.mig_profile = profile;
    return c;
  };
  auto fractional = [&](const std::string& tenant, int64_t milli, int tasks) {
    SubmitCommand c = cmd(tenant, "frac", tasks, 1);
    c.spec.request.gpu_milli = core::MilliGpu{milli};
    c.spec.request.isolation = model::Isolation::kProcess;
    return c;
  };
  auto cpu_only = [&](const std::string& tenant, int tasks) {
    SubmitCommand c = cmd(tenant, "cpu", tasks, 0);
    c.spec.request.gpu_milli = core::MilliGpu{0};
    return c;
  };
  auto in = [](SubmitCommand c, const std::string& queue) {
    c.queue = queue;
    return c;
  };
  struct Case {
    const char* what;
    SubmitCommand c;
    const char* says;  // "" when admitted.
  };
  const std::vector<Case> cases = {
      {"no limit: any gang", cmd("team-1", "w", 2, 8), ""},
      {"frozen: one whole GPU", cmd("frozen", "w", 1, 1),
       "this workload needs 1 x 1 GPU = 1 GPU at once (minAvailable x each task's GPU), and "
       "tenant 'frozen' may hold no GPU at all (its limit.gpu is 0); it could never start"},
      {"frozen: a fractional GPU", fractional("frozen", 100, 1), "1 x 0.1 GPU = 0.1 GPU"},
      {"frozen: a MIG slice", mig("frozen", "1g.10gb"), "1 x 0.142 GPU = 0.142 GPU"},
      {"frozen: no GPU at all", cpu_only("frozen", 4), ""},
      {"capped 2 GPUs: 2 x 1", cmd("capped", "w", 2, 1), ""},
      {"capped 2 GPUs: 3 x 1 at once", cmd("capped", "w", 3, 1),
       "3 x 1 GPU = 3 GPUs at once (minAvailable x each task's GPU), and tenant 'capped' may hold "
       "at most 2 GPUs at once"},
      {"capped 2 GPUs: 1 x 4", cmd("capped", "w", 1, 4), "1 x 4 GPUs = 4 GPUs"},
      {"capped 2 GPUs: 4 halves", fractional("capped", 500, 4), ""},
      {"capped 2 GPUs: 5 halves", fractional("capped", 500, 5), "5 x 0.5 GPU = 2.5 GPUs"},
      {"a frozen team's queue", in(cmd("team-1", "w", 1, 1), "interns"),
       "queue 'interns' of tenant 'team-1' may hold no GPU at all"},
      {"a team's queue of half a GPU: half", in(fractional("team-1", 500, 1), "research"), ""},
      {"a team's queue of half a GPU: one", in(cmd("team-1", "w", 1, 1), "research"),
       "1 x 1 GPU = 1 GPU at once"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(driver_->check(c.c).isOk()) << c.what << ": " << driver_->check(c.c).message();
    core::Status st = driver_->checkLimits(c.c);
    EXPECT_EQ(st.isOk(), std::string(c.says).empty()) << c.what << ": " << st.message();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.what << ": " << st.message();
  }
  // Unfrozen: -1 is none again, and the scheduler agrees.
  ASSERT_TRUE(driver_->updateTenantQueue("frozen", 0, sched::kNoGpuLimit, 1, 100).isOk());
  EXPECT_TRUE(driver_->checkLimits(cmd("frozen", "w", 2, 8)).isOk());
  ASSERT_TRUE(driver_->submit(cmd("frozen", "w", 1, 1)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("frozen", "w")->phase, WorkloadPhase::kRunning);
}

TEST_F(DriverTest, AFrozenTenantsAdmittedWorkWaitsAndATenantMadeAgainTakesItsNewLimit) {
  // Admitted before the freeze: it waits on the limit, and runs once the limit is lifted.
  ASSERT_TRUE(driver_->addTenantQueue("t", 0, 0, 1, 100).isOk());
  ASSERT_TRUE(driver_->submit(cmd("t", "w", 1, 1)).isOk());  // Restored work is not refused.
  driver_->runOnce();
  auto s = driver_->status("t", "w");
  EXPECT_EQ(s->phase, WorkloadPhase::kPending);
  EXPECT_NE(s->reason.find("limit"), std::string::npos) << s->reason;
  // The same name added again (a tenant deleted and created anew, or loaded twice) takes the
  // numbers it is given now, not the first one's.
  ASSERT_TRUE(driver_->addTenantQueue("t", 0, sched::kNoGpuLimit, 1, 100).isOk());
  EXPECT_TRUE(driver_->checkLimits(cmd("t", "x", 1, 1)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("t", "w")->phase, WorkloadPhase::kRunning);
}

TEST_F(DriverTest, SchedulesTenantsWorkAndReportsChanges) {
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 2, 4, std::chrono::seconds(60))).isOk());
  ASSERT_TRUE(driver_->submit(cmd("team-2", "eval", 1, 8)).isOk());
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kPending);
  driver_->runOnce();
  auto s = driver_->status("team-1", "train");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->phase, WorkloadPhase::kRunning);
  ASSERT_EQ(s->tasks.size(), 2U);
  EXPECT_EQ(s->tasks[0].gpus.size(), 4U);
  EXPECT_FALSE(s->tasks[0].node.empty());
  EXPECT_EQ(driver_->status("team-2", "eval")->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(seen_["team-1/train"], "running");
  // The simulated run ends after its duration.
  clock_.advance(std::chrono::seconds(61));
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kSucceeded);
  EXPECT_EQ(seen_["team-1/train"], "succeeded");
  driver_->cancel("team-2", "eval");
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-2", "eval")->phase, WorkloadPhase::kCancelled);
  // Queues: allocated vs fair share vs quota.
  bool found = false;
  for (const QueueStatus& q : driver_->queues("team-1")) {
    if (q.name == "team-1") {
      found = true;
      EXPECT_EQ(q.quota_milli_gpu, 8000);
      EXPECT_EQ(q.allocated_milli_gpu, 0);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(driver_->queues("team-3").empty());
}

TEST_F(DriverTest, RefusesWorkNoNodeCanHoldAndUnknownTenants) {
  EXPECT_FALSE(driver_->submit(cmd("team-1", "huge", 1, 16)).isOk());
  EXPECT_EQ(driver_->submit(cmd("nobody", "x", 1, 1)).code(), core::StatusCode::kInvalidArgument);
}

// What could never run is refused with the field that asks for it.
TEST_F(DriverTest, RefusesWhatThePoolCanNeverRunAndSaysWhichField) {
  auto refusal = [&](SubmitCommand c) {
    const core::Status s = driver_->check(c);
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
    return s.message();
  };
  SubmitCommand mig = cmd("team-1", "mig", 1, 1);
  mig.spec.request.mig_profile = "9g.99gb";
  EXPECT_TRUE(refusal(mig).starts_with("gpu.mig: no GPU in the pool offers MIG profile '9g.99gb'"))
      << refusal(mig);
  mig.spec.request.mig_profile = "3g.40gb";
  EXPECT_TRUE(driver_->check(mig).isOk());
  SubmitCommand t4 = cmd("team-1", "t4", 1, 1);
  t4.spec.request.models = {*cat_.find("T4")};
  EXPECT_TRUE(refusal(t4).starts_with("gpu.models: no GPU in the pool is a T4")) << refusal(t4);
  SubmitCommand big_memory = cmd("team-1", "mem", 1, 1);
  big_memory.spec.request.gpu_memory = core::MiB{200000};
  EXPECT_TRUE(refusal(big_memory).starts_with("gpu.memoryMiB")) << refusal(big_memory);
  // Sixteen GPUs in all: a gang of 17 one-GPU tasks never starts, 17 elastic ones do.
  SubmitCommand gang = cmd("team-1", "gang", 17, 1);
  EXPECT_TRUE(
      refusal(gang).starts_with("minAvailable: its 17 tasks must start together, but "
                                "the whole pool holds at most 16"))
      << refusal(gang);
  gang.spec.min_available = 16;
  EXPECT_TRUE(driver_->check(gang).isOk());
  // Most of a node's CPU each: one fits a node, three cannot start together on two.
  SubmitCommand cpu = cmd("team-1", "cpu", 3, 0);
  cpu.spec.request.gpu_milli = core::MilliGpu{0};
  cpu.spec.request.cpu = core::MilliCpu{200000};
  EXPECT_TRUE(refusal(cpu).starts_with("minAvailable")) << refusal(cpu);
  cpu.spec.request.cpu = core::MilliCpu{300000};
  cpu.spec.tasks = cpu.spec.min_available = 1;
  EXPECT_TRUE(refusal(cpu).starts_with("cpuMilli")) << refusal(cpu);
}

TEST_F(DriverTest, AForgottenTenantsNamesCanBeUsedAgain) {
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1, std::chrono::seconds(10))).isOk());
  driver_->runOnce();
  clock_.advance(std::chrono::seconds(11));
  driver_->runOnce();
  ASSERT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kSucceeded);
  // Without forgetting, the same name is taken for a replay and ignored.
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kSucceeded);
  driver_->forgetTenant("team-1");
  EXPECT_FALSE(driver_->status("team-1", "train").has_value());
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kRunning);
}

TEST_F(DriverTest, ADeletedTeamQueuesNodeGoesToTheTenantsNextNewQueue) {
  ASSERT_TRUE(driver_->putTeamQueue("team-1", "a", 2000, sched::kNoGpuLimit, 1, 100).isOk());
  ASSERT_TRUE(driver_->putTeamQueue("team-1", "b", 2000, sched::kNoGpuLimit, 1, 100).isOk());
  SubmitCommand in_a = cmd("team-1", "in-a", 1, 1, std::chrono::seconds(10));
  in_a.queue = "a";
  ASSERT_TRUE(driver_->submit(in_a).isOk());
  driver_->runOnce();
  clock_.advance(std::chrono::seconds(11));
  driver_->runOnce();
  ASSERT_EQ(driver_->status("team-1", "in-a")->phase, WorkloadPhase::kSucceeded);
  ASSERT_TRUE(driver_->retireTeamQueue("team-1", "a").isOk());
  EXPECT_EQ(driver_->teamQueues("team-1"), (std::vector<std::string>{"b"}));
  EXPECT_EQ(driver_->teamQueueNodeCount("team-1"), 2U);
  // Another tenant's new queue does not take it; team-1's next new queue does.
  ASSERT_TRUE(driver_->putTeamQueue("team-2", "x", 1000, sched::kNoGpuLimit, 1, 100).isOk());
  EXPECT_EQ(driver_->teamQueueNodeCount("team-2"), 1U);
  ASSERT_TRUE(driver_->putTeamQueue("team-1", "c", 3000, sched::kNoGpuLimit, 1, 100).isOk());
  EXPECT_EQ(driver_->teamQueueNodeCount("team-1"), 2U);
  EXPECT_EQ(driver_->teamQueues("team-1"), (std::vector<std::string>{"b", "c"}));
  EXPECT_FALSE(driver_->hasQueue("team-1", "a"));
  // It takes work, under its own numbers; the deleted queue is not listed.
  SubmitCommand in_c = cmd("team-1", "in-c", 1, 2);
  in_c.queue = "c";
  ASSERT_TRUE(driver_->submit(in_c).isOk());
  in_a.name = "in-a-again";
  EXPECT_FALSE(driver_->submit(in_a).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "in-c")->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(driver_->status("team-1", "in-a")->phase,
            WorkloadPhase::kSucceeded);  // Its record stays.
  std::map<std::string, QueueStatus> listed;
  for (const QueueStatus& q : driver_->queues("team-1")) {
    listed[q.name] = q;
  }
  EXPECT_FALSE(listed.contains("team-1/a"));
  ASSERT_TRUE(listed.contains("team-1/c"));
  EXPECT_EQ(listed["team-1/c"].quota_milli_gpu, 3000);
  EXPECT_EQ(listed["team-1/c"].allocated_milli_gpu, 2000);
  // With no retired node left, a new queue gets a node of its own.
  ASSERT_TRUE(driver_->putTeamQueue("team-1", "a", 2000, sched::kNoGpuLimit, 1, 100).isOk());
  EXPECT_EQ(driver_->teamQueueNodeCount("team-1"), 3U);
}

// An evicted workload is told who took its GPUs and why, without the name of another tenant's
// workload; a workload waiting for its own tasks to stop says so.
TEST_F(DriverTest, AnEvictionIsAnEventOnTheVictimWithWhoTookTheGpusAndWhy) {
  SubmitCommand wide = cmd("team-1", "wide", 16, 1);
  wide.spec.min_available = 1;
  ASSERT_TRUE(driver_->submit(wide).isOk());
  driver_->runOnce();
  ASSERT_EQ(driver_->status("team-1", "wide")->phase, WorkloadPhase::kRunning);
  ASSERT_TRUE(driver_->submit(cmd("team-2", "secret-project", 1, 8)).isOk());
  driver_->runOnce();  // Evicts; simulated nodes stop their tasks at once.
  driver_->runOnce();  // Places.
  ASSERT_FALSE(events_["team-1/wide"].empty());
  const std::string& e = events_["team-1/wide"][0];
  EXPECT_TRUE(
      e.starts_with("reclaimed by queue team-2/default: team-1 held 16 GPUs, fair share 8 "
                    "(task "))
      << e;
  EXPECT_EQ(e.find("secret-project"), std::string::npos) << e;
  EXPECT_TRUE(driver_->status("team-1", "wide")->events.empty());  // Told once.
  // Inside a queue: the preemptor is named, with its priority.
  ASSERT_EQ(driver_->status("team-2", "secret-project")->phase, WorkloadPhase::kRunning);
  SubmitCommand urgent = cmd("team-2", "urgent", 1, 8);
  urgent.spec.priority = 10;
  ASSERT_TRUE(driver_->submit(urgent).isOk());
  driver_->runOnce();
  ASSERT_FALSE(events_["team-2/secret-project"].empty())
      << driver_->status("team-2", "urgent")->reason;
  EXPECT_TRUE(
      events_["team-2/secret-project"][0].starts_with("preempted by workload urgent (priority 10)"))
      << events_["team-2/secret-project"][0];
  for (const std::string w : {"team-1/wide", "team-2/secret-project", "team-2/urgent"}) {
    const size_t slash = w.find('/');
    const WorkloadStatus s = *driver_->status(w.substr(0, slash), w.substr(slash + 1));
    EXPECT_TRUE(s.phase != WorkloadPhase::kPending || !s.reason.empty()) << w;
  }
}

TEST_F(DriverTest, RunsPassesOnItsOwnThread) {
  core::RealClock real;
  std::vector<model::Node> nodes = {*model::makeProfileNode("dgx-h100", "n0", cat_, 0)};
  DriverOptions opts;
  opts.pass_interval = std::chrono::milliseconds(10);
  auto d = SchedulerDriver::create(cat_, std::move(nodes), real, opts, {});
  ASSERT_TRUE(d.isOk());
  ASSERT_TRUE((*d)->addTenantQueue("t", 8000, sched::kNoGpuLimit, 1, 100).isOk());
  (*d)->start();
  ASSERT_TRUE((*d)->submit(cmd("t", "w", 1, 1)).isOk());
  for (int i = 0; i < 500 && (*d)->status("t", "w")->phase != WorkloadPhase::kRunning; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ((*d)->status("t", "w")->phase, WorkloadPhase::kRunning);
  (*d)->stop();
}

// Two nodes run by agents, "a" and "b" (2 H100 each), and one simulated, "sim" (2 T4, too few
// CPUs for the tests' tasks).
class AgentNodesTest : public DriverTest {
 protected:
  // Another driver, with one agent-run node "a" (2 H100s).
  core::Result<std::unique_ptr<SchedulerDriver>> oneAgentNodeDriver(
      SchedulerDriver::Listener listener) {
    model::Node n = *model::makeProfileNode("dgx-h100", "a", cat_, 0);
    n.gpus.resize(2);
    DriverOptions opts;
    opts.agent_nodes = {"a"};
    return SchedulerDriver::create(cat_, {n}, clock_, opts, std::move(listener));
  }
  void SetUp() override {
    std::vector<model::Node> nodes = {*model::makeProfileNode("t4-2x", "sim", cat_, 0)};
    nodes[0].cpu = core::MilliCpu{1000};
    for (const char* name : {"a", "b"}) {
      model::Node n = *model::makeProfileNode("dgx-h100", name, cat_, 0);
      n.gpus.resize(2);
      nodes.push_back(n);
    }
    DriverOptions opts;
    opts.agent_nodes = {"a", "b"};
    opts.lease_ttl = std::chrono::seconds(15);
    opts.epoch = 3;
    auto d = SchedulerDriver::create(
        cat_, std::move(nodes), clock_, opts,
        [this](const std::map<std::string, WorkloadStatus>& changed) -> core::Status {
          if (store_fails_) {
            return core::unavailable("etcd: no leader");
          }
          for (const auto& [key, status] : changed) {
            stored_[key] = std::string(phaseName(status.phase));
          }
          return core::Status::ok();
        });
    ASSERT_TRUE(d.isOk()) << d.status().message();
    driver_ = std::move(d).value();
    ASSERT_TRUE(driver_->addTenantQueue("team-1", 4000, sched::kNoGpuLimit, 1, 100).isOk());
  }
  core::Result<HeartbeatAnswer> beat(const std::string& node,
                                     std::vector<NodeTaskReport> reports = {}) {
    return driver_->heartbeat(node, {"H100-80GB", "H100-80GB"}, std::move(reports));
  }
  static NodeTaskReport report(const NodeTask& t, NodeTaskReport::State state, int code = -1) {
    NodeTaskReport r;
    r.task = t.id;
    r.generation = t.generation;
    r.state = state;
    r.exit_code = code;
    return r;
  }
  bool store_fails_ = false;                   // The listener's store write fails.
  std::map<std::string, std::string> stored_;  // What it stored: "tenant/name" -> phase.
  std::string stateOf(const std::string& node) {
    for (const NodeState& n : driver_->nodeStates()) {
      if (n.name == node) {
        return n.state;
      }
    }
    return "?";
  }
};

TEST_F(AgentNodesTest, AgentNodesWaitForTheirAgentThenRunItsTasks) {
  EXPECT_EQ(stateOf("a"), "waiting");
  EXPECT_EQ(stateOf("sim"), "simulated");
  SubmitCommand c = cmd("team-1", "train", 1, 2);
  c.command = {"sh", "-c", "echo hi"};
  c.env = {{"LR", "0.1"}};
  c.grace = std::chrono::seconds(45);
  ASSERT_TRUE(driver_->submit(c).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kPending);  // No agent yet.
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  EXPECT_EQ(stateOf("a"), "ready");
  auto answer = beat("a");
  ASSERT_TRUE(answer.isOk());
  ASSERT_EQ(answer->tasks.size(), 1U);
  const NodeTask t = answer->tasks[0];
  EXPECT_EQ(t.id, "team-1.train.0");
  EXPECT_EQ(t.generation, (3U << 16) | 1U);  // The server's epoch, then its first start.
  EXPECT_EQ(t.command, c.command);
  EXPECT_EQ(t.env.at("LR"), "0.1");
  EXPECT_EQ(t.gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.grace_ms, 45000);
  EXPECT_EQ(driver_->status("team-1", "train")->tasks[0].state, "starting");
  ASSERT_TRUE(beat("a", {report(t, NodeTaskReport::State::kRunning)}).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->tasks[0].state, "running");
  ASSERT_TRUE(beat("a", {report(t, NodeTaskReport::State::kExited, 0)}).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kSucceeded);
  EXPECT_TRUE(beat("a")->tasks.empty());
}

// A restarted (or newly leading) server: until the tasks that ran before are back in its
// nodes' lists, an agent's heartbeat is refused, never answered with a list that leaves them
// out (its agent would stop them: a CI run of HaTest saw exactly that).
TEST_F(AgentNodesTest, HeartbeatsWaitUntilRestoredTasksArePublished) {
  SubmitCommand c = cmd("team-1", "train", 1, 2);
  RestoredTask rt;
  rt.node = "a";
  rt.gpus = {0, 1};
  rt.generation = (2U << 16) | 1U;  // Started by the previous server (epoch 2).
  rt.starts = 1;
  rt.started_at = clock_.wallNow() - std::chrono::seconds(30);
  rt.confirmed = true;
  c.restore = {rt};
  ASSERT_TRUE(driver_->submit(c).isOk());
  auto early = beat("a");
  ASSERT_FALSE(early.isOk());
  EXPECT_EQ(early.status().code(), core::StatusCode::kUnavailable) << early.status().message();
  driver_->runOnce();
  auto answer = beat("a");
  ASSERT_TRUE(answer.isOk()) << answer.status().message();
  ASSERT_EQ(answer->tasks.size(), 1U);
  EXPECT_EQ(answer->tasks[0].generation, rt.generation);  // Kept, not started again.
  EXPECT_EQ(answer->tasks[0].gpus, rt.gpus);
  EXPECT_EQ(driver_->status("team-1", "train")->tasks[0].state, "running");
}

// A restarted server keeps a Job's completions done: a task that had finished (exit 0) is not
// placed again, and shows as it ended; the one that ran goes on; the next runs after it.
TEST_F(AgentNodesTest, ARestartKeepsFinishedTasksDoneAndRunsOnlyWhatIsLeft) {
  SubmitCommand c = cmd("team-1", "serial", 3, 1);
  c.spec.parallelism = 1;
  c.spec.min_available = 1;
  c.command = {"true"};
  RestoredTask done;
  done.index = 0;
  done.finished = true;
  done.node = "a";
  done.gpus = {1};
  done.started_at = clock_.wallNow() - std::chrono::seconds(90);
  done.finished_at = clock_.wallNow() - std::chrono::seconds(60);
  done.exit_code = 0;
  RestoredTask running;
  running.index = 1;
  running.node = "a";
  running.gpus = {0};
  running.generation = (2U << 16) | 1U;
  running.starts = 1;
  running.started_at = clock_.wallNow() - std::chrono::seconds(50);
  running.confirmed = true;
  c.restore = {done, running};
  ASSERT_TRUE(driver_->submit(c).isOk());
  driver_->runOnce();
  auto status = driver_->status("team-1", "serial");
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(status->tasks[0].state, "finished");
  EXPECT_EQ(status->tasks[0].exit_code, 0);
  EXPECT_EQ(status->tasks[0].node, "a");
  EXPECT_EQ(status->tasks[0].finished_at, done.finished_at);
  EXPECT_EQ(status->tasks[1].state, "running");
  EXPECT_EQ(status->tasks[2].state, "pending");  // Its parallelism is 1: after task 1.
  auto answer = beat("a");
  ASSERT_TRUE(answer.isOk()) << answer.status().message();
  ASSERT_EQ(answer->tasks.size(), 1U);
  EXPECT_EQ(answer->tasks[0].index, 1);
  ASSERT_TRUE(beat("a", {report(answer->tasks[0], NodeTaskReport::State::kExited, 0)}).isOk());
  driver_->runOnce();
  answer = beat("a");
  ASSERT_EQ(answer->tasks.size(), 1U);
  EXPECT_EQ(answer->tasks[0].index, 2);  // Never task 0 again.
  ASSERT_TRUE(beat("a", {report(answer->tasks[0], NodeTaskReport::State::kExited, 0)}).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "serial")->phase, WorkloadPhase::kSucceeded);
}

// Stored before any agent hears of it: while the store refuses the status write, the start is
// in no node's list; the status is written again at the next pass, and then the agent hears.
TEST_F(AgentNodesTest, AStartReachesNoAgentUntilItsStatusIsStored) {
  ASSERT_TRUE(beat("a").isOk());
  ASSERT_TRUE(beat("b").isOk());
  driver_->runOnce();
  store_fails_ = true;
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 2)).isOk());
  driver_->runOnce();
  EXPECT_FALSE(stored_.contains("team-1/train"));
  EXPECT_TRUE(beat("a")->tasks.empty());
  EXPECT_TRUE(beat("b")->tasks.empty());
  driver_->runOnce();  // Still failing: still nobody hears.
  EXPECT_TRUE(beat("a")->tasks.empty() && beat("b")->tasks.empty());
  store_fails_ = false;
  driver_->runOnce();  // Nothing new happens in this pass; the unsaved status is written.
  EXPECT_EQ(stored_["team-1/train"], "running");
  EXPECT_EQ(beat("a")->tasks.size() + beat("b")->tasks.size(), 1U);
}

// The GPU map (the console's fleet page, the metrics): each GPU with the task on it, its share,
// and whether it is stopping; a GPU freed is empty again at the next pass.
TEST_F(AgentNodesTest, NodeStatesMapEachGpuToTheTasksOnIt) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  SubmitCommand half = cmd("team-1", "half", 1, 1);
  half.spec.request.gpu_milli = core::MilliGpu{500};
  half.spec.request.isolation = model::Isolation::kProcess;
  ASSERT_TRUE(driver_->submit(cmd("team-1", "whole", 1, 1)).isOk());
  ASSERT_TRUE(driver_->submit(half).isOk());
  driver_->runOnce();
  auto node = [&](const std::string& name) {
    for (const NodeState& n : driver_->nodeStates()) {
      if (n.name == name) {
        return n;
      }
    }
    return NodeState{};
  };
  NodeState a = node("a");
  ASSERT_EQ(a.gpus.size(), 2U);
  EXPECT_EQ(a.gpus[0].model, "H100-80GB");
  std::map<std::string, int64_t> milli;
  for (const GpuState& g : a.gpus) {
    for (const GpuUse& u : g.uses) {
      EXPECT_EQ(u.tenant, "team-1");
      milli[u.workload] += u.milli;
    }
  }
  EXPECT_EQ(milli, (std::map<std::string, int64_t>{{"half", 500}, {"whole", 1000}}));
  EXPECT_TRUE(node("b").gpus.size() == 2 && node("b").gpus[0].uses.empty());
  driver_->cancel("team-1", "whole");
  driver_->runOnce();
  for (const GpuState& g : node("a").gpus) {
    for (const GpuUse& u : g.uses) {
      EXPECT_EQ(u.terminating, u.workload == "whole") << u.workload;
    }
  }
}

TEST_F(AgentNodesTest, ALapsedLeaseMovesTasksToAnotherNodeAtAHigherGeneration) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 2)).isOk());
  driver_->runOnce();
  const NodeTask first = beat("a")->tasks.at(0);
  ASSERT_TRUE(beat("b").isOk());
  // "b" keeps beating, "a" goes silent past its lease.
  clock_.advance(std::chrono::seconds(10));
  ASSERT_TRUE(beat("b").isOk());
  driver_->runOnce();
  EXPECT_EQ(stateOf("a"), "ready");
  clock_.advance(std::chrono::seconds(6));
  ASSERT_TRUE(beat("b").isOk());
  driver_->runOnce();
  EXPECT_EQ(stateOf("a"), "lost");
  auto on_b = beat("b");
  ASSERT_EQ(on_b->tasks.size(), 1U);
  EXPECT_EQ(on_b->tasks[0].id, first.id);
  EXPECT_EQ(on_b->tasks[0].generation, first.generation + 1);
  EXPECT_EQ(driver_->status("team-1", "train")->tasks[0].node, "b");
  // "a" comes back: nothing of its old generation counts, and it gets nothing.
  auto back = beat("a", {report(first, NodeTaskReport::State::kExited, 1)});
  driver_->runOnce();
  EXPECT_TRUE(beat("a")->tasks.empty());
  EXPECT_EQ(stateOf("a"), "ready");
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kRunning);
}

// Issue 38: a gang that loses a task with its node starts over whole: its task on the node
// that lives is stopped, and every task is placed again at a new generation, none of them
// against the old rendezvous.
TEST_F(AgentNodesTest, AGangThatLosesANodeStartsOverWhole) {
  ASSERT_TRUE(beat("a").isOk());
  ASSERT_TRUE(beat("b").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "gang", 2, 2)).isOk());
  driver_->runOnce();
  const NodeTask on_b = beat("b")->tasks.at(0);
  ASSERT_EQ(beat("a")->tasks.size(), 1U);
  clock_.advance(std::chrono::seconds(10));
  ASSERT_TRUE(beat("b").isOk());
  driver_->runOnce();
  clock_.advance(std::chrono::seconds(6));
  ASSERT_TRUE(beat("b").isOk());
  driver_->runOnce();
  ASSERT_EQ(stateOf("a"), "lost");
  // b's task is taken off b's list (its agent stops it), and nothing starts meanwhile.
  EXPECT_TRUE(beat("b")->tasks.empty());
  EXPECT_EQ(driver_->status("team-1", "gang")->phase, WorkloadPhase::kPending);
  ASSERT_TRUE(beat("b", {report(on_b, NodeTaskReport::State::kExited, 143)}).isOk());
  ASSERT_TRUE(beat("a").isOk());  // Back: room for the whole gang again.
  driver_->runOnce();
  driver_->runOnce();
  std::vector<NodeTask> now = beat("a")->tasks;
  const std::vector<NodeTask> on_b_now = beat("b")->tasks;
  now.insert(now.end(), on_b_now.begin(), on_b_now.end());
  ASSERT_EQ(now.size(), 2U);
  for (const NodeTask& t : now) {
    if (t.id == on_b.id) {
      EXPECT_GT(t.generation, on_b.generation) << "placed anew, not kept";
    }
  }
  EXPECT_EQ(driver_->status("team-1", "gang")->phase, WorkloadPhase::kRunning);
  // A failure is not an interruption: no retries asked, so the workload fails (below).
}

// Issue 38: with mode "delay" a failing workload is never failed: once its attempts are used it
// is tried on, the delay doubling from 10 s; meanwhile it waits, saying when the next starts.
TEST_F(AgentNodesTest, ACrashLoopBacksOffAndIsNeverFailedInDelayMode) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  SubmitCommand c = cmd("team-1", "loop", 1, 1);
  c.restart.keep_trying = true;
  ASSERT_TRUE(driver_->submit(c).isOk());
  driver_->runOnce();
  for (const int64_t wait_s : {10, 20, 40}) {
    const NodeTask t = beat("a")->tasks.at(0);
    ASSERT_TRUE(beat("a", {report(t, NodeTaskReport::State::kExited, 2)}).isOk());
    driver_->runOnce();
    const WorkloadStatus s = *driver_->status("team-1", "loop");
    EXPECT_EQ(s.phase, WorkloadPhase::kPending);
    EXPECT_EQ(s.reason.rfind("restarting: attempt", 0), 0U) << s.reason;
    EXPECT_TRUE(beat("a")->tasks.empty()) << "started again before its delay";
    clock_.advance(std::chrono::seconds(wait_s - 1));
    driver_->runOnce();
    EXPECT_TRUE(beat("a")->tasks.empty()) << wait_s;
    clock_.advance(std::chrono::seconds(1));
    driver_->runOnce();
    driver_->runOnce();
    ASSERT_EQ(beat("a")->tasks.size(), 1U) << "not started again after " << wait_s << " s";
    EXPECT_GT(beat("a")->tasks.at(0).generation, t.generation);
  }
  EXPECT_EQ(driver_->status("team-1", "loop")->attempt, 4);
  EXPECT_EQ(driver_->status("team-1", "loop")->attempts.size(), 3U);
}

// With `maxDelay` the delay doubles after each failure up to it, as a Kubernetes Job's pods are
// recreated after 10 s, 20 s, 40 s... up to 6 minutes; the last failure fails the workload.
TEST_F(AgentNodesTest, RetriesBackOffDoublingUpToTheMaximumDelay) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  SubmitCommand c = cmd("team-1", "job", 1, 1);
  c.restart.attempts = 3;
  c.restart.delay = std::chrono::seconds(10);
  c.restart.max_delay = std::chrono::seconds(25);
  ASSERT_TRUE(driver_->submit(c).isOk());
  driver_->runOnce();
  for (const int64_t wait_s : {10, 20, 25}) {
    const NodeTask t = beat("a")->tasks.at(0);
    ASSERT_TRUE(beat("a", {report(t, NodeTaskReport::State::kExited, 1)}).isOk());
    driver_->runOnce();
    clock_.advance(std::chrono::seconds(wait_s - 1));
    driver_->runOnce();
    EXPECT_TRUE(beat("a")->tasks.empty()) << "started again before its " << wait_s << " s";
    clock_.advance(std::chrono::seconds(1));
    driver_->runOnce();
    driver_->runOnce();
    ASSERT_EQ(beat("a")->tasks.size(), 1U) << "not started again after " << wait_s << " s";
  }
  const NodeTask last = beat("a")->tasks.at(0);
  ASSERT_TRUE(beat("a", {report(last, NodeTaskReport::State::kExited, 1)}).isOk());
  driver_->runOnce();
  const WorkloadStatus s = *driver_->status("team-1", "job");
  EXPECT_EQ(s.phase, WorkloadPhase::kFailed);
  EXPECT_NE(s.reason.find("after 4 attempts"), std::string::npos) << s.reason;
}

// Tasks that run one at a time (parallelism 1 of 3, a serial Kubernetes Job) are retried one by
// one: the others go on while the failed one waits its delay, then it alone runs again, and
// what succeeded stays done; no rendezvous is given. Each failure uses one of its attempts.
TEST_F(AgentNodesTest, TasksThatRunOneAtATimeAreRetriedAloneUntilTheirAttemptsAreUsed) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  SubmitCommand c = cmd("team-1", "serial", 3, 1);
  c.spec.min_available = 1;
  c.spec.parallelism = 1;
  c.restart.attempts = 2;
  c.restart.delay = std::chrono::seconds(5);
  ASSERT_TRUE(driver_->submit(c).isOk());
  driver_->runOnce();
  const NodeTask first = beat("a")->tasks.at(0);
  EXPECT_EQ(first.index, 0);
  EXPECT_EQ(first.task_count, 1);  // Not run together: no rendezvous.
  EXPECT_FALSE(first.ports.contains("master"));
  ASSERT_TRUE(beat("a", {report(first, NodeTaskReport::State::kExited, 0)}).isOk());
  driver_->runOnce();
  const NodeTask second = beat("a")->tasks.at(0);
  EXPECT_EQ(second.index, 1);
  ASSERT_TRUE(beat("a", {report(second, NodeTaskReport::State::kExited, 3)}).isOk());
  driver_->runOnce();
  WorkloadStatus s = *driver_->status("team-1", "serial");
  EXPECT_EQ(s.reason.rfind("restarting: attempt 2", 0), 0U) << s.reason;
  const NodeTask third = beat("a")->tasks.at(0);
  EXPECT_EQ(third.index, 2) << "the next goes on while the failed one waits";
  clock_.advance(std::chrono::seconds(5));
  driver_->runOnce();
  driver_->runOnce();
  ASSERT_EQ(beat("a")->tasks.size(), 1U) << "one at a time, the retry included";
  ASSERT_TRUE(beat("a", {report(third, NodeTaskReport::State::kExited, 0)}).isOk());
  driver_->runOnce();
  const NodeTask again = beat("a")->tasks.at(0);
  EXPECT_EQ(again.index, 1) << "the failed task alone";
  EXPECT_GT(again.generation, second.generation);
  s = *driver_->status("team-1", "serial");
  EXPECT_EQ(s.tasks.at(0).state, "finished") << "what succeeded stays done";
  EXPECT_EQ(s.tasks.at(2).state, "finished");
  EXPECT_EQ(s.attempt, 2);
  // It fails again, and again after its delay: its attempts are used, so it fails.
  ASSERT_TRUE(beat("a", {report(again, NodeTaskReport::State::kExited, 1)}).isOk());
  driver_->runOnce();
  clock_.advance(std::chrono::seconds(5));
  driver_->runOnce();
  driver_->runOnce();
  const NodeTask last = beat("a")->tasks.at(0);
  EXPECT_EQ(last.index, 1);
  ASSERT_TRUE(beat("a", {report(last, NodeTaskReport::State::kExited, 1)}).isOk());
  driver_->runOnce();
  s = *driver_->status("team-1", "serial");
  EXPECT_EQ(s.phase, WorkloadPhase::kFailed);
  EXPECT_NE(s.reason.find("after 3 attempts"), std::string::npos) << s.reason;
}

TEST_F(AgentNodesTest, AFailedTaskFailsItsWorkloadAndStopsTheOthers) {
  ASSERT_TRUE(beat("a").isOk());
  ASSERT_TRUE(beat("b").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 2, 2)).isOk());
  driver_->runOnce();
  const NodeTask on_a = beat("a")->tasks.at(0);
  ASSERT_EQ(beat("b")->tasks.size(), 1U);
  NodeTaskReport oom = report(on_a, NodeTaskReport::State::kExited);
  oom.signal = 9;
  oom.oom_killed = true;
  ASSERT_TRUE(beat("a", {oom}).isOk());
  driver_->runOnce();
  const WorkloadStatus s = *driver_->status("team-1", "train");
  EXPECT_EQ(s.phase, WorkloadPhase::kFailed);
  EXPECT_NE(s.reason.find("killed by signal 9"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("out of memory"), std::string::npos) << s.reason;
  EXPECT_TRUE(beat("b")->tasks.empty());  // Its other task is no longer wanted.
}

// Issue #38: each task of a workload of several is told where its peers are (the nodes'
// addresses, task 0's "master" port); ports are allocated per node, never two tasks the same
// one on a node, and a task placed again gets new ones.
TEST_F(AgentNodesTest, TasksOfSeveralGetTheirRendezvousAndPortsNeverCollide) {
  ASSERT_TRUE(driver_->heartbeat("a", {"H100-80GB", "H100-80GB"}, {}, {}, "10.0.0.1").isOk());
  ASSERT_TRUE(driver_->heartbeat("b", {"H100-80GB", "H100-80GB"}, {}, {}, "10.0.0.2").isOk());
  driver_->runOnce();
  SubmitCommand gang = cmd("team-1", "train", 2, 2);  // One task per node.
  ASSERT_TRUE(driver_->submit(gang).isOk());
  driver_->runOnce();
  const NodeTask on_a = beat("a")->tasks.at(0);
  const NodeTask on_b = beat("b")->tasks.at(0);
  const NodeTask& zero = on_a.index == 0 ? on_a : on_b;
  const NodeTask& one = on_a.index == 0 ? on_b : on_a;
  EXPECT_EQ(zero.task_count, 2);
  const std::vector<std::string> hosts = {zero.id == on_a.id ? "10.0.0.1" : "10.0.0.2",
                                          one.id == on_a.id ? "10.0.0.1" : "10.0.0.2"};
  EXPECT_EQ(zero.hosts, hosts);
  EXPECT_EQ(one.hosts, hosts);
  ASSERT_TRUE(zero.ports.contains("master"));
  EXPECT_GE(zero.ports.at("master"), 20000);
  EXPECT_LE(zero.ports.at("master"), 32000);
  EXPECT_EQ(zero.master_port, zero.ports.at("master"));
  EXPECT_EQ(one.master_port, zero.ports.at("master"));  // Task 0's, on task 0's node.
  EXPECT_EQ(driver_->status("team-1", "train")->tasks[0].ports, zero.ports);  // Kept.
  // A CPU-only workload asking for two ports goes beside the gang's task on one node: its ports
  // are other than that task's.
  SubmitCommand web = cmd("team-1", "web", 1, 0);
  web.spec.request.cpu = core::MilliCpu{1500};  // More than "sim" has: on "a" or "b".
  web.spec.request.gpu_milli = core::MilliGpu{0};
  web.ports = {"http", "metrics"};
  ASSERT_TRUE(driver_->submit(web).isOk()) << driver_->submit(web).message();
  driver_->runOnce();
  const WorkloadStatus ws = *driver_->status("team-1", "web");
  ASSERT_EQ(ws.tasks.size(), 1U);
  const NodeTask& beside = ws.tasks[0].node == "a" ? on_a : on_b;
  EXPECT_EQ(ws.tasks[0].ports.size(), 2U);
  std::set<int> ports;
  for (const auto& [name, port] : ws.tasks[0].ports) {
    ports.insert(port);
  }
  for (const auto& [name, port] : beside.ports) {
    EXPECT_FALSE(ports.contains(port)) << name << " " << port;
  }
  EXPECT_EQ(ports.size(), 2U);
  // Task 1 stopped by its agent (fenced): the gang starts over (its other task is stopped
  // first), and task 1 is placed again with new ports.
  const std::string one_node = one.id == on_a.id ? "a" : "b";
  const std::string other_node = one_node == "a" ? "b" : "a";
  NodeTaskReport fenced = report(one, NodeTaskReport::State::kExited);
  fenced.signal = 15;
  fenced.stopped = true;
  ASSERT_TRUE(beat(one_node, {fenced}).isOk());
  driver_->runOnce();
  const NodeTask other = one.id == on_a.id ? on_b : on_a;
  const std::vector<NodeTask> still = beat(other_node)->tasks;
  for (const NodeTask& t : still) {
    EXPECT_NE(t.id, other.id) << "its peer was not stopped";
  }
  ASSERT_TRUE(beat(other_node, {report(other, NodeTaskReport::State::kExited, 143)}).isOk());
  driver_->runOnce();
  driver_->runOnce();
  std::optional<NodeTask> again;
  for (const char* node : {"a", "b"}) {
    const auto answer = beat(node);
    ASSERT_TRUE(answer.isOk());
    for (const NodeTask& t : answer->tasks) {
      if (t.id == one.id) {
        again = t;
      }
    }
  }
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->generation, one.generation + 1);
  EXPECT_NE(again->ports.at("master"), one.ports.at("master"));
}

TEST_F(AgentNodesTest, ATaskThatCannotStartFailsWithTheAgentsReason) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1)).isOk());
  driver_->runOnce();
  NodeTaskReport r = report(beat("a")->tasks.at(0), NodeTaskReport::State::kFailedToStart);
  r.error = "no such program 'trian.py'";
  ASSERT_TRUE(beat("a", {r}).isOk());
  driver_->runOnce();
  const WorkloadStatus s = *driver_->status("team-1", "train");
  EXPECT_EQ(s.phase, WorkloadPhase::kFailed);
  EXPECT_NE(s.reason.find("trian.py"), std::string::npos);
  // Its task ended without running: a failure with no exit code, not a task that succeeded.
  ASSERT_EQ(s.tasks.size(), 1U);
  EXPECT_EQ(s.tasks[0].state, "finished");
  EXPECT_TRUE(s.tasks[0].start_failed);
  EXPECT_EQ(s.tasks[0].exit_code, -1);
  EXPECT_EQ(s.tasks[0].finished_at, clock_.wallNow());
  // Stored and read back so (what a restarted server and the Kubernetes API see).
  auto back = statusFromJson(statusJson(s), "status");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_TRUE(back->tasks[0].start_failed);
}

TEST_F(AgentNodesTest, AnAgentStoppedTaskIsPlacedAgain) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1)).isOk());
  driver_->runOnce();
  const NodeTask t = beat("a")->tasks.at(0);
  NodeTaskReport fenced = report(t, NodeTaskReport::State::kExited);
  fenced.signal = 15;
  fenced.stopped = true;
  ASSERT_TRUE(beat("a", {fenced}).isOk());
  driver_->runOnce();
  auto again = beat("a");
  ASSERT_EQ(again->tasks.size(), 1U);
  EXPECT_EQ(again->tasks[0].generation, t.generation + 1);
  EXPECT_EQ(driver_->status("team-1", "train")->phase, WorkloadPhase::kRunning);
}

// A cancelled task leaves its node's list at once, but its GPUs stay its own until its agent
// reports the process gone: nothing else is placed on a GPU a dying process still uses.
TEST_F(AgentNodesTest, CancellingTakesTheTaskOffItsNodeAndFreesItsGpusWhenItHasStopped) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 2)).isOk());
  driver_->runOnce();
  const std::vector<NodeTask> listed = beat("a")->tasks;
  ASSERT_EQ(listed.size(), 1U);
  ASSERT_TRUE(beat("a", {report(listed[0], NodeTaskReport::State::kRunning)}).isOk());
  driver_->runOnce();
  driver_->cancel("team-1", "train");
  driver_->runOnce();
  EXPECT_TRUE(beat("a")->tasks.empty());
  WorkloadStatus s = *driver_->status("team-1", "train");
  EXPECT_EQ(s.phase, WorkloadPhase::kCancelled);
  EXPECT_EQ(s.tasks[0].state, "terminating");
  EXPECT_EQ(s.tasks[0].node, "a");
  EXPECT_NE(s.reason.find("stopping"), std::string::npos) << s.reason;
  // Another workload for those GPUs waits for the process to stop (grace period, SIGKILL).
  ASSERT_TRUE(driver_->submit(cmd("team-1", "next", 1, 2)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "next")->phase, WorkloadPhase::kPending);
  EXPECT_TRUE(beat("a")->tasks.empty());
  NodeTaskReport gone = report(listed[0], NodeTaskReport::State::kExited, 143);
  gone.stopped = true;
  ASSERT_TRUE(beat("a", {gone}).isOk());
  driver_->runOnce();
  s = *driver_->status("team-1", "train");
  EXPECT_EQ(s.phase, WorkloadPhase::kCancelled);
  EXPECT_EQ(s.tasks[0].state, "finished");  // Not pending again: nothing is left to run.
  EXPECT_EQ(driver_->status("team-1", "next")->phase, WorkloadPhase::kRunning);
}

// A cancelled task its agent never started frees its GPUs at the next heartbeat.
TEST_F(AgentNodesTest, ACancelledTaskItsAgentNeverStartedFreesItsGpusAtTheNextHeartbeat) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 2)).isOk());
  driver_->runOnce();
  ASSERT_EQ(beat("a")->tasks.size(), 1U);  // Listed; the agent never says it started it.
  driver_->cancel("team-1", "train");
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->tasks[0].state, "terminating");
  ASSERT_TRUE(beat("a").isOk());  // Answers the list without it.
  ASSERT_TRUE(beat("a").isOk());  // Says nothing of it: it never ran.
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->tasks[0].state, "finished");
}

// A task evicted before its agent started it holds its GPUs only until a heartbeat proves the
// agent is not running it; one the agent said it started holds them until it reports the exit.
TEST_F(AgentNodesTest, AnEvictedTaskTheAgentNeverStartedFreesItsGpus) {
  ASSERT_TRUE(driver_->updateTenantQueue("team-1", 0, sched::kNoGpuLimit, 1, 100)
                  .isOk());  // Borrows all it has.
  ASSERT_TRUE(driver_->addTenantQueue("team-2", 4000, sched::kNoGpuLimit, 1, 100).isOk());
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  // team-1 borrows both GPUs of "a" (the only node up): two elastic tasks.
  SubmitCommand wide = cmd("team-1", "wide", 2, 1);
  wide.spec.min_available = 1;
  ASSERT_TRUE(driver_->submit(wide).isOk());
  driver_->runOnce();
  ASSERT_EQ(driver_->status("team-1", "wide")->phase, WorkloadPhase::kRunning);
  // The agent is told, and says it started one of them only (its answer to the other is lost,
  // say, or it is still starting).
  const std::vector<NodeTask> listed = beat("a")->tasks;
  ASSERT_EQ(listed.size(), 2U);
  ASSERT_TRUE(beat("a", {report(listed[0], NodeTaskReport::State::kRunning)}).isOk());
  driver_->runOnce();
  // team-2 reclaims both GPUs: both tasks are evicted. (It asks for more than "a" has, or the
  // simulated node's GPUs, which its tasks cannot use, would count as team-1's fair share.)
  ASSERT_TRUE(driver_->submit(cmd("team-2", "big", 1, 2)).isOk());
  ASSERT_TRUE(driver_->submit(cmd("team-2", "more", 1, 2)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-2", "big")->reason.rfind("waiting-for-evictions", 0), 0U)
      << driver_->status("team-2", "big")->reason;
  // The next heartbeat reports nothing more: the unstarted task's GPU is free, the started one
  // is not, and the gang of two waits for it.
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  WorkloadStatus wide_now = *driver_->status("team-1", "wide");
  EXPECT_EQ(wide_now.tasks[1].state, "pending");
  EXPECT_EQ(wide_now.tasks[0].state, "terminating");
  EXPECT_EQ(wide_now.tasks[0].node, "a");
  EXPECT_EQ(driver_->status("team-2", "big")->phase, WorkloadPhase::kPending);
  // Its exit frees the other; the reclaimer starts.
  ASSERT_TRUE(beat("a", {report(listed[0], NodeTaskReport::State::kExited, 143)}).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-2", "big")->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(driver_->status("team-1", "wide")->tasks[0].state, "pending");
}

// A task placed and evicted before any heartbeat listed it is free at the next heartbeat.
TEST_F(AgentNodesTest, ATaskEvictedBeforeItsAgentHeardOfItFreesItsGpusAtTheNextHeartbeat) {
  ASSERT_TRUE(driver_->updateTenantQueue("team-1", 0, sched::kNoGpuLimit, 1, 100).isOk());
  ASSERT_TRUE(driver_->addTenantQueue("team-2", 4000, sched::kNoGpuLimit, 1, 100).isOk());
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-1", "early", 1, 2)).isOk());
  driver_->runOnce();
  ASSERT_TRUE(driver_->submit(cmd("team-2", "big", 1, 2)).isOk());
  ASSERT_TRUE(driver_->submit(cmd("team-2", "more", 1, 2)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "early")->tasks[0].state, "terminating");
  driver_->runOnce();  // Without a heartbeat, nothing proves it is not running.
  EXPECT_EQ(driver_->status("team-1", "early")->tasks[0].state, "terminating");
  auto answer = beat("a");
  ASSERT_TRUE(answer.isOk());
  EXPECT_TRUE(answer->tasks.empty());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-2", "big")->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(driver_->status("team-1", "early")->phase, WorkloadPhase::kPending);
  EXPECT_FALSE(driver_->status("team-1", "early")->reason.empty());
}

// A waiting workload's reason follows what keeps it waiting, even when nothing happens to the
// workload itself: refused while node "a" is full, it is refused later because the half GPU
// that frees up is beside another tenant's task.
TEST_F(AgentNodesTest, AWaitingWorkloadsReasonIsRefreshedWhenItChanges) {
  std::vector<std::map<std::string, WorkloadStatus>> told;
  {
    auto d = oneAgentNodeDriver([&](const std::map<std::string, WorkloadStatus>& changed) {
      told.push_back(changed);
      return core::Status::ok();
    });
    ASSERT_TRUE(d.isOk()) << d.status().message();
    driver_ = std::move(d).value();
    ASSERT_TRUE(driver_->addTenantQueue("team-1", 2000, sched::kNoGpuLimit, 1, 100).isOk());
    ASSERT_TRUE(driver_->addTenantQueue("team-2", 2000, sched::kNoGpuLimit, 1, 100).isOk());
  }
  auto half = [&](const std::string& tenant, const std::string& name) {
    SubmitCommand c = cmd(tenant, name, 1, 1);
    c.spec.request.gpu_milli = core::MilliGpu{500};
    c.spec.request.isolation = model::Isolation::kProcess;
    return driver_->submit(c);
  };
  ASSERT_TRUE(beat("a").isOk());
  for (const char* name : {"h0", "h1", "h2", "h3"}) {
    const core::Status st = half("team-1", name);
    ASSERT_TRUE(st.isOk()) << st.message();
  }
  driver_->runOnce();
  ASSERT_TRUE(half("team-2", "late").isOk());
  driver_->runOnce();
  const std::string before = driver_->status("team-2", "late")->reason;
  EXPECT_EQ(before.find("untrusted"), std::string::npos) << before;  // No room at all.
  // One of team-1's halves ends: its GPU has half free, beside team-1's other half.
  const std::vector<NodeTask> tasks = beat("a")->tasks;
  ASSERT_EQ(tasks.size(), 4U);
  ASSERT_TRUE(beat("a", {report(tasks[0], NodeTaskReport::State::kExited, 0)}).isOk());
  driver_->runOnce();
  driver_->runOnce();
  told.clear();
  driver_->runOnce();  // Nothing new: not told again.
  const WorkloadStatus now = *driver_->status("team-2", "late");
  EXPECT_EQ(now.phase, WorkloadPhase::kPending);
  EXPECT_NE(now.reason.find("untrusted"), std::string::npos) << now.reason;
  for (const auto& changed : told) {
    EXPECT_FALSE(changed.contains("team-2/late")) << now.reason;
  }
}

// A node's task-list version from one leader is never another's: an agent whose watch sends
// the version an earlier leader gave it is answered at once by a new leader (issue 42: a watch
// that waited on a list that had changed held a task's start for a renewal).
TEST_F(AgentNodesTest, TaskListVersionsOfTwoLeadersDiffer) {
  auto next = oneAgentNodeDriver({});
  ASSERT_TRUE(next.isOk()) << next.status().message();
  const uint64_t old_version = *driver_->watchNode("a", 0, {});
  const uint64_t new_version = *(*next)->watchNode("a", 0, {});
  EXPECT_NE(old_version, new_version);
  EXPECT_EQ(*(*next)->watchNode("a", old_version, std::chrono::seconds(10)), new_version);
}

TEST_F(AgentNodesTest, RefusesUnknownNodesSimulatedNodesAndOtherHardware) {
  EXPECT_EQ(beat("nope").status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(driver_->heartbeat("sim", {"T4", "T4"}, {}).status().code(),
            core::StatusCode::kFailedPrecondition);
  auto other = driver_->heartbeat("a", {"L40S"}, {});
  EXPECT_EQ(other.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("2 x H100-80GB"), std::string::npos)
      << other.status().message();
  EXPECT_NE(other.status().message().find("1 x L40S"), std::string::npos);
  EXPECT_EQ(stateOf("a"), "waiting");  // A refused heartbeat registers nothing.
}

TEST_F(AgentNodesTest, AWatchWaitsForItsNodesTasksToChange) {
  ASSERT_TRUE(beat("a").isOk());
  driver_->runOnce();
  const uint64_t version = beat("a")->version;
  EXPECT_EQ(*driver_->watchNode("a", version + 7, std::chrono::seconds(10)), version);  // At once.
  EXPECT_EQ(driver_->watchNode("sim", 0, {}).status().code(), core::StatusCode::kNotFound);
  std::optional<uint64_t> got;
  std::thread waiter([&] {
    auto v = driver_->watchNode("a", version, std::chrono::seconds(10));
    if (v.isOk()) {
      got = *v;
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1)).isOk());
  driver_->runOnce();
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(got.has_value());
  EXPECT_GT(*got, version);
  EXPECT_EQ(beat("a")->tasks.size(), 1U);
}

}  // namespace
}  // namespace tessera::server
