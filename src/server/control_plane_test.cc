// When an answer leaves, relative to the audit log's disk flush: the policy of
// `audit_durable_answers` (docs/server.md, "A request's path", step 5), on a real ControlPlane
// over SQLite and a FileSink whose flush the test holds back or counts.
#include "server/control_plane.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "audit/auditor.h"
#include "audit/file_sink.h"
#include "core/clock.h"
#include "model/gpu_catalogue.h"
#include "model/node_profiles.h"
#include "secrets/service.h"
#include "server/driver.h"
#include "store/sqlite_store.h"
#include "store/store.h"

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

class ControlPlaneAuditTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-cp-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto store = store::SqliteStore::open((dir_ / "tessera.db").string(), {}, clock_);
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    store_ = std::move(store).value();
    audit::FileSinkOptions fo{{.salt = "pepper"}};
    fo.fdatasync = [this](int fd) { return disk_.fdatasync(fd); };
    fo.appended_flush_delay = flush_delay_;
    auto sink = audit::FileSink::open((dir_ / "audit.log").string(), fo, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    std::vector<std::unique_ptr<audit::AuditSink>> sinks;
    sinks.push_back(std::move(sink).value());
    auditor_ = std::move(audit::Auditor::create(std::move(sinks))).value();
    std::vector<model::Node> nodes = {*model::makeProfileNode("dgx-h100", "n0", catalogue_, 0)};
    auto driver = SchedulerDriver::create(catalogue_, std::move(nodes), clock_, {}, {});
    ASSERT_TRUE(driver.isOk()) << driver.status().toString();
    driver_ = std::move(driver).value();
    secrets::SecretsOptions so;
    so.seal.key_file = (dir_ / "unseal-key").string();
    auto secrets = secrets::Secrets::open(*store_, clock_, so);
    ASSERT_TRUE(secrets.isOk()) << secrets.status().toString();
    secrets_ = std::move(secrets).value();
    ControlPlaneOptions co;
    co.durable_every_answer = GetParam();
    auto cp =
        ControlPlane::open(*store_, *auditor_, *driver_, catalogue_, clock_, co, secrets_.get());
    ASSERT_TRUE(cp.isOk()) << cp.status().toString();
    cp_ = std::move(cp).value();
    auto root = cp_->bootstrapRootToken();
    ASSERT_TRUE(root.isOk());
    auto demo = cp_->createTenantWithToken("demo", json{{"quota", {{"gpu", 8}}}}, root->info);
    ASSERT_TRUE(demo.isOk()) << demo.status().toString();
    token_ = demo->secret;
    listeners_.emplace_back();
  }

  void TearDown() override {
    disk_.release();
    for (std::thread& t : threads_) {
      t.join();
    }
    cp_.reset();
    secrets_.reset();
    driver_.reset();
    auditor_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // Sends a request as tenant demo; the future is ready when the answer is sent.
  std::future<HttpResponse> send(const std::string& method, const std::string& path,
                                 const json& body = nullptr) {
    HttpRequest r;
    r.method = method;
    r.target = "/v1/tenants/demo/" + path;
    r.headers = {{"x-tessera-token", token_}};
    r.body = body.is_null() ? "" : body.dump();
    r.remote = "127.0.0.1:1";
    auto answer = std::make_shared<std::promise<HttpResponse>>();
    std::future<HttpResponse> answered = answer->get_future();
    threads_.emplace_back([this, r, answer] {
      cp_->handle(r, listeners_, [answer](HttpResponse resp) { answer->set_value(resp); });
    });
    return answered;
  }

  // Sends a request with the disk free and waits for its answer.
  HttpResponse call(const std::string& method, const std::string& path,
                    const json& body = nullptr) {
    auto answered = send(method, path, body);
    const bool ready = answered.wait_for(10s) == std::future_status::ready;
    EXPECT_TRUE(ready) << method << " " << path << " unanswered";
    if (ready) {
      return answered.get();
    }
    HttpResponse none;
    none.status = 0;
    return none;
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

  // When the audit log flushes records nobody waits for.
  std::chrono::milliseconds flush_delay_ = 1ms;
  fs::path dir_;
  core::RealClock clock_;
  const model::GpuCatalogue catalogue_ = model::GpuCatalogue::builtin();
  HeldDisk disk_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<audit::Auditor> auditor_;
  std::unique_ptr<SchedulerDriver> driver_;
  std::unique_ptr<secrets::Secrets> secrets_;
  std::unique_ptr<ControlPlane> cp_;
  std::string token_;
  std::vector<ListenerConfig> listeners_;
  std::vector<std::thread> threads_;  // Each runs one request's handler.
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
  EXPECT_FALSE(answeredWhileTheDiskIsHeld("POST", "workloads/w2", 202,
                                          {{"cpuMilli", 100}, {"duration", 1}}));
}

TEST_P(ControlPlaneAuditTest, ASubmissionIsStoredOnlyOnceItsRequestRecordIsOnDisk) {
  const std::string key = "/tenants/demo/workloads/w1";
  disk_.hold();
  const int flushes_before = disk_.started();
  auto answered = send("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
  for (int i = 0; i < 1000 && disk_.started() == flushes_before; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GT(disk_.started(), flushes_before);
  // Checked and queued for the store meanwhile, but not stored.
  std::this_thread::sleep_for(200ms);
  auto stored = store_->get(key);
  ASSERT_TRUE(stored.isOk());
  EXPECT_FALSE(stored->has_value());
  EXPECT_EQ(answered.wait_for(0ms), std::future_status::timeout);
  disk_.release();
  ASSERT_EQ(answered.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(answered.get().status, 202U);
  stored = store_->get(key);
  ASSERT_TRUE(stored.isOk());
  EXPECT_TRUE(stored->has_value());
}

TEST_P(ControlPlaneAuditTest, ASubmissionWhoseRequestRecordCannotReachTheDiskIsRefused) {
  disk_.fail();
  const HttpResponse r = call("POST", "workloads/w1", {{"cpuMilli", 100}, {"duration", 1}});
  EXPECT_EQ(r.status, 503U);
  EXPECT_NE(r.body.find("audit log cannot record"), std::string::npos) << r.body;
  auto stored = store_->get("/tenants/demo/workloads/w1");
  ASSERT_TRUE(stored.isOk());
  EXPECT_FALSE(stored->has_value());
  // The log stays stopped: the next one is refused before anything is done.
  EXPECT_EQ(call("POST", "workloads/w2", {{"cpuMilli", 100}, {"duration", 1}}).status, 503U);
  EXPECT_EQ(call("GET", "workloads/w1").status, 503U);
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
  // A submission: its request record before the change; its response too with "all".
  EXPECT_EQ(flushesFor("POST", "workloads/w1", 202, spec), all ? 2 : 1);
  // A status read: none, or one for both records.
  EXPECT_EQ(flushesFor("GET", "workloads/w1", 200), all ? 1 : 0);
  // A secret written (its answer names the version: under data, which the log HMACs) and read.
  EXPECT_EQ(flushesFor("PUT", "secrets/kv/data/db", 200, {{"data", {{"password", "hunter2"}}}}), 2);
  EXPECT_EQ(flushesFor("GET", "secrets/kv/data/db", 200), 1);
}

INSTANTIATE_TEST_SUITE_P(AuditDurableAnswers, ControlPlaneAuditTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "All" : "Secrets"; });
INSTANTIATE_TEST_SUITE_P(AuditDurableAnswers, ControlPlaneAuditFlushCountTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "All" : "Secrets"; });

}  // namespace
}  // namespace tessera::server
