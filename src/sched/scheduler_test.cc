#include "sched/scheduler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "sched/test_util.h"

namespace tessera::sched {
namespace {

using std::chrono::seconds;

class SchedulerTest : public ::testing::Test {
 protected:
  // Builds a scheduler over `nodes` 8-GPU H100 nodes and queues a (quota qa GPUs) and
  // b (quota qb GPUs) under one organisation.
  void build(int nodes, int64_t qa, int64_t qb, SchedulerOptions options = {}, int64_t limit_a = -1,
             int64_t max_unsaved_a_s = -1) {
    ResourceSpace space = ResourceSpace::withModels(cat_, {});
    auto gpus = [&](int64_t n) {
      Amounts a = space.zeros();
      a[kGpuDim] = n * 1000;
      return a;
    };
    QueueSpec a{"a", "org", gpus(qa), {}, 1, 100, max_unsaved_a_s};
    if (limit_a >= 0) {
      a.limit = space.unlimited();
      a.limit[kGpuDim] = limit_a * 1000;
    }
    auto tree = QueueTree::create(
        space, {{"org", "", {}, {}, 1, 100}, a, {"b", "org", gpus(qb), {}, 1, 100}});
    ASSERT_TRUE(tree.isOk()) << tree.status().message();
    std::vector<model::Node> ns;
    for (int i = 0; i < nodes; ++i) {
      ns.push_back(testing::node(cat_, "n" + std::to_string(i), 224, 2048, "H100-80GB", 8));
      ns.back().nvlink_domain = i / 2;
    }
    options.policy = options.policy.empty() ? "bestfit" : options.policy;
    auto s = Scheduler::create(cat_, std::move(ns), std::move(tree).value(), {}, options, clock_);
    ASSERT_TRUE(s.isOk()) << s.status().message();
    s_ = std::move(s).value();
  }

  WorkloadId submit(const std::string& name, const std::string& queue, int tasks, int min,
                    int gpus_per_task, int32_t priority = 0, bool preemptible = true,
                    core::Duration max_runtime = core::Duration{0}) {
    WorkloadSpec w;
    w.name = name;
    w.queue = *s_->queues().find(queue);
    w.tasks = tasks;
    w.min_available = min;
    w.request = testing::gpuTask(4000, gpus_per_task);
    w.priority = priority;
    w.preemptible = preemptible;
    w.max_runtime = max_runtime;
    auto id = s_->submit(w);
    EXPECT_TRUE(id.isOk()) << id.status().message();
    return id.value();
  }

  // A workload of `tasks` tasks of `request`, all of them one gang when `min` == `tasks`.
  std::pair<WorkloadId, WorkloadId> halfBesidePinned();
  WorkloadId submitRequest(const std::string& name, const std::string& queue, int tasks, int min,
                           model::TaskRequest request, bool preemptible = true,
                           core::Duration checkpoint_every = core::Duration{0}) {
    WorkloadSpec w;
    w.name = name;
    w.queue = *s_->queues().find(queue);
    w.tasks = tasks;
    w.min_available = min;
    w.request = std::move(request);
    w.preemptible = preemptible;
    w.checkpoint_every = checkpoint_every;
    auto id = s_->submit(w);
    EXPECT_TRUE(id.isOk()) << id.status().message();
    return id.value();
  }
  // The nodes of the running (or terminating) tasks of `w`.
  std::set<NodeIndex> nodesOf(WorkloadId w) const {
    std::set<NodeIndex> out;
    for (TaskId t : s_->workload(w).tasks) {
      if (s_->task(t).state == TaskState::kRunning ||
          s_->task(t).state == TaskState::kTerminating) {
        out.insert(s_->task(t).assignment.placement.node);
      }
    }
    return out;
  }

