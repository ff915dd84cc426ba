#include "agent/agent.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;

// A runtime that records what it is asked; exits are delivered by the test.
class FakeRuntime : public Runtime {
 public:
  core::Status start(const TaskSpec& spec) override {
    if (fail_.contains(spec.id)) {
      return core::failedPrecondition("command 'x' not found in PATH");
    }
    starts.push_back(spec.id);
    tags[spec.id] = spec.tag;
    envs[spec.id] = spec.env;
    // What the task would read at its start.
    if (auto f = spec.env.find("TESSERA_IDENTITY_TOKEN_FILE"); f != spec.env.end()) {
      std::ifstream in(f->second);
      seen_token[spec.id].assign(std::istreambuf_iterator<char>(in),
                                 std::istreambuf_iterator<char>());
    }
    running_.insert(spec.id);
    return core::Status::ok();
  }
  core::Status stop(const std::string& id, std::chrono::milliseconds grace) override {
    if (!running_.contains(id)) {
      return core::notFound(id);
    }
    stops.emplace_back(id, grace);
    return core::Status::ok();
  }
  std::vector<std::string> running() const override { return {running_.begin(), running_.end()}; }
  // The task ended: tells the agent, as ProcessRuntime's callback does.
  void exit(Agent& agent, const std::string& id, TaskExit e) {
    running_.erase(id);
    agent.onExit(id, e);
  }
  void failStarting(const std::string& id) { fail_.insert(id); }
  // A task an earlier runtime started, now adopted.
  void adopted(const std::string& id) { running_.insert(id); }

  std::vector<std::string> starts;
  std::map<std::string, std::string> tags;  // What adoption will give back: the generation.
  std::map<std::string, std::map<std::string, std::string>> envs;
  std::map<std::string, std::string> seen_token;  // The token file's content at start.
  std::vector<std::pair<std::string, std::chrono::milliseconds>> stops;

 private:
  std::set<std::string> running_;
  std::set<std::string> fail_;
};

class FakeServer : public ControlPlaneClient {
 public:
  core::Result<std::vector<TaskAssignment>> heartbeat(
      const std::string& node, const NodeGpus&, const std::vector<TaskReport>& reports) override {
    ++calls;
    if (down) {
      return core::unavailable("connection refused");
    }
    EXPECT_EQ(node, "gpu-01");
    received.insert(received.end(), reports.begin(), reports.end());
    return assigned;
  }
  void assign(const std::string& id, uint32_t generation, std::chrono::milliseconds grace = 5s) {
    TaskAssignment a;
    a.spec.id = id;
    a.spec.command = {"true"};
    a.generation = generation;
    a.grace = grace;
    for (TaskAssignment& old : assigned) {
      if (old.spec.id == id) {
        old = a;
        return;
      }
    }
    assigned.push_back(a);
  }
  void unassign(const std::string& id) {
    std::erase_if(assigned, [&](const TaskAssignment& a) { return a.spec.id == id; });
  }

  bool noLeaderCanAct() const override { return down && no_leader; }

  bool down = false;
  bool no_leader = false;  // While down: the servers answer that no leader can act.
  int calls = 0;
  std::vector<TaskAssignment> assigned;
  std::vector<TaskReport> received;
};

class AgentTest : public ::testing::Test {
 protected:
  Agent agent() { return Agent("gpu-01", NodeGpus{}, server_, runtime_, clock_, options_); }

  core::FakeClock clock_;
  FakeServer server_;
  FakeRuntime runtime_;
  // One start at a time: FakeRuntime records starts in order, unsynchronized.
  AgentOptions options_{
      .fence_after = 10s, .fence_grace = 1s, .unassigned_grace = 7s, .parallel_starts = 1};
};

