#include "sim/scenario.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/scenario_run.h"

namespace tessera::sim {
namespace {

std::string examples() {
  const char* d = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(d != nullptr ? d : ".") + "/examples/scenarios/";
}

ScenarioResult run(const std::string& name) {
  auto sc = readScenario(examples() + name);
  EXPECT_TRUE(sc.isOk()) << sc.status().message();
  auto r = runScenario(*sc);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return std::move(r).value();
}

// The last tenants row of `queue` at or before `t`.
TenantRow at(const ScenarioResult& r, const std::string& queue, double t) {
  TenantRow last;
  for (const TenantRow& row : r.tenants) {
    if (row.queue == queue && row.time_s <= t) {
      last = row;
    }
  }
  return last;
}

TEST(ScenarioTest, BorrowerGivesBackExactlyItsOverShareWithinOnePassAndGrace) {
  ScenarioResult r = run("reclaim.json");
  // a borrows: 40 tasks run at once on 48 GPUs while b wants nothing.
  EXPECT_EQ(at(r, "a", 0).allocated_milli_gpu, 40000);
  // b arrives at 600 wanting 16 GPUs as two whole nodes; fair shares become a 32, b 16.
  int evicted = 0;
  for (const SimEvent& e : r.events) {
    if (e.event == "evict") {
      EXPECT_EQ(e.time_s, 600);
      EXPECT_EQ(e.queue, "a");
      EXPECT_NE(e.detail.find("reclaimed by 'b-big' (queue 'b')"), std::string::npos) << e.detail;
      ++evicted;
    }
  }
  EXPECT_EQ(evicted, 8);  // Exactly a's over-share.
  int b_started = 0;
  for (const SimEvent& e : r.events) {
    if (e.event == "start" && e.workload == "b-big") {
      EXPECT_EQ(e.time_s, 630);  // One pass plus the victims' 30 s grace period.
      ++b_started;
    }
  }
  EXPECT_EQ(b_started, 2);
  EXPECT_EQ(at(r, "a", 630).allocated_milli_gpu, 32000);
  EXPECT_EQ(at(r, "b", 630).allocated_milli_gpu, 16000);
  EXPECT_EQ(at(r, "b", 630).fair_share_milli_gpu, 16000);
  EXPECT_EQ(r.queues[1].name, "b");
  EXPECT_LE(r.queues[1].max_time_to_quota_s, 30);
  EXPECT_EQ(r.failed_workloads, 0);
}

// summary.json's account of work: what finished tasks did, and what evictions threw away (the
// run since each victim's last checkpoint).
TEST(ScenarioTest, TheWorkEvictionsThrowAwayIsCounted) {
  // reclaim.json: a's tasks checkpoint every 600 s and are evicted at 600 s: nothing is lost.
  ScenarioResult r = run("reclaim.json");
  EXPECT_EQ(r.evictions, 8);
  EXPECT_DOUBLE_EQ(r.lost_gpu_seconds, 0);
  // 40 one-GPU tasks of 7,200 s and 2 eight-GPU tasks of 3,600 s, all finished.
  EXPECT_DOUBLE_EQ(r.useful_gpu_seconds, 40 * 7200.0 + 2 * 8 * 3600.0);
  EXPECT_DOUBLE_EQ(r.queues[0].useful_gpu_seconds, 40 * 7200.0);
  EXPECT_GT(r.goodput, 0);
  EXPECT_LE(r.goodput, r.utilisation + 1e-9);
  // tenants-reclaim.json: 16 one-GPU tasks evicted at 900 s keep their 600 s checkpoint.
  r = run("tenants-reclaim.json");
  EXPECT_EQ(r.evictions, 16);
  EXPECT_DOUBLE_EQ(r.lost_gpu_seconds, 16 * 300.0);
  EXPECT_DOUBLE_EQ(r.queues[0].lost_gpu_seconds, 16 * 300.0);
  EXPECT_DOUBLE_EQ(r.queues[1].lost_gpu_seconds, 0);
}

TEST(ScenarioTest, SurplusSplitsByWeightOneToTwo) {
  ScenarioResult r = run("weights.json");
  EXPECT_EQ(at(r, "light", 600).allocated_milli_gpu, 48000);  // Alone: all of it.
  const TenantRow light = at(r, "light", 1300);
  const TenantRow heavy = at(r, "heavy", 1300);
  EXPECT_EQ(light.fair_share_milli_gpu, 16000);
  EXPECT_EQ(heavy.fair_share_milli_gpu, 32000);
  EXPECT_EQ(light.allocated_milli_gpu, 16000);
  EXPECT_EQ(heavy.allocated_milli_gpu, 32000);
}

TEST(ScenarioTest, BigGangIsNotStarvedByAStreamOfSmallJobs) {
  ScenarioResult r = run("big-gang.json");
  double gang_start = -1;
  int small_after = 0;
  for (const SimEvent& e : r.events) {
    if (e.event == "start" && e.workload == "big-gang") {
      gang_start = e.time_s;
    }
    if (e.event == "start" && e.workload.rfind("small-", 0) == 0 && e.time_s > 600 &&
        gang_start < 0) {
      ++small_after;
    }
  }
  // Small jobs arrive every 10 s and run 300 s; the gang arrives at 600. Its nodes drain within
  // one small job's run, and no small job starts meanwhile.
  ASSERT_GE(gang_start, 0);
  EXPECT_LE(gang_start, 600 + 300);
  EXPECT_EQ(small_after, 0);
  EXPECT_EQ(r.evictions, 0);
  EXPECT_EQ(r.failed_workloads, 0);
}

TEST(ScenarioTest, NoTaskIsEvictedTwiceForTheSamePairOfQueues) {
  ScenarioResult r = run("no-ping-pong.json");
  ASSERT_GT(r.evictions, 0);
  std::map<std::pair<std::string, int>, std::vector<std::string>> history;
  for (const SimEvent& e : r.events) {
    if (e.event == "evict") {
      const size_t q = e.detail.find("(queue '");
      const std::string preemptor = e.detail.substr(q + 8, e.detail.find('\'', q + 8) - q - 8);
      history[{e.workload, e.task}].push_back(e.queue + "<-" + preemptor);
    }
  }
  for (const auto& [task, pairs] : history) {
    for (size_t i = 1; i < pairs.size(); ++i) {
      EXPECT_NE(pairs[i], pairs[i - 1]) << task.first << "/" << task.second;
    }
  }
  for (const QueueSummary& q : r.queues) {
    EXPECT_LE(q.max_time_to_quota_s, 30) << q.name;  // One pass plus the grace period.
  }
}

// Issue #20, rules 1 and 2, end to end (and through the live API in cli_sim_test): team-2 takes
// back a node from team-1. team-1's 16-GPU gang has run two unsaved hours (32 GPU-hours: far over
// the bound), its 1-GPU tasks checkpoint every 10 minutes (5 GPU-minutes unsaved each): those go,
// all on the one node the reclaimer then uses, and nothing else.
TEST(ScenarioTest, ReclaimTakesOnlyCheapWorkOnTheNodeItUses) {
  ScenarioResult r = run("tenants-reclaim-cost.json");
  std::set<std::string> nodes;
  int evicted = 0;
  std::string train_node;
  double train_start = -1;
  for (const SimEvent& e : r.events) {
    if (e.event == "evict") {
      ++evicted;
      EXPECT_EQ(e.workload, "team-1/saved");
      EXPECT_EQ(e.time_s, 7500);
      nodes.insert(e.node);
    }
    if (e.event == "start" && e.workload == "team-2/train") {
      train_start = e.time_s;
      train_node = e.node;
    }
  }
  EXPECT_EQ(evicted, 8);
  ASSERT_EQ(nodes.size(), 1U);
  EXPECT_EQ(train_node, *nodes.begin());
  EXPECT_EQ(train_start, 7500 + 30);  // Within one pass plus the grace period.
  // 8 tasks x 300 s since their last checkpoint.
  EXPECT_NEAR(r.lost_gpu_seconds, 8 * 300, 1e-6);
}

// Rule 3 end to end, past the floor (#40): team-2 deserves one GPU of surplus, and taking a pair
// of team-1's (8 held, share 7) leaves team-1 at 6 of its 7 and team-2 at its share where it had
// nothing: fairer, so one pair goes for "one" at 600 (before #40 "one" waited for "two" to
// change the shares). "two" then starts in the GPU the pair left and the one "one" frees: one
// eviction in all, and team-1 never below 6.
TEST(ScenarioTest, ReclaimGoesPastTheFloorOnlyWhenThatIsFairer) {
  ScenarioResult r = run("tenants-past-the-floor.json");
  int evicted = 0;
  for (const SimEvent& e : r.events) {
    if (e.event == "evict") {
      ++evicted;
      EXPECT_EQ(e.time_s, 600);
      EXPECT_EQ(e.workload, "team-1/pairs");
    }
    if (e.event == "start" && e.workload == "team-2/one") {
      EXPECT_EQ(e.time_s, 630);  // One pass plus the pair's grace period.
    }
    if (e.event == "start" && e.workload == "team-2/two") {
      EXPECT_EQ(e.time_s, 1230);  // When "one" ends: no second eviction.
    }
  }
  EXPECT_EQ(evicted, 1);
  for (const TenantRow& row : r.tenants) {
    if (row.queue == "team-1/default" && row.time_s < 7200) {
      EXPECT_GE(row.allocated_milli_gpu, 6000) << row.time_s;
    }
  }
}

// Rule 3, patience, end to end (and through the live API in cli_sim_test): team-2 may reclaim
// only after waiting 600 s within its share; the simulator passes at that instant though no
// event falls there, as the server's periodic passes would.
TEST(ScenarioTest, ReclaimWaitsForItsPatience) {
  ScenarioResult r = run("tenants-patience.json");
  int evicted = 0;
  for (const SimEvent& e : r.events) {
    if (e.event == "evict") {
      ++evicted;
      EXPECT_EQ(e.time_s, 1000 + 600);
    }
    if (e.event == "start" && e.workload == "team-2/train") {
      EXPECT_EQ(e.time_s, 1000 + 600 + 30);
    }
  }
  EXPECT_EQ(evicted, 4);
  EXPECT_EQ(r.makespan_s, 9430);  // The last task's end; the passes between events end nothing.
}

// Counts of each event kind for one workload, and the time of its first start.
struct WorkloadEvents {
  int evicted = 0;
  double first_start = -1;
  std::vector<std::string> details;
};
std::map<std::string, WorkloadEvents> byWorkload(const ScenarioResult& r) {
  std::map<std::string, WorkloadEvents> out;
  for (const SimEvent& e : r.events) {
    WorkloadEvents& w = out[e.workload];
    if (e.event == "evict") {
      ++w.evicted;
      w.details.push_back(e.detail);
    }
    if (e.event == "start" && w.first_start < 0) {
      w.first_start = e.time_s;
    }
  }
  return out;
}

// Rule 5 end to end: at 1,200 s six GPUs are free, but not on one node; two of team-2's own
// 1-GPU tasks move to the other node (the tenant is told they moved), and the 6-GPU task starts
// one grace period later where they were.
TEST(ScenarioTest, ConsolidationMovesTasksToMakeRoomInOnePiece) {
  ScenarioResult r = run("tenants-consolidation.json");
  std::string six_node;
  std::set<std::string> moved_from;
  for (const SimEvent& e : r.events) {
    if (e.event == "evict" && e.detail.starts_with("moved")) {
      EXPECT_EQ(e.time_s, 1200);
      EXPECT_EQ(e.workload, "team-2/half");
      moved_from.insert(e.node);
    }
    if (e.event == "start" && e.workload == "team-2/six") {
      EXPECT_EQ(e.time_s, 1230);
      six_node = e.node;
    }
    if (e.event == "start" && e.workload == "team-2/half" && e.time_s == 1230) {
      EXPECT_NE(e.node, six_node);  // Restarted at once, elsewhere.
    }
  }
  ASSERT_EQ(moved_from.size(), 1U);
  EXPECT_EQ(six_node, *moved_from.begin());
}

// Bug 4a end to end: two 4-GPU jobs of team-2 arrive together; only the first's share is taken
// back (4 evictions, not 8), and the second waits for team-1's work to end.
TEST(ScenarioTest, ASecondReclaimerDoesNotTakeTheShareAgain) {
  ScenarioResult r = run("tenants-second-reclaimer.json");
  auto w = byWorkload(r);
  EXPECT_EQ(w["team-1/sweep"].evicted, 4);
  EXPECT_EQ(r.evictions, 4);
  EXPECT_EQ(w["team-2/first"].first_start, 930);
  EXPECT_GE(w["team-2/second"].first_start, 4530);
}

// Issue 22, labels and pools in scenarios (and through the API, by the parity test): team-2's
// four tasks never go to the node of the pool dedicated to team-1, even while two of them wait;
// team-1's selected tasks go there, and its unselected one goes wherever there is room.
TEST(ScenarioTest, ADedicatedPoolRunsOnlyItsTenantsTasks) {
  ScenarioResult r = run("tenants-dedicated-pool.json");
  std::map<std::string, std::set<std::string>> nodes;
  for (const SimEvent& e : r.events) {
    if (e.event == "start") {
      nodes[e.workload].insert(e.node);
    }
  }
  EXPECT_EQ(nodes["team-2/wide"], std::set<std::string>{"shared"});
  EXPECT_EQ(nodes["team-1/pinned"], std::set<std::string>{"reserved"});
  auto w = byWorkload(r);
  EXPECT_EQ(w["team-2/wide"].first_start, 0);
  EXPECT_EQ(w["team-1/pinned"].first_start, 60);
  EXPECT_GE(w["team-1/anywhere"].first_start, 120);
}

// Bug 4d end to end: the tenant is at its 4-GPU limit with priority-0 work; a priority-100 job
// of 2 GPUs preempts two of those tasks instead of waiting two hours.
TEST(ScenarioTest, PriorityPreemptsPastTheTenantsLimit) {
  ScenarioResult r = run("tenants-limit-preemption.json");
  auto w = byWorkload(r);
  EXPECT_EQ(w["team-1/background"].evicted, 2);
  for (const std::string& d : w["team-1/background"].details) {
    EXPECT_TRUE(d.starts_with("preempted by workload urgent")) << d;
  }
  EXPECT_EQ(w["team-1/urgent"].first_start, 630);
}

// Bug 4f end to end: team-2 has no quota and weight 0, so no share of GPUs; its job arrives with
// one of team-1's, two GPUs are free, and both go to team-1 (nothing is reclaimed back).
TEST(ScenarioTest, AQueueWithNoShareIsServedAfterOneWithin) {
  ScenarioResult r = run("tenants-queue-order.json");
  auto w = byWorkload(r);
  EXPECT_EQ(w["team-1/two"].first_start, 600);
  EXPECT_EQ(w["team-2/one"].first_start, 2400);  // When team-1's two end.
  EXPECT_EQ(r.evictions, 0);
}

// Rule 2, a tenant's own bound, end to end (and through the live API: the tenant field
// max_unsaved_gpu_seconds): team-1 accepts losing up to 3 GPU-hours per eviction, so its 1-GPU
// tasks, two hours in and never checkpointed, are taken back, which the default hour would not.
TEST(ScenarioTest, ATenantsOwnBoundOnUnsavedWorkDecides) {
  ScenarioResult r = run("tenants-unsaved-bound.json");
  auto w = byWorkload(r);
  EXPECT_EQ(w["team-1/sweep"].evicted, 4);
  EXPECT_EQ(w["team-2/train"].first_start, 7230);
  EXPECT_NEAR(r.lost_gpu_seconds, 4 * 7200, 1e-6);
  // Without the tenant's bound (the scheduler's default hour), nothing is taken.
  auto sc = readScenario(examples() + "tenants-unsaved-bound.json");
  ASSERT_TRUE(sc.isOk());
  for (sched::QueueSpec& q : sc->queues) {
    q.max_unsaved_gpu_s = -1;
  }
  auto plain = runScenario(*sc);
  ASSERT_TRUE(plain.isOk());
  EXPECT_EQ(plain->evictions, 0);
}

std::string parseError(const std::string& json) {
  auto s = parseScenario(json, "s.json");
  return s.isOk() ? "ok" : s.status().message();
}

TEST(ScenarioTest, ParseErrorsSayWhere) {
  const std::string cluster = R"("cluster": {"nodes": [{"profile": "dgx-h100"}]})";
  const std::string queues = R"("queues": [{"name": "q"}])";
  auto doc = [&](const std::string& workloads) {
    return "{" + cluster + "," + queues + ", \"workloads\": [" + workloads + "]}";
  };
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q", "duration": 10})")), "ok");
  EXPECT_EQ(parseError("{"), parseError("{").substr(0, 0) + parseError("{"));
  EXPECT_NE(parseError("{").find("s.json: not valid JSON at byte"), std::string::npos);
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "nope", "duration": 10})")),
            "s.json: workloads[0].queue: unknown queue 'nope'");
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q"})")),
            "s.json: workloads[0]: missing field 'duration'");
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q", "duration": 10, "gpu": {"count": -1}})")),
            "s.json: workloads[0].gpu.count: value -1 is outside 0..64");
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q", "duration": 10, "tasks": 2,
                              "minAvailable": 3})")),
            "s.json: workloads[0].minAvailable: value 3 is outside 1..2");
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q", "duration": "soon"})")),
            "s.json: workloads[0].duration: expected a number");
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q", "duration": 1, "colour": "red"})")),
            "s.json: workloads[0]: unknown field 'colour' (known: name, queue, at, tasks, "
            "minAvailable, gpu, cpuMilli, memoryMiB, duration, priority, preemptible, "
            "checkpointEvery, maxRuntime, gracePeriod, repeat, tenant, nodeSelector)");
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q", "duration": 1},
                              {"name": "w", "queue": "q", "duration": 1})")),
            "s.json: workloads[1]: workload name 'w' is used twice");
  EXPECT_EQ(parseError("{" + cluster +
                       R"(, "queues": [{"name": "q", "maxUnsavedGpuTime": -5}], "workloads": []})"),
            "s.json: queues[0].maxUnsavedGpuTime: expected a non-negative number");
  EXPECT_EQ(parseError("{" + cluster + "," + queues +
                       R"(, "workloads": [], "options": {"reclaimPatience": "x"}})"),
            "s.json: options.reclaimPatience: expected a number");
  EXPECT_EQ(parseError(doc(R"({"name": "w", "queue": "q", "duration": 1,
                              "gpu": {"models": ["A100-80GB"]}})")),
            "s.json: workloads[0].gpu.models[0]: no node has GPU model 'A100-80GB'");
  EXPECT_EQ(parseError(R"({"cluster": {"nodes": [{"profile": "dgx-b200"}]}, )" + queues +
                       R"(, "workloads": []})"),
            "s.json: cluster.nodes[0].profile: unknown node profile 'dgx-b200' (known: "
            "dgx-h100, dgx-h200, a100-8x, a100-40gb-8x, l40s-4x, t4-2x)");
  EXPECT_EQ(parseError("{" + cluster + R"(, "queues": [{"name": "q", "quota": {"gpu": -2}}],
                        "workloads": []})"),
            "s.json: queues[0].quota.gpu: expected a non-negative number");
  EXPECT_EQ(parseError("{" + cluster + R"(, "queues": [{"name": "q", "quota": {"gpu:B200": 2}}],
                        "workloads": []})"),
            "s.json: queues[0].quota: unknown GPU model 'B200'");
}