  int running(WorkloadId w) const { return s_->workload(w).running; }
  int64_t allocatedGpus(const std::string& q) const {
    return s_->queues().queue(*s_->queues().find(q)).allocated[kGpuDim] / 1000;
  }
  // Stops every evicted task, as the driver does after their grace period.
  void stopEvicted(const PassResult& r) {
    for (const EvictDecision& e : r.evicted) {
      s_->taskStopped(e.task);
    }
  }

  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  core::FakeClock clock_;
  std::unique_ptr<Scheduler> s_;
};

// A softly shared GPU hosts one tenant, or tenants of one trust group; a change of group takes
// effect at once for new work and moves nothing that already shares a GPU.
TEST_F(SchedulerTest, TrustGroupsDecideWhoSharesAGpuAndMayChangeWhileWorkRuns) {
  build(1, 4, 4);
  auto half = [&](const std::string& name, const std::string& queue, uint32_t tenant) {
    WorkloadSpec w;
    w.name = name;
    w.queue = *s_->queues().find(queue);
    w.request = testing::gpuTask(1000, 1, 500);
    w.request.tenant = model::TenantId{tenant};
    auto id = s_->submit(w);
    EXPECT_TRUE(id.isOk()) << id.status().message();
    return id.value();
  };
  auto gpuOf = [&](WorkloadId w) {
    return s_->task(s_->workload(w).tasks[0]).assignment.placement.gpus;
  };
  // Eight GPUs, one node: 1 and 2 (no group) never share one.
  std::vector<WorkloadId> ones;
  std::vector<WorkloadId> twos;
  for (int i = 0; i < 8; ++i) {
    ones.push_back(half("one-" + std::to_string(i), "a", 1));
    twos.push_back(half("two-" + std::to_string(i), "b", 2));
  }
  s_->schedule();
  std::map<uint64_t, std::set<uint32_t>> tenants_on;
  for (int i = 0; i < 8; ++i) {
    tenants_on[gpuOf(ones[i])].insert(1);
    tenants_on[gpuOf(twos[i])].insert(2);
  }
  EXPECT_EQ(tenants_on.size(), 8U);  // Four GPUs each, two halves per GPU.
  for (const auto& [gpu, tenants] : tenants_on) {
    EXPECT_EQ(tenants.size(), 1U) << "GPU mask " << gpu;
  }
  // 1 and 3 in one group: once one of 1's halves ends, 3 may take its place beside 1's other.
  s_->setTrustGroup(model::TenantId{1}, 7);
  s_->setTrustGroup(model::TenantId{3}, 7);
  const uint64_t freed = gpuOf(ones[0]);
  s_->taskFinished(s_->workload(ones[0]).tasks[0]);
  WorkloadId three = half("three", "a", 3);
  WorkloadId two_more = half("two-more", "b", 2);
  s_->schedule();
  ASSERT_EQ(running(three), 1);
  EXPECT_EQ(gpuOf(three), freed);
  EXPECT_EQ(running(two_more), 0);  // 2 is in no group, and no GPU is free of others.
  // 3 leaves the group while it shares a GPU with 1: it keeps running, but when 1's task there
  // ends, 1's next one may not take its place beside 3.
  s_->setTrustGroup(model::TenantId{3}, 0);
  EXPECT_EQ(running(three), 1);
  for (size_t i = 1; i < ones.size(); ++i) {
    if (gpuOf(ones[i]) == freed) {
      s_->taskFinished(s_->workload(ones[i]).tasks[0]);
    }
  }
  WorkloadId one_more = half("one-more", "a", 1);
  s_->schedule();
  EXPECT_EQ(running(one_more), 0);
  EXPECT_NE(s_->explain(one_more).message.find("untrusted"), std::string::npos)
      << s_->explain(one_more).message;
  // 2's waiting workload was refused while every GPU was full; now that half a GPU is free
  // beside 3, it waits on the trust rule, and says so (not the stale "no free share").
  EXPECT_EQ(running(two_more), 0);
  EXPECT_NE(s_->explain(two_more).message.find("untrusted"), std::string::npos)
      << s_->explain(two_more).message;
}

// A workload refused for want of room, when the room that frees up is beside an untrusted
// tenant, says so: its reason does not stay the one of its first try.
TEST_F(SchedulerTest, AWaitingWorkloadsReasonFollowsWhatNowKeepsItOut) {
  SchedulerOptions o;
  o.min_runtime = std::chrono::hours(1);  // Nothing is reclaimed: the reason is the point.
  build(1, 4, 4, o);
  auto half = [&](const std::string& name, uint32_t tenant) {
    WorkloadSpec w;
    w.name = name;
    w.queue = *s_->queues().find(tenant == 1 ? "a" : "b");
    w.request = testing::gpuTask(1000, 1, 500);
    w.request.tenant = model::TenantId{tenant};
    return s_->submit(w).value();
  };
  std::vector<WorkloadId> ones;
  for (int i = 0; i < 16; ++i) {
    ones.push_back(half("one-" + std::to_string(i), 1));
  }
  s_->schedule();
  const WorkloadId two = half("two", 2);
  s_->schedule();
  ASSERT_EQ(running(two), 0);
  EXPECT_EQ(s_->explain(two).message.find("untrusted"), std::string::npos);  // No room at all.
  s_->taskFinished(s_->workload(ones[0]).tasks[0]);
  s_->schedule();
  EXPECT_EQ(running(two), 0);  // Half a GPU is free, beside tenant 1's other half.
  EXPECT_NE(s_->explain(two).message.find("untrusted"), std::string::npos)
      << s_->explain(two).message;
}

// CPU held for free GPUs: a task with no GPU waits, saying why, and a GPU task that starts
// frees held CPU, which the waiting task gets without anything being released.
TEST_F(SchedulerTest, CpuHeldForFreeGpusGoesToCpuOnlyWorkOnceGpusAreTaken) {
  SchedulerOptions o;
  o.cpu_per_free_gpu_milli = 27000;  // 216 of the node's 224 cores while its 8 GPUs are free.
  build(1, 8, 8, o);
  const WorkloadId etl = submitRequest("etl", "a", 1, 1, testing::cpuTask(20000));
  s_->schedule();
  ASSERT_EQ(running(etl), 0);
  EXPECT_NE(s_->explain(etl).message.find("CPU held for the node's free GPUs"), std::string::npos)
      << s_->explain(etl).message;
  const WorkloadId train = submit("train", "b", 1, 1, 1);  // 4 cores, 1 GPU: 189 cores held.
  s_->schedule();
  s_->schedule();
  EXPECT_EQ(running(train), 1);
  EXPECT_EQ(running(etl), 1);
}

// Issue #20: a reservation is for work that waits for room. Held by a workload that now fails
// on its queue's limit, it would close the queue to its mates for ever, even on an empty node.
TEST_F(SchedulerTest, AReservationEndsWhenItsWorkloadWaitsOnItsQueuesLimitNotOnRoom) {
  build(1, 8, 0);
  const WorkloadId hold = submit("hold", "a", 1, 1, 4);
  s_->schedule();
  ASSERT_EQ(running(hold), 1);
  const WorkloadId big = submit("big", "a", 1, 1, 8);
  s_->schedule();
  ASSERT_EQ(running(big), 0);  // Waits for room: the node is reserved for it.
  // The queue's limit falls below what it asks; then the node empties.
  const QueueId a = *s_->queues().find("a");
  Amounts quota = s_->queues().space().zeros();
  quota[kGpuDim] = 4000;
  Amounts limit = s_->queues().space().unlimited();
  limit[kGpuDim] = 4000;
  ASSERT_TRUE(s_->updateQueue(a, quota, limit, 1, 100).isOk());
  s_->taskFinished(s_->workload(hold).tasks[0]);
  s_->schedule();
  const WorkloadId small = submit("small", "a", 1, 1, 1);
  s_->schedule();
  s_->schedule();
  EXPECT_EQ(running(big), 0);
  EXPECT_EQ(running(small), 1) << s_->explain(small).message;
}

TEST_F(SchedulerTest, BorrowsIdleGpusAndGivesBackExactlyTheOverShare) {
  build(1, 4, 4);
  WorkloadId a = submit("a-train", "a", 8, 1, 1);
  PassResult r = s_->schedule();
  EXPECT_EQ(r.started.size(), 8U);  // b wants nothing: a borrows everything.
  EXPECT_TRUE(r.evicted.empty());
  clock_.advance(seconds(600));
  WorkloadId b = submit("b-job", "b", 4, 4, 1);
  r = s_->schedule();
  EXPECT_TRUE(r.started.empty());
  ASSERT_EQ(r.evicted.size(), 4U);  // Exactly a's over-share.
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(e.victim, a);
    EXPECT_EQ(e.preemptor, b);
    EXPECT_TRUE(e.reclaim);
    EXPECT_NE(e.detail.find("reclaimed by 'b-job' (queue 'b')"), std::string::npos) << e.detail;
  }
  EXPECT_EQ(s_->explain(b).reason, WaitReason::kWaitingForEvictions);
  // Nothing more is evicted while the victims stop.
  EXPECT_TRUE(s_->schedule().evicted.empty());
  stopEvicted(r);
  r = s_->schedule();
  EXPECT_EQ(running(b), 4);
  EXPECT_EQ(running(a), 4);
  EXPECT_EQ(allocatedGpus("a"), 4);
  EXPECT_EQ(allocatedGpus("b"), 4);
  // Stable: later passes change nothing (no ping-pong).
  for (int i = 0; i < 5; ++i) {
    clock_.advance(seconds(60));
    PassResult again = s_->schedule();
    EXPECT_TRUE(again.evicted.empty());
    EXPECT_TRUE(again.started.empty());
  }
}

TEST_F(SchedulerTest, ReclaimToQuotaRestoresOnlyTheGuarantee) {
  // a has quota 1, b quota 3 of 8 GPUs; the other 4 are surplus, split 1:1 by fair share.
  SchedulerOptions o;
  o.reclaim_to = ReclaimTo::kQuota;
  build(1, 1, 3, o);
  WorkloadId a = submit("a-train", "a", 8, 1, 1);
  s_->schedule();
  ASSERT_EQ(running(a), 8);
  WorkloadId b = submit("b-job", "b", 8, 1, 1);
  PassResult r = s_->schedule();
  // Fair share would give b 5 (3 + half the surplus); reclaim to quota takes back 3.
  ASSERT_EQ(r.evicted.size(), 3U);
  stopEvicted(r);
  s_->schedule();
  EXPECT_EQ(running(b), 3);
  EXPECT_EQ(running(a), 5);
  for (int i = 0; i < 3; ++i) {
    clock_.advance(seconds(60));
    EXPECT_TRUE(s_->schedule().evicted.empty());
  }
  EXPECT_EQ(s_->queues().queue(*s_->queues().find("b")).fair_share[kGpuDim], 5000);
}

TEST_F(SchedulerTest, QueuesCanBeAddedWhileRunning) {
  build(1, 4, 4);
  WorkloadId a = submit("a-train", "a", 8, 1, 1);
  s_->schedule();
  ASSERT_EQ(running(a), 8);
  const ResourceSpace& space = s_->queues().space();
  Amounts quota = space.zeros();
  quota[kGpuDim] = 4000;
  auto c = s_->addQueue({"c", "org", quota, {}, 1, 100});
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(allocatedGpus("a"), 8);  // Totals survive.
  EXPECT_EQ(allocatedGpus("org"), 8);
  WorkloadId w = submit("c-job", "c", 2, 2, 1);
  PassResult r = s_->schedule();
  EXPECT_EQ(r.evicted.size(), 2U);  // The new tenant reclaims within its share.
  stopEvicted(r);
  s_->schedule();
  EXPECT_EQ(running(w), 2);
  // A leaf holding work cannot become a parent; names stay unique.
  auto bad = s_->addQueue({"a-team", "a", {}, {}, 1, 100});
  EXPECT_EQ(bad.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(s_->addQueue({"c", "org", {}, {}, 1, 100}).isOk());
}

TEST_F(SchedulerTest, QueuesCanBeChangedWhileRunning) {
  build(1, 4, 4);
  const ResourceSpace& space = s_->queues().space();
  const QueueId a = *s_->queues().find("a");
  Amounts two = space.zeros();
  two[kGpuDim] = 2000;
  Amounts limit = space.unlimited();
  limit[kGpuDim] = 2000;
  ASSERT_TRUE(s_->updateQueue(a, two, limit, 3, 50).isOk());
  EXPECT_EQ(s_->queues().queue(a).weight, 3);
  EXPECT_EQ(s_->queues().queue(a).priority, 50);
  WorkloadId w = submit("a-train", "a", 8, 1, 1);
  s_->schedule();
  EXPECT_EQ(running(w), 2);  // Held at the new limit.
  // Raising the limit makes room at once, though the pass had left a "no room" verdict.
  ASSERT_TRUE(s_->updateQueue(a, two, space.unlimited(), 1, 100).isOk());
  s_->schedule();
  EXPECT_EQ(running(w), 8);
  EXPECT_EQ(allocatedGpus("a"), 8);  // Totals survive the change.
  // Bad amounts are refused and change nothing.
  Amounts big = space.zeros();
  big[kGpuDim] = 9000;
  EXPECT_FALSE(s_->updateQueue(a, big, limit, 1, 100).isOk());
  EXPECT_EQ(s_->queues().queue(a).quota[kGpuDim], 2000);
}

TEST_F(SchedulerTest, GangIsAllOrNothing) {
  build(1, 8, 0);
  WorkloadId w = submit("big", "a", 2, 2, 8);  // Needs two whole nodes; there is one.
  PassResult r = s_->schedule();
  EXPECT_TRUE(r.started.empty());
  EXPECT_EQ(s_->cluster().usedGpuMilli(), 0);  // The first task was rolled back.
  EXPECT_EQ(s_->explain(w).reason, WaitReason::kNoCapacity);
  EXPECT_NE(s_->explain(w).message.find("no placement for task 2 of 2: 0/1 nodes fit"),
            std::string::npos)
      << s_->explain(w).message;
}

// A Job's parallelism below its completions: at most that many tasks run, in index order, the
// next placed as one finishes; the held ones are not its queue's demand; cancel and restart
// keep the count.
// After a restart, tasks that had finished are marked so (Scheduler::restoreFinished): their
// queue no longer asks for them, and a gang needs at once only the tasks it has left.
TEST_F(SchedulerTest, RestoredFinishedTasksAreNotPlacedAgain) {
  build(1, 8, 8);
  const QueueId a = *s_->queues().find("a");
  WorkloadSpec spec;
  spec.name = "serial";
  spec.queue = a;
  spec.tasks = 3;
  spec.parallelism = 1;
  spec.min_available = 1;
  spec.request = testing::gpuTask(4000, 1);
  const WorkloadId w = *s_->submit(spec);
  ASSERT_TRUE(s_->restoreFinished(s_->workload(w).tasks[0]).isOk());
  EXPECT_FALSE(s_->restoreFinished(s_->workload(w).tasks[0]).isOk());  // Not pending now.
  EXPECT_EQ(s_->workload(w).finished, 1);
  EXPECT_EQ(s_->workload(w).pending + s_->workload(w).deferred, 2);
  EXPECT_EQ(s_->queues().queue(a).pending[kGpuDim], 1000);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(s_->task(r.started[0].task).index, 1U);
  // A gang of four, two of which had finished: the two left start, together.
  spec.name = "gang";
  spec.tasks = 4;
  spec.parallelism = 4;
  spec.min_available = 4;
  const WorkloadId g = *s_->submit(spec);
  ASSERT_TRUE(s_->restoreFinished(s_->workload(g).tasks[0]).isOk());
  ASSERT_TRUE(s_->restoreFinished(s_->workload(g).tasks[2]).isOk());
  EXPECT_EQ(s_->workload(g).spec.min_available, 2);
  // The gang's two (serial's task 2 is deferred behind its task 1).
  EXPECT_EQ(s_->queues().queue(a).pending[kGpuDim], 2000);
  r = s_->schedule();
  std::vector<uint32_t> started;
  for (const auto& d : r.started) {
    if (s_->task(d.task).workload == g) {
      started.push_back(s_->task(d.task).index);
    }
  }
  std::sort(started.begin(), started.end());
  EXPECT_EQ(started, (std::vector<uint32_t>{1, 3}));
}

// A suspended workload (a Kubernetes Job's spec.suspend): nothing of it is placed or asked for;
// its running tasks are handed back to be stopped and come back held; resumed, it runs what is
// left within its parallelism.
TEST_F(SchedulerTest, ASuspendedWorkloadHoldsItsTasksUntilResumed) {
  build(1, 8, 8);
  const QueueId a = *s_->queues().find("a");
  WorkloadSpec spec;
  spec.name = "job";
  spec.queue = a;
  spec.tasks = 4;
  spec.parallelism = 2;
  spec.min_available = 1;
  spec.request = testing::gpuTask(4000, 1);
  const WorkloadId w = *s_->submit(spec);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 2U);
  s_->taskFinished(r.started[0].task);  // One completion done.
  const std::vector<TaskId> stop = s_->suspend(w);
  ASSERT_EQ(stop.size(), 1U);                            // The one still running.
  EXPECT_EQ(s_->queues().queue(a).pending[kGpuDim], 0);  // Its held tasks ask for nothing.
  EXPECT_TRUE(s_->schedule().started.empty());
  ASSERT_TRUE(s_->evictTask(stop[0]));
  s_->taskStopped(stop[0]);
  EXPECT_EQ(s_->workload(w).pending, 0);
  EXPECT_EQ(s_->workload(w).deferred, 3);  // Held, with the two never started.
  EXPECT_TRUE(s_->schedule().started.empty());
  EXPECT_EQ(s_->workload(w).finished, 1);
  s_->resume(w);
  EXPECT_EQ(s_->queues().queue(a).pending[kGpuDim], 2000);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 2U);  // Its parallelism, from what is left.
  EXPECT_EQ(s_->task(r.started[0].task).index, 1U);
  EXPECT_EQ(s_->task(r.started[1].task).index, 2U);
}

