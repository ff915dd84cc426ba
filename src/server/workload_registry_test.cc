#include "server/workload_registry.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/rfc3339.h"
#include "store/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;

WorkloadRecord record(const std::string& name, WorkloadPhase phase = WorkloadPhase::kPending) {
  WorkloadRecord r;
  r.name = name;
  r.spec = {{"gpu", 1}, {"command", {"sleep", "1"}}};
  r.submitted = "2026-12-04T10:00:00Z";
  r.status.phase = phase;
  r.addEvent(r.submitted, "submitted");
  return r;
}

// The codec: what it writes reads back the same, including a placed task's fields a restarted
// server needs, and the stored form is the one earlier servers wrote (so their stores load).
TEST(WorkloadRecordTest, EncodesAndDecodesEveryField) {
  WorkloadRecord r = record("train", WorkloadPhase::kRunning);
  r.started = "2026-12-04T10:00:01.250Z";
  r.cancel_requested = true;
  r.sealed_env = {{"API_TOKEN", "00ff"}};
  r.status.attempt = 2;
  r.status.attempts = {"attempt 1: task 0 exited with code 3"};
  TaskStatus t;
  t.state = "running";
  t.node = "gpu-a";
  t.gpus = {2, 3};
  t.milli_per_gpu = 500;
  t.mig_profile = "3g.40gb";
  t.mig_start = 4;
  t.generation = 65537;
  t.starts = 1;
  t.ports = {{"master", 20001}};
  t.started_at = *core::parseRfc3339("2026-12-04T10:00:01.250Z");
  r.status.tasks = {t, TaskStatus{}};
  r.addEvent("2026-12-04T10:00:02Z", "evicted", "preempted by team-2/big");

  const std::string stored = encodeWorkload(r);
  const json j = json::parse(stored);
  EXPECT_EQ(j["status"]["phase"], "running");
  EXPECT_EQ(j["status"]["tasks"][0]["mig_slot"], 4);
  EXPECT_EQ(j["events"][1]["reason"], "preempted by team-2/big");
  EXPECT_FALSE(j["events"][0].contains("reason"));

  auto back = decodeWorkload(stored, "/tenants/t/workloads/train");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->name, "train");
  EXPECT_EQ(back->spec, r.spec);
  EXPECT_EQ(back->started, r.started);
  EXPECT_TRUE(back->cancel_requested);
  EXPECT_EQ(back->sealed_env, r.sealed_env);
  EXPECT_EQ(back->events, r.events);
  EXPECT_EQ(back->status.phase, WorkloadPhase::kRunning);
  EXPECT_EQ(back->status.attempt, 2);
  EXPECT_EQ(back->status.attempts, r.status.attempts);
  ASSERT_EQ(back->status.tasks.size(), 2U);
  const TaskStatus& b = back->status.tasks[0];
  EXPECT_EQ(b.node, "gpu-a");
  EXPECT_EQ(b.gpus, t.gpus);
  EXPECT_EQ(b.milli_per_gpu, 500);
  EXPECT_EQ(b.mig_profile, "3g.40gb");
  EXPECT_EQ(b.mig_start, 4);
  EXPECT_EQ(b.generation, 65537U);
  EXPECT_EQ(b.ports, t.ports);
  EXPECT_EQ(b.started_at, t.started_at);
  EXPECT_EQ(back->status.tasks[1].state, "pending");
  // Written again, byte for byte the same.
  EXPECT_EQ(encodeWorkload(*back), stored);
}

