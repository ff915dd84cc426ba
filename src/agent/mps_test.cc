#include "agent/mps.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-mps-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(MpsTest, OneDaemonPerGpuAndUserStartedByTheFirstClientStoppedAfterTheLast) {
  RecordingMpsControl control;
  {
    MpsDaemons daemons(control, dir_.string());
    auto a1 = daemons.acquire("GPU-1", "team-a");
    ASSERT_TRUE(a1.isOk()) << a1.status().message();
    EXPECT_EQ(*a1, (dir_ / "mps/GPU-1-team-a/pipe").string());
    EXPECT_TRUE(fs::is_directory(*a1));
    auto a2 = daemons.acquire("GPU-1", "team-a");  // Same GPU and user: the same daemon.
    ASSERT_TRUE(a2.isOk());
    EXPECT_EQ(*a2, *a1);
    auto b = daemons.acquire("GPU-1", "team-b");  // Another user: its own.
    ASSERT_TRUE(b.isOk());
    EXPECT_NE(*b, *a1);
    ASSERT_TRUE(daemons.acquire("GPU-2", "team-a").isOk());
    EXPECT_EQ(control.calls().size(), 3U);
    EXPECT_EQ((daemons.clients().at({"GPU-1", "team-a"})), 2);
    ASSERT_TRUE(daemons.release("GPU-1", "team-a").isOk());
    EXPECT_EQ(control.calls().size(), 3U);  // One client left.
    ASSERT_TRUE(daemons.release("GPU-1", "team-a").isOk());
    ASSERT_EQ(control.calls().size(), 4U);
    EXPECT_EQ(control.calls()[3], "stop GPU-1 team-a " + *a1);
    EXPECT_EQ(daemons.release("GPU-1", "team-a").code(), core::StatusCode::kNotFound);
    EXPECT_FALSE(daemons.acquire("../x", "team-a").isOk());
    EXPECT_FALSE(daemons.acquire("GPU-1", "a/b").isOk());
  }
  // Going away stops what is left: GPU-1 team-b and GPU-2 team-a.
  const std::vector<std::string> calls = control.calls();
  ASSERT_EQ(calls.size(), 6U);
  EXPECT_EQ(calls[0].rfind("start GPU-1 team-a ", 0), 0U);
  EXPECT_EQ(calls[4].rfind("stop ", 0), 0U);
  EXPECT_EQ(calls[5].rfind("stop ", 0), 0U);
}

// A runtime that records what starts and ends tasks when told.
class RecordingRuntime : public Runtime {
 public:
  core::Status start(const TaskSpec& spec) override {
    if (spec.id == "refused") {
      return core::failedPrecondition("no");
    }
    started.push_back(spec);
    return core::Status::ok();
  }
  core::Status stop(const std::string&, std::chrono::milliseconds) override {
    return core::Status::ok();
  }
  std::vector<std::string> running() const override { return {}; }
  std::vector<TaskSpec> started;
};

TEST_F(MpsTest, MpsTasksGetTheirDaemonsForAsLongAsTheyRun) {
  RecordingMpsControl control;
  MpsDaemons daemons(control, dir_.string());
  std::vector<std::string> exits;
  MpsRuntime rt(daemons, [&](const std::string& id, const TaskExit&) { exits.push_back(id); });
  RecordingRuntime inner;
  rt.wrap(inner);
  const Runtime::OnExit exit = rt.exitHandler();
  TaskSpec mps;
  mps.id = "a";
  mps.user = "team-a";
  mps.gpus.mode = GpuPinning::Mode::kMps;
  mps.gpus.uuids = {"GPU-1"};
  ASSERT_TRUE(rt.start(mps).isOk());
  TaskSpec second = mps;
  second.id = "b";
  ASSERT_TRUE(rt.start(second).isOk());
  TaskSpec whole;
  whole.id = "w";
  whole.gpus.mode = GpuPinning::Mode::kWhole;
  whole.gpus.uuids = {"GPU-2"};
  ASSERT_TRUE(rt.start(whole).isOk());  // Not MPS: no daemon.
  ASSERT_EQ(inner.started.size(), 3U);
  EXPECT_EQ(inner.started[0].gpus.mps_pipe_directory, (dir_ / "mps/GPU-1-team-a/pipe").string());
  EXPECT_EQ(inner.started[1].gpus.mps_pipe_directory, inner.started[0].gpus.mps_pipe_directory);
  EXPECT_TRUE(inner.started[2].gpus.mps_pipe_directory.empty());
  EXPECT_EQ(control.calls().size(), 1U);  // One daemon for both clients.
  exit("a", {});
  EXPECT_EQ(control.calls().size(), 1U);  // One client left.
  exit("b", {});
  ASSERT_EQ(control.calls().size(), 2U);
  EXPECT_EQ(control.calls()[1].rfind("stop GPU-1 team-a ", 0), 0U);
  EXPECT_EQ(exits, (std::vector<std::string>{"a", "b"}));
  // A start that fails gives its daemon back at once.
  TaskSpec refused = mps;
  refused.id = "refused";
  EXPECT_FALSE(rt.start(refused).isOk());
  EXPECT_EQ(control.calls().size(), 4U);  // Started for it, and stopped again.
  EXPECT_TRUE(daemons.clients().empty());
}