TEST_F(SchedulerTest, ParallelismBoundsTheTasksPlacedAtOnce) {
  build(2, 8, 8);
  WorkloadSpec spec;
  spec.name = "job";
  spec.queue = *s_->queues().find("a");
  spec.tasks = 5;
  spec.parallelism = 2;
  spec.request = testing::gpuTask(4000, 1);
  spec.min_available = 3;
  EXPECT_FALSE(s_->submit(spec).isOk());  // A gang larger than its parallelism never starts.
  spec.min_available = 1;
  spec.parallelism = 6;
  EXPECT_FALSE(s_->submit(spec).isOk());
  spec.parallelism = 2;
  const WorkloadId w = *s_->submit(spec);
  const QueueId a = *s_->queues().find("a");
  EXPECT_EQ(s_->queues().queue(a).pending[kGpuDim], 2000);  // Not 5,000: three are deferred.
  EXPECT_EQ(s_->workload(w).pending, 2);
  EXPECT_EQ(s_->workload(w).deferred, 3);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 2U);  // 16 GPUs free; two may run.
  EXPECT_EQ(s_->task(r.started[0].task).index, 0U);
  EXPECT_EQ(s_->task(r.started[1].task).index, 1U);
  EXPECT_TRUE(s_->schedule().started.empty());
  s_->taskFinished(r.started[0].task);
  EXPECT_EQ(s_->workload(w).deferred, 2);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(s_->task(r.started[0].task).index, 2U);
  EXPECT_EQ(running(w), 2);
  // An evicted task is pending again within the bound, not one more.
  ASSERT_TRUE(s_->evictTask(r.started[0].task));
  s_->taskStopped(r.started[0].task);
  EXPECT_EQ(s_->workload(w).pending, 1);
  EXPECT_EQ(s_->workload(w).deferred, 2);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(running(w), 2);
  // A restart makes every task pending again, two of them placeable.
  s_->restart(w);
  EXPECT_EQ(running(w), 0);
  EXPECT_EQ(s_->workload(w).pending, 2);
  EXPECT_EQ(s_->workload(w).deferred, 3);
  EXPECT_EQ(s_->queues().queue(a).pending[kGpuDim], 2000);
  EXPECT_EQ(s_->schedule().started.size(), 2U);
  s_->cancel(w);
  EXPECT_EQ(s_->workload(w).finished, 5);
  EXPECT_EQ(s_->workload(w).pending + s_->workload(w).deferred, 0);
  EXPECT_EQ(s_->queues().queue(a).pending[kGpuDim], 0);
  EXPECT_EQ(allocatedGpus("a"), 0);

  // A task retried alone, even once its workload had finished, runs again as its parallelism
  // allows; the others stay finished.
  spec.name = "retried";
  spec.tasks = 2;
  spec.parallelism = 1;
  const WorkloadId v = *s_->submit(spec);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  const TaskId zero = r.started[0].task;
  s_->taskFinished(zero);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  s_->taskFinished(r.started[0].task);
  EXPECT_EQ(s_->workload(v).finished, 2);
  s_->retryTask(zero);
  EXPECT_EQ(s_->workload(v).finished, 1);
  EXPECT_EQ(s_->workload(v).pending, 1);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].task, zero);
  EXPECT_EQ(s_->task(zero).starts, 2U);
  s_->retryTask(zero);  // Running, not finished: nothing.
  EXPECT_EQ(running(v), 1);
}

TEST_F(SchedulerTest, GangStaysOnOneNodeWhenItFits) {
  build(4, 32, 0);
  submit("filler", "a", 1, 1, 1);  // Makes node choice non-trivial.
  s_->schedule();
  WorkloadId g = submit("gang", "a", 4, 4, 2);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 4U);
  for (const StartDecision& d : r.started) {
    EXPECT_EQ(d.placement.node, r.started[0].placement.node);
    EXPECT_EQ(d.workload, g);
  }
}

TEST_F(SchedulerTest, QueueLimitIsExplained) {
  build(1, 0, 0, {}, /*limit_a=*/2);
  WorkloadId w = submit("wide", "a", 4, 4, 1);
  s_->schedule();
  EXPECT_EQ(running(w), 0);
  EXPECT_EQ(s_->explain(w).reason, WaitReason::kQueueLimit);
  EXPECT_EQ(s_->explain(w).message, "queue 'a' at its limit for gpu: 0 + 3000 > 2000 milli-GPU");
  WorkloadId elastic = submit("elastic", "a", 4, 1, 1);
  s_->schedule();
  EXPECT_EQ(running(elastic), 2);  // Elastic tasks stop at the limit.
}

TEST_F(SchedulerTest, NonPreemptibleWorkMustFitTheQuota) {
  build(1, 2, 0);
  WorkloadId w = submit("serve", "a", 3, 3, 1, 0, /*preemptible=*/false);
  s_->schedule();
  EXPECT_EQ(s_->explain(w).reason, WaitReason::kOverQuota);
  WorkloadId ok = submit("serve-small", "a", 2, 2, 1, 0, false);
  s_->schedule();
  EXPECT_EQ(running(ok), 2);
}

TEST_F(SchedulerTest, PreemptsLowerPriorityInsideTheQueue) {
  build(1, 8, 0);
  WorkloadId low = submit("low", "a", 8, 1, 1, /*priority=*/10);
  s_->schedule();
  WorkloadId high = submit("high", "a", 2, 2, 1, /*priority=*/50);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 2U);
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(e.victim, low);
    EXPECT_FALSE(e.reclaim);
  }
  stopEvicted(r);
  s_->schedule();
  EXPECT_EQ(running(high), 2);
  EXPECT_EQ(running(low), 6);
  // Equal priority never preempts.
  submit("peer", "a", 1, 1, 1, /*priority=*/10);
  EXPECT_TRUE(s_->schedule().evicted.empty());
}

TEST_F(SchedulerTest, MinimumRuntimeProtectsYoungTasks) {
  SchedulerOptions o;
  o.min_runtime = seconds(300);
  build(1, 4, 4, o);
  submit("a-train", "a", 8, 1, 1);
  s_->schedule();
  clock_.advance(seconds(100));
  WorkloadId b = submit("b-job", "b", 4, 4, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  EXPECT_EQ(s_->explain(b).reason, WaitReason::kNoCapacity);
  clock_.advance(seconds(200));
  EXPECT_EQ(s_->schedule().evicted.size(), 4U);
}

TEST_F(SchedulerTest, EachEvictionDoublesTheMinimumRuntime) {
  SchedulerOptions o;
  o.min_runtime = seconds(300);
  build(1, 4, 4, o);
  WorkloadId a = submit("a-train", "a", 8, 1, 1);
  s_->schedule();
  clock_.advance(seconds(300));
  WorkloadId b = submit("b-job", "b", 4, 4, 1);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 4U);
  stopEvicted(r);
  s_->schedule();
  ASSERT_EQ(running(b), 4);
  // b leaves, a's evicted tasks restart; b comes back and may not take them again at once.
  for (TaskId t : s_->workload(b).tasks) {
    s_->taskFinished(t);
  }
  s_->schedule();
  ASSERT_EQ(running(a), 8);
  clock_.advance(seconds(300));
  WorkloadId b2 = submit("b-again", "b", 4, 4, 1);
  r = s_->schedule();
  // Four of a's tasks never left: they are the victims now, not the restarted ones.
  ASSERT_EQ(r.evicted.size(), 4U);
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(s_->task(e.task).starts, 1U);
  }
  stopEvicted(r);
  s_->schedule();
  ASSERT_EQ(running(b2), 4);
  for (TaskId t : s_->workload(b2).tasks) {
    s_->taskFinished(t);
  }
  s_->schedule();
  // Every task of a has now been evicted once: 600 s of protection after a restart. The first
  // four restarted 300 s before the others; at 599 s of running they are still protected.
  clock_.advance(seconds(299));
  submit("b-third", "b", 4, 4, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  clock_.advance(seconds(1));
  r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 4U);
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(s_->task(e.task).starts, 2U);
    EXPECT_EQ(clock_.now() - s_->task(e.task).started, seconds(600));
  }
}

TEST_F(SchedulerTest, EvictionsPerPassAreCapped) {
  SchedulerOptions o;
  o.max_evictions_per_pass = 3;
  build(1, 4, 4, o);
  submit("a-train", "a", 8, 1, 1);
  s_->schedule();
  submit("b-1", "b", 1, 1, 1);
  submit("b-2", "b", 1, 1, 1);
  submit("b-3", "b", 1, 1, 1);
  submit("b-4", "b", 1, 1, 1);
  EXPECT_EQ(s_->schedule().evicted.size(), 3U);
}

TEST_F(SchedulerTest, ReclaimOnlyWhenItLowersUnfairness) {
  build(1, 4, 4);
  WorkloadId a = submit("a-train", "a", 5, 1, 1);
  WorkloadId b = submit("b-small", "b", 3, 3, 1);
  s_->schedule();
  ASSERT_EQ(running(a), 5);
  ASSERT_EQ(running(b), 3);
  // Fair shares: a 5 (it asks 5), b 3. b asks for 2 more: fair shares become 4 / 4 ... but then
  // b would hold 5 > 4, above its fair share: no reclaim.
  WorkloadId b2 = submit("b-pair", "b", 1, 1, 2);
  PassResult r = s_->schedule();
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_EQ(s_->explain(b2).reason, WaitReason::kNoCapacity);
  s_->cancel(b2);
  // One GPU instead fits b's fair share (4/4 < a's 5/4): one of a's tasks goes.
  WorkloadId b1 = submit("b-one", "b", 1, 1, 1);
  r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].preemptor, b1);
}

TEST_F(SchedulerTest, FifoModeNeverEvicts) {
  SchedulerOptions o;
  o.fair_share = false;
  build(1, 4, 4, o);
  submit("a-train", "a", 8, 1, 1);
  s_->schedule();
  submit("b-job", "b", 4, 4, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
}

TEST_F(SchedulerTest, SubmitValidation) {
  build(1, 4, 4);
  WorkloadSpec w;
  w.name = "x";
  w.queue = *s_->queues().find("org");
  w.request = testing::gpuTask(1000, 1);
  EXPECT_EQ(s_->submit(w).status().message(),
            "workload 'x': queue 'org' has child queues; submit to a leaf queue");
  w.queue = *s_->queues().find("a");
  w.min_available = 2;
  EXPECT_EQ(s_->submit(w).status().message(), "workload 'x': minAvailable 2 is outside 1..1");
  w.min_available = 1;
  w.request.gpu_milli = core::MilliGpu{1500};
  EXPECT_EQ(s_->submit(w).status().message(),
            "workload 'x': gpu share 1500 milli is outside 1..1000");
}

// A restarted driver puts running tasks back exactly where they run, with their start time and
// start count; a placement that no longer fits is refused and changes nothing.
TEST_F(SchedulerTest, RestoredTasksHoldTheirGpusAndKeepTheirStarts) {
  build(1, 8, 0);
  const WorkloadId pair = submit("pair", "a", 1, 1, 2);
  const TaskId t = s_->workload(pair).tasks[0];
  const core::TimePoint started = clock_.now() - std::chrono::hours(2);
  const Placement on_2_and_5{.node = 0, .gpus = 0b100100};
  ASSERT_TRUE(s_->restoreTask(t, on_2_and_5, started, 3).isOk());
  EXPECT_EQ(s_->task(t).state, TaskState::kRunning);
  EXPECT_EQ(s_->task(t).assignment.placement.gpus, 0b100100U);
  EXPECT_EQ(s_->task(t).started, started);
  EXPECT_EQ(s_->task(t).starts, 3U);
  EXPECT_EQ(allocatedGpus("a"), 2);
  EXPECT_EQ(running(pair), 1);
  // Not pending any more; and GPU 5 is taken for anyone else.
  EXPECT_FALSE(s_->restoreTask(t, on_2_and_5, started, 3).isOk());
  const WorkloadId other = submit("other", "a", 1, 1, 2);
  const TaskId o = s_->workload(other).tasks[0];
  const core::Status taken = s_->restoreTask(o, {.node = 0, .gpus = 0b110000}, started, 1);
  EXPECT_NE(taken.message().find("taken"), std::string::npos) << taken.toString();
  EXPECT_FALSE(s_->restoreTask(o, {.node = 0, .gpus = 0b1}, started, 1).isOk());  // One GPU.
  EXPECT_FALSE(s_->restoreTask(o, {.node = 7, .gpus = 0b11}, started, 1).isOk());
  EXPECT_EQ(s_->task(o).state, TaskState::kPending);
  // The pass places the rest around it, and a later start is counted after the restored ones.
  PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].task, o);
  EXPECT_EQ(r.started[0].placement.gpus & 0b100100U, 0U);
  s_->nodeLost(0);
  s_->nodeBack(0);
  s_->schedule();
  EXPECT_EQ(s_->task(t).starts, 4U);
  // A down node takes no restored task.
  s_->nodeLost(0);
  const WorkloadId late = submit("late", "a", 1, 1, 1);
  EXPECT_FALSE(
      s_->restoreTask(s_->workload(late).tasks[0], {.node = 0, .gpus = 0b1}, started, 1).isOk());
}

