#include "server/driver.h"

#include <gtest/gtest.h>

#include "model/node_profiles.h"

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
                                         seen_[k] = v.phase;
                                       }
                                     });
    ASSERT_TRUE(d.isOk()) << d.status().message();
    driver_ = std::move(d).value();
    ASSERT_TRUE(driver_->addTenantQueue("team-1", 8000, 0, 1, 100).isOk());
    ASSERT_TRUE(driver_->addTenantQueue("team-2", 8000, 0, 1, 100).isOk());
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
};

TEST_F(DriverTest, SchedulesTenantsWorkAndReportsChanges) {
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 2, 4, std::chrono::seconds(60))).isOk());
  ASSERT_TRUE(driver_->submit(cmd("team-2", "eval", 1, 8)).isOk());
  EXPECT_EQ(driver_->status("team-1", "train")->phase, "pending");
  driver_->runOnce();
  auto s = driver_->status("team-1", "train");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->phase, "running");
  ASSERT_EQ(s->tasks.size(), 2U);
  EXPECT_EQ(s->tasks[0].gpus.size(), 4U);
  EXPECT_FALSE(s->tasks[0].node.empty());
  EXPECT_EQ(driver_->status("team-2", "eval")->phase, "running");
  EXPECT_EQ(seen_["team-1/train"], "running");
  // The simulated run ends after its duration.
  clock_.advance(std::chrono::seconds(61));
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, "succeeded");
  EXPECT_EQ(seen_["team-1/train"], "succeeded");
  driver_->cancel("team-2", "eval");
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-2", "eval")->phase, "cancelled");
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

TEST_F(DriverTest, AForgottenTenantsNamesCanBeUsedAgain) {
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1, std::chrono::seconds(10))).isOk());
  driver_->runOnce();
  clock_.advance(std::chrono::seconds(11));
  driver_->runOnce();
  ASSERT_EQ(driver_->status("team-1", "train")->phase, "succeeded");
  // Without forgetting, the same name is taken for a replay and ignored.
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, "succeeded");
  driver_->forgetTenant("team-1");
  EXPECT_FALSE(driver_->status("team-1", "train").has_value());
  ASSERT_TRUE(driver_->submit(cmd("team-1", "train", 1, 1)).isOk());
  driver_->runOnce();
  EXPECT_EQ(driver_->status("team-1", "train")->phase, "running");
}

TEST_F(DriverTest, RunsPassesOnItsOwnThread) {
  core::RealClock real;
  std::vector<model::Node> nodes = {*model::makeProfileNode("dgx-h100", "n0", cat_, 0)};
  auto d = SchedulerDriver::create(
      cat_, std::move(nodes), real,
      {.policy = "tessera", .pass_interval = std::chrono::milliseconds(10)}, {});
  ASSERT_TRUE(d.isOk());
  ASSERT_TRUE((*d)->addTenantQueue("t", 8000, 0, 1, 100).isOk());
  (*d)->start();
  ASSERT_TRUE((*d)->submit(cmd("t", "w", 1, 1)).isOk());
  for (int i = 0; i < 500 && (*d)->status("t", "w")->phase != "running"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ((*d)->status("t", "w")->phase, "running");
  (*d)->stop();
}

}  // namespace
}  // namespace tessera::server