// A runtime whose tasks named "*.img.*" need their image pulled first: each pull says how far it
// got, then waits for the test to let it end, as a long download would.
class PullingRuntime : public FakeRuntime {
 public:
  bool needsPull(const TaskSpec& spec) const override {
    return spec.id.find(".img.") != std::string::npos;
  }
  core::Status pull(const TaskSpec& spec) override {
    spec.container.pull_progress(500'000'000, 1'200'000'000);
    std::unique_lock lock(mu_);
    ++pulls_started;
    cv_.wait(lock, [&] { return results_.contains(spec.id); });
    core::Status result = std::move(results_[spec.id]);
    results_.erase(spec.id);  // Each pull ends with its own: one given per pull.
    return result;
  }
  void finish(const std::string& id, core::Status result) {
    std::lock_guard lock(mu_);
    results_[id] = std::move(result);
    cv_.notify_all();
  }
  int pullsStarted() {
    std::lock_guard lock(mu_);
    return pulls_started;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, core::Status> results_;
  int pulls_started = 0;
};

// A registry image is pulled off the agent's loop: heartbeats go on meanwhile, carrying the
// download's progress; the task starts once its image is here, or fails with the pull's reason.
TEST_F(AgentTest, ImagesArePulledOffTheLoopWithProgressThenTheTaskStarts) {
  PullingRuntime runtime;
  std::atomic<int> wakes{0};
  AgentOptions options = options_;
  options.wake = [&] { ++wakes; };
  Agent a("gpu-01", NodeGpus{}, server_, runtime, clock_, options);
  server_.assign("t.img.0", 1);
  server_.assign("t.img.1", 1);
  ASSERT_TRUE(a.tick().isOk());  // Returns at once: the pulls run on their own.
  ASSERT_TRUE([&] {
    for (int i = 0; i < 500 && runtime.pullsStarted() < 2; ++i) {
      std::this_thread::sleep_for(10ms);
    }
    return runtime.pullsStarted() == 2;
  }());
  EXPECT_TRUE(runtime.starts.empty());
  ASSERT_TRUE(a.tick().isOk());  // The loop goes on, and reports how far each pull got.
  auto progress = [&](const std::string& id) {
    std::string last;
    for (const TaskReport& r : server_.received) {
      if (r.id == id && r.state == TaskReport::State::kStarting) {
        last = r.progress;
      }
    }
    return last;
  };
  EXPECT_EQ(progress("t.img.0"), "pulling image (500 MB of 1.2 GB)");
  EXPECT_GE(wakes.load(), 2);
  const size_t received = server_.received.size();
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(server_.received.size(), received);  // Progress is sent once, while it is new.
  EXPECT_TRUE(runtime.starts.empty());

  runtime.finish("t.img.0", core::Status::ok());
  runtime.finish("t.img.1", core::permissionDenied("image r/x:1: unauthorized: no pull secret"));
  for (int i = 0; i < 500 && runtime.starts.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(a.tick().isOk());
  }
  EXPECT_EQ(runtime.starts, std::vector<std::string>{"t.img.0"});
  ASSERT_TRUE(a.tick().isOk());
  bool failed = false;
  for (const TaskReport& r : server_.received) {
    if (r.id == "t.img.1") {
      EXPECT_NE(r.state, TaskReport::State::kRunning);
      failed = failed || (r.state == TaskReport::State::kFailedToStart &&
                          r.error == "image r/x:1: unauthorized: no pull secret");
    }
  }
  EXPECT_TRUE(failed);
  // Not pulled again, not started again.
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime.pullsStarted(), 2);
  EXPECT_EQ(runtime.starts, std::vector<std::string>{"t.img.0"});
}

// A pull that fails for a cause that may pass (the registry unreachable) is tried again after a
// back-off that doubles, the task waiting meanwhile and saying so (ImagePullBackOff), not
// failing; once its retries are used the task fails to start, saying how often it was tried.
TEST_F(AgentTest, APullThatMayPassIsRetriedAfterABackOffThenFails) {
  PullingRuntime runtime;
  AgentOptions options = options_;
  options.pull_retries = 2;
  options.pull_backoff = 10s;
  Agent a("gpu-01", NodeGpus{}, server_, runtime, clock_, options);
  server_.assign("t.img.0", 1);
  auto pulls = [&](int n) {
    for (int i = 0; i < 500 && runtime.pullsStarted() < n; ++i) {
      std::this_thread::sleep_for(10ms);
      EXPECT_TRUE(a.tick().isOk());
    }
    return runtime.pullsStarted() == n;
  };
  auto last = [&](TaskReport::State state) {
    std::optional<TaskReport> out;
    for (const TaskReport& r : server_.received) {
      if (r.id == "t.img.0" && r.state == state) {
        out = r;
      }
    }
    return out;
  };
  // Ticks until the task's newest progress starts with `text`.
  auto says = [&](const std::string& text) {
    for (int i = 0; i < 500; ++i) {
      EXPECT_TRUE(a.tick().isOk());
      auto r = last(TaskReport::State::kStarting);
      if (r && r->progress.starts_with(text)) {
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  ASSERT_TRUE(pulls(1));
  const core::Status down = core::unavailable("image r/x:1: cannot reach the registry at r");
  runtime.finish("t.img.0", down);
  ASSERT_TRUE(says("ImagePullBackOff (retry 1 of 2 in 10 s): image r/x:1: cannot reach"))
      << last(TaskReport::State::kStarting)->progress;
  EXPECT_FALSE(last(TaskReport::State::kFailedToStart));
  clock_.advance(9s);
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime.pullsStarted(), 1) << "tried again before its back-off";
  clock_.advance(1s);
  ASSERT_TRUE(pulls(2));
  runtime.finish("t.img.0", down);
  ASSERT_TRUE(says("ImagePullBackOff (retry 2 of 2 in 20 s)"));
  clock_.advance(20s);
  ASSERT_TRUE(pulls(3));
  runtime.finish("t.img.0", down);
  for (int i = 0; i < 500 && !last(TaskReport::State::kFailedToStart); ++i) {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(a.tick().isOk());
  }
  const auto failed = last(TaskReport::State::kFailedToStart);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->error, down.message() + " (the pull was tried 3 times)");
  EXPECT_TRUE(runtime.starts.empty());
  clock_.advance(60s);
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime.pullsStarted(), 3) << "not pulled again once failed";
}

// A task cancelled while its pull backs off is forgotten: its pull is not tried again.
TEST_F(AgentTest, ATaskCancelledWhileItsPullBacksOffIsNotPulledAgain) {
  PullingRuntime runtime;
  Agent a("gpu-01", NodeGpus{}, server_, runtime, clock_, options_);
  server_.assign("t.img.0", 1);
  for (int i = 0; i < 500 && runtime.pullsStarted() < 1; ++i) {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(a.tick().isOk());
  }
  runtime.finish("t.img.0", core::unavailable("registry down"));
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(a.tick().isOk());
  }
  server_.unassign("t.img.0");  // Cancelled.
  ASSERT_TRUE(a.tick().isOk());
  clock_.advance(std::chrono::minutes(10));
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(a.tick().isOk());
  }
  EXPECT_EQ(runtime.pullsStarted(), 1);
  for (const TaskReport& r : server_.received) {
    EXPECT_NE(r.state, TaskReport::State::kFailedToStart) << r.error;
  }
}