TEST_F(SchedulerTest, FinishedTasksReleaseAndOthersStart) {
  build(1, 8, 0);
  WorkloadId first = submit("first", "a", 8, 8, 1);
  WorkloadId second = submit("second", "a", 8, 8, 1);
  PassResult r = s_->schedule();
  EXPECT_EQ(running(first), 8);
  EXPECT_EQ(s_->explain(second).reason, WaitReason::kNoCapacity);
  for (TaskId t : s_->workload(first).tasks) {
    s_->taskFinished(t);
  }
  s_->schedule();
  EXPECT_EQ(running(second), 8);
  EXPECT_EQ(allocatedGpus("a"), 8);
  EXPECT_EQ(s_->workload(first).finished, 8);
}

TEST_F(SchedulerTest, BigGangIsNotStarvedBySmallJobs) {
  build(2, 16, 0);
  WorkloadId small = submit("small", "a", 16, 1, 1);
  s_->schedule();
  ASSERT_EQ(running(small), 16);
  WorkloadId gang = submit("gang", "a", 2, 2, 8);
  s_->schedule();
  EXPECT_EQ(s_->reservedFor(), gang);
  EXPECT_EQ(s_->reservedNodes().size(), 2U);
  // It says which nodes wait for it, and that without declared runtimes nobody knows for how long.
  EXPECT_NE(s_->explain(gang).message.find(
                "2 node(s) held for it (n0, n1), when they drain is unknown: tasks there declare "
                "no maxRuntime"),
            std::string::npos)
      << s_->explain(gang).message;
  // Small jobs keep coming; as GPUs free up they must not take the reserved nodes.
  WorkloadId more = submit("more", "a", 8, 1, 1);
  const std::vector<TaskId> tasks = s_->workload(small).tasks;
  for (int i = 0; i < 12; ++i) {
    s_->taskFinished(tasks[i]);
  }
  PassResult r = s_->schedule();
  EXPECT_TRUE(r.started.empty());
  EXPECT_EQ(running(more), 0);
  EXPECT_NE(s_->explain(more).message.find("reserved for a waiting gang"), std::string::npos)
      << s_->explain(more).message;
  for (int i = 12; i < 16; ++i) {
    s_->taskFinished(tasks[i]);
  }
  s_->schedule();
  EXPECT_EQ(running(gang), 2);
  EXPECT_EQ(s_->reservedFor(), kNoWorkload);
}

TEST_F(SchedulerTest, BackfillsWhatEndsBeforeTheReservation) {
  build(2, 16, 0);
  WorkloadId small = submit("small", "a", 16, 1, 1, 0, true, seconds(1000));
  s_->schedule();
  WorkloadId gang = submit("gang", "a", 2, 2, 8);
  s_->schedule();
  ASSERT_EQ(s_->reservedFor(), gang);
  clock_.advance(seconds(10));
  s_->taskFinished(s_->workload(small).tasks[0]);  // One GPU frees up early.
  WorkloadId too_long = submit("too-long", "a", 1, 1, 1, 0, true, seconds(5000));
  WorkloadId short_one = submit("short", "a", 1, 1, 1, 0, true, seconds(100));
  s_->schedule();
  EXPECT_EQ(running(too_long), 0);
  EXPECT_EQ(running(short_one), 1);  // Ends at 110 s, before the nodes drain at 1000 s.
  EXPECT_NE(s_->explain(gang).message.find(
                "node(s) held for it (n0, n1), drained in at most 16 min by the maxRuntime of the "
                "tasks there"),
            std::string::npos)
      << s_->explain(gang).message;
}

// Issue #40: nodes drained for a queue below its share are not taken by another queue that is
// nearer its own share, though below it; a queue further below its share than the holder may
// use them. Queue a (the holder) waits with an 8-GPU task and one node drains for it; queue b
// runs `other_running` 1-GPU tasks and asks for one more.
struct DrainCase {
  int holder_running;
  int other_running;
  bool other_may_use;
};

class ReservedNodesTest : public SchedulerTest, public ::testing::WithParamInterface<DrainCase> {};

TEST_P(ReservedNodesTest, AreOpenOnlyToAQueueFurtherBelowItsShare) {
  const DrainCase c = GetParam();
  build(2, 8, 8);
  // n1 ends full (b's tasks and a's), n0 with one task of a and 7 GPUs free.
  WorkloadId first = submit("holder-first", "a", 1, 1, 1, 0, false);
  s_->schedule();
  const NodeIndex n0 = s_->task(s_->workload(first).tasks[0]).assignment.placement.node;
  WorkloadId fill = submit("fill", "b", 15, 1, 1);  // Borrowed: preemptible.
  s_->schedule();
  ASSERT_EQ(running(fill), 15);
  // Room on n1 for a's other tasks first, so that they land there; then n0 empties.
  int kept = 0;
  for (TaskId t : s_->workload(fill).tasks) {
    if (s_->task(t).assignment.placement.node != n0 && kept++ >= c.other_running) {
      s_->taskFinished(t);
    }
  }
  WorkloadId rest = submit("holder-rest", "a", 8 - c.other_running, 1, 1, 0, false);
  s_->schedule();
  ASSERT_EQ(running(rest), 8 - c.other_running);
  for (TaskId t : s_->workload(fill).tasks) {
    if (s_->task(t).state == TaskState::kRunning && s_->task(t).assignment.placement.node == n0) {
      s_->taskFinished(t);
    }
  }
  ASSERT_EQ(allocatedGpus("a"), c.holder_running);
  ASSERT_EQ(allocatedGpus("b"), c.other_running);
  WorkloadId big = submit("holder-big", "a", 1, 1, 8);
  s_->schedule();
  ASSERT_EQ(running(big), 0);
  ASSERT_EQ(s_->reservedFor(), big);
  ASSERT_EQ(s_->reservedNodes(), std::vector<NodeIndex>{n0});
  WorkloadId more = submit("other-more", "b", 1, 1, 1);
  s_->schedule();
  const Queue& holder = s_->queues().queue(*s_->queues().find("a"));
  const Queue& other = s_->queues().queue(*s_->queues().find("b"));
  SCOPED_TRACE(fmt::format("a {}/{} GPUs of its share, b {}/{} before its new task",
                           holder.allocated[kGpuDim] / 1000, holder.fair_share[kGpuDim] / 1000,
                           c.other_running, other.fair_share[kGpuDim] / 1000));
  ASSERT_LT(c.other_running * 1000, other.fair_share[kGpuDim]);  // b is below its share.
  ASSERT_EQ(s_->reservedFor(), big);
  EXPECT_EQ(running(more), c.other_may_use ? 1 : 0);
  if (!c.other_may_use) {
    EXPECT_NE(s_->explain(more).message.find("reserved for a waiting gang"), std::string::npos)
        << s_->explain(more).message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Drain, ReservedNodesTest,
    ::testing::Values(
        // a at 2 of 8, b at 7 of 8: b is nearer its share and waits.
        DrainCase{.holder_running = 2, .other_running = 7, .other_may_use = false},
        // a at 8 of 14 (b asks for 2 in all), b at 1 of 2: b is further below and runs.
        DrainCase{.holder_running = 8, .other_running = 1, .other_may_use = true}));

TEST_F(SchedulerTest, BlockedWorkWaitsUntilARelevantNodeFreesUp) {
  build(2, 16, 0);
  WorkloadId fill = submit("fill", "a", 16, 1, 1);
  s_->schedule();
  ASSERT_EQ(running(fill), 16);
  // Two kinds of waiting work: one GPU and 4 CPUs, or one GPU and 200 of a node's 224 CPUs.
  std::vector<WorkloadId> big;
  std::vector<WorkloadId> small;
  for (int i = 0; i < 20; ++i) {
    WorkloadSpec spec;
    spec.name = "big-" + std::to_string(i);
    spec.queue = *s_->queues().find("a");
    spec.request = testing::gpuTask(200000, 1);
    big.push_back(s_->submit(spec).value());
    small.push_back(submit("small-" + std::to_string(i), "a", 1, 1, 1));
  }
  // One try per kind of request answers for all twenty of that kind.
  PassResult r = s_->schedule();
  EXPECT_EQ(r.tried, 2U);
  EXPECT_EQ(s_->explain(big[19]).reason, WaitReason::kNoCapacity);
  EXPECT_NE(s_->explain(big[19]).message.find("0/2 nodes fit"), std::string::npos)
      << s_->explain(big[19]).message;
  // Nothing changed: nothing is tried.
  EXPECT_EQ(s_->schedule().tried, 0U);
  // One GPU frees up: room for one small task, not for a big one (the node's CPUs are taken).
  s_->taskFinished(s_->workload(fill).tasks[0]);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].workload, small[0]);
  EXPECT_EQ(r.tried, 2U);  // small-0 started, small-1 found no room; no big one was tried.
  EXPECT_EQ(s_->explain(small[1]).reason, WaitReason::kNoCapacity);
  // Dropping the verdicts makes the next pass try each kind again.
  s_->forgetVerdicts();
  EXPECT_EQ(s_->schedule().tried, 2U);
  // A whole node frees up: the first big workload starts there.
  const NodeIndex node = r.started[0].placement.node;
  for (TaskId t : s_->workload(fill).tasks) {
    if (s_->task(t).state == TaskState::kRunning && s_->task(t).assignment.placement.node == node) {
      s_->taskFinished(t);
    }
  }
  s_->taskFinished(s_->workload(small[0]).tasks[0]);
  r = s_->schedule();
  EXPECT_EQ(running(big[0]), 1);
  EXPECT_EQ(running(big[1]), 0);
}