TEST(WorkloadRecordTest, ABadStoredRecordIsAnErrorThatSaysWhere) {
  const std::string where = "/tenants/t/workloads/w";
  auto bad = [&](const std::string& text) {
    auto r = decodeWorkload(text, where);
    EXPECT_FALSE(r.isOk()) << text;
    return r.isOk() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad("{not json").find(where), std::string::npos);
  EXPECT_NE(bad(R"({"name":"w","status":{"phase":"sleeping"}})").find("phase: 'sleeping'"),
            std::string::npos);
  EXPECT_NE(bad(R"({"name":"w","status":{"phase":"running","tasks":[{"gpus":"0,1"}]}})")
                .find("tasks[0]: gpus: expected"),
            std::string::npos);
  EXPECT_NE(bad(R"({"name":"w","status":{"phase":"running","tasks":[{"started_at":"soon"}]}})")
                .find("'soon' is not an RFC 3339 time"),
            std::string::npos);
  EXPECT_NE(bad(R"({"name":"w","cancel_requested":"yes","status":{"phase":"pending"}})")
                .find("cancel_requested: expected true or false"),
            std::string::npos);
  EXPECT_NE(bad(R"({"name":"w"})").find("status: missing"), std::string::npos);
}

TEST(WorkloadRecordTest, EventsKeepTheLastHundred) {
  WorkloadRecord r = record("w");
  for (int i = 0; i < 150; ++i) {
    r.addEvent("t", "e" + std::to_string(i));
  }
  ASSERT_EQ(r.events.size(), kMaxWorkloadEvents);
  EXPECT_EQ(r.events.front().event, "e50");
  EXPECT_EQ(r.events.back().event, "e149");
}

// The registry against a real store and its watch, as the control plane feeds it.
class WorkloadRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open(dir_.file("t.db"), {}, clock_);
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    store_ = std::move(s).value();
  }
  void watch(int64_t from) {
    auto w = store_->watch("/tenants/", store::prefixEnd("/tenants/"), from,
                           [this](const store::WatchResponse& r) {
                             for (WorkloadChange& c : registry_.apply(r)) {
                               std::lock_guard lock(mu_);
                               seen_.push_back(std::move(c));
                             }
                           });
    ASSERT_TRUE(w.isOk()) << w.status().toString();
  }
  int64_t put(const std::string& tenant, const WorkloadRecord& r) {
    auto rev = store_->put("/tenants/" + tenant + "/workloads/" + r.name, encodeWorkload(r));
    EXPECT_TRUE(rev.isOk()) << rev.status().toString();
    return rev.isOk() ? *rev : 0;
  }

  store::TempDir dir_;
  core::FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  WorkloadRegistry registry_{8};
  std::mutex mu_;
  std::vector<WorkloadChange> seen_;
};