TEST_F(AgentTest, StartsWhatIsAssignedAndReportsEachChangeOnce) {
  Agent a = agent();
  server_.assign("t.w.0", 1);
  server_.assign("t.w.1", 1);
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime_.starts, (std::vector<std::string>{"t.w.0", "t.w.1"}));
  EXPECT_EQ(runtime_.tags["t.w.0"], "1");
  ASSERT_TRUE(a.tick().isOk());  // Reports the starts; starts nothing again.
  EXPECT_EQ(runtime_.starts.size(), 2U);
  ASSERT_EQ(server_.received.size(), 2U);
  EXPECT_EQ(server_.received[0].state, TaskReport::State::kRunning);
  EXPECT_EQ(server_.received[0].generation, 1U);
  // It ends; the server has not caught up yet and still assigns it: it is not run again.
  TaskExit e;
  e.exit_code = 0;
  runtime_.exit(a, "t.w.0", e);
  ASSERT_TRUE(a.tick().isOk());
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime_.starts.size(), 2U);
  ASSERT_EQ(server_.received.size(), 3U);  // The exit, once.
  EXPECT_EQ(server_.received[2].state, TaskReport::State::kExited);
  EXPECT_EQ(server_.received[2].id, "t.w.0");
  EXPECT_EQ(server_.received[2].exit.exit_code, 0);
  EXPECT_EQ(a.running(), (std::map<std::string, uint32_t>{{"t.w.1", 1}}));
  // Once the server drops it, the same id at the same generation would be new work again
  // (the agent keeps no memory of finished tasks past their assignment).
  server_.unassign("t.w.0");
  ASSERT_TRUE(a.tick().isOk());
  server_.assign("t.w.0", 1);
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime_.starts.size(), 3U);
}