TEST_F(SchedulerTest, ALostNodesTasksArePlacedElsewhereAndItTakesNoneUntilBack) {
  build(2, 8, 8);
  WorkloadId w = submit("train", "a", 4, 1, 2);  // 4 tasks of 2 GPUs: one node's worth.
  PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 4U);
  const NodeIndex first = r.started[0].placement.node;
  for (const StartDecision& d : r.started) {
    ASSERT_EQ(d.placement.node, first);  // Best fit packs them on one node.
    EXPECT_EQ(s_->task(d.task).starts, 1U);
  }
  const NodeIndex other = 1 - first;
  std::vector<TaskId> lost = s_->nodeLost(first);
  EXPECT_EQ(lost.size(), 4U);
  EXPECT_TRUE(s_->nodeLost(first).empty());  // Idempotent.
  EXPECT_FALSE(s_->cluster().up(first));
  EXPECT_EQ(s_->workload(w).running, 0);
  EXPECT_EQ(s_->workload(w).pending, 4);
  EXPECT_EQ(allocatedGpus("a"), 0);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 4U);
  for (const StartDecision& d : r.started) {
    EXPECT_EQ(d.placement.node, other);
    EXPECT_EQ(s_->task(d.task).starts, 2U);  // The generation the agents see.
  }
  // More work waits rather than go to the lost node, and the fair shares divide only the
  // GPUs of the node that is up: 8 of the 10 asked for.
  WorkloadId more = submit("more", "b", 1, 1, 2);
  r = s_->schedule();
  EXPECT_EQ(s_->queues().queue(*s_->queues().find("org")).fair_share[kGpuDim], 8000);
  EXPECT_TRUE(r.started.empty());
  EXPECT_NE(s_->explain(more).message.find("node down"), std::string::npos)
      << s_->explain(more).message;
  // Back: it takes work again.
  s_->nodeBack(first);
  EXPECT_TRUE(s_->cluster().up(first));
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].placement.node, first);
  // All 10 GPUs asked for fit again (it was 8, one node's, while the node was down).
  EXPECT_EQ(s_->queues().queue(*s_->queues().find("org")).fair_share[kGpuDim], 10000);
}

// Fair shares divide the nodes that are up and not cordoned (as KAI's proportion plugin counts
// only ready, schedulable nodes), whatever order cordons and losses come in.
TEST_F(SchedulerTest, CordonedAndLostNodesLeaveTheFairSharesOnce) {
  build(2, 8, 8);
  const auto gpus = [&] { return s_->capacity()[kGpuDim] / 1000; };
  EXPECT_EQ(gpus(), 16);
  const WorkloadId a = submit("a", "a", 1, 1, 8);
  s_->schedule();
  ASSERT_EQ(nodesOf(a), std::set<NodeIndex>{0});
  submit("b", "b", 2, 1, 8);  // 24 GPUs asked for in all: the shares divide all there is.
  s_->schedule();
  const auto org_share = [&] {
    return s_->queues().queue(*s_->queues().find("org")).fair_share[kGpuDim] / 1000;
  };
  EXPECT_EQ(org_share(), 16);
  s_->setCordoned(0, true);
  EXPECT_EQ(gpus(), 8);
  s_->schedule();
  // The org's share is what is left; the task on the cordoned node runs on, still charged.
  EXPECT_EQ(org_share(), 8);
  EXPECT_EQ(running(a), 1);
  EXPECT_EQ(allocatedGpus("a"), 8);
  s_->nodeLost(0);  // Already out: no second subtraction.
  EXPECT_EQ(gpus(), 8);
  s_->nodeBack(0);  // Still cordoned.
  EXPECT_EQ(gpus(), 8);
  s_->setCordoned(0, false);
  EXPECT_EQ(gpus(), 16);
  s_->nodeLost(1);
  EXPECT_EQ(gpus(), 8);
  s_->setCordoned(1, true);  // Down already: nothing more leaves.
  EXPECT_EQ(gpus(), 8);
  s_->setCordoned(1, false);  // Still down.
  EXPECT_EQ(gpus(), 8);
  s_->nodeBack(1);
  EXPECT_EQ(gpus(), 16);
}

// Issue 22, nodes join: a node added while work waits takes it once up; cordons, dedicated
// nodes and node selectors keep new work off nodes while what runs there stays; a drained task
// runs again elsewhere.
TEST_F(SchedulerTest, JoinedNodesCordonsPoolsAndSelectorsSteerNewWorkOnly) {
  build(1, 16, 16, {.policy = "tessera"});
  WorkloadId first = submit("first", "a", 1, 1, 8);
  WorkloadId waits = submit("waits", "a", 1, 1, 8);
  ASSERT_EQ(s_->schedule().started.size(), 1U);
  EXPECT_EQ(s_->workload(waits).pending, 1);
  model::Node joined = testing::node(cat_, "joined", 224, 2048, "H100-80GB", 8);
  joined.labels = {{"pool", "p1"}, {"zone", "b"}};
  auto n = s_->addNode(joined);
  ASSERT_TRUE(n.isOk()) << n.status().message();
  EXPECT_EQ(*n, 1U);
  EXPECT_TRUE(s_->schedule().started.empty());  // Down until its agent is heard from.
  s_->nodeBack(*n);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].placement.node, *n);
  EXPECT_EQ(s_->queues().queue(*s_->queues().find("org")).fair_share[kGpuDim], 16000);
  model::Node bad = joined;
  bad.labels = {{"-bad", "x"}};
  EXPECT_FALSE(s_->addNode(bad).isOk());

  // Cordoned: the running task stays; new work waits, and says why.
  s_->taskFinished(s_->workload(first).tasks[0]);
  s_->setCordoned(0, true);
  WorkloadId later = submit("later", "a", 1, 1, 8);
  EXPECT_TRUE(s_->schedule().started.empty());
  EXPECT_NE(s_->explain(later).message.find("node cordoned"), std::string::npos)
      << s_->explain(later).message;
  s_->setCordoned(0, false);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].placement.node, 0U);

  // Drained: its task terminates and, once stopped, is pending again for another node.
  const TaskId drained = s_->workload(waits).tasks[0];
  s_->setCordoned(*n, true);
  ASSERT_TRUE(s_->evictTask(drained));
  EXPECT_FALSE(s_->evictTask(drained));  // Terminating already.
  EXPECT_EQ(s_->task(drained).state, TaskState::kTerminating);
  s_->taskStopped(drained);
  EXPECT_EQ(s_->task(drained).state, TaskState::kPending);
  EXPECT_TRUE(s_->schedule().started.empty());  // Node 0 is full, node 1 cordoned.
  s_->setCordoned(*n, false);

  // Node 1 dedicated to tenant 7: tenant 0's tasks never go there; tenant 7's may.
  s_->setDedicated(*n, model::TenantId{7});
  EXPECT_TRUE(s_->schedule().started.empty());
  EXPECT_NE(s_->explain(waits).message.find("dedicated to another tenant"), std::string::npos)
      << s_->explain(waits).message;
  model::TaskRequest seven = testing::gpuTask(4000, 8);
  seven.tenant = model::TenantId{7};
  seven.node_selector = {{"pool", "p1"}};
  WorkloadId ours = submitRequest("ours", "b", 1, 1, seven);
  r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].workload, ours);
  EXPECT_EQ(r.started[0].placement.node, *n);
  // A selector no node matches waits with its reason.
  model::TaskRequest elsewhere = testing::gpuTask(4000, 1);
  elsewhere.node_selector = {{"zone", "nowhere"}};
  WorkloadId lost = submitRequest("lost", "b", 1, 1, elsewhere);
  EXPECT_TRUE(s_->schedule().started.empty());
  EXPECT_NE(s_->explain(lost).message.find("lacks the selected labels"), std::string::npos)
      << s_->explain(lost).message;
}

// Two tenants' workloads of one shape: before a pool, the placer answers both alike; once one
// tenant has a pool, "no room" for the other's must not hold back its own.
TEST_F(SchedulerTest, ANoRoomVerdictForOneTenantHoldsBackNoTenantThatHasAPool) {
  build(1, 16, 16, {.policy = "tessera"});
  submit("fill", "a", 1, 1, 8);
  ASSERT_EQ(s_->schedule().started.size(), 1U);
  model::TaskRequest one = testing::gpuTask(4000, 1);
  one.tenant = model::TenantId{7};
  WorkloadId theirs = submitRequest("theirs", "b", 1, 1, one);
  one.tenant = model::TenantId{3};
  WorkloadId ours = submitRequest("ours", "b", 1, 1, one);
  EXPECT_TRUE(s_->schedule().started.empty());  // No room for either.
  auto n = s_->addNode(testing::node(cat_, "joined", 224, 2048, "H100-80GB", 8));
  ASSERT_TRUE(n.isOk()) << n.status().message();
  s_->setDedicated(*n, model::TenantId{3});
  s_->nodeBack(*n);
  const PassResult r = s_->schedule();
  ASSERT_EQ(r.started.size(), 1U);
  EXPECT_EQ(r.started[0].workload, ours);
  EXPECT_EQ(r.started[0].placement.node, *n);
  EXPECT_EQ(s_->workload(theirs).pending, 1);
  EXPECT_NE(s_->explain(theirs).message.find("dedicated to another tenant"), std::string::npos)
      << s_->explain(theirs).message;
}

// Issue 38: a gang started over (a retry) is placed again whole, as a new start of every task,
// and only once every task that must stop has stopped: never half of it against old peers.
TEST_F(SchedulerTest, ARestartedGangIsPlacedAgainWholeOnceEveryTaskHasStopped) {
  build(2, 16, 0);
  const WorkloadId w = submit("gang", "a", 3, 3, 4);
  PassResult first = s_->schedule();
  ASSERT_EQ(first.started.size(), 3U);
  const TaskId done = s_->workload(w).tasks[2];
  s_->taskFinished(done);                         // One rank ended well before another failed.
  const TaskId stays = s_->workload(w).tasks[1];  // Its process must be stopped first.
  s_->restart(w, [&](TaskId t) { return t == stays; });
  EXPECT_EQ(s_->task(stays).state, TaskState::kTerminating);
  EXPECT_EQ(s_->workload(w).pending, 2);
  EXPECT_EQ(s_->workload(w).finished, 0);
  EXPECT_TRUE(s_->schedule().started.empty()) << "placed while a task of the gang still stops";
  s_->taskStopped(stays);
  PassResult again = s_->schedule();
  ASSERT_EQ(again.started.size(), 3U);
  for (TaskId t : s_->workload(w).tasks) {
    EXPECT_EQ(s_->task(t).state, TaskState::kRunning);
    EXPECT_EQ(s_->task(t).starts, 2U) << "a new start, so a new generation";
  }
  // A workload whose every task finished can be started over too.
  for (TaskId t : s_->workload(w).tasks) {
    s_->taskFinished(t);
  }
  s_->schedule();
  s_->restart(w);
  EXPECT_EQ(s_->workload(w).pending, 3);
  EXPECT_EQ(s_->schedule().started.size(), 3U);
  // A cancelled one is not.
  s_->cancel(w);
  s_->restart(w);
  EXPECT_EQ(s_->workload(w).pending, 0);
}

// The same in FIFO mode (no fair share), whose list of unfinished workloads drops finished ones.
TEST_F(SchedulerTest, AFinishedWorkloadRestartedIsPlacedAgainInFifoMode) {
  SchedulerOptions fifo;
  fifo.fair_share = false;
  build(1, 8, 0, fifo);
  const WorkloadId w = submit("once", "a", 1, 1, 4);
  ASSERT_EQ(s_->schedule().started.size(), 1U);
  s_->taskFinished(s_->workload(w).tasks[0]);
  EXPECT_TRUE(s_->schedule().started.empty());  // The list is swept of it here.
  s_->restart(w);
  EXPECT_EQ(s_->schedule().started.size(), 1U);
}