// An agent restart leaves MPS tasks with their daemons: the old agent detaches without stopping
// them, the new one restores who holds what from the holds file, so the daemon is not started
// again, and its last client's end stops it; a holder that ended meanwhile releases its own.
TEST_F(MpsTest, DaemonsOutliveAnAgentRestartWithTheirClients) {
  const std::string holds = (dir_ / "mps-holds").string();
  TaskSpec mps;
  mps.user = "team-a";
  mps.gpus.mode = GpuPinning::Mode::kMps;
  RecordingRuntime inner;
  RecordingMpsControl before;
  {
    MpsDaemons daemons(before, dir_.string());
    MpsRuntime rt(
        daemons, [](const std::string&, const TaskExit&) {}, holds);
    rt.wrap(inner);
    for (const char* id : {"a", "b"}) {
      mps.id = id;
      mps.gpus.uuids = {std::string("a") == id ? "GPU-1" : "GPU-2"};
      ASSERT_TRUE(rt.start(mps).isOk());
    }
    daemons.detach();  // The agent goes; its tasks stay under their shims.
  }
  ASSERT_EQ(before.calls().size(), 2U);  // Two starts, no stop.
  RecordingMpsControl after;
  MpsDaemons daemons(after, dir_.string());
  std::vector<std::string> exits;
  MpsRuntime rt(
      daemons, [&](const std::string& id, const TaskExit&) { exits.push_back(id); }, holds);
  rt.wrap(inner);
  ASSERT_TRUE(rt.restore().isOk());
  EXPECT_EQ((daemons.clients().at({"GPU-1", "team-a"})), 1);
  rt.forgetGone({"a"});  // b ended while no agent watched: its daemon goes.
  ASSERT_EQ(after.calls().size(), 1U);
  EXPECT_EQ(after.calls()[0], "stop GPU-2 team-a " + (dir_ / "mps/GPU-2-team-a/pipe").string());
  rt.exitHandler()("a", {});  // a ends: it was the daemon's last client.
  ASSERT_EQ(after.calls().size(), 2U);
  EXPECT_EQ(after.calls()[1], "stop GPU-1 team-a " + (dir_ / "mps/GPU-1-team-a/pipe").string());
  EXPECT_EQ(exits, std::vector<std::string>{"a"});
  EXPECT_TRUE(daemons.clients().empty());
  // Nothing is left to restore.
  MpsDaemons again(after, dir_.string());
  MpsRuntime third(
      again, [](const std::string&, const TaskExit&) {}, holds);
  ASSERT_TRUE(third.restore().isOk());
  EXPECT_TRUE(again.clients().empty());
}

TEST_F(MpsTest, TheRealControlRunsAsTheUserWithItsGpuAndFolders) {
  // A stand-in for nvidia-cuda-mps-control that writes down how it was called.
  const fs::path fake = dir_ / "nvidia-cuda-mps-control";
  std::ofstream(fake) << "#!/bin/sh\n"
                      << "echo \"$(id -un) $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY $*\" >> "
                         "\"$CUDA_MPS_LOG_DIRECTORY/calls\"\n"
                      << "[ \"$1\" = -d ] || cat >> \"$CUDA_MPS_LOG_DIRECTORY/calls\"\n";
  fs::permissions(fake, fs::perms::all);
  fs::permissions(dir_, fs::perms::all);
  const std::string user = ::getuid() == 0 ? "nobody" : "";
  ProcessMpsControl control(fake.string());
  MpsDaemons daemons(control, (dir_ / "run").string());
  auto pipe = daemons.acquire("GPU-abc", user);
  ASSERT_TRUE(pipe.isOk()) << pipe.status().message();
  ASSERT_TRUE(daemons.release("GPU-abc", user).isOk());
  const fs::path log = fs::path(*pipe).parent_path() / "log/calls";
  const std::string calls = read(log);
  const std::string name = user.empty() ? calls.substr(0, calls.find(' ')) : user;
  EXPECT_EQ(calls, name + " GPU-abc " + *pipe + " -d\n" + name + " GPU-abc " + *pipe + " \nquit\n")
      << calls;
  // A control that fails is an error that says where to look.
  std::ofstream(dir_ / "failing") << "#!/bin/sh\nexit 3\n";
  fs::permissions(dir_ / "failing", fs::perms::all);
  ProcessMpsControl failing((dir_ / "failing").string());
  MpsDaemons broken(failing, (dir_ / "run2").string());
  auto refused = broken.acquire("GPU-abc", "");
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("exited 3"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(broken.clients().empty());
  ProcessMpsControl missing((dir_ / "no-such-control").string());
  MpsDaemons nothing(missing, (dir_ / "run3").string());
  EXPECT_FALSE(nothing.acquire("GPU-abc", "").isOk());
}

}  // namespace
}  // namespace tessera::agent