TEST_F(AgentTest, StopsWhatIsNoLongerAssignedAndReplacesAnOlderGeneration) {
  Agent a = agent();
  server_.assign("t.w.0", 1, 3s);
  server_.assign("t.w.1", 1);
  ASSERT_TRUE(a.tick().isOk());
  server_.unassign("t.w.1");
  server_.assign("t.w.0", 2, 3s);  // Placed again (this node was thought lost, say).
  ASSERT_TRUE(a.tick().isOk());
  // Each with the grace it was assigned (t.w.1's: the fake server's 5 s), not the agent's
  // default for tasks it knows nothing of (7 s here; see the adoption test).
  EXPECT_EQ(runtime_.stops, (std::vector<std::pair<std::string, std::chrono::milliseconds>>{
                                {"t.w.0", 3s}, {"t.w.1", 5s}}));
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime_.stops.size(), 2U);   // Asked once.
  EXPECT_EQ(runtime_.starts.size(), 2U);  // Generation 2 waits for generation 1 to end.
  TaskExit stopped;
  stopped.signal = 15;
  stopped.stopped = true;
  runtime_.exit(a, "t.w.0", stopped);
  runtime_.exit(a, "t.w.1", stopped);
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime_.starts.back(), "t.w.0");
  EXPECT_EQ(runtime_.starts.size(), 3U);
  EXPECT_EQ(a.running(), (std::map<std::string, uint32_t>{{"t.w.0", 2}}));
  ASSERT_TRUE(a.tick().isOk());
  // The old generation's exit was reported with its own generation.
  bool old_reported = false;
  for (const TaskReport& r : server_.received) {
    old_reported |= r.id == "t.w.0" && r.generation == 1 && r.state == TaskReport::State::kExited;
  }
  EXPECT_TRUE(old_reported);
}

TEST_F(AgentTest, ARestartedAgentKeepsAdoptedTasksStillAssignedAndStopsStrays) {
  Agent a = agent();
  for (const char* id : {"t.w.0", "t.w.1", "t.old.0"}) {
    runtime_.adopted(id);
  }
  TaskExit ended;
  ended.exit_code = 2;
  a.adopt({{"t.w.0", "3", std::nullopt},
           {"t.w.1", "1", std::nullopt},
           {"t.old.0", "1", std::nullopt},
           {"t.done.0", "4", ended}});
  server_.assign("t.w.0", 3);    // Still this node's, same generation: kept.
  server_.assign("t.w.1", 2);    // Placed anew meanwhile: the old one goes, the new one waits.
  ASSERT_TRUE(a.tick().isOk());  // t.old.0 is not assigned at all: a stray.
  EXPECT_TRUE(runtime_.starts.empty());
  EXPECT_EQ(runtime_.stops, (std::vector<std::pair<std::string, std::chrono::milliseconds>>{
                                {"t.old.0", 7s}, {"t.w.1", 5s}}));
  // What ended while no agent watched is reported with its generation.
  ASSERT_EQ(server_.received.size(), 1U);
  EXPECT_EQ(server_.received[0].id, "t.done.0");
  EXPECT_EQ(server_.received[0].generation, 4U);
  EXPECT_EQ(server_.received[0].exit.exit_code, 2);
  EXPECT_EQ(a.running().at("t.w.0"), 3U);
}

TEST_F(AgentTest, AStartThatFailsIsReportedAndNotRetriedForThatGeneration) {
  Agent a = agent();
  runtime_.failStarting("t.w.0");
  server_.assign("t.w.0", 1);
  ASSERT_TRUE(a.tick().isOk());
  ASSERT_TRUE(a.tick().isOk());
  ASSERT_EQ(server_.received.size(), 1U);
  EXPECT_EQ(server_.received[0].state, TaskReport::State::kFailedToStart);
  EXPECT_NE(server_.received[0].error.find("not found in PATH"), std::string::npos);
  EXPECT_TRUE(a.running().empty());
}

