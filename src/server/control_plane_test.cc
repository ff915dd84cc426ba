// A real ControlPlane over SQLite and a FileSink, with the audit disk's flushes and the store's
// writes held back or counted by the test:
// - when an answer leaves, relative to the audit log's disk flush: the policy of
//   `audit_durable_answers` (docs/server.md, "A request's path", step 5);
// - which of a tenant's changes wait for one another, and that none waits for another tenant's.
#include "server/control_plane.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "audit/auditor.h"
#include "audit/file_sink.h"
#include "audit/verify.h"
#include "core/clock.h"
#include "model/gpu_catalogue.h"
#include "model/node_profiles.h"
#include "secrets/service.h"
#include "server/api_util.h"
#include "server/driver.h"
#include "server/node_records.h"
#include "store/sqlite_store.h"
#include "store/store.h"
#include "store/test_util.h"

namespace tessera::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

// A disk whose flushes can be held: while held, every fdatasync waits until it is let go.
class HeldDisk {
 public:
  int fdatasync(int fd) {
    std::unique_lock lock(mu_);
    ++started_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !held_; });
    ++passed_;
    cv_.notify_all();
    if (failing_) {
      errno = EIO;
      return -1;
    }
    lock.unlock();
    return ::fdatasync(fd);
  }
  // Every later flush fails, as a dying disk's would.
  void fail() {
    std::lock_guard lock(mu_);
    failing_ = true;
  }
  void hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  // Lets every flush go, and waits until those already waiting have gone through (so that a
  // hold() right after holds only later ones).
  void release() {
    std::unique_lock lock(mu_);
    held_ = false;
    cv_.notify_all();
    cv_.wait(lock, [this] { return passed_ == started_; });
  }
  int started() {
    std::lock_guard lock(mu_);
    return started_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  bool failing_ = false;
  int started_ = 0;  // Flushes that reached the disk,
  int passed_ = 0;   // and those it let through.
};

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-cp-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto store = store::SqliteStore::open((dir_ / "tessera.db").string(), {}, clock_);
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    store_ = std::move(store).value();
    held_store_ = std::make_unique<store::HeldStore>(*store_);
    audit::FileSinkOptions fo{{.salt = "pepper"}};
    fo.fdatasync = [this](int fd) { return disk_.fdatasync(fd); };
    fo.appended_flush_delay = flush_delay_;
    auto sink = audit::FileSink::open((dir_ / "audit.log").string(), fo, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    std::vector<std::unique_ptr<audit::AuditSink>> sinks;
    sinks.push_back(std::move(sink).value());
    auditor_ = std::move(audit::Auditor::create(std::move(sinks))).value();
    std::vector<model::Node> nodes = {*model::makeProfileNode("dgx-h100", "n0", catalogue_, 0)};
    SchedulerDriver::Listener listener;
    if (passes_write_statuses_) {  // As the server wires it: a pass's changes go to the store.
      listener = [this](const std::map<std::string, WorkloadStatus>& changed) {
        return cp_ != nullptr ? cp_->onDriverChanges(changed) : core::Status::ok();
      };
    }
    auto driver =
        SchedulerDriver::create(catalogue_, std::move(nodes), clock_, {}, std::move(listener));
    ASSERT_TRUE(driver.isOk()) << driver.status().toString();
    driver_ = std::move(driver).value();
    secrets::SecretsOptions so;
    so.seal.key_file = (dir_ / "unseal-key").string();
    auto secrets = secrets::Secrets::open(*store_, clock_, so);
    ASSERT_TRUE(secrets.isOk()) << secrets.status().toString();
    secrets_ = std::move(secrets).value();
    ControlPlaneOptions co;
    co.durable_every_answer = durable_every_answer_;
    co.status_write_deadline = status_write_deadline_;
    auto cp = ControlPlane::open(*held_store_, *auditor_, *driver_, catalogue_, clock_, co,
                                 secrets_.get());
    ASSERT_TRUE(cp.isOk()) << cp.status().toString();
    cp_ = std::move(cp).value();
    auto root = cp_->bootstrapRootToken();
    ASSERT_TRUE(root.isOk());
    root_ = *root;
    auto demo = cp_->createTenantWithToken("demo", json{{"quota", {{"gpu", 8}}}}, root->info);
    ASSERT_TRUE(demo.isOk()) << demo.status().toString();
    token_ = demo->secret;
    listeners_.emplace_back();
  }

  void TearDown() override {
    disk_.release();
    held_store_->release();
    for (std::thread& t : threads_) {
      t.join();
    }
    cp_.reset();
    secrets_.reset();
    driver_.reset();
    auditor_.reset();
    held_store_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // Sends a request as tenant demo; the future is ready when the answer is sent.
  std::future<HttpResponse> send(const std::string& method, const std::string& path,
                                 const json& body = nullptr) {
    return sendAs(token_, method, "/v1/tenants/demo/" + path, body);
  }
  // Sends a request to `target` with `token`.
  std::future<HttpResponse> sendAs(const std::string& token, const std::string& method,
                                   const std::string& target, const json& body = nullptr) {
    HttpRequest r;
    r.method = method;
    r.target = target;
    r.headers = {{"x-tessera-token", token}};
    r.body = body.is_null() ? "" : body.dump();
    r.remote = "127.0.0.1:1";
    auto answer = std::make_shared<std::promise<HttpResponse>>();
    std::future<HttpResponse> answered = answer->get_future();
    threads_.emplace_back([this, r, answer] {
      cp_->handle(r, listeners_,
                  [answer](HttpResponse resp) { answer->set_value(std::move(resp)); });
    });
    return answered;
  }

  // Sends a request with the disk free and waits for its answer.
  HttpResponse call(const std::string& method, const std::string& path,
                    const json& body = nullptr) {
    return answer(send(method, path, body), method + " " + path);
  }
  HttpResponse callAs(const std::string& token, const std::string& method,
                      const std::string& target, const json& body = nullptr) {
    return answer(sendAs(token, method, target, body), method + " " + target);
  }
  // The answer, once it comes (status 0 if not within 10 s).
  static HttpResponse answer(std::future<HttpResponse> answered, const std::string& what) {
    const bool ready = answered.wait_for(10s) == std::future_status::ready;
    EXPECT_TRUE(ready) << what << " unanswered";
    if (ready) {
      return answered.get();
    }
    HttpResponse none;
    none.status = 0;
    return none;
  }
  // Keys in the store under `prefix`.
  std::vector<std::string> keysUnder(const std::string& prefix) {
    std::vector<std::string> keys;
    auto got = store_->range(prefix, store::prefixEnd(prefix));
    EXPECT_TRUE(got.isOk()) << got.status().toString();
    if (got.isOk()) {
      for (const store::KeyValue& kv : got->kvs) {
        keys.push_back(kv.key);
      }
    }
    return keys;
  }

  // Waits (up to 5 s) until `key` is in the store.
  void waitStored(const std::string& key) {
    for (int i = 0; i < 500; ++i) {
      auto kv = store_->get(key);
      if (kv.isOk() && kv->has_value()) {
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << key << " was never stored";
  }

  // Whether a request's answer leaves while the disk holds every flush (each answer that does
  // must still come once the disk lets go).
  bool answeredWhileTheDiskIsHeld(const std::string& method, const std::string& path,
                                  unsigned want_status, const json& body = nullptr) {
    disk_.hold();
    const int flushes_before = disk_.started();
    auto answered = send(method, path, body);
    // A flush has started and waits on the disk; an answer that waited for it cannot be sent.
    for (int i = 0; i < 1000 && disk_.started() == flushes_before; ++i) {
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_GT(disk_.started(), flushes_before) << "no flush for " << path;
    const bool early = answered.wait_for(300ms) == std::future_status::ready;
    disk_.release();
    const bool ready = answered.wait_for(10s) == std::future_status::ready;
    EXPECT_TRUE(ready) << path << " unanswered after the flush";
    EXPECT_EQ(ready ? answered.get().status : 0U, want_status) << path;
    return early;
  }

  // Whether every answer waits for the audit log's flush (audit_durable_answers = "all").
  bool durable_every_answer_ = false;
  // ControlPlaneOptions::status_write_deadline.
  std::chrono::milliseconds status_write_deadline_{0};
  // When the audit log flushes records nobody waits for.
  std::chrono::milliseconds flush_delay_ = 1ms;
  fs::path dir_;
  core::RealClock clock_;
  bool passes_write_statuses_ = false;  // Set before SetUp: the driver's passes write statuses.
  const model::GpuCatalogue catalogue_ = model::GpuCatalogue::builtin();
  HeldDisk disk_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::HeldStore> held_store_;  // The ControlPlane's view of store_.
  std::unique_ptr<audit::Auditor> auditor_;
  std::unique_ptr<SchedulerDriver> driver_;
  std::unique_ptr<secrets::Secrets> secrets_;
  std::unique_ptr<ControlPlane> cp_;
  CreatedToken root_;
  std::string token_;  // Tenant demo's admin.
  std::vector<ListenerConfig> listeners_;
  std::vector<std::thread> threads_;  // Each runs one request's handler.
};

class ControlPlaneAuditTest : public ControlPlaneTest, public ::testing::WithParamInterface<bool> {
 protected:
  ControlPlaneAuditTest() { durable_every_answer_ = GetParam(); }
};

TEST_P(ControlPlaneAuditTest, ReadsRevealingNothingSecretGoBeforeTheFlushUnlessAllMustWait) {
  const bool durable_every_answer = GetParam();
  ASSERT_EQ(call("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}}).status, 202U);
  // A workload's status and a list reveal nothing secret.
  EXPECT_EQ(answeredWhileTheDiskIsHeld("GET", "workloads/w1", 200), !durable_every_answer);
  EXPECT_EQ(answeredWhileTheDiskIsHeld("LIST", "workloads", 200), !durable_every_answer);
}

TEST_P(ControlPlaneAuditTest, ReadsOfSecretsAndChangesAlwaysWaitForTheFlush) {
  ASSERT_EQ(call("PUT", "secrets/kv/data/db", {{"data", {{"password", "hunter2"}}}}).status, 200U);
  EXPECT_FALSE(answeredWhileTheDiskIsHeld("GET", "secrets/kv/data/db", 200));
  EXPECT_FALSE(answeredWhileTheDiskIsHeld("LIST", "secrets/kv/metadata/", 200));
  // Even an answer without the secret (none there) waits: the path says what it would hold.
  EXPECT_FALSE(answeredWhileTheDiskIsHeld("GET", "secrets/kv/data/absent", 404));
  // A change waits for its request record before it is made.
  EXPECT_FALSE(answeredWhileTheDiskIsHeld("DELETE", "secrets/kv/data/db", 204));
  // A submission does not (its request record is on stable storage with it, in the store), unless
  // every answer waits for its response record.
  EXPECT_EQ(
      answeredWhileTheDiskIsHeld("POST", "workloads/w2", 202, {{"cpuMilli", 100}, {"duration", 1}}),
      !durable_every_answer_);
}

TEST_P(ControlPlaneAuditTest, ASubmissionStoresACopyOfItsRequestRecordWithIt) {
  disk_.hold();  // No flush of the log gets through.
  auto answered = send("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
  waitStored("/tenants/demo/workloads/w1");
  // The request record, byte for byte as the log has it (written, not yet flushed), is in the
  // store under its seq.
  const std::string topic = "audit/file:" + (dir_ / "audit.log").string();
  auto notes = store_->notes(topic);
  ASSERT_TRUE(notes.isOk()) << notes.status().toString();
  ASSERT_EQ(notes->size(), 1U);
  const json record = json::parse(notes->front().body);
  EXPECT_EQ(record["type"], "request");
  EXPECT_EQ(record["request"]["method"], "POST");
  EXPECT_EQ(record["request"]["path"], "tenants/demo/workloads/w1");
  EXPECT_EQ(record["seq"], notes->front().id);
  std::ifstream log(dir_ / "audit.log");
  std::string line;
  bool in_log = false;
  while (std::getline(log, line)) {
    in_log = in_log || line == notes->front().body;
  }
  EXPECT_TRUE(in_log);
  disk_.release();
  EXPECT_EQ(answer(std::move(answered), "the submission").status, 202U);
}

TEST_P(ControlPlaneAuditTest, CopiesOfFlushedRecordsAreDropped) {
  const std::string topic = "audit/file:" + (dir_ / "audit.log").string();
  disk_.hold();  // The log cannot flush the submission's record.
  auto answered = send("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
  waitStored("/tenants/demo/workloads/w1");
  ASSERT_EQ(store_->notes(topic)->size(), 1U);
  cp_->housekeeping();
  EXPECT_EQ(store_->notes(topic)->size(), 1U) << "dropped before the log had it on disk";
  disk_.release();
  EXPECT_EQ(answer(std::move(answered), "the submission").status, 202U);
  for (int i = 0; i < 500 && !store_->notes(topic)->empty(); ++i) {
    cp_->housekeeping();  // The log flushes within its delay (1 ms here).
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(store_->notes(topic)->empty());
}

TEST_P(ControlPlaneAuditTest, OnceTheLogCannotFlushSubmissionsAreRefusedAndNothingIsStored) {
  disk_.fail();
  // A change that waits for its record finds the log failing, and the log stops.
  const HttpResponse first = call("DELETE", "workloads/none");
  EXPECT_EQ(first.status, 503U) << first.body;
  const HttpResponse r = call("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
  EXPECT_EQ(r.status, 503U);
  EXPECT_NE(r.body.find("audit log cannot record"), std::string::npos) << r.body;
  auto stored = store_->get("/tenants/demo/workloads/w1");
  ASSERT_TRUE(stored.isOk());
  EXPECT_FALSE(stored->has_value());
  EXPECT_EQ(call("GET", "workloads/w1").status, 503U);
}

TEST_P(ControlPlaneAuditTest, AChangeMadeButUnrecordedSaysItWasMade) {
  ASSERT_EQ(call("POST", "workloads/w1", {{"cpuMilli", 100}}).status, 202U);
  waitStored("/tenants/demo/workloads/w1");
  // The cancel's request record is on disk; its store write waits; meanwhile the disk dies, so
  // the response record cannot be written after the change is made.
  held_store_->hold("/tenants/demo/workloads/");
  auto cancelled = send("DELETE", "workloads/w1");
  ASSERT_TRUE(held_store_->waitHeld(1));
  disk_.fail();
  // The log finds out at its next flush (this refusal's) and stops.
  const HttpResponse refused = call("DELETE", "workloads/none");
  EXPECT_EQ(refused.status, 503U);
  EXPECT_TRUE(refused.headers.empty()) << "nothing changed: " << refused.body;
  held_store_->release();
  const HttpResponse r = answer(std::move(cancelled), "the cancel");
  EXPECT_EQ(r.status, 503U);
  EXPECT_NE(r.body.find("the change was made"), std::string::npos) << r.body;
  EXPECT_NE(std::find(r.headers.begin(), r.headers.end(),
                      std::pair<std::string, std::string>("X-Tessera-Applied", "true")),
            r.headers.end());
  auto stored = store_->get("/tenants/demo/workloads/w1");
  ASSERT_TRUE(stored.isOk() && stored->has_value());
  EXPECT_TRUE(json::parse((*stored)->value).value("cancel_requested", false));
}

TEST_P(ControlPlaneAuditTest, ASubmissionsRecordTheLogLostIsWrittenAgainAtTheNextStart) {
  const fs::path log = dir_ / "audit.log";
  ASSERT_EQ(call("POST", "workloads/w0", {{"cpuMilli", 100}, {"duration", 1}}).status, 202U);
  disk_.hold();
  const uintmax_t before = fs::file_size(log);
  auto answered = send("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
  waitStored("/tenants/demo/workloads/w1");
  disk_.release();
  ASSERT_EQ(answer(std::move(answered), "the submission").status, 202U);
  for (std::thread& t : threads_) {
    t.join();
  }
  threads_.clear();
  cp_.reset();
  ASSERT_TRUE(auditor_->close().isOk());
  auditor_.reset();
  // The machine crashed before the log's flush: the file ends where it was before w1.
  fs::resize_file(log, before);
  audit::FileSinkOptions fo{{.salt = "pepper"}};
  auto sink = audit::FileSink::open(log.string(), fo, clock_);
  ASSERT_TRUE(sink.isOk()) << sink.status().toString();
  std::vector<std::unique_ptr<audit::AuditSink>> sinks;
  sinks.push_back(std::move(sink).value());
  auditor_ = std::move(audit::Auditor::create(std::move(sinks))).value();
  auto cp =
      ControlPlane::open(*held_store_, *auditor_, *driver_, catalogue_, clock_, {}, secrets_.get());
  ASSERT_TRUE(cp.isOk()) << cp.status().toString();
  cp_ = std::move(cp).value();
  // The request record of w1 is back, as a new record marked recovered, and the chain verifies.
  auto report = audit::verifyAuditFile(log.string());
  ASSERT_TRUE(report.isOk());
  EXPECT_TRUE(report->intact()) << report->summary();
  std::ifstream in(log);
  std::string line;
  std::vector<json> recovered;
  while (std::getline(in, line)) {
    json rec = json::parse(line);
    if (rec.contains("recovered")) {
      recovered.push_back(std::move(rec));
    }
  }
  ASSERT_EQ(recovered.size(), 1U);
  EXPECT_EQ(recovered[0]["request"]["path"], "tenants/demo/workloads/w1");
  EXPECT_EQ(recovered[0]["tenant"], "demo");
  EXPECT_GT(recovered[0]["recovered"]["seq"].get<uint64_t>(), 0U);
  // The copies are gone; a start after this one recovers nothing again.
  auto notes = store_->notes("audit/file:" + log.string());
  ASSERT_TRUE(notes.isOk());
  EXPECT_TRUE(notes->empty());
}

TEST_P(ControlPlaneAuditTest, ARecordAnsweredBeforeItsFlushIsOnDiskRightAfter) {
  ASSERT_EQ(call("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}}).status, 202U);
  const auto size_before = fs::file_size(dir_ / "audit.log");
  const int flushes_before = disk_.started();
  ASSERT_EQ(call("GET", "workloads/w1").status, 200U);
  // Both records are in the log when the answer leaves, and a flush covers them without
  // anyone asking (1 ms after, here).
  EXPECT_GT(fs::file_size(dir_ / "audit.log"), size_before);
  for (int i = 0; i < 1000 && disk_.started() == flushes_before; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GT(disk_.started(), flushes_before);
}

// The audit log flushes only when someone waits, so each request's flushes can be counted.
class ControlPlaneAuditFlushCountTest : public ControlPlaneAuditTest {
 protected:
  ControlPlaneAuditFlushCountTest() { flush_delay_ = std::chrono::hours(1); }

  // The audit log's flushes before `method path` was answered.
  int flushesFor(const std::string& method, const std::string& path, unsigned want_status,
                 const json& body = nullptr) {
    const int before = disk_.started();
    EXPECT_EQ(call(method, path, body).status, want_status) << method << " " << path;
    return disk_.started() - before;
  }
};

TEST_P(ControlPlaneAuditFlushCountTest, EachAnswerWaitsForTheFlushesItNeeds) {
  const bool all = GetParam();
  const json spec = {{"cpuMilli", 100}, {"duration", 1}};
  // A submission: none (its request record is stored with it); its response's with "all".
  EXPECT_EQ(flushesFor("POST", "workloads/w1", 202, spec), all ? 1 : 0);
  // A status read: none, or one for both records.
  EXPECT_EQ(flushesFor("GET", "workloads/w1", 200), all ? 1 : 0);
  // A secret written (its answer names the version: under data, which the log HMACs) and read.
  EXPECT_EQ(flushesFor("PUT", "secrets/kv/data/db", 200, {{"data", {{"password", "hunter2"}}}}), 2);
  EXPECT_EQ(flushesFor("GET", "secrets/kv/data/db", 200), 1);
}

// A tenant's changes that read before they write take that tenant's lock, and only its.
using ControlPlaneTenantLockTest = ControlPlaneTest;

TEST_F(ControlPlaneTenantLockTest, AQueueChangeWaitsForNoOtherTenant) {
  auto other = cp_->createTenantWithToken("other", json{{"quota", {{"gpu", 8}}}}, root_.info);
  ASSERT_TRUE(other.isOk()) << other.status().toString();
  held_store_->hold("/tenants/demo/queues/");
  auto demo_queue = send("POST", "queues/team-a", {{"quota", {{"gpu", 1}}}});
  ASSERT_TRUE(held_store_->waitHeld(1)) << "the queue's write never reached the store";
  // While demo's queue change waits on the store, another tenant changes its queues and an
  // operator creates and changes tenants.
  EXPECT_EQ(
      callAs(other->secret, "POST", "/v1/tenants/other/queues/team-b", {{"quota", {{"gpu", 1}}}})
          .status,
      204U);
  EXPECT_EQ(callAs(other->secret, "DELETE", "/v1/tenants/other/queues/team-b").status, 204U);
  EXPECT_EQ(callAs(root_.secret, "POST", "/v1/tenants/third", {{"quota", {{"gpu", 1}}}}).status,
            204U);
  EXPECT_EQ(callAs(root_.secret, "POST", "/v1/tenants/other", {{"quota", {{"gpu", 2}}}}).status,
            204U);
  // demo's own next change of a queue waits for the first.
  auto demo_second = send("POST", "queues/team-c", {{"quota", {{"gpu", 1}}}});
  EXPECT_EQ(demo_second.wait_for(300ms), std::future_status::timeout);
  EXPECT_EQ(demo_queue.wait_for(0ms), std::future_status::timeout);
  held_store_->release();
  EXPECT_EQ(answer(std::move(demo_queue), "demo's first queue").status, 204U);
  EXPECT_EQ(answer(std::move(demo_second), "demo's second queue").status, 204U);
}

TEST_F(ControlPlaneTenantLockTest, ATenantDeletedWhileItsQueueIsWrittenKeepsNoQueue) {
  held_store_->hold("/tenants/demo/queues/");
  auto queue = send("POST", "queues/team-a", {{"quota", {{"gpu", 1}}}});
  ASSERT_TRUE(held_store_->waitHeld(1));
  auto deleted = sendAs(root_.secret, "DELETE", "/v1/tenants/demo");
  // The deletion waits for the queue's write: otherwise the write would land after the
  // tenant's keys are gone and outlive it.
  EXPECT_EQ(deleted.wait_for(300ms), std::future_status::timeout);
  held_store_->release();
  EXPECT_EQ(answer(std::move(queue), "the queue").status, 204U);
  EXPECT_EQ(answer(std::move(deleted), "the deletion").status, 204U);
  EXPECT_EQ(keysUnder("/tenants/demo"), std::vector<std::string>{});
  // And a tenant of that name created later starts with no queue.
  ASSERT_EQ(callAs(root_.secret, "POST", "/v1/tenants/demo", {{"quota", {{"gpu", 1}}}}).status,
            204U);
  EXPECT_EQ(keysUnder("/tenants/demo/queues/"), std::vector<std::string>{});
}

TEST_F(ControlPlaneTenantLockTest, ASubmissionOvertakenByItsTenantsDeletionStoresNothing) {
  held_store_->hold("/tenants/demo/workloads/");
  auto submitted = send("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
  ASSERT_TRUE(held_store_->waitHeld(1));
  // Checked, not yet stored: the deletion sees no workload of demo's and goes ahead.
  EXPECT_EQ(callAs(root_.secret, "DELETE", "/v1/tenants/demo").status, 204U);
  held_store_->release();
  EXPECT_EQ(answer(std::move(submitted), "the submission").status, 404U);
  EXPECT_EQ(keysUnder("/tenants/demo"), std::vector<std::string>{});
  // Nothing of it stays in memory either: the name is free, and a new tenant there is empty.
  ASSERT_EQ(callAs(root_.secret, "POST", "/v1/tenants/demo", {{"quota", {{"gpu", 1}}}}).status,
            204U);
  const HttpResponse list = callAs(root_.secret, "LIST", "/v1/tenants/demo/workloads");
  EXPECT_EQ(list.status, 200U) << list.body;
  EXPECT_EQ(list.body.find("w1"), std::string::npos) << list.body;
}

// A submission checked before its tenant's deletion began, and stored before the deletion
// removed the tenant's keys: held at the store, then let go once the deletion (held at the
// revocation of demo's tokens) has taken the tenant out of the caches.
class ControlPlaneDeletionRaceTest : public ControlPlaneTest {
 protected:
  void submitDuringDeletion() {
    held_store_->hold("/tenants/demo/workloads/");
    submitted_ = send("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
    ASSERT_TRUE(held_store_->waitHeld(1)) << "the submission never reached the store";
    held_store_->hold("/tokens/");
    deleted_ = sendAs(root_.secret, "DELETE", "/v1/tenants/demo");
    ASSERT_TRUE(held_store_->waitHeld(2)) << "the deletion never reached demo's tokens";
    EXPECT_EQ(callAs(root_.secret, "GET", "/v1/tenants/demo").status, 404U);
    held_store_->release("/tenants/demo/workloads/");
    // Stored (demo's key is still there), and answered only once the deletion is done.
    for (int i = 0; i < 500 && keysUnder("/tenants/demo/workloads/").empty(); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(keysUnder("/tenants/demo/workloads/"),
              std::vector<std::string>{"/tenants/demo/workloads/w1"});
    EXPECT_EQ(submitted_.wait_for(100ms), std::future_status::timeout);
  }

  std::future<HttpResponse> submitted_;
  std::future<HttpResponse> deleted_;
};

TEST_F(ControlPlaneDeletionRaceTest, ADeletionThatSucceedsTakesTheWorkloadWithIt) {
  submitDuringDeletion();
  held_store_->release("/tokens/");
  EXPECT_EQ(answer(std::move(deleted_), "the deletion").status, 204U);
  EXPECT_EQ(answer(std::move(submitted_), "the submission").status, 404U);
  EXPECT_EQ(keysUnder("/tenants/demo"), std::vector<std::string>{});
}

TEST_F(ControlPlaneDeletionRaceTest, ADeletionThatFailsKeepsTheWorkloadAndSchedulesIt) {
  submitDuringDeletion();
  held_store_->fail("/tokens/");
  held_store_->release("/tokens/");
  EXPECT_EQ(answer(std::move(deleted_), "the deletion").status, 503U);
  held_store_->fail("/nothing/");
  // Accepted, as it is stored: in the tenant's list, and with the scheduler, which the store's
  // watch did not tell while the tenant was out of the caches.
  EXPECT_EQ(answer(std::move(submitted_), "the submission").status, 202U);
  EXPECT_EQ(call("GET", "workloads/w1").status, 200U);
  std::optional<WorkloadStatus> status;
  for (int i = 0; i < 500 && !(status && status->phase == WorkloadPhase::kRunning); ++i) {
    driver_->runOnce();
    status = driver_->status("demo", "w1");
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(status.has_value()) << "the scheduler never got the workload";
  EXPECT_EQ(status->phase, WorkloadPhase::kRunning);
  // It counts as demo's: the tenant cannot be deleted while it runs.
  EXPECT_EQ(callAs(root_.secret, "DELETE", "/v1/tenants/demo").status, 409U);
}

TEST_F(ControlPlaneTenantLockTest, ATenantsDeletionHoldsUpNoOtherTenantsRequests) {
  auto other = cp_->createTenantWithToken("other", json{{"quota", {{"gpu", 8}}}}, root_.info);
  ASSERT_TRUE(other.isOk());
  ASSERT_EQ(callAs(other->secret, "POST", "/v1/tenants/other/workloads/w1",
                   {{"cpuMilli", 100}, {"duration", 1}})
                .status,
            202U);
  held_store_->hold("/tenants/demo/");
  auto deleted = sendAs(root_.secret, "DELETE", "/v1/tenants/demo");
  ASSERT_TRUE(held_store_->waitHeld(1)) << "the deletion never reached the store";
  // While its keys are being removed, the others are served, and demo is gone already.
  EXPECT_EQ(callAs(other->secret, "GET", "/v1/tenants/other/workloads/w1").status, 200U);
  EXPECT_EQ(callAs(root_.secret, "GET", "/v1/tenants/other").status, 200U);
  EXPECT_EQ(callAs(root_.secret, "GET", "/v1/tenants/demo").status, 404U);
  EXPECT_EQ(deleted.wait_for(0ms), std::future_status::timeout);
  held_store_->release();
  EXPECT_EQ(answer(std::move(deleted), "the deletion").status, 204U);
  EXPECT_EQ(keysUnder("/tenants/demo"), std::vector<std::string>{});
}

TEST_F(ControlPlaneTenantLockTest, ADeletionThatCannotFinishLeavesTheTenantInPlace) {
  ASSERT_EQ(call("POST", "queues/team-a", {{"quota", {{"gpu", 1}}}}).status, 204U);
  ASSERT_EQ(
      call("POST", "policies/reader", {{"path", {{"workloads/*", {{"capabilities", {"read"}}}}}}})
          .status,
      204U);
  held_store_->fail("/tenants/demo/");
  const HttpResponse refused = callAs(root_.secret, "DELETE", "/v1/tenants/demo");
  EXPECT_EQ(refused.status, 503U) << refused.body;
  EXPECT_NE(refused.body.find("deleting tenant 'demo'"), std::string::npos) << refused.body;
  held_store_->fail("/nothing/");
  // Its settings, policies and queues are back, for the operator to try again. (Its tokens were
  // revoked before the store failed: a tenant created later under its name must not be
  // reachable with them.)
  EXPECT_EQ(callAs(root_.secret, "GET", "/v1/tenants/demo").status, 200U);
  EXPECT_EQ(callAs(root_.secret, "GET", "/v1/tenants/demo/policies/reader").status, 200U);
  EXPECT_EQ(callAs(root_.secret, "GET", "/v1/tenants/demo/queues/team-a").status, 200U);
  EXPECT_EQ(callAs(root_.secret, "LIST", "/v1/tenants/demo/workloads").status, 200U);
  // And it is deleted once the store takes writes again.
  EXPECT_EQ(callAs(root_.secret, "DELETE", "/v1/tenants/demo").status, 204U);
  EXPECT_EQ(callAs(root_.secret, "GET", "/v1/tenants/demo").status, 404U);
  EXPECT_EQ(keysUnder("/tenants/demo"), std::vector<std::string>{});
}

// Which requests admit() lets run on the I/O thread: reads of a workload's status in the
// token's own tenant, nothing that could block.
using ControlPlaneAdmitTest = ControlPlaneTest;

TEST_F(ControlPlaneAdmitTest, OnlyReadsOfAWorkloadsStatusInTheTokensOwnTenantRunNow) {
  auto other = cp_->createTenantWithToken("other", json{{"quota", {{"gpu", 1}}}}, root_.info);
  ASSERT_TRUE(other.isOk());
  ListenerConfig chroot;
  chroot.chroot_tenant = "demo";
  listeners_.push_back(chroot);
  auto runs_now = [&](const std::string& token, const std::string& method,
                      const std::string& target, size_t listener = 0) {
    HttpRequest r;
    r.method = method;
    r.target = target;
    r.headers = {{"x-tessera-token", token}};
    r.listener = listener;
    return cp_->admit(r, listeners_).run_now;
  };
  EXPECT_TRUE(runs_now(token_, "GET", "/v1/tenants/demo/workloads/w1"));
  EXPECT_TRUE(runs_now(root_.secret, "GET", "/v1/tenants/demo/workloads/w1"));
  EXPECT_TRUE(runs_now(token_, "GET", "/v1/workloads/w1", 1));  // On demo's chroot listener.
  // Not another tenant's (it could come in on a grant), not even on that one's listener.
  EXPECT_FALSE(runs_now(token_, "GET", "/v1/tenants/other/workloads/w1"));
  EXPECT_FALSE(runs_now(other->secret, "GET", "/v1/workloads/w1", 1));
  // Not lists, logs (they may wait for an agent), events, changes, or anything unparsed.
  EXPECT_FALSE(runs_now(token_, "LIST", "/v1/tenants/demo/workloads"));
  EXPECT_FALSE(runs_now(token_, "GET", "/v1/tenants/demo/workloads?list=true"));
  EXPECT_FALSE(runs_now(token_, "GET", "/v1/tenants/demo/workloads/w1/logs/0"));
  EXPECT_FALSE(runs_now(token_, "GET", "/v1/tenants/demo/workloads/w1/events"));
  EXPECT_FALSE(runs_now(token_, "DELETE", "/v1/tenants/demo/workloads/w1"));
  EXPECT_FALSE(runs_now(token_, "POST", "/v1/tenants/demo/workloads/w1"));
  EXPECT_FALSE(runs_now(token_, "GET", "/v1/tenants/demo/secrets/kv/data/w1"));
  EXPECT_FALSE(runs_now(token_, "GET", "/v1/tenants/demo/workloads%2Fw1"));
  EXPECT_FALSE(runs_now("tsr.not-a-token", "GET", "/v1/tenants/demo/workloads/w1"));
}

// Issue #36: a body on a request whose route reads none (a GET, a DELETE) is ignored, never
// parsed: not by admit on the I/O thread, which decides from the head alone, and not by the
// handler. Before, admit parsed it to decide whether the request ran now, and the handler
// parsed it again.
TEST_F(ControlPlaneAdmitTest, ABodyOnARequestThatReadsNoneIsNeitherParsedNorRefused) {
  HttpRequest r;
  r.method = "GET";
  r.target = "/v1/tenants/demo/workloads/w1";
  r.headers = {{"x-tessera-token", token_}};
  r.body = "{\"unparsable";
  EXPECT_TRUE(cp_->admit(r, listeners_).run_now);
  // Not an object, not even JSON: the answer is the route's, as without a body.
  EXPECT_EQ(callAs(token_, "GET", "/v1/tenants/demo/queues", json::array({1, 2})).status, 200U);
  EXPECT_EQ(callAs(token_, "LIST", "/v1/tenants/demo/policies", "a string").status, 200U);
  ASSERT_EQ(call("POST", "queues/team-a", {{"quota", {{"gpu", 1}}}}).status, 204U);
  EXPECT_EQ(callAs(token_, "DELETE", "/v1/tenants/demo/queues/team-a",
                   {{"kind", "DeleteOptions"}, {"propagationPolicy", "Background"}})
                .status,
            204U);
  // A route that reads its body still refuses one that is not an object.
  EXPECT_EQ(call("POST", "queues/team-b", json::array({1})).status, 400U);
}

INSTANTIATE_TEST_SUITE_P(AuditDurableAnswers, ControlPlaneAuditTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "All" : "Secrets"; });
INSTANTIATE_TEST_SUITE_P(AuditDurableAnswers, ControlPlaneAuditFlushCountTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "All" : "Secrets"; });

// Issue #36: a GPU limit of 0 used to mean none. Tenants and team queues stored so keep that
// meaning (rewritten to -1 once, at the first start of this version); a 0 written since is
// zero, and stays zero across restarts.
class ControlPlaneStatusWriteTest : public ControlPlaneTest {
 protected:
  ControlPlaneStatusWriteTest() { status_write_deadline_ = 100ms; }
};

// Issue 42: the scheduler's status write is bounded below a pass (a store member whose leader
// died does not hold the pass); each failure in a row doubles the bound, up to 16 times (a
// slow store still takes it), and a success brings it back.
TEST_F(ControlPlaneStatusWriteTest, EachFailureInARowDoublesTheStatusWritesDeadline) {
  ASSERT_EQ(call("POST", "workloads/w", {{"cpuMilli", 100}, {"duration", 1}}).status, 202U);
  const std::string key = "/tenants/demo/workloads/w";
  waitStored(key);
  const size_t before = held_store_->txnDeadlines().size();
  WorkloadStatus running;
  running.phase = WorkloadPhase::kRunning;
  held_store_->fail(key);
  for (int i = 0; i < 6; ++i) {
    EXPECT_FALSE(cp_->onDriverChanges({{"demo/w", running}}).isOk());
  }
  held_store_->heal();
  ASSERT_TRUE(cp_->onDriverChanges({{"demo/w", running}}).isOk());
  ASSERT_TRUE(cp_->onDriverChanges({{"demo/w", running}}).isOk());
  const std::vector<std::chrono::milliseconds> all = held_store_->txnDeadlines();
  ASSERT_EQ(all.size(), before + 8);
  const std::vector<std::chrono::milliseconds> got(all.begin() + before, all.end());
  EXPECT_EQ(got, (std::vector<std::chrono::milliseconds>{100ms, 200ms, 400ms, 800ms, 1600ms, 1600ms,
                                                         1600ms, 100ms}));
  auto stored = store_->get(key);
  ASSERT_TRUE(stored.isOk() && stored->has_value());
  EXPECT_EQ(json::parse((*stored)->value)["status"].value("phase", ""), "running");
}

// The store may end the watch that feeds the workload registry (an etcd backend whose history
// was compacted while the server was cut off from it). The server reads the workloads again,
// catches the registry and the scheduler up with what it missed and watches on: a workload
// written meanwhile is listed, scheduled and cancellable, and one deleted meanwhile is gone.
TEST_F(ControlPlaneTest, AStoreWatchThatEndsIsResumedAndWhatItMissedIsCaughtUp) {
  ASSERT_EQ(call("POST", "workloads/before", json{{"duration", 600}}).status, 202U);
  ASSERT_EQ(call("POST", "workloads/gone", json{{"duration", 600}}).status, 202U);
  // Reading is down first, so the server cannot catch up at once: the writes below are made
  // while nothing feeds the registry.
  held_store_->failRangesFrom("/tenants/");
  ASSERT_GE(held_store_->endWatches(core::outOfRange("history compacted")), 1U);
  auto submitted = send("POST", "workloads/after", json{{"duration", 600}});
  ASSERT_TRUE(store_->deleteRange("/tenants/demo/workloads/gone", "").isOk());
  std::this_thread::sleep_for(300ms);  // A few tries of the feed, each refused.
  EXPECT_EQ(submitted.wait_for(0ms), std::future_status::timeout)
      << "the handler waits for the registry to bring its own write";
  held_store_->failRangesFrom("");
  EXPECT_EQ(answer(std::move(submitted), "POST workloads/after").status, 202U);
  EXPECT_EQ(call("GET", "workloads/after").status, 200U);
  EXPECT_EQ(call("GET", "workloads/gone").status, 404U);
  // The scheduler has it, and the resumed watch carries what comes next: a cancel.
  std::optional<WorkloadStatus> after;
  for (int i = 0; i < 500 && !(after && after->phase == WorkloadPhase::kRunning); ++i) {
    driver_->runOnce();
    after = driver_->status("demo", "after");
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(after.has_value()) << "the scheduler never got the workload written meanwhile";
  EXPECT_EQ(after->phase, WorkloadPhase::kRunning);
  ASSERT_EQ(call("DELETE", "workloads/before").status / 100, 2U);
  std::optional<WorkloadStatus> before;
  for (int i = 0; i < 500 && !(before && before->phase == WorkloadPhase::kCancelled); ++i) {
    driver_->runOnce();
    before = driver_->status("demo", "before");
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->phase, WorkloadPhase::kCancelled);
}

class ControlPlanePassTest : public ControlPlaneTest {
 protected:
  ControlPlanePassTest() { passes_write_statuses_ = true; }
};

// Collecting a finished workload past its retention holds the status-write lock while it
// deletes the record; a pass holds the driver's lock while it writes statuses. Collection once
// went on to the driver (to forget the workload) with the status-write lock still held: when a
// pass had statuses to write at that moment, each waited for the other and the server answered
// nothing more (found in kube_integration_test, a few runs in ten).
TEST_F(ControlPlanePassTest, CollectingAFinishedWorkloadWhileAPassWritesStatusesHoldsUpNeither) {
  ASSERT_EQ(callAs(root_.secret, "POST", "/v1/tenants/demo",
                   {{"quota", {{"gpu", 8}}}, {"workload_retention_seconds", 1}})
                .status,
            204U);
  ASSERT_EQ(call("POST", "workloads/done", {{"cpuMilli", 100}, {"duration", 1}}).status, 202U);
  auto phase = [&](const std::string& name) {
    auto stored = store_->get("/tenants/demo/workloads/" + name);
    return stored.isOk() && stored->has_value()
               ? json::parse((*stored)->value)["status"].value("phase", "")
               : std::string("gone");
  };
  for (int i = 0; i < 500 && phase("done") != "succeeded"; ++i) {
    driver_->runOnce();
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(phase("done"), "succeeded");
  std::this_thread::sleep_for(1100ms);  // Past its retention.
  ASSERT_EQ(call("POST", "workloads/next", {{"cpuMilli", 100}, {"duration", 600}}).status, 202U);
  for (int i = 0; i < 500 && !driver_->status("demo", "next"); ++i) {
    std::this_thread::sleep_for(10ms);  // Until the store's watch has handed it over.
  }
  ASSERT_TRUE(driver_->status("demo", "next").has_value());
  // Collection deletes "done" (held here, with the status-write lock taken); a pass starts
  // "next" and waits to write its status; then the deletion goes on.
  held_store_->hold("/tenants/demo/workloads/done");
  std::promise<void> collected;
  std::promise<void> passed;
  threads_.emplace_back([&] {
    cp_->housekeeping();
    collected.set_value();
  });
  ASSERT_TRUE(held_store_->waitHeld(1)) << "the collection never reached the store";
  threads_.emplace_back([&] {
    driver_->runOnce();
    passed.set_value();
  });
  std::this_thread::sleep_for(300ms);  // The pass reaches its status write.
  held_store_->release();
  const bool both = collected.get_future().wait_for(10s) == std::future_status::ready &&
                    passed.get_future().wait_for(10s) == std::future_status::ready;
  if (!both) {
    ADD_FAILURE() << "the collection and the pass wait for each other";
    std::_Exit(1);  // Their threads can never be joined.
  }
  EXPECT_EQ(phase("done"), "gone");
  EXPECT_EQ(call("GET", "workloads/done").status, 404U);
  EXPECT_EQ(phase("next"), "running");
  // The name may be used again.
  EXPECT_EQ(call("POST", "workloads/done", {{"cpuMilli", 100}, {"duration", 1}}).status, 202U);
}

TEST_F(ControlPlaneTest, StoredGpuLimitsOfZeroFromBeforeStayNoneAndNewZerosStayZero) {
  auto reopen = [&] {
    for (std::thread& t : threads_) {
      t.join();
    }
    threads_.clear();
    cp_.reset();
    auto cp = ControlPlane::open(*held_store_, *auditor_, *driver_, catalogue_, clock_, {},
                                 secrets_.get());
    ASSERT_TRUE(cp.isOk()) << cp.status().toString();
    cp_ = std::move(cp).value();
  };
  auto stored = [&](const std::string& key) {
    auto got = store_->get(key);
    EXPECT_TRUE(got.isOk() && got->has_value()) << key;
    return got.isOk() && got->has_value() ? json::parse((*got)->value) : json();
  };
  // As an older server wrote them: 0 for no limit (or no field at all), a number for a limit.
  const json legacy = {{"name", "legacy"},
                       {"quota_milli_gpu", 0},
                       {"limit_milli_gpu", 0},
                       {"weight", 1},
                       {"priority", 100}};
  ASSERT_TRUE(store_->put("/tenants/legacy", legacy.dump()).isOk());
  ASSERT_TRUE(
      store_->put("/tenants/older", json{{"name", "older"}, {"quota_milli_gpu", 1000}}.dump())
          .isOk());
  json capped = legacy;
  capped["name"] = "capped";
  capped["limit_milli_gpu"] = 4000;
  ASSERT_TRUE(store_->put("/tenants/capped", capped.dump()).isOk());
  ASSERT_TRUE(store_
                  ->put("/tenants/legacy/queues/team", json{{"name", "team"},
                                                            {"quota_milli_gpu", 0},
                                                            {"limit_milli_gpu", 0},
                                                            {"weight", 1},
                                                            {"priority", 100}}
                                                           .dump())
                  .isOk());
  ASSERT_TRUE(store_->deleteRange("/migrations/gpu-limit-zero-is-zero").isOk());
  reopen();
  EXPECT_EQ(stored("/tenants/legacy")["limit_milli_gpu"], -1);
  EXPECT_EQ(stored("/tenants/older")["limit_milli_gpu"], -1);
  EXPECT_EQ(stored("/tenants/capped")["limit_milli_gpu"], 4000);
  EXPECT_EQ(stored("/tenants/legacy/queues/team")["limit_milli_gpu"], -1);
  EXPECT_EQ(stored("/tenants/demo")["limit_milli_gpu"], -1);  // Written by this version.
  const json gpu_work = {{"gpu", {{"count", 1}}}, {"cpuMilli", 100}, {"duration", 1}};
  HttpResponse r = callAs(root_.secret, "POST", "/v1/tenants/legacy/workloads/a", gpu_work);
  EXPECT_EQ(r.status, 202U) << r.body;
  json team_work = gpu_work;
  team_work["queue"] = "team";
  r = callAs(root_.secret, "POST", "/v1/tenants/legacy/workloads/b", team_work);
  EXPECT_EQ(r.status, 202U) << r.body;
  // A zero written now is zero, after any number of restarts.
  r = callAs(root_.secret, "POST", "/v1/tenants/legacy",
             {{"quota", {{"gpu", 0}}}, {"limit", {{"gpu", 0}}}});
  ASSERT_EQ(r.status, 204U) << r.body;
  reopen();
  reopen();
  EXPECT_EQ(stored("/tenants/legacy")["limit_milli_gpu"], 0);
  r = callAs(root_.secret, "POST", "/v1/tenants/legacy/workloads/c", gpu_work);
  EXPECT_EQ(r.status, 400U) << r.body;
  EXPECT_NE(r.body.find("may hold no GPU at all"), std::string::npos) << r.body;
}

std::string slurpFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The audit log's records, parsed (appended ones included: they are in the file already).
std::vector<json> auditRecords(const fs::path& log) {
  std::vector<json> out;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    out.push_back(json::parse(line));
  }
  return out;
}

// Every request record has a response record with its request id.
void expectEveryRequestAnswered(const std::vector<json>& records) {
  std::map<std::string, int> open;
  for (const json& rec : records) {
    if (rec["type"] == "request") {
      ++open[rec["request_id"].get<std::string>()];
    } else if (rec["type"] == "response") {
      open.erase(rec["request_id"].get<std::string>());
    }
  }
  for (const auto& [id, n] : open) {
    ADD_FAILURE() << "request " << id << " has a request record and no response record";
  }
}

// A retry back-off (`restart.maxDelay`) must be reachable by doubling `delay`: one below the
// delay, or with no delay to double, is refused saying so, and nothing is stored.
TEST_F(ControlPlaneTest, ARetryBackOffNeedsADelayToDoubleUpToIt) {
  const json base = {{"cpuMilli", 100}, {"duration", 1}};
  json below = base;
  below["restart"] = {{"attempts", 2}, {"delay", 30}, {"maxDelay", 20}};
  HttpResponse r = call("POST", "workloads/below", below);
  EXPECT_EQ(r.status, 400U) << r.body;
  EXPECT_NE(r.body.find("restart.maxDelay: must be at least delay (30 s)"), std::string::npos)
      << r.body;
  json none = base;
  none["restart"] = {{"attempts", 2}, {"maxDelay", 60}};
  r = call("POST", "workloads/none", none);
  EXPECT_EQ(r.status, 400U) << r.body;
  EXPECT_NE(r.body.find("restart.maxDelay: needs a delay of at least 1 s"), std::string::npos)
      << r.body;
  EXPECT_EQ(keysUnder("/tenants/demo/workloads/"), std::vector<std::string>{});
  json good = base;
  good["restart"] = {{"attempts", 2}, {"delay", 10}, {"maxDelay", 360}};
  EXPECT_EQ(call("POST", "workloads/good", good).status, 202U);
}

// A join whose non-string join_token made the handler throw (an unauthenticated 500 whose
// request record had no response record) is a 400 that says what is wrong, recorded.
// Team queues share their tenant's guarantee: their quotas together never exceed the tenant's
// (demo's is 8 GPUs), and the tenant's is not lowered under theirs.
TEST_F(ControlPlaneTest, TeamQuotasAddUpToNoMoreThanTheTenants) {
  ASSERT_EQ(call("POST", "queues/team-a", {{"quota", {{"gpu", 5}}}}).status, 204U);
  ASSERT_EQ(call("POST", "queues/team-b", {{"quota", {{"gpu", 3}}}}).status, 204U);
  HttpResponse r = call("POST", "queues/team-c", {{"quota", {{"gpu", 1}}}});
  EXPECT_EQ(r.status, 400U) << r.body;
  EXPECT_NE(r.body.find("queue 'team-c': quota.gpu 1 GPU and the other team queues' (team-a 5 "
                        "GPUs, team-b 3 GPUs) add up to 9 GPUs, more than tenant 'demo''s quota "
                        "of 8 GPUs"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(keysUnder("/tenants/demo/queues/team-c"), std::vector<std::string>{});
  // Raising one past the rest: refused; lowering it, or a change that keeps its quota: taken.
  r = call("POST", "queues/team-a", {{"quota", {{"gpu", 6}}}});
  EXPECT_EQ(r.status, 400U) << r.body;
  EXPECT_EQ(call("POST", "queues/team-a", {{"quota", {{"gpu", 4}}}}).status, 204U);
  EXPECT_EQ(call("POST", "queues/team-c", {{"quota", {{"gpu", 1}}}}).status, 204U);
  EXPECT_EQ(call("POST", "queues/team-c", {{"weight", 2}}).status, 204U);
  // A queue without a quota borrows only: always taken.
  EXPECT_EQ(call("POST", "queues/team-d", json::object()).status, 204U);
  // Listed at once, before any scheduling pass, with its quota.
  const HttpResponse listed = call("GET", "queues");
  ASSERT_EQ(listed.status, 200U) << listed.body;
  const json queues = json::parse(listed.body)["data"]["queues"];
  std::map<std::string, int64_t> quotas;
  for (const json& q : queues) {
    quotas[q["name"]] = q["quota_milli_gpu"];
  }
  EXPECT_EQ(quotas.at("demo/team-a"), 4000) << listed.body;
  EXPECT_EQ(quotas.at("demo/team-d"), 0) << listed.body;
  // The tenant's own quota under its teams' 8 GPUs: refused, saying what to lower first.
  r = callAs(root_.secret, "POST", "/v1/tenants/demo", {{"quota", {{"gpu", 7}}}});
  EXPECT_EQ(r.status, 400U) << r.body;
  EXPECT_NE(r.body.find("quota.gpu 7 GPUs is less than its team queues' 8 GPUs together"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(callAs(root_.secret, "POST", "/v1/tenants/demo", {{"quota", {{"gpu", 12}}}}).status,
            204U);
  EXPECT_EQ(call("POST", "queues/team-e", {{"quota", {{"gpu", 4}}}}).status, 204U);
}

TEST_F(ControlPlaneTest, AJoinWithANonStringJoinTokenIsA400AndRecorded) {
  for (const json& token : {json(0), json::array(), json("")}) {
    const HttpResponse r =
        callAs("", "POST", "/v1/sys/nodes/join", {{"join_token", token}, {"node", "n9"}});
    EXPECT_EQ(r.status, 400U) << r.body;
    EXPECT_NE(r.body.find("join_token: expected a non-empty string"), std::string::npos) << r.body;
  }
  // A node name of the wrong type, with a token that authenticates, is the handler's 400.
  const HttpResponse made =
      callAs(root_.secret, "POST", "/v1/sys/nodes/join-tokens", {{"ttl", "1h"}});
  ASSERT_EQ(made.status, 200U) << made.body;
  const std::string join = json::parse(made.body)["data"]["token"];
  const HttpResponse named =
      callAs("", "POST", "/v1/sys/nodes/join", {{"join_token", join}, {"node", 7}});
  EXPECT_EQ(named.status, 400U) << named.body;
  EXPECT_NE(named.body.find("node: expected a string"), std::string::npos) << named.body;
  const std::vector<json> records = auditRecords(dir_ / "audit.log");
  expectEveryRequestAnswered(records);
  int joins = 0;
  for (const json& rec : records) {
    if (rec["request"]["path"] == "sys/nodes/join" && rec["type"] == "response") {
      EXPECT_EQ(rec["response"]["status"], 400) << rec.dump();
      ++joins;
    }
  }
  EXPECT_EQ(joins, 4);
  EXPECT_EQ(slurpFile(dir_ / "audit.log").find(join), std::string::npos);  // HMAC'd only.
}

// Whatever throws on a request's way (here the store, as a backend with a bug might) is
// answered, and no request record is left without its response record.
TEST_F(ControlPlaneTest, AnExceptionOnTheWayIsAnsweredAndRecorded) {
  const HttpResponse made =
      callAs(root_.secret, "POST", "/v1/sys/nodes/join-tokens", {{"ttl", "1h"}});
  ASSERT_EQ(made.status, 200U) << made.body;
  held_store_->throwOnRange(std::string(kJoinTokensPrefix));
  const HttpResponse r =
      callAs("", "POST", "/v1/sys/nodes/join",
             {{"join_token", json::parse(made.body)["data"]["token"]}, {"node", "n9"}});
  held_store_->throwOnRange("");
  EXPECT_EQ(r.status, 500U) << r.body;
  const std::vector<json> records = auditRecords(dir_ / "audit.log");
  expectEveryRequestAnswered(records);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back()["request"]["path"], "sys/nodes/join");
  EXPECT_EQ(records.back()["response"]["status"], 500);
}

// A tenant made before `patch` existed keeps KV PATCH for its admin; an edited policy is the
// operator's and stays as written.
TEST(UpgradedTenantPolicyTest, AnUntouchedTenantAdminGainsPatchAndNothingElseChanges) {
  const json old =
      json::parse(R"({"path":{"*":{"capabilities":["create","read","update","delete","list"]}}})");
  const std::string kv = "secrets/kv/data/app";
  auto allows = [&](const std::string& name, const json& stored, Capability c) {
    auto p = Policy::fromJson(name, api::upgradedTenantPolicy(name, stored));
    EXPECT_TRUE(p.isOk()) << p.status().toString();
    const Policy& policy = *p;
    return resolve(std::vector<const Policy*>{&policy}, kv).allows(c);
  };
  const Policy as_stored = *Policy::fromJson("tenant-admin", old);
  EXPECT_TRUE(resolve(std::vector<const Policy*>{&as_stored}, kv).allows(Capability::kUpdate));
  EXPECT_FALSE(resolve(std::vector<const Policy*>{&as_stored}, kv).allows(Capability::kPatch));
  EXPECT_TRUE(allows("tenant-admin", old, Capability::kPatch));
  EXPECT_TRUE(allows("tenant-admin", old, Capability::kDelete));
  EXPECT_FALSE(allows("my-admin", old, Capability::kPatch));  // Another name: as written.
  json edited = old;
  edited["path"]["*"]["capabilities"] = {"read", "list"};
  EXPECT_FALSE(allows("tenant-admin", edited, Capability::kPatch));
  EXPECT_FALSE(allows("tenant-admin", edited, Capability::kUpdate));
}

}  // namespace
}  // namespace tessera::server