TEST_F(WorkloadRegistryTest, LoadsThenFollowsTheStoreAndAWriterReadsItsOwnWrite) {
  put("team-1", record("old", WorkloadPhase::kSucceeded));
  ASSERT_TRUE(store_->put("/tenants/team-1", "{}").isOk());  // Not a workload: passed over.
  auto got = store_->range("/tenants/", store::prefixEnd("/tenants/"));
  ASSERT_TRUE(got.isOk());
  ASSERT_TRUE(registry_.load(got->kvs, got->revision).isOk());
  EXPECT_EQ(registry_.revision(), got->revision);
  EXPECT_EQ(registry_.count("team-1"), 1U);
  EXPECT_EQ(registry_.pending("team-1"), 0);
  EXPECT_EQ(registry_.index("team-1"), got->revision);
  watch(got->revision + 1);

  const int64_t rev = put("team-1", record("train"));
  ASSERT_TRUE(registry_.waitFor(rev, std::chrono::seconds(5)));
  WorkloadPtr train = registry_.get("team-1", "train");
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->mod_revision, rev);
  EXPECT_EQ(train->create_revision, rev);
  EXPECT_EQ(registry_.pending("team-1"), 1);
  EXPECT_EQ(registry_.index("team-1"), rev);
  EXPECT_EQ(registry_.index("team-2"), got->revision);  // No change of its own.

  // A status change: the record a reader held stays as it was (immutable), the new one is
  // published, and the pending count follows the phase.
  WorkloadRecord running = *train;
  running.status.phase = WorkloadPhase::kRunning;
  const int64_t rev2 = put("team-1", running);
  ASSERT_TRUE(registry_.waitFor(rev2, std::chrono::seconds(5)));
  EXPECT_EQ(train->status.phase, WorkloadPhase::kPending);
  EXPECT_EQ(registry_.get("team-1", "train")->status.phase, WorkloadPhase::kRunning);
  EXPECT_EQ(registry_.get("team-1", "train")->create_revision, rev);
  EXPECT_EQ(registry_.pending("team-1"), 0);

  auto deleted = store_->deleteRange("/tenants/team-1/workloads/old");
  ASSERT_TRUE(deleted.isOk());
  ASSERT_TRUE(registry_.waitFor(deleted->revision, std::chrono::seconds(5)));
  EXPECT_EQ(registry_.get("team-1", "old"), nullptr);
  EXPECT_EQ(registry_.list("team-1").size(), 1U);

  // The change stream, as a Kubernetes watch from the load's revision reads it.
  auto changes = registry_.changesSince("team-1", got->revision);
  ASSERT_TRUE(changes.isOk()) << changes.status().toString();
  ASSERT_EQ(changes->size(), 3U);
  EXPECT_EQ((*changes)[0].type, WorkloadChange::Type::kAdded);
  EXPECT_EQ((*changes)[0].revision, rev);
  EXPECT_EQ((*changes)[1].type, WorkloadChange::Type::kModified);
  EXPECT_EQ((*changes)[1].before->status.phase, WorkloadPhase::kPending);
  EXPECT_EQ((*changes)[2].type, WorkloadChange::Type::kDeleted);
  EXPECT_EQ((*changes)[2].record->name, "old");  // A deletion carries the last record.
  // From a later revision, only what came after it; another tenant sees none of it.
  EXPECT_EQ(registry_.changesSince("team-1", rev2)->size(), 1U);
  EXPECT_TRUE(registry_.changesSince("team-2", got->revision)->empty());
  // A waiter for a revision not yet written times out, false.
  EXPECT_FALSE(registry_.waitFor(deleted->revision + 1, std::chrono::milliseconds(50)));
}

TEST_F(WorkloadRegistryTest, ChangesOlderThanTheWindowAreGone) {
  ASSERT_TRUE(registry_.load({}, 0).isOk());
  watch(1);
  int64_t last = 0;
  std::vector<int64_t> revs;
  for (int i = 0; i < 20; ++i) {
    revs.push_back(last = put("team-1", record("w" + std::to_string(i))));
  }
  ASSERT_TRUE(registry_.waitFor(last, std::chrono::seconds(5)));
  // The window holds the last 8 changes: from the revision before the 13th on, all of them.
  auto recent = registry_.changesSince("team-1", revs[11]);
  ASSERT_TRUE(recent.isOk()) << recent.status().toString();
  EXPECT_EQ(recent->size(), 8U);
  EXPECT_EQ(registry_.oldestRevision(), revs[11]);
  auto gone = registry_.changesSince("team-1", revs[10]);
  ASSERT_FALSE(gone.isOk());
  EXPECT_EQ(gone.status().code(), core::StatusCode::kOutOfRange);
  EXPECT_EQ(registry_.count("team-1"), 20U);  // The records themselves all stay.
}

TEST_F(WorkloadRegistryTest, AnUndecodableChangeIsPassedOverAndTheRevisionStillCounts) {
  ASSERT_TRUE(registry_.load({}, 0).isOk());
  watch(1);
  auto bad = store_->put("/tenants/team-1/workloads/broken", "{\"name\": 3}");
  ASSERT_TRUE(bad.isOk());
  ASSERT_TRUE(registry_.waitFor(*bad, std::chrono::seconds(5)));
  EXPECT_EQ(registry_.get("team-1", "broken"), nullptr);
  // A corrupt record at load is an error that names it: the server does not start on a guess.
  auto got = store_->range("/tenants/", store::prefixEnd("/tenants/"));
  WorkloadRegistry fresh;
  core::Status st = fresh.load(got->kvs, got->revision);
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("/tenants/team-1/workloads/broken"), std::string::npos);
}

}  // namespace
}  // namespace tessera::server