// Issue 42: while the servers answer that no leader can act (etcd without quorum), nobody can
// place the tasks elsewhere: they run on past fence_after, the shims' lease renewed with them,
// up to the agent's bound; cut off from the servers instead, it fences at fence_after.
TEST_F(AgentTest, WhileNoLeaderCanActTheTasksRunOnUpToTheBound) {
  options_.no_leader_bound = 60s;
  std::vector<std::chrono::milliseconds> leases;
  options_.renewed = [&](std::chrono::milliseconds d) { leases.push_back(d); };
  Agent a = agent();
  server_.assign("t.w.0", 1);
  ASSERT_TRUE(a.tick().isOk());
  ASSERT_EQ(leases.size(), 1U);
  EXPECT_EQ(leases.back(), 10s);
  server_.down = true;
  server_.no_leader = true;
  for (int i = 0; i < 5; ++i) {
    clock_.advance(10s);
    EXPECT_FALSE(a.tick().isOk());
    EXPECT_FALSE(a.fenced()) << "after " << (i + 1) * 10 << " s";
  }
  EXPECT_TRUE(runtime_.stops.empty());
  // The shims' lease followed, never past the bound: 10 s each time, then what is left.
  ASSERT_EQ(leases.size(), 6U);
  EXPECT_EQ(leases[1], 10s);
  EXPECT_EQ(leases[5], 10s);
  clock_.advance(5s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_EQ(leases.back(), 5s) << "55 s of the 60 s bound are gone";
  EXPECT_FALSE(a.fenced());
  // The bound passes: fenced.
  clock_.advance(5s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_TRUE(a.fenced());
  EXPECT_EQ(runtime_.stops.size(), 1U);
}

TEST_F(AgentTest, ServersOutOfReachAreNoProofThatNoLeaderActs) {
  options_.no_leader_bound = 60s;
  Agent a = agent();
  server_.assign("t.w.0", 1);
  ASSERT_TRUE(a.tick().isOk());
  server_.down = true;
  server_.no_leader = true;
  clock_.advance(5s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_FALSE(a.fenced());
  // Now the servers cannot be reached at all (this node may be the one cut off, while a leader
  // elsewhere moves its tasks): fenced at fence_after since the last sign that nobody could
  // move them, the "no leader" answer at 5 s (a new leader gives every node a full lease from
  // its start, so none can move them before 5 s + the lease).
  server_.no_leader = false;
  clock_.advance(5s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_FALSE(a.fenced()) << "a failure without the answer is no reason to stop early";
  clock_.advance(4s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_FALSE(a.fenced());
  clock_.advance(1s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_TRUE(a.fenced()) << "10 s after the last answer that no leader could act";
}

TEST_F(AgentTest, CutOffFromTheServerItStopsEverythingBeforeTheLeaseLapses) {
  Agent a = agent();
  server_.assign("t.w.0", 1);
  server_.assign("t.w.1", 1);
  ASSERT_TRUE(a.tick().isOk());
  server_.down = true;
  clock_.advance(9s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_TRUE(runtime_.stops.empty());  // Not yet: a short outage changes nothing.
  EXPECT_FALSE(a.fenced());
  clock_.advance(1s);
  EXPECT_FALSE(a.tick().isOk());
  EXPECT_TRUE(a.fenced());
  ASSERT_EQ(runtime_.stops.size(), 2U);
  EXPECT_EQ(runtime_.stops[0].second, 1s);  // fence_grace.
  TaskExit stopped;
  stopped.signal = 15;
  stopped.stopped = true;
  runtime_.exit(a, "t.w.0", stopped);
  runtime_.exit(a, "t.w.1", stopped);
  // Back: the reports kept through the outage (the starts and both exits) reach the server,
  // and the old generation is not started again; a new one would be.
  server_.down = false;
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_FALSE(a.fenced());
  EXPECT_EQ(server_.received.size(), 4U);
  EXPECT_EQ(runtime_.starts.size(), 2U);
  server_.assign("t.w.0", 2);
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime_.starts.size(), 3U);
}

TEST_F(AgentTest, CredentialFilesAreThereAtStartFollowRotationAndGoWithTheTask) {
  const std::string root = ::testing::TempDir() + "creds-" + std::to_string(::getpid());
  const CredentialFiles files(root);
  options_.credentials = &files;
  Agent a = agent();
  server_.assign("t.w.0", 1);
  server_.assigned[0].credentials["identity-token"] = "jwt-1";
  server_.assigned[0].credentials["secrets.json"] = "{}";
  server_.assigned[0].spec.env["AWS_ROLE_ARN"] = "arn:aws:iam::1:role/r";
  ASSERT_TRUE(a.tick().isOk());
  ASSERT_EQ(runtime_.starts, std::vector<std::string>{"t.w.0"});
  const std::string path = root + "/t.w.0/identity-token";
  EXPECT_EQ(runtime_.seen_token["t.w.0"], "jwt-1");  // Written before the start.
  EXPECT_EQ(runtime_.envs["t.w.0"]["TESSERA_CREDENTIALS_DIR"], root + "/t.w.0");
  EXPECT_EQ(runtime_.envs["t.w.0"]["AWS_WEB_IDENTITY_TOKEN_FILE"], path);
  EXPECT_EQ(runtime_.envs["t.w.0"]["TESSERA_SECRETS_FILE"], root + "/t.w.0/secrets.json");
  EXPECT_TRUE(std::filesystem::exists(root + "/t.w.0/secrets.json"));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0400U);
  ASSERT_EQ(::stat((root + "/t.w.0").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700U);
  // A new token: the file changes in place, the task is not restarted.
  server_.assigned[0].credentials["identity-token"] = "jwt-2";
  ASSERT_TRUE(a.tick().isOk());
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()),
            "jwt-2");
  EXPECT_EQ(runtime_.starts.size(), 1U);
  // Unassigned: stopped; once it has ended, its folder is removed.
  server_.unassign("t.w.0");
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_TRUE(std::filesystem::exists(path));  // Still running (stopping).
  runtime_.exit(a, "t.w.0", TaskExit{});
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_FALSE(std::filesystem::exists(root + "/t.w.0"));
  // A file that cannot be written fails the start, with why.
  server_.assign("t.w.1", 1);
  server_.assigned[0].credentials[".hidden"] = "x";  // No hidden files, no paths.
  ASSERT_TRUE(a.tick().isOk());
  ASSERT_TRUE(a.tick().isOk());
  EXPECT_EQ(runtime_.starts.size(), 1U);
  ASSERT_FALSE(server_.received.empty());
  EXPECT_EQ(server_.received.back().state, TaskReport::State::kFailedToStart);
  EXPECT_NE(server_.received.back().error.find("bad file name"), std::string::npos);
  std::filesystem::remove_all(root);
}

// A MIG task may open its own instance's capability nodes, found in the driver's table by its
// GPU's minor and its GPU and compute instance ids, and no other instance's.
TEST(MigCapabilityNodes, AreItsOwnInstancesOnly) {
  const std::string table = ::testing::TempDir() + "/mig-minors";
  std::ofstream(table) << "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
                          "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu1/gi1/access 102\n"
                          "gpu1/gi1/ci0/access 103\n";
  MigDevice d;
  d.gpu_instance_id = 2;
  d.compute_instance_id = 0;
  EXPECT_EQ(
      migCapabilityNodes(table, "/dev/nvidia-caps", 0, d),
      (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"}));
  d.gpu_instance_id = 1;
  EXPECT_EQ(migCapabilityNodes(table, "/dev/nvidia-caps", 1, d),
            (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap102",
                                      "/dev/nvidia-caps/nvidia-cap103"}));
  d.gpu_instance_id = -1;  // Unknown: nothing.
  EXPECT_TRUE(migCapabilityNodes(table, "/dev/nvidia-caps", 0, d).empty());
  d.gpu_instance_id = 1;
  EXPECT_TRUE(migCapabilityNodes("/nonexistent", "/dev/nvidia-caps", 0, d).empty());
}

}  // namespace
}  // namespace tessera::agent