TEST_F(SchedulerTest, LosingANodeRequeuesOnlyItsUnfinishedTasks) {
  build(1, 8, 0);
  WorkloadId w = submit("w", "a", 2, 1, 4);
  ASSERT_EQ(s_->schedule().started.size(), 2U);
  s_->cancel(w);  // Nothing left to requeue of a cancelled workload.
  EXPECT_TRUE(s_->nodeLost(0).empty());
  s_->nodeBack(0);
  WorkloadId v = submit("v", "a", 1, 1, 8);
  ASSERT_EQ(s_->schedule().started.size(), 1U);
  EXPECT_EQ(s_->nodeLost(0).size(), 1U);
  EXPECT_EQ(s_->workload(v).pending, 1);
  EXPECT_TRUE(s_->schedule().started.empty());  // The only node is down.
}

// Issue #20, rule 1: reclaim chooses the node where room costs the least unsaved work and evicts
// there only, the fewest victims that make room; before, it released victims across the whole
// cluster until the work fit anywhere.
TEST_F(SchedulerTest, ReclaimEvictsOnlyOnTheNodeItWillUse) {
  build(2, 8, 8);
  const WorkloadId old_work = submit("a-old", "a", 8, 8, 1);
  s_->schedule();
  clock_.advance(std::chrono::minutes(30));
  const WorkloadId young = submit("a-young", "a", 8, 8, 1);
  s_->schedule();
  ASSERT_EQ(running(old_work) + running(young), 16);
  ASSERT_EQ(nodesOf(old_work).size(), 1U);
  ASSERT_EQ(nodesOf(young).size(), 1U);
  clock_.advance(std::chrono::minutes(5));
  const WorkloadId b = submit("b-four", "b", 1, 1, 4);
  PassResult r = s_->schedule();
  // The young gang is the cheap one (8 x 5 GPU-minutes against 8 x 35), and it goes whole.
  ASSERT_EQ(r.evicted.size(), 8U);
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(e.victim, young);
    EXPECT_EQ(e.preemptor, b);
    EXPECT_NE(e.detail.find("unsaved 0.67 GPU-h"), std::string::npos) << e.detail;
  }
  EXPECT_EQ(running(old_work), 8);
}

// Rule 1: what the victims free is the preemptor's until it has been tried, whoever else waits
// (the victims themselves included), even while only some of the victims have stopped.
TEST_F(SchedulerTest, TheRoomVictimsFreeIsHeldForTheirPreemptor) {
  build(1, 4, 4);
  const WorkloadId a = submit("a-wide", "a", 8, 1, 1);
  s_->schedule();
  ASSERT_EQ(running(a), 8);
  const WorkloadId b = submit("b-gang", "b", 1, 1, 3);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 3U);
  // Two victims stop; a third workload of a's arrives, and a's evicted tasks wait too.
  s_->taskStopped(r.evicted[0].task);
  s_->taskStopped(r.evicted[1].task);
  const WorkloadId other = submit("a-other", "a", 1, 1, 1);
  PassResult mid = s_->schedule();
  EXPECT_TRUE(mid.started.empty());
  EXPECT_EQ(running(other), 0);
  EXPECT_EQ(running(a), 5);
  EXPECT_EQ(s_->explain(b).reason, WaitReason::kWaitingForEvictions);
  // The last one stops: the preemptor starts on the room made for it.
  s_->taskStopped(r.evicted[2].task);
  PassResult last = s_->schedule();
  ASSERT_EQ(running(b), 1);
  EXPECT_EQ(running(other), 0);
  EXPECT_EQ(last.started.front().workload, b);
}

// Rule 1 again, where no reservation covers the victims' node: the reservation is b-big's, on
// the other node. Before, whatever freed up there while the preemptor waited for its last
// victim was anyone's.
TEST_F(SchedulerTest, TheRoomVictimsFreeIsHeldWhereNoReservationCoversIt) {
  build(2, 12, 2);
  const WorkloadId first = submit("a-first", "a", 8, 1, 1);
  s_->schedule();
  clock_.advance(std::chrono::minutes(10));
  const WorkloadId second = submit("a-second", "a", 8, 1, 1);
  s_->schedule();
  ASSERT_EQ(running(first) + running(second), 16);
  const NodeIndex second_node = *nodesOf(second).begin();
  clock_.advance(std::chrono::minutes(5));
  // b's fair share is 3: b-big (8 GPUs) cannot reclaim, but holds the reservation.
  const WorkloadId big = submit("b-big", "b", 1, 1, 8);
  s_->schedule();
  ASSERT_EQ(s_->reservedFor(), big);
  ASSERT_NE(s_->reservedNodes().front(), second_node);
  const WorkloadId gang = submit("b-gang", "b", 1, 1, 3);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 3U);
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(e.victim, second);  // The younger ones, on the node not reserved.
  }
  s_->taskStopped(r.evicted[0].task);
  s_->taskStopped(r.evicted[1].task);
  const WorkloadId other = submit("a-other", "a", 1, 1, 1);
  s_->schedule();
  EXPECT_EQ(running(other), 0);  // The two stopped victims' GPUs wait for b-gang.
  s_->taskStopped(r.evicted[2].task);
  s_->schedule();
  EXPECT_EQ(running(gang), 1);
  EXPECT_EQ(*nodesOf(gang).begin(), second_node);
}

// Rule 2: reclaim takes a task only while its unsaved work is under the victim queue's bound;
// a checkpoint makes a long job cheap to take, and a queue may set its own bound.
TEST_F(SchedulerTest, ReclaimLeavesWorkWhoseEvictionWouldDestroyTooMuch) {
  build(1, 4, 4);
  const WorkloadId a = submit("a-long", "a", 8, 8, 1);
  s_->schedule();
  clock_.advance(std::chrono::hours(2));  // 2 GPU-hours unsaved per task.
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  EXPECT_EQ(s_->explain(b).reason, WaitReason::kNoCapacity);
  s_->cancel(a);
  s_->cancel(b);
  // Such tasks checkpointing every 25 minutes: 2 h in, each saved 20 minutes ago.
  const WorkloadId saved = submitRequest("a-saved", "a", 8, 1, testing::gpuTask(4000, 1), true,
                                         std::chrono::minutes(25));
  s_->schedule();
  clock_.advance(std::chrono::hours(2));
  const WorkloadId b2 = submit("b-two", "b", 1, 1, 1);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, saved);
  EXPECT_EQ(r.evicted[0].preemptor, b2);
}

// A real GPU's MIG mode decides what it takes: MIG slices only where it is on, other work only
// where it is off; a MIG slice waits, saying why, until a GPU's agent reports the mode on.
TEST_F(SchedulerTest, MigSlicesGoOnlyToGpusInMigModeAndOtherWorkNever) {
  build(1, 16, 0);  // a's quota is no limit here: only the GPUs' modes are.
  for (int g = 0; g < 8; ++g) {
    ASSERT_TRUE(s_->setGpuMigMode(0, g, model::MigMode::kOff).isOk());
  }
  const WorkloadId slice = submitRequest("a-slice", "a", 1, 1, testing::migTask("3g.40gb"));
  s_->schedule();
  EXPECT_EQ(running(slice), 0);
  EXPECT_NE(s_->explain(slice).message.find("MIG mode"), std::string::npos)
      << s_->explain(slice).message;
  ASSERT_TRUE(s_->setGpuMigMode(0, 5, model::MigMode::kOn).isOk());
  s_->schedule();
  ASSERT_EQ(running(slice), 1);
  const TaskInfo& t = s_->task(s_->workload(slice).tasks[0]);
  EXPECT_EQ(t.assignment.placement.gpus, uint64_t{1} << 5);
  // Eight whole GPUs no longer fit: one is in MIG mode. Seven do, never on GPU 5.
  const WorkloadId eight = submit("a-eight", "a", 1, 1, 8);
  const WorkloadId seven = submit("a-seven", "a", 1, 1, 7);
  s_->schedule();
  EXPECT_EQ(running(eight), 0);
  ASSERT_EQ(running(seven), 1);
  EXPECT_EQ(s_->task(s_->workload(seven).tasks[0]).assignment.placement.gpus & (1U << 5), 0U);
  EXPECT_FALSE(s_->setGpuMigMode(0, 8, model::MigMode::kOn).isOk());
}

// #40 item 6: a MIG instance left by a task that ended stays in its GPU's layout. The next task
// of its profile is placed in it, with no re-layout, though another GPU is fuller (which is
// what the slice would take otherwise); a slice of another profile keeps out of an idle
// instance while another GPU has room; and a whole GPU's task clears the layout.
TEST_F(SchedulerTest, AMigInstanceLeftByAFinishedTaskIsReusedWithoutRelayout) {
  build(1, 16, 0);
  for (int g = 0; g < 2; ++g) {
    ASSERT_TRUE(s_->setGpuMigMode(0, g, model::MigMode::kOn).isOk());
  }
  for (int g = 2; g < 8; ++g) {
    ASSERT_TRUE(s_->setGpuMigMode(0, g, model::MigMode::kOff).isOk());
  }
  auto where = [&](WorkloadId w, int task = 0) {
    const Placement& p =
        s_->task(s_->workload(w).tasks[static_cast<size_t>(task)]).assignment.placement;
    return std::pair{std::countr_zero(p.gpus), p.mig_start};
  };
  const WorkloadId pair = submitRequest("a-pair", "a", 2, 2, testing::migTask("3g.40gb"));
  s_->schedule();
  ASSERT_EQ(running(pair), 2);
  ASSERT_EQ(where(pair, 0).first, 0);  // Both on GPU 0: the fullest first.
  ASSERT_EQ(where(pair, 1).first, 0);
  const std::set<int> starts = {where(pair, 0).second, where(pair, 1).second};
  const WorkloadId small = submitRequest("a-small", "a", 1, 1, testing::migTask("1g.10gb"));
  s_->schedule();
  ASSERT_EQ(where(small).first, 1);  // GPU 0 is full.
  s_->taskFinished(s_->workload(pair).tasks[0]);
  s_->taskFinished(s_->workload(pair).tasks[1]);

  // GPU 1 is the fuller now; GPU 0 holds two idle 3g instances.
  const WorkloadId again = submitRequest("a-again", "a", 1, 1, testing::migTask("3g.40gb"));
  s_->schedule();
  ASSERT_EQ(running(again), 1);
  EXPECT_EQ(where(again).first, 0);
  EXPECT_TRUE(starts.contains(where(again).second));
  // A 1g slice: on GPU 0 it could only go across the idle 3g instance; GPU 1 has room.
  const WorkloadId other = submitRequest("a-other", "a", 1, 1, testing::migTask("1g.10gb"));
  s_->schedule();
  EXPECT_EQ(where(other).first, 1);
  // The other idle instance is still there for the next 3g.
  const WorkloadId third = submitRequest("a-third", "a", 1, 1, testing::migTask("3g.40gb"));
  s_->schedule();
  EXPECT_EQ(where(third).first, 0);
  EXPECT_TRUE(starts.contains(where(third).second));
  EXPECT_NE(where(third).second, where(again).second);
}

// Reclaim skips a running workload with no victim under the bound until that can change: its
// next checkpoint, a task coming of age (MinimumRuntimeProtectsYoungTasks), or a change in its
// running tasks. Each of these must bring it back.
TEST_F(SchedulerTest, WorkOverTheBoundIsAVictimAgainAfterItsNextCheckpoint) {
  build(1, 4, 4);
  const WorkloadId a =
      submitRequest("a-saved", "a", 8, 1, testing::gpuTask(4000, 1), true, std::chrono::hours(2));
  s_->schedule();
  clock_.advance(std::chrono::minutes(90));  // 1.5 GPU-hours unsaved per task: over the bound.
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  clock_.advance(std::chrono::minutes(20));
  EXPECT_TRUE(s_->schedule().evicted.empty());  // 1 h 50 min: still over.
  clock_.advance(std::chrono::minutes(20));     // Saved at 2 h; 10 minutes unsaved since.
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, a);
  EXPECT_EQ(r.evicted[0].preemptor, b);
}