TEST(ScenarioTest, TenantsBuildTheServersTreeAndSayWhatIsWrong) {
  const std::string cluster = R"("cluster": {"nodes": [{"profile": "l40s-4x"}]})";
  auto s = parseScenario("{" + cluster + R"(,
    "tenants": [{"name": "team-1", "quota": {"gpu": 2}, "limit": {"gpu": 3}, "weight": 2,
                 "trust_group": "lab", "queues": [{"name": "research", "quota": {"gpu": 1}}]},
                {"name": "team-2"}],
    "tenantUpdates": [{"at": 60, "tenant": "team-2", "trust_group": "lab"},
                      {"at": 30, "tenant": "team-1", "quota": {"gpu": 1}, "trust_group": ""}],
    "workloads": [{"name": "w", "tenant": "team-1", "queue": "research", "duration": 5},
                  {"name": "v", "tenant": "team-2", "duration": 5, "gpu": {"count": 1}}]})",
                         "s.json");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  std::vector<std::string> names;
  for (const sched::QueueSpec& q : s->queues) {
    names.push_back(q.name + "<" + q.parent);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"tessera<", "team-1<tessera", "team-1/default<team-1",
                                             "team-1/research<team-1", "team-2<tessera",
                                             "team-2/default<team-2"}));
  EXPECT_EQ(s->queues[1].quota[sched::kGpuDim], 2000);
  EXPECT_EQ(s->queues[1].over_quota_weight, 2);
  EXPECT_EQ(s->queues[2].over_quota_weight, 1);  // The default leaf: weight 1, as the server's.
  ASSERT_EQ(s->workloads.size(), 2U);
  EXPECT_EQ(s->workloads[0].spec.name, "team-1/w");
  EXPECT_EQ(s->workloads[0].name, "w");
  EXPECT_EQ(s->workloads[1].spec.request.tenant, model::TenantId{2});
  EXPECT_EQ(s->workloads[1].body["gracePeriod"], 30);  // Explicit for the API.
  EXPECT_FALSE(s->workloads[1].body.contains("tenant"));
  // Updates in time order, each with all the numbers and the group after it.
  ASSERT_EQ(s->tenant_updates.size(), 2U);
  EXPECT_EQ(s->tenant_updates[0].tenant, 0U);
  EXPECT_EQ(s->tenant_updates[0].numbers.quota_milli_gpu, 1000);
  EXPECT_EQ(s->tenant_updates[0].numbers.limit_milli_gpu, 3000);  // Kept.
  EXPECT_EQ(s->tenant_updates[0].trust_group, "");
  EXPECT_EQ(s->tenant_updates[1].trust_group, "lab");

  auto doc = [&](const std::string& rest) { return "{" + cluster + "," + rest + "}"; };
  EXPECT_EQ(parseError(doc(R"("queues": [{"name": "q"}], "tenants": [{"name": "t"}],
                              "workloads": [])")),
            "s.json: (top): expected either \"queues\" (a queue tree) or \"tenants\" (the server's "
            "tree for them)");
  EXPECT_EQ(parseError(doc(R"("tenants": [{"name": "Team"}], "workloads": [])")),
            "s.json: tenants[0].name: 'Team' is not a name the server takes (lowercase letters, "
            "digits and '-', at most 63)");
  EXPECT_EQ(parseError(doc(R"("tenants": [{"name": "t"}], "workloads": [{"name": "w",
                              "tenant": "u", "duration": 1}])")),
            "s.json: workloads[0].tenant: unknown tenant 'u'");
  EXPECT_EQ(parseError(doc(R"("tenants": [{"name": "t"}], "workloads": [{"name": "w",
                              "tenant": "t", "queue": "nope", "duration": 1}])")),
            "s.json: workloads[0].queue: unknown queue 't/nope'");
  EXPECT_EQ(parseError(doc(R"("tenants": [{"name": "t", "quota": {"gpu": 2},
                              "limit": {"gpu": 1}}], "workloads": [])")),
            "s.json: tenants[0]: limit.gpu is below quota.gpu");
  EXPECT_EQ(parseError(doc(R"("tenants": [{"name": "t", "queues": [{"name": "default"}]}],
                              "workloads": [])")),
            "s.json: tenants[0].queues[0].name: queue 'default' is declared twice (or is the "
            "tenant's own 'default')");
  EXPECT_EQ(parseError(doc(R"("queues": [{"name": "q"}], "tenantUpdates": [],
                              "workloads": [])")),
            "s.json: tenantUpdates: tenant updates need \"tenants\"");
  EXPECT_EQ(parseError(doc(R"("tenants": [{"name": "t", "trust_group": 7}], "workloads": [])")),
            "s.json: tenants[0].trust_group: expected a string of at most 128 bytes (\"\": no "
            "group)");
}

TEST(ScenarioTest, PerModelQuotasParse) {
  auto s = parseScenario(R"({
    "cluster": {"nodes": [{"profile": "dgx-h200", "count": 2}, {"profile": "a100-8x"}]},
    "queues": [{"name": "q", "quota": {"gpu:H200": 8, "gpu:A100-80GB": 4, "cpu": 10,
                                        "memoryGiB": 2}}],
    "workloads": []})",
                         "s.json");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s->nodes.size(), 3U);
  const sched::QueueSpec& q = s->queues[0];
  EXPECT_EQ(q.quota[s->space.modelDim(*s->catalogue.find("H200"))], 8000);
  EXPECT_EQ(q.quota[s->space.modelDim(*s->catalogue.find("A100-80GB"))], 4000);
  EXPECT_EQ(q.quota[sched::kCpuDim], 10000);
  EXPECT_EQ(q.quota[sched::kMemoryDim], 2048);
}

}  // namespace
}  // namespace tessera::sim