TEST_F(SchedulerTest, WorkOverTheBoundIsAVictimAgainWhenItsRunningTasksChange) {
  build(1, 0, 8);  // a deserves nothing: all it runs is borrowed.
  const WorkloadId a = submit("a-gang", "a", 8, 8, 1);
  s_->schedule();
  ASSERT_EQ(running(a), 8);
  clock_.advance(std::chrono::minutes(10));  // The gang: 80 GPU-minutes unsaved, over the bound.
  const WorkloadId b = submitRequest("b-six", "b", 1, 1, testing::gpuTask(4000, 6));
  EXPECT_TRUE(s_->schedule().evicted.empty());
  // Half the gang finishes: the rest, 40 GPU-minutes unsaved, is under the bound now.
  for (int i = 0; i < 4; ++i) {
    s_->taskFinished(s_->workload(a).tasks[static_cast<size_t>(i)]);
  }
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 4U);
  EXPECT_EQ(r.evicted[0].victim, a);
  EXPECT_EQ(r.evicted[0].preemptor, b);
}

TEST_F(SchedulerTest, AQueueMaySetItsOwnBoundOnUnsavedWork) {
  build(1, 4, 4, {}, -1, /*max_unsaved_a_s=*/3 * 3600);
  const WorkloadId a = submit("a-elastic", "a", 8, 1, 1);
  s_->schedule();
  clock_.advance(std::chrono::hours(2));  // 2 GPU-hours per task: under a's own 3.
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, a);
  EXPECT_EQ(r.evicted[0].preemptor, b);
}

// Rule 2: a queue without a bound of its own takes its nearest ancestor's (a tenant's covers its
// teams), and its own, once set, wins.
TEST_F(SchedulerTest, AQueueTakesItsAncestorsBoundUnlessItHasItsOwn) {
  build(1, 4, 4);
  const QueueId org = *s_->queues().find("org");
  const QueueId aq = *s_->queues().find("a");
  ASSERT_TRUE(s_->setMaxUnsaved(org, 3 * 3600).isOk());
  ASSERT_TRUE(s_->setMaxUnsaved(aq, 0).isOk());
  submit("a-elastic", "a", 8, 1, 1);
  s_->schedule();
  clock_.advance(std::chrono::hours(2));  // 2 GPU-hours unsaved per task.
  submit("b-one", "b", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());  // a's own bound, 0, wins over org's 3 hours.
  ASSERT_TRUE(s_->setMaxUnsaved(aq, -1).isOk());
  EXPECT_EQ(s_->schedule().evicted.size(), 1U);  // Now org's 3 hours.
  EXPECT_FALSE(s_->setMaxUnsaved(aq, -2).isOk());
}

// Rule 2: victims go in order of least unsaved work; a recent checkpoint makes an old task the
// cheapest.
TEST_F(SchedulerTest, VictimsGoInOrderOfLeastUnsavedWork) {
  build(1, 4, 4);
  const WorkloadId plain = submit("a-plain", "a", 5, 1, 1);
  const WorkloadId saved = submitRequest("a-saved", "a", 3, 1, testing::gpuTask(4000, 1), true,
                                         std::chrono::minutes(25));
  s_->schedule();
  ASSERT_EQ(running(saved) + running(plain), 8);
  clock_.advance(std::chrono::minutes(30));  // a-saved saved 5 minutes ago; a-plain never.
  submit("b-two", "b", 1, 1, 2);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 2U);
  EXPECT_EQ(r.evicted[0].victim, saved);
  EXPECT_EQ(r.evicted[1].victim, saved);
}

// Rule 3, past the floor (#40, item 4): a unit that would take the victim's side below its floor
// goes only when that brings the farther of the two sides nearer its share. Fair shares a 7, b 1:
// a pair of a's (8 held) for b's one GPU leaves a at 6 of 7 and b at its share, where b had
// nothing: fairer, though a GPU idles until the pair can come back. KAI evicts here; before #40
// b waited for as long as a's pairs ran.
TEST_F(SchedulerTest, ReclaimTakesTheVictimBelowItsShareWhenThatIsFairer) {
  build(1, 4, 0);  // b deserves nothing: what it gets is surplus.
  const WorkloadId a = submit("a-pairs", "a", 4, 1, 2);
  s_->schedule();
  ASSERT_EQ(running(a), 4);
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, a);
  EXPECT_EQ(r.evicted[0].preemptor, b);
  stopEvicted(r);
  s_->schedule();
  EXPECT_EQ(running(b), 1);
  EXPECT_EQ(running(a), 3);
  EXPECT_TRUE(s_->schedule().evicted.empty());  // And it stays so.
}

// #40, item 4: the room a reclaimer needs on one node may come from single elastic tasks of
// several workloads of the victim's queue.
TEST_F(SchedulerTest, OneTaskEachOfTwoElasticJobsMakeRoomForATwoGpuTask) {
  build(1, 4, 4);
  const WorkloadId a1 = submit("a-one", "a", 4, 3, 1);
  const WorkloadId a2 = submit("a-two", "a", 2, 1, 1);
  const WorkloadId b0 = submit("b-two", "b", 2, 2, 1);
  s_->schedule();
  ASSERT_EQ(running(a1), 4);
  ASSERT_EQ(running(a2), 2);
  ASSERT_EQ(running(b0), 2);
  clock_.advance(std::chrono::minutes(10));
  const WorkloadId pair = submit("b-pair", "b", 1, 1, 2);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 2U);  // a's one elastic task of a-one and one of a-two's.
  std::set<WorkloadId> victims;
  for (const EvictDecision& e : r.evicted) {
    victims.insert(e.victim);
    EXPECT_EQ(e.preemptor, pair);
  }
  EXPECT_EQ(victims, (std::set<WorkloadId>{a1, a2}));
  stopEvicted(r);
  s_->schedule();
  EXPECT_EQ(running(pair), 1);
}

// ... and not when it would leave the pair less fair: a (quota 4) holds one 6-GPU task, b (quota
// 4) holds 2 and asks for one more. Taking the 6 GPUs would leave a 4 below its quota where it is
// 2 over, for b's 1: b waits. (KAI evicts, and 5 GPUs idle until the 6-GPU task fits again.)
TEST_F(SchedulerTest, ReclaimLeavesAUnitWhoseEvictionWouldBeLessFair) {
  build(1, 4, 4);
  const WorkloadId big = submit("a-big", "a", 1, 1, 6);
  const WorkloadId two = submit("b-two", "b", 2, 2, 1);
  s_->schedule();
  ASSERT_EQ(running(big), 1);
  ASSERT_EQ(running(two), 2);
  clock_.advance(std::chrono::minutes(5));
  const WorkloadId one = submit("b-one", "b", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  EXPECT_NE(s_->explain(one).message.find("the only victims would take 'a' below its quota"),
            std::string::npos)
      << s_->explain(one).message;
}

// Issue #37: a workload waiting for room says what reclaim made of it, in words a user can act
// on: not considered (its queue holds more than its share), or considered and refused, and why.
TEST_F(SchedulerTest, AWaitingWorkloadSaysWhatReclaimMadeOfIt) {
  auto says = [&](WorkloadId w, const std::string& text) {
    const Explanation e = s_->explain(w);
    EXPECT_EQ(e.reason, WaitReason::kNoCapacity) << e.message;
    EXPECT_NE(e.message.find(text), std::string::npos) << e.message;
  };
  // The only victim would take the other queue below its share, and leave the two less fair: a
  // (fair share 7) holds 8 in one task, which b's one GPU would take whole.
  build(1, 4, 0);
  submit("a-all", "a", 1, 1, 8);
  s_->schedule();
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  says(b,
       "0/1 nodes fit: 1 insufficient free GPU share; reclaim considered: the only victims "
       "would take 'a' below its share");
  // The reclaimer itself would go past its share: b holds 3 of its 4, and a pair would make 5.
  build(1, 4, 4);
  const WorkloadId a = submit("a-train", "a", 5, 1, 1);
  submit("b-small", "b", 3, 3, 1);
  s_->schedule();
  const WorkloadId pair = submit("b-pair", "b", 1, 1, 2);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  says(pair, "reclaim considered: with its 1 task(s), queue 'b' would hold more than its share");
  // a, holding 5 of its 4, is not considered for reclaim at all.
  const WorkloadId more = submit("a-more", "a", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  says(more, "reclaim not considered: queue 'a' holds more than its share");
  EXPECT_EQ(running(a), 5);
  // Work that holds too much unsaved work is no victim.
  build(1, 4, 4);
  submit("a-long", "a", 8, 8, 1);
  s_->schedule();
  clock_.advance(std::chrono::hours(2));
  const WorkloadId late = submit("b-late", "b", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  says(late,
       "reclaim considered: no running work of the queues over their share ('a') may be "
       "taken");
  // No queue over its share: nothing to reclaim from.
  build(1, 4, 4);
  submit("a-half", "a", 4, 4, 1);
  submit("b-half", "b", 4, 4, 1);
  s_->schedule();
  const WorkloadId extra = submit("b-extra", "b", 1, 1, 1);
  s_->schedule();
  // b at its share (4 of 4) with more pending: over it once the extra is counted, not before.
  const std::string m = s_->explain(extra).message;
  EXPECT_TRUE(m.find("reclaim considered: with its 1 task(s), queue 'b' would hold more") !=
                  std::string::npos ||
              m.find("reclaim considered: no other queue holds more than its share") !=
                  std::string::npos)
      << m;
}

// Issue #37: a removed node is no node: a waiting workload's reason neither counts it nor says
// it is down.
TEST_F(SchedulerTest, ARemovedNodeLeavesTheWaitingReasons) {
  build(3, 4, 4);
  const WorkloadId wide = submit("wide", "a", 1, 1, 8);
  const WorkloadId big = submit("big", "a", 1, 1, 8);
  const WorkloadId b = submit("b-wide", "b", 1, 1, 8);
  s_->schedule();
  ASSERT_EQ(running(wide) + running(big) + running(b), 3);
  const WorkloadId waits = submit("waits", "b", 1, 1, 4);
  s_->schedule();
  EXPECT_NE(s_->explain(waits).message.find("0/3 nodes fit: 3 insufficient free GPU share"),
            std::string::npos)
      << s_->explain(waits).message;
  // The node of `big` goes: lost, then removed.
  const NodeIndex gone = *nodesOf(big).begin();
  s_->nodeLost(gone);
  s_->cancel(big);
  s_->removeNode(gone);
  s_->schedule();
  const std::string m = s_->explain(waits).message;
  EXPECT_NE(m.find("0/2 nodes fit: 2 insufficient free GPU share"), std::string::npos) << m;
  EXPECT_EQ(m.find("down"), std::string::npos) << m;
  EXPECT_EQ(m.find("removed"), std::string::npos) << m;
}

// Rule 3: patience. A workload reclaims only after it waited `reclaim_patience` while its
// queue was within its share.
TEST_F(SchedulerTest, ReclaimWaitsForItsPatience) {
  SchedulerOptions o;
  o.reclaim_patience = std::chrono::minutes(10);
  build(1, 4, 4, o);
  submit("a-wide", "a", 8, 1, 1);
  s_->schedule();
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  EXPECT_TRUE(s_->schedule().evicted.empty());
  clock_.advance(std::chrono::minutes(9));
  EXPECT_TRUE(s_->schedule().evicted.empty());
  clock_.advance(std::chrono::minutes(1));
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].preemptor, b);
}

// Bug 4a: two blocked workloads of one queue in one pass each judged reclaim against the state
// before the pass's earlier evictions, so the second evicted again past the share.
TEST_F(SchedulerTest, ASecondReclaimerSeesTheEvictionsAlreadyUnderWay) {
  build(1, 4, 4);
  const WorkloadId a = submit("a-wide", "a", 8, 1, 1);
  s_->schedule();
  const WorkloadId b1 = submit("b-first", "b", 1, 1, 4);
  const WorkloadId b2 = submit("b-second", "b", 1, 1, 4);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 4U);
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(e.preemptor, b1);
  }
  EXPECT_TRUE(s_->schedule().evicted.empty());  // Nor in a pass while they stop.
  stopEvicted(r);
  s_->schedule();
  EXPECT_EQ(running(b1), 1);
  EXPECT_EQ(running(b2), 0);
  EXPECT_EQ(running(a), 4);
  EXPECT_TRUE(s_->schedule().evicted.empty());
}

// Bug 4c: a queue exactly at its GPU share could not reclaim CPU it is owed.
TEST_F(SchedulerTest, AQueueAtItsGpuShareMayReclaimCpuItIsOwed) {
  build(1, 4, 4);
  const WorkloadId a_gpu = submit("a-gpu", "a", 4, 4, 1);
  const WorkloadId b_gpu = submit("b-gpu", "b", 4, 4, 1);
  // a fills the node's other 192 cores with CPU-only tasks of 8 cores.
  const WorkloadId a_cpu = submitRequest("a-cpu", "a", 24, 1, testing::cpuTask(8000));
  s_->schedule();
  ASSERT_EQ(running(a_gpu) + running(b_gpu), 8);
  ASSERT_EQ(running(a_cpu), 24);
  ASSERT_EQ(allocatedGpus("b"), 4);  // Exactly its GPU share.
  const WorkloadId b_cpu = submitRequest("b-cpu", "b", 1, 1, testing::cpuTask(8000));
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, a_cpu);
  EXPECT_EQ(r.evicted[0].preemptor, b_cpu);
}

// Bug 4d: a higher-priority job blocked by its own queue's limit preempts lower-priority work of
// the queue: the swap leaves the queue's totals as they were.
TEST_F(SchedulerTest, PriorityPreemptionServesWorkBlockedByItsQueuesLimit) {
  build(2, 4, 4, {}, /*limit_a=*/4);
  const WorkloadId low = submit("a-low", "a", 4, 1, 1, /*priority=*/0);
  s_->schedule();
  ASSERT_EQ(running(low), 4);
  const WorkloadId high = submit("a-high", "a", 1, 1, 2, /*priority=*/10);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 2U);  // Two GPUs of the four under the limit, no more.
  for (const EvictDecision& e : r.evicted) {
    EXPECT_EQ(e.victim, low);
    EXPECT_FALSE(e.reclaim);
  }
  stopEvicted(r);
  s_->schedule();
  EXPECT_EQ(running(high), 1);
  EXPECT_EQ(allocatedGpus("a"), 4);
}

// Bug 4e: a victim that frees nothing the preemptor can use (half of a GPU whose other half
// stays taken, for a whole-GPU preemptor) is not evicted, though it is the cheapest.
// On one node of queue a: 7 whole GPUs, and on the eighth a non-preemptible half beside a
// younger preemptible half (the cheapest task of all, freeing nothing whole). Returns the
// whole-GPU workload and the young half's.
std::pair<WorkloadId, WorkloadId> SchedulerTest::halfBesidePinned() {
  const WorkloadId whole = submit("a-whole", "a", 7, 1, 1);
  const WorkloadId pinned =
      submitRequest("a-pinned", "a", 1, 1, testing::gpuTask(1000, 1, 500), false);
  s_->schedule();
  EXPECT_EQ(running(whole), 7);
  EXPECT_EQ(running(pinned), 1);
  clock_.advance(std::chrono::minutes(10));
  const WorkloadId half = submitRequest("a-half", "a", 1, 1, testing::gpuTask(1000, 1, 500));
  s_->schedule();
  EXPECT_EQ(running(half), 1);
  return {whole, half};
}

TEST_F(SchedulerTest, AVictimThatFreesNothingUsableIsLeftAlone) {
  build(1, 4, 4);
  const auto [whole, half] = halfBesidePinned();
  ASSERT_FALSE(HasFailure());
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, whole);
  EXPECT_EQ(r.evicted[0].preemptor, b);
  EXPECT_EQ(running(half), 1);
}

// Bug 4c, memory: a queue exactly at its GPU share reclaims memory it is owed.
TEST_F(SchedulerTest, AQueueAtItsGpuShareMayReclaimMemoryItIsOwed) {
  build(1, 4, 4);
  const WorkloadId a_gpu = submit("a-gpu", "a", 4, 4, 1);
  const WorkloadId b_gpu = submit("b-gpu", "b", 4, 4, 1);
  // a takes all of the node's memory with CPU-only tasks of 256 GiB.
  const WorkloadId a_mem = submitRequest("a-mem", "a", 8, 1, testing::cpuTask(1000, 262144));
  s_->schedule();
  ASSERT_EQ(running(a_gpu) + running(b_gpu), 8);
  ASSERT_EQ(running(a_mem), 8);
  const WorkloadId b_mem = submitRequest("b-mem", "b", 1, 1, testing::cpuTask(1000, 262144));
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, a_mem);
  EXPECT_EQ(r.evicted[0].preemptor, b_mem);
}

// Bug 4e, by priority: a preemption in one queue leaves alone the half GPU it could not use.
TEST_F(SchedulerTest, APreemptionLeavesAloneAVictimThatFreesNothingUsable) {
  build(1, 8, 0);
  const auto [whole, half] = halfBesidePinned();
  ASSERT_FALSE(HasFailure());
  const WorkloadId high = submit("a-high", "a", 1, 1, 1, /*priority=*/10);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, whole);
  EXPECT_EQ(r.evicted[0].preemptor, high);
  EXPECT_EQ(running(half), 1);
}

// Bug 4e, CPU: a CPU-only victim on a node whose GPUs are all taken frees nothing for a GPU task.
TEST_F(SchedulerTest, AReclaimLeavesAloneACpuOnlyVictimWhenGpusAreWhatIsMissing) {
  build(1, 4, 4);
  clock_.advance(std::chrono::minutes(10));
  const WorkloadId whole = submit("a-whole", "a", 8, 1, 1);
  s_->schedule();
  clock_.advance(std::chrono::minutes(10));
  const WorkloadId cpu = submitRequest("a-cpu", "a", 1, 1, testing::cpuTask(1000));
  s_->schedule();
  ASSERT_EQ(running(whole), 8);
  ASSERT_EQ(running(cpu), 1);  // Younger: the least unsaved work.
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 1U);
  EXPECT_EQ(r.evicted[0].victim, whole);
  EXPECT_EQ(r.evicted[0].preemptor, b);
  EXPECT_EQ(running(cpu), 1);
}

// Bug 4f: queues are served in KAI's order, judged with their next job added. A queue with no
// fair share of GPUs (quota 0, weight 0) compared as "0 / 0 = 0" before, won the tie against a
// queue under its share, took the GPU, and was reclaimed in the same pass.
TEST_F(SchedulerTest, AQueueWithNoShareOfWhatItAsksIsServedLast) {
  build(1, 4, 0);
  const QueueId bq = *s_->queues().find("b");
  ASSERT_TRUE(s_->updateQueue(bq, s_->queues().space().zeros(), s_->queues().space().unlimited(),
                              /*weight=*/0, 100)
                  .isOk());
  const WorkloadId six = submit("a-six", "a", 6, 1, 1);
  s_->schedule();
  ASSERT_EQ(running(six), 6);
  const WorkloadId two = submit("a-two", "a", 2, 1, 1);
  const WorkloadId b = submit("b-one", "b", 1, 1, 1);
  PassResult r = s_->schedule();
  EXPECT_EQ(running(two), 2);
  EXPECT_EQ(running(b), 0);
  EXPECT_TRUE(r.evicted.empty());
  // Once a wants no more, b takes what is idle: the order decides who goes first, not who may.
  s_->taskFinished(s_->workload(six).tasks[0]);
  s_->schedule();
  EXPECT_EQ(running(b), 1);
}

// Rule 5: consolidation. A 6-GPU task fits nowhere, though 6 GPUs are free (2 on one node, 4 on
// the other); moving two young 1-GPU tasks to the other node makes room. Neither reclaim nor
// preemption could: everything is in one queue, at one priority.
TEST_F(SchedulerTest, ConsolidationMovesTasksThatCanRestartElsewhereAtOnce) {
  build(2, 8, 8);
  const WorkloadId full = submit("a-full", "a", 8, 1, 1);
  s_->schedule();
  clock_.advance(std::chrono::minutes(5));
  const WorkloadId half = submit("a-half", "a", 4, 1, 1);
  s_->schedule();
  ASSERT_EQ(nodesOf(full).size(), 1U);
  ASSERT_EQ(nodesOf(half).size(), 1U);
  const NodeIndex full_node = *nodesOf(full).begin();
  s_->taskFinished(s_->workload(full).tasks[0]);
  s_->taskFinished(s_->workload(full).tasks[1]);
  clock_.advance(std::chrono::minutes(5));
  const WorkloadId six = submit("a-six", "a", 1, 1, 6);
  PassResult r = s_->schedule();
  ASSERT_EQ(r.evicted.size(), 2U);
  for (const EvictDecision& e : r.evicted) {
    EXPECT_TRUE(e.moved);
    EXPECT_FALSE(e.reclaim);
    EXPECT_EQ(e.victim, half);  // The younger tasks, from the node with more room.
    EXPECT_EQ(e.preemptor, six);
  }
  stopEvicted(r);
  r = s_->schedule();
  EXPECT_EQ(running(six), 1);
  EXPECT_EQ(running(half), 4);  // Both moved tasks restarted at once, on the other node.
  int moved_over = 0;
  for (TaskId t : s_->workload(half).tasks) {
    moved_over += s_->task(t).assignment.placement.node == full_node ? 1 : 0;
  }
  EXPECT_EQ(moved_over, 2);
  EXPECT_NE(*nodesOf(six).begin(), full_node);
}

// Rule 5: nothing moves when the moved tasks would have nowhere to go.
TEST_F(SchedulerTest, ConsolidationMovesNothingThatCannotRestartAtOnce) {
  build(2, 8, 8);
  const WorkloadId big = submit("a-big", "a", 1, 1, 6);
  s_->schedule();
  const WorkloadId other = submit("a-other", "a", 1, 1, 6);
  s_->schedule();
  ASSERT_EQ(running(big) + running(other), 2);
  const WorkloadId four = submit("a-four", "a", 1, 1, 4);
  EXPECT_TRUE(s_->schedule().evicted.empty());  // 4 free GPUs, but no 6-GPU task can move.
  EXPECT_EQ(running(four), 0);
}

}  // namespace
}  // namespace tessera::sched
