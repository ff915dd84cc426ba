// ProcessRuntime with real processes. The cgroup tests need root and a cgroup v1 hierarchy with
// the memory and devices controllers (as on this project's CI machines); elsewhere they are
// skipped, and say why.
#include "agent/runtime.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "agent/sandbox.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whether a process is gone (or a zombie nobody has reaped yet: it runs nothing).
bool gone(pid_t pid) {
  const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) {
    return true;
  }
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool waitFor(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

class RuntimeTest : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-runtime-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::all);  // Tasks under another user write their logs here.
  }
  void TearDown() override {
    runtime_.reset();
    fs::remove_all(dir_);
  }

  ProcessRuntime& runtime(const Cgroups* cgroups = nullptr, const std::string& lease = "",
                          bool sandbox = false) {
    runtime_ = std::make_unique<ProcessRuntime>(
        ProcessRuntimeOptions{.work_dir = (dir_ / "tasks").string(),
                              .cgroups = cgroups,
                              .lease_file = lease,
                              .fence_grace = 300ms,
                              .sandbox = sandbox},
        [this](const std::string& id, const TaskExit& e) {
          std::lock_guard lock(mu_);
          exits_[id] = e;
          cv_.notify_all();
        });
    return *runtime_;
  }
  // Waits for the task's exit report.
  std::optional<TaskExit> exitOf(const std::string& id, std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, limit, [&] { return exits_.contains(id); })) {
      return std::nullopt;
    }
    return exits_[id];
  }
  TaskSpec shell(const std::string& id, const std::string& script) {
    TaskSpec s;
    s.id = id;
    s.tenant = "team-a";
    s.workload = "train";
    s.command = {"sh", "-c", script};
    return s;
  }
  std::string log(const std::string& id, const char* name = "stdout.log") {
    return readFile(runtime_->taskDir(id) + "/" + name);
  }

  fs::path dir_;
  std::unique_ptr<ProcessRuntime> runtime_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, TaskExit> exits_;
};

TEST(GpuEnvironment, PinsTheAssignedGpusAndNothingElse) {
  EXPECT_EQ(gpuEnvironment({}).at("CUDA_VISIBLE_DEVICES"), "");  // No GPUs: none visible.
  GpuPinning whole;
  whole.mode = GpuPinning::Mode::kWhole;
  whole.uuids = {"GPU-a", "GPU-b"};
  auto env = gpuEnvironment(whole);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-a,GPU-b");
  EXPECT_FALSE(env.contains("CUDA_MPS_PIPE_DIRECTORY"));
  GpuPinning mps;
  mps.mode = GpuPinning::Mode::kMps;
  mps.uuids = {"GPU-a"};
  mps.mps_pipe_directory = "/run/tessera/mps/0-team-a";
  mps.mps_thread_percentage = 25;
  mps.mps_memory_limit_mib = 20480;
  env = gpuEnvironment(mps);
  EXPECT_EQ(env.at("CUDA_MPS_PIPE_DIRECTORY"), "/run/tessera/mps/0-team-a");
  EXPECT_EQ(env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20480M");
  GpuPinning frac;
  frac.mode = GpuPinning::Mode::kFractional;
  frac.uuids = {"GPU-b"};
  frac.memory_limit_mib = 8192;
  frac.compute_share_percent = 30;
  env = gpuEnvironment(frac);
  EXPECT_EQ(env.at("TESSERA_CUDA_MEMORY_LIMIT"), "8192M");
  EXPECT_EQ(env.at("TESSERA_CUDA_COMPUTE_SHARE"), "30");
  EXPECT_FALSE(env.contains("LD_PRELOAD"));  // Without the interposer's path.
  frac.interposer = "/usr/lib/tessera/libtessera-cuda.so";
  EXPECT_EQ(gpuEnvironment(frac).at("LD_PRELOAD"), "/usr/lib/tessera/libtessera-cuda.so");
}

// #41 item 3: a share's caps say what it may use now and, with a burst limit, its guarantee.
TEST(GpuEnvironment, CapsSayTheShareNowAndTheGuaranteeUnderABurstLimit) {
  GpuPinning frac;
  frac.mode = GpuPinning::Mode::kFractional;
  frac.uuids = {"GPU-b"};
  frac.memory_limit_mib = 64;
  frac.compute_share_percent = 30;
  EXPECT_EQ(cudaCapsText(frac), "");  // No interposer, no caps.
  frac.interposer = "/usr/lib/tessera/libtessera-cuda.so";
  EXPECT_EQ(cudaCapsText(frac), "TESSERA_CUDA_COMPUTE_SHARE=30\nTESSERA_CUDA_MEMORY_LIMIT=64M\n");
  frac.compute_limit_percent = 80;
  EXPECT_EQ(cudaCapsText(frac, 55),
            "TESSERA_CUDA_COMPUTE_SHARE=55\nTESSERA_CUDA_COMPUTE_GUARANTEE=30\n"
            "TESSERA_CUDA_MEMORY_LIMIT=64M\n");
}

// The GPU's time that no share is guaranteed goes to those with a burst limit, by their
// guarantees, none past its limit; what one cannot take goes to the others; with no free time,
// or no limit above a guarantee, everyone has its guarantee.
TEST(BurstShares, SplitTheUnguaranteedTimeByGuaranteeUpToEachLimit) {
  using Shares = std::map<std::string, int>;
  EXPECT_EQ(burstShares({{"a", 30, 100}}), (Shares{{"a", 100}}));
  EXPECT_EQ(burstShares({{"a", 30, 70}}), (Shares{{"a", 70}}));
  EXPECT_EQ(burstShares({{"a", 30, 100}, {"b", 50, 0}}), (Shares{{"a", 50}, {"b", 50}}));
  // 40 free, split 1:3, and a's limit leaves the rest to b.
  EXPECT_EQ(burstShares({{"a", 10, 100}, {"b", 30, 100}, {"c", 20, 0}}),
            (Shares{{"a", 20}, {"b", 60}, {"c", 20}}));
  EXPECT_EQ(burstShares({{"a", 10, 12}, {"b", 30, 100}, {"c", 20, 0}}),
            (Shares{{"a", 12}, {"b", 68}, {"c", 20}}));
  // Nothing free: the guarantees.
  EXPECT_EQ(burstShares({{"a", 50, 100}, {"b", 50, 100}}), (Shares{{"a", 50}, {"b", 50}}));
  // Three ways into 1 % left over: whole percents, none lost.
  const Shares odd = burstShares({{"a", 33, 100}, {"b", 33, 100}, {"c", 33, 100}});
  EXPECT_EQ(odd.at("a") + odd.at("b") + odd.at("c"), 100);
  for (const auto& [task, share] : odd) {
    EXPECT_GE(share, 33) << task;
  }
  EXPECT_TRUE(burstShares({}).empty());
}

TEST_F(RuntimeTest, RunsTheCommandWithItsGpusAndNamesInTheEnvironmentAndLogsIt) {
  ProcessRuntime& rt = runtime();
  TaskSpec spec = shell("t-1",
                        "echo $CUDA_VISIBLE_DEVICES; echo $TESSERA_TENANT/$TESSERA_WORKLOAD;"
                        " echo $MINE; pwd; echo $HOME; echo oops >&2");
  spec.gpus.mode = GpuPinning::Mode::kWhole;
  spec.gpus.uuids = {"GPU-1234", "GPU-5678"};
  spec.env = {{"MINE", "yes"}, {"CUDA_VISIBLE_DEVICES", "all"}};  // The agent's value wins.
  ASSERT_TRUE(rt.start(spec).isOk());
  auto e = exitOf("t-1");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << e->describe();
  EXPECT_FALSE(e->stopped);
  EXPECT_EQ(log("t-1"), "GPU-1234,GPU-5678\nteam-a/train\nyes\n" + rt.taskDir("t-1") + "\n" +
                            rt.taskDir("t-1") + "\n");
  EXPECT_EQ(log("t-1", "stderr.log"), "oops\n");
  EXPECT_TRUE(rt.running().empty());
}

// A task started again at a new generation (a retry) keeps each earlier generation's logs beside
// its own; the same generation started again (adopted, say) writes on.
TEST_F(RuntimeTest, EachGenerationKeepsItsOwnLogs) {
  ProcessRuntime& rt = runtime();
  for (const char* tag : {"65537", "65538", "65539"}) {
    TaskSpec spec = shell("again", std::string("echo out ") + tag + "; echo err " + tag + " >&2");
    spec.tag = tag;
    ASSERT_TRUE(rt.start(spec).isOk());
    ASSERT_TRUE(exitOf("again").has_value());
    std::lock_guard lock(mu_);
    exits_.erase("again");
  }
  EXPECT_EQ(log("again"), "out 65539\n");
  EXPECT_EQ(log("again", "stderr.log"), "err 65539\n");
  EXPECT_EQ(log("again", "stdout.65537.log"), "out 65537\n");
  EXPECT_EQ(log("again", "stderr.65538.log"), "err 65538\n");
}

TEST_F(RuntimeTest, NoDescriptorOfTheAgentReachesTheTask) {
  ProcessRuntime& rt = runtime();
  // An inheritable descriptor of the agent's (as a store lock or a socket might be).
  const int leaky = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leaky, 3);
  const std::string fd = std::to_string(leaky);
  ASSERT_TRUE(rt.start(shell("fds", "if [ -e /proc/$$/fd/" + fd + " ]; then echo leaked " + fd +
                                        "; else echo closed; fi"))
                  .isOk());
  auto e = exitOf("fds");
  ::close(leaky);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(log("fds"), "closed\n");
}

TEST_F(RuntimeTest, ReportsExitCodesAndSignals) {
  ProcessRuntime& rt = runtime();
  ASSERT_TRUE(rt.start(shell("code", "exit 3")).isOk());
  ASSERT_TRUE(rt.start(shell("signal", "kill -SEGV $$")).isOk());
  auto code = exitOf("code");
  auto sig = exitOf("signal");
  ASSERT_TRUE(code && sig);
  EXPECT_EQ(code->exit_code, 3);
  EXPECT_EQ(code->describe(), "exited 3");
  EXPECT_EQ(sig->exit_code, -1);
  EXPECT_EQ(sig->signal, SIGSEGV);
  EXPECT_NE(sig->describe().find("killed by signal 11"), std::string::npos) << sig->describe();
}

TEST_F(RuntimeTest, StartErrorsSayWhy) {
  ProcessRuntime& rt = runtime();
  core::Status missing = rt.start([&] {
    TaskSpec s = shell("m", "");
    s.command = {"no-such-command-here"};
    return s;
  }());
  EXPECT_FALSE(missing.isOk());
  EXPECT_NE(missing.message().find("'no-such-command-here' not found in PATH"), std::string::npos)
      << missing.message();
  // Exec itself fails: a file that is not executable.
  std::ofstream(dir_ / "script") << "not a program\n";
  fs::permissions(dir_ / "script", fs::perms::owner_read | fs::perms::owner_exec);
  TaskSpec bad = shell("b", "");
  bad.command = {(dir_ / "script").string()};
  core::Status exec = rt.start(bad);
  EXPECT_FALSE(exec.isOk());
  EXPECT_NE(exec.message().find("running the command: Exec format error"), std::string::npos)
      << exec.message();
  EXPECT_FALSE(rt.start(shell("../escape", "true")).isOk());
  TaskSpec node = shell("n", "true");
  node.device_nodes = {(dir_ / "script").string()};
  core::Status not_dev = rt.start(node);
  EXPECT_NE(not_dev.message().find("not a character device"), std::string::npos)
      << not_dev.message();
  TaskSpec nobody = shell("u", "true");
  nobody.user = "no-such-user-tessera";
  EXPECT_NE(rt.start(nobody).message().find("no Unix user 'no-such-user-tessera'"),
            std::string::npos);
  EXPECT_TRUE(rt.running().empty());
}

TEST_F(RuntimeTest, StoppingKillsTheWholeProcessTree) {
  ProcessRuntime& rt = runtime();
  // A child in the background (what leaves the process group is the cgroup tests' business).
  ASSERT_TRUE(rt.start(shell("tree", "sleep 300 & echo $! > child.pid; sleep 300")).isOk());
  const std::string d = rt.taskDir("tree");
  ASSERT_TRUE(waitFor([&] { return !readFile(d + "/child.pid").empty(); }));
  const pid_t child = std::stoi(readFile(d + "/child.pid"));
  const pid_t leader = *rt.pidOf("tree");
  ASSERT_FALSE(gone(child));
  ASSERT_TRUE(rt.stop("tree", 5s).isOk());
  auto e = exitOf("tree");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->stopped);
  EXPECT_EQ(e->signal, SIGTERM) << e->describe();
  EXPECT_TRUE(waitFor([&] { return gone(child) && gone(leader); }));
  EXPECT_TRUE(rt.running().empty());
  EXPECT_EQ(rt.stop("tree", 1s).code(), core::StatusCode::kNotFound);
}

TEST_F(RuntimeTest, ATasksShimStopsItWhenTheAgentsLeaseRunsOut) {
  const std::string lease = (dir_ / "lease").string();
  ASSERT_TRUE(writeLease(lease, 800ms).isOk());
  ProcessRuntime& rt = runtime(nullptr, lease);
  ASSERT_TRUE(rt.start(shell("kept", "sleep 300")).isOk());
  ASSERT_TRUE(rt.start(shell("stubborn", "trap '' TERM; while true; do sleep 0.05; done")).isOk());
  // Renewed before it runs out (as the agent does after each heartbeat): the shims read the new
  // deadline when the old one passes, and the tasks run on.
  std::this_thread::sleep_for(400ms);
  ASSERT_TRUE(writeLease(lease, 1200ms).isOk());
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(exitOf("kept", 0ms).has_value());
  // Not renewed again: each shim stops its task on its own, SIGKILL after the grace for one
  // that ignores SIGTERM; both count as stopped (fenced).
  auto kept = exitOf("kept", 5s);
  ASSERT_TRUE(kept.has_value());
  EXPECT_TRUE(kept->stopped);
  EXPECT_EQ(kept->signal, SIGTERM) << kept->describe();
  auto stubborn = exitOf("stubborn", 5s);
  ASSERT_TRUE(stubborn.has_value());
  EXPECT_TRUE(stubborn->stopped);
  EXPECT_EQ(stubborn->signal, SIGKILL) << stubborn->describe();
  // A lease file that cannot be read counts as run out.
  fs::remove(lease);
  ASSERT_TRUE(rt.start(shell("orphan", "sleep 300")).isOk());
  auto orphan = exitOf("orphan", 5s);
  ASSERT_TRUE(orphan.has_value());
  EXPECT_TRUE(orphan->stopped);
}

TEST_F(RuntimeTest, ATaskOutlivesItsAgentOnlyUntilTheLeaseRunsOut) {
  // The agent is a forked child here, killed with SIGKILL: nothing of it runs any more, yet its
  // task's shim still stops the task when the lease it left behind runs out.
  const std::string lease = (dir_ / "lease").string();
  const std::string pid_file = (dir_ / "task.pid").string();
  ASSERT_TRUE(writeLease(lease, 1500ms).isOk());
  const pid_t agent = ::fork();
  if (agent == 0) {
    ProcessRuntime rt({.work_dir = (dir_ / "tasks").string(), .lease_file = lease},
                      [](const std::string&, const TaskExit&) {});
    TaskSpec s;
    s.id = "left";
    s.command = {"sh", "-c", "echo $$ > " + pid_file + "; sleep 300"};
    if (!rt.start(s).isOk()) {
      ::_exit(1);
    }
    ::pause();
    ::_exit(0);
  }
  ASSERT_TRUE(waitFor([&] { return !readFile(pid_file).empty(); }));
  const pid_t task = std::stoi(readFile(pid_file));
  ::kill(agent, SIGKILL);
  int status = 0;
  ::waitpid(agent, &status, 0);
  EXPECT_FALSE(gone(task));  // The agent's death alone does not stop it...
  EXPECT_TRUE(waitFor([&] { return gone(task); }, 5s));  // ...its lease's end does.
  // Recorded as fenced, by the shim once it has reaped the task (gone() is true of a zombie).
  const std::string exit_file = (dir_ / "tasks" / "left" / "exit").string();
  ASSERT_TRUE(waitFor([&] { return fs::exists(exit_file); }, 5s));
  EXPECT_EQ(readFile(exit_file), std::to_string(SIGTERM) + " 1\n");
}

TEST_F(RuntimeTest, ARestartedRuntimeAdoptsTasksAndLearnsHowTheOthersEnded) {
  const std::string lease = (dir_ / "lease").string();
  ASSERT_TRUE(writeLease(lease, 60s).isOk());
  {
    ProcessRuntime& first = runtime(nullptr, lease);
    TaskSpec keeps = shell("keeps", "echo $$ > pid; read line < fifo; echo got $line; exit 4");
    keeps.tag = "7";
    fs::create_directories(dir_ / "tasks" / "keeps");
    ASSERT_EQ(::mkfifo((dir_ / "tasks" / "keeps" / "fifo").c_str(), 0666), 0);
    ASSERT_TRUE(first.start(keeps).isOk());
    TaskSpec quick = shell("quick", "exit 3");
    quick.tag = "2";
    ASSERT_TRUE(first.start(quick).isOk());
    ASSERT_TRUE(exitOf("quick").has_value());  // Reported by the first: not adopted again.
    TaskSpec later = shell("later", "read line < fifo; exit 5");
    later.tag = "9";
    fs::create_directories(dir_ / "tasks" / "later");
    ASSERT_EQ(::mkfifo((dir_ / "tasks" / "later" / "fifo").c_str(), 0666), 0);
    ASSERT_TRUE(first.start(later).isOk());
    ASSERT_TRUE(waitFor([&] { return !readFile(first.taskDir("keeps") + "/pid").empty(); }));
    first.detach();
    runtime_.reset();  // The agent goes; its tasks stay.
  }
  exits_.clear();
  const pid_t pid = std::stoi(readFile((dir_ / "tasks" / "keeps" / "pid").string()));
  EXPECT_FALSE(gone(pid));
  // "later" ends while no runtime watches it.
  std::ofstream((dir_ / "tasks" / "later" / "fifo").string()) << "x\n";
  ASSERT_TRUE(waitFor([&] { return fs::exists(dir_ / "tasks" / "later" / "exit"); }));

  ProcessRuntime& second = runtime(nullptr, lease);
  std::vector<AdoptedTask> adopted = second.adopt();
  std::sort(adopted.begin(), adopted.end(),
            [](const AdoptedTask& a, const AdoptedTask& b) { return a.id < b.id; });
  ASSERT_EQ(adopted.size(), 2U);
  EXPECT_EQ(adopted[0].id, "keeps");
  EXPECT_EQ(adopted[0].tag, "7");
  EXPECT_FALSE(adopted[0].ended.has_value());
  EXPECT_EQ(adopted[1].id, "later");
  EXPECT_EQ(adopted[1].tag, "9");
  ASSERT_TRUE(adopted[1].ended.has_value());
  EXPECT_EQ(adopted[1].ended->exit_code, 5);
  EXPECT_EQ(second.running(), std::vector<std::string>{"keeps"});
  EXPECT_TRUE(second.adopt().empty());  // Once only.
  // The adopted task is the same process, and its end is reported by the new runtime.
  std::ofstream((dir_ / "tasks" / "keeps" / "fifo").string()) << "hello\n";
  auto e = exitOf("keeps");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 4) << e->describe();
  EXPECT_FALSE(e->stopped);
  EXPECT_EQ(log("keeps"), "got hello\n");
  EXPECT_TRUE(gone(pid));
}

TEST_F(RuntimeTest, ATaskThatIgnoresSigtermIsKilledAfterItsGrace) {
  ProcessRuntime& rt = runtime();
  ASSERT_TRUE(
      rt.start(shell("stubborn", "trap '' TERM; echo ready; while true; do sleep 0.05; done"))
          .isOk());
  ASSERT_TRUE(waitFor([&] { return log("stubborn") == "ready\n"; }));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(rt.stop("stubborn", 300ms).isOk());
  auto e = exitOf("stubborn");
  ASSERT_TRUE(e.has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 290ms);
  EXPECT_EQ(e->signal, SIGKILL) << e->describe();
  EXPECT_TRUE(e->stopped);
}

TEST_F(RuntimeTest, RunsUnderTheTasksUser) {
  if (::getuid() != 0) {
    GTEST_SKIP() << "switching users needs root";
  }
  passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  ProcessRuntime& rt = runtime();
  TaskSpec spec = shell("as-nobody", "id -u; id -g; echo $USER; touch mine");
  spec.user = "nobody";
  ASSERT_TRUE(rt.start(spec).isOk());
  auto e = exitOf("as-nobody");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << e->describe() << log("as-nobody", "stderr.log");
  EXPECT_EQ(log("as-nobody"),
            std::to_string(nobody->pw_uid) + "\n" + std::to_string(nobody->pw_gid) + "\nnobody\n");
  struct stat st {};
  ASSERT_EQ(::stat((rt.taskDir("as-nobody") + "/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, nobody->pw_uid);  // Its folder is its own.
}

// The cgroup tests: skipped unless this process may create v1 memory and devices groups.
class CgroupRuntimeTest : public RuntimeTest {
 protected:
  void SetUp() override {
    RuntimeTest::SetUp();
    if (::getuid() != 0) {
      GTEST_SKIP() << "cgroups need root";
    }
    auto cg = Cgroups::detect();
    if (!cg.isOk() || cg->version() != 1 || !cg->devicesEnforced()) {
      GTEST_SKIP() << "needs cgroup v1 with memory and devices; have: "
                   << (cg.isOk() ? cg->describe() : cg.status().message());
    }
    cgroups_ = std::move(cg).value();
  }
  std::optional<Cgroups> cgroups_;
};

TEST_F(CgroupRuntimeTest, ATaskOverItsMemoryLimitIsReportedOomKilled) {
  ProcessRuntime& rt = runtime(&*cgroups_);
  // dd fills a 256 MiB buffer; the task may have 32.
  TaskSpec spec = shell("hog", "dd if=/dev/zero of=/dev/null bs=256M count=1 && echo survived");
  spec.limits.memory_mib = 32;
  ASSERT_TRUE(rt.start(spec).isOk());
  auto e = exitOf("hog", 30s);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->oom_killed) << e->describe();
  EXPECT_NE(e->describe().find("out of memory"), std::string::npos);
  EXPECT_EQ(log("hog").find("survived"), std::string::npos);
  // The same command with room enough runs to the end.
  TaskSpec roomy = shell("roomy", "dd if=/dev/zero of=/dev/null bs=16M count=1 && echo survived");
  roomy.limits.memory_mib = 128;
  ASSERT_TRUE(rt.start(roomy).isOk());
  auto ok = exitOf("roomy", 30s);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->exit_code, 0) << ok->describe();
  EXPECT_FALSE(ok->oom_killed);
}

// Fake GPU device nodes with a major number no driver uses: opening one that is allowed gets
// "No such device or address" (no driver behind it), one that is not, "Operation not permitted"
// (the devices rule).
void expectOnlyItsOwnDeviceNodes(RuntimeTest& t, ProcessRuntime& rt, const fs::path& dir,
                                 const std::string& id) {
  const std::string mine = (dir / (id + "-nvidia0")).string();
  const std::string other = (dir / (id + "-nvidia1")).string();
  ASSERT_EQ(::mknod(mine.c_str(), S_IFCHR | 0666, makedev(4000, 0)), 0) << std::strerror(errno);
  ASSERT_EQ(::mknod(other.c_str(), S_IFCHR | 0666, makedev(4000, 1)), 0) << std::strerror(errno);
  TaskSpec spec;
  spec.id = id;
  spec.command = {"sh", "-c",
                  "cat " + mine + " 2>&1; cat " + other + " 2>&1; cat /dev/null && echo null-ok"};
  spec.device_nodes = {mine};
  spec.limits.restrict_devices = true;
  ASSERT_TRUE(rt.start(spec).isOk());
  ASSERT_TRUE(t.exitOf(id).has_value());
  const std::string out = readFile(rt.taskDir(id) + "/stdout.log");
  EXPECT_NE(out.find(mine + ": No such device or address"), std::string::npos) << out;
  EXPECT_NE(out.find(other + ": Operation not permitted"), std::string::npos) << out;
  EXPECT_NE(out.find("null-ok"), std::string::npos) << out;
}

TEST_F(CgroupRuntimeTest, ATaskCanOpenOnlyItsOwnDeviceNodes) {
  expectOnlyItsOwnDeviceNodes(*this, runtime(&*cgroups_), dir_, "devs");
}

// The v2 device rule (an eBPF program), on the machine's cgroup2 mount: the unified hierarchy
// of a pure v2 machine, or the one beside the v1 controllers of a hybrid one.
TEST_F(RuntimeTest, OnCgroupV2ATaskCanOpenOnlyItsOwnDeviceNodes) {
  if (::getuid() != 0) {
    GTEST_SKIP() << "cgroups need root";
  }
  std::string mount;
  std::ifstream mounts("/proc/mounts");
  for (std::string dev, point, type, rest;
       mounts >> dev >> point >> type && std::getline(mounts, rest);) {
    if (type == "cgroup2") {
      mount = point;
      break;
    }
  }
  if (mount.empty()) {
    GTEST_SKIP() << "no cgroup2 mount";
  }
  auto cg = Cgroups::detect("tessera-test-" + std::to_string(::getpid()), mount);
  ASSERT_TRUE(cg.isOk()) << cg.status().message();
  ASSERT_EQ(cg->version(), 2);
  if (!cg->devicesEnforced()) {
    GTEST_SKIP() << cg->describe();
  }
  expectOnlyItsOwnDeviceNodes(*this, runtime(&*cg), dir_, "devs-v2");
  runtime_.reset();
  std::error_code ec;
  fs::remove(fs::path(mount) / ("tessera-test-" + std::to_string(::getpid())), ec);
}

TEST_F(CgroupRuntimeTest, StoppingKillsWhatEscapedTheProcessGroup) {
  ProcessRuntime& rt = runtime(&*cgroups_);
  ASSERT_TRUE(
      rt.start(shell("escape", "setsid sleep 300 & echo $! > escaped.pid; sleep 300")).isOk());
  const std::string d = rt.taskDir("escape");
  ASSERT_TRUE(waitFor([&] { return !readFile(d + "/escaped.pid").empty(); }));
  const pid_t escaped = std::stoi(readFile(d + "/escaped.pid"));
  ASSERT_FALSE(gone(escaped));
  ASSERT_TRUE(rt.stop("escape", 2s).isOk());
  ASSERT_TRUE(exitOf("escape").has_value());
  EXPECT_TRUE(waitFor([&] { return gone(escaped); }));  // Found through its cgroup.
}

TEST_F(CgroupRuntimeTest, AGroupLeftOverByADeadAgentIsEmptiedBeforeReuse) {
  auto g = cgroups_->create("leftover", {});
  ASSERT_TRUE(g.isOk()) << g.status().message();
  const std::vector<std::string> joins = g->joinPaths();
  const pid_t child = ::fork();
  if (child == 0) {
    for (const std::string& p : joins) {
      std::ofstream(p) << "0";
    }
    ::execl("/bin/sleep", "sleep", "300", nullptr);
    ::_exit(1);
  }
  ASSERT_TRUE(waitFor([&] {
    const std::vector<pid_t> in = g->pids();
    return std::find(in.begin(), in.end(), child) != in.end();
  }));
  auto again = cgroups_->create("leftover", {});
  ASSERT_TRUE(again.isOk()) << again.status().message();
  EXPECT_TRUE(again->pids().empty());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(cgroups_->remove(*again).isOk());
}

// Tasks in namespaces of their own (agent/sandbox.h): root, cgroup v1, and a machine that lets
// this process make PID and mount namespaces; skipped otherwise, saying why.
class SandboxRuntimeTest : public CgroupRuntimeTest {
 protected:
  void SetUp() override {
    CgroupRuntimeTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    if (core::Status s = probeSandbox(); !s.isOk()) {
      GTEST_SKIP() << s.message();
    }
    // A user of the machine's that is neither root nor nobody, for the task.
    for (const char* name : {"daemon", "bin", "sys"}) {
      if (const passwd* pw = ::getpwnam(name); pw != nullptr) {
        user_ = name;
        uid_ = pw->pw_uid;
        break;
      }
    }
    if (user_.empty()) {
      GTEST_SKIP() << "needs a system user (daemon, bin or sys) to run the task as";
    }
  }
  ProcessRuntime& sandboxed() { return runtime(&*cgroups_, "", true); }
  TaskSpec as(TaskSpec spec) {
    spec.user = user_;
    return spec;
  }
  std::string user_;
  uid_t uid_ = 0;
};

// What the task prints of the node: every process it sees (pid and command line), every
// environment it can read, its users and groups.
constexpr char kLookAround[] =
    "for p in /proc/[0-9]*; do printf 'proc %s ' \"${p#/proc/}\"; tr '\\0' ' ' < $p/cmdline; "
    "echo; tr '\\0' '\\n' < $p/environ 2>/dev/null | sed 's/^/env /'; done; "
    "sed 's/^/passwd /' /etc/passwd; sed 's/^/group /' /etc/group; echo end";

TEST_F(SandboxRuntimeTest, ATaskSeesItsOwnProcessesAndUsersOnly) {
  // A process of the node's with a secret on its command line, as an agent given --token was.
  const pid_t decoy = ::fork();
  if (decoy == 0) {
    ::setpgid(0, 0);  // Its sleep goes with it (it holds the test's output open).
    ::execl("/bin/sh", "sh", "-c", "sleep 300; true", "decoy-tsr.not-for-tasks", nullptr);
    ::_exit(127);
  }
  ASSERT_GT(decoy, 0);
  ASSERT_TRUE(waitFor([&] {
    return readFile("/proc/" + std::to_string(decoy) + "/cmdline").find("decoy-tsr") !=
           std::string::npos;
  }));
  // The control: without a sandbox the same look finds it.
  {
    ProcessRuntime& plain = runtime(&*cgroups_);
    ASSERT_TRUE(plain.start(as(shell("plain", kLookAround))).isOk());
    ASSERT_TRUE(exitOf("plain", 30s).has_value());
    EXPECT_NE(log("plain").find("decoy-tsr.not-for-tasks"), std::string::npos);
  }
  ProcessRuntime& rt = sandboxed();
  ASSERT_TRUE(rt.start(as(shell("look", kLookAround))).isOk());
  auto e = exitOf("look", 30s);
  ::kill(-decoy, SIGKILL);
  ::waitpid(decoy, nullptr, 0);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << e->describe() << log("look", "stderr.log");
  const std::string out = log("look");
  ASSERT_NE(out.find("\nend\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("decoy-tsr"), std::string::npos) << out;
  // Its own processes only: the shell and what it ran (its init, root's, is hidden from it).
  std::istringstream lines(out);
  std::string line;
  int procs = 0;
  std::vector<std::string> passwd;
  std::vector<std::string> groups;
  while (std::getline(lines, line)) {
    if (line.rfind("proc ", 0) == 0) {
      ++procs;
      EXPECT_TRUE(line.find(" sh -c ") != std::string::npos ||
                  line.find(" tr ") != std::string::npos || line.find(" sed ") != std::string::npos)
          << line;
    } else if (line.rfind("passwd ", 0) == 0) {
      passwd.push_back(line.substr(7, line.find(':') - 7));
    } else if (line.rfind("group ", 0) == 0) {
      groups.push_back(line.substr(6, line.find(':') - 6));
    } else if (line.rfind("env ", 0) == 0) {
      EXPECT_EQ(line.find("TESSERA_TOKEN"), std::string::npos) << line;
    }
  }
  EXPECT_GE(procs, 1);
  EXPECT_LE(procs, 3) << out;
  EXPECT_EQ(passwd, (std::vector<std::string>{"root", user_, "nobody"})) << out;
  EXPECT_EQ(groups.front(), "root");
  EXPECT_EQ(groups.back(), "nogroup");
  EXPECT_LE(groups.size(), 3U) << out;
}

TEST_F(SandboxRuntimeTest, TmpAndDevShmAreTheTasksOwnChargedToItAndGoneWithIt) {
  ProcessRuntime& rt = sandboxed();
  const std::string mark = "tessera-sandbox-" + std::to_string(::getpid());
  TaskSpec spec =
      as(shell("own", "echo mine > /tmp/" + mark + " && dd if=/dev/zero of=/dev/shm/" + mark +
                          " bs=1M count=48 2>/dev/null && ls /dev/shm && "
                          "echo written; ls /tmp; exec sleep 300"));
  spec.limits.memory_mib = 96;
  ASSERT_TRUE(rt.start(spec).isOk());
  ASSERT_TRUE(waitFor([&] { return log("own").find("written") != std::string::npos; }, 20s))
      << log("own") << log("own", "stderr.log");
  // Nothing of anyone else's: in /tmp, beside its file, only the way to its own folder (this
  // test's work folder is under /tmp).
  ASSERT_TRUE(waitFor([&] {
    const std::string out = log("own");
    return out.find(mark + "\n", out.find("written")) != std::string::npos;
  }));
  EXPECT_EQ(log("own"), mark + "\nwritten\n" + dir_.filename().string() + "\n" + mark + "\n");
  EXPECT_FALSE(fs::exists("/tmp/" + mark));
  EXPECT_FALSE(fs::exists("/dev/shm/" + mark));
  const fs::path tmp = dir_ / "tasks" / ".tmp" / "own";
  EXPECT_TRUE(fs::exists(tmp / mark));
  // The 48 MiB in its /dev/shm are in its memory cgroup's usage.
  const TaskCgroup g = cgroups_->existing("own");
  ASSERT_FALSE(g.memory_dir.empty());
  const int64_t used = std::stoll(readFile(g.memory_dir + "/memory.usage_in_bytes"));
  EXPECT_GE(used, int64_t{48} << 20);
  ASSERT_TRUE(rt.stop("own", 2s).isOk());
  ASSERT_TRUE(exitOf("own").has_value());
  EXPECT_FALSE(fs::exists(tmp));  // Its /tmp went with it; its /dev/shm with its namespace.
  EXPECT_TRUE(g.pids().empty());
  // More than its memory does not fit in its /dev/shm.
  TaskSpec big = as(shell("big",
                          "dd if=/dev/zero of=/dev/shm/x bs=1M count=100 2>&1; "
                          "echo dd-exit $?"));
  big.limits.memory_mib = 64;
  ASSERT_TRUE(rt.start(big).isOk());
  auto e = exitOf("big", 30s);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(e->oom_killed || log("big").find("No space left on device") != std::string::npos)
      << e->describe() << log("big");
  EXPECT_EQ(log("big").find("dd-exit 0"), std::string::npos) << log("big");
}

TEST_F(SandboxRuntimeTest, ExitsSignalsStopsAndOrphansAreTheCommands) {
  ProcessRuntime& rt = sandboxed();
  const std::string orphan = "3" + std::to_string(::getpid() % 100000) + ".5";
  ASSERT_TRUE(rt.start(as(shell("code", "(sleep " + orphan + " &); exit 3"))).isOk());
  ASSERT_TRUE(rt.start(as(shell("signal", "kill -SEGV $$"))).isOk());
  ASSERT_TRUE(rt.start(as(shell("stopped", "echo up; exec sleep 300"))).isOk());
  ASSERT_TRUE(
      rt.start(as(shell("stubborn", "trap '' TERM; echo up; while true; do sleep 0.05; done")))
          .isOk());
  auto code = exitOf("code");
  auto sig = exitOf("signal");
  ASSERT_TRUE(code && sig);
  EXPECT_EQ(code->exit_code, 3) << code->describe();
  EXPECT_EQ(sig->signal, SIGSEGV) << sig->describe();
  // What the command left behind died with it.
  EXPECT_TRUE(waitFor([&] {
    for (const fs::directory_entry& p : fs::directory_iterator("/proc")) {
      if (readFile(p.path().string() + "/cmdline").find(orphan) != std::string::npos) {
        return false;
      }
    }
    return true;
  }));
  ASSERT_TRUE(waitFor([&] { return log("stopped") == "up\n" && log("stubborn") == "up\n"; }));
  ASSERT_TRUE(rt.stop("stopped", 5s).isOk());
  ASSERT_TRUE(rt.stop("stubborn", 300ms).isOk());
  auto stopped = exitOf("stopped");
  auto stubborn = exitOf("stubborn");
  ASSERT_TRUE(stopped && stubborn);
  EXPECT_EQ(stopped->signal, SIGTERM) << stopped->describe();  // One SIGTERM reaches it.
  EXPECT_TRUE(stopped->stopped);
  EXPECT_EQ(stubborn->signal, SIGKILL) << stubborn->describe();
}

TEST_F(SandboxRuntimeTest, WhatTheTaskNeedsUnderTmpAndDevShmIsCarriedIntoItsView) {
  // Its credentials under /dev/shm (the agent's default), its folder under /tmp (this test's).
  const fs::path creds =
      fs::path("/dev/shm") / ("tessera-test-creds-" + std::to_string(::getpid()));
  fs::create_directories(creds / "task");
  std::ofstream(creds / "task" / "identity-token") << "jwt-of-the-task";
  fs::permissions(creds, fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
  fs::permissions(creds / "task", fs::perms::all);
  fs::permissions(creds / "task" / "identity-token",
                  fs::perms::owner_read | fs::perms::others_read);
  ProcessRuntime& rt = sandboxed();
  TaskSpec spec = as(shell("keep", "cat " + (creds / "task" / "identity-token").string() +
                                       "; echo; pwd; ls -a " + creds.string() + " 2>&1 | head -1"));
  spec.credentials_dir = (creds / "task").string();
  ASSERT_TRUE(rt.start(spec).isOk());
  auto e = exitOf("keep", 30s);
  fs::remove_all(creds);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << e->describe() << log("keep", "stderr.log");
  const std::string out = log("keep");
  EXPECT_EQ(out.rfind("jwt-of-the-task\n" + rt.taskDir("keep") + "\n", 0), 0U) << out;
  // The folder above it is one the task passes through, never lists.
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
}

// #41 item 3: time-sliced shares' caps are the agent's files, read-only in each task's view and
// rewritten as shares come and go on their GPU; a restarted runtime learns them back from its
// records and goes on rewriting them. (The preload is the C library itself, already loaded by
// every program: the test is about the caps, not the interposer.)
TEST_F(SandboxRuntimeTest, SharesCapsAreRewrittenAsSharesComeAndGoAcrossARestart) {
  ASSERT_TRUE(prepareCudaMountPoints(false).isOk());
  Dl_info libc{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&::getpid), &libc), 0);
  auto share = [&](const std::string& id, int guarantee, int limit) {
    TaskSpec spec = as(shell(id,
                             "cat /etc/tessera/cuda/caps; test -w /etc/tessera/cuda/caps && echo "
                             "writable; sleep 60"));
    spec.gpus.mode = GpuPinning::Mode::kFractional;
    spec.gpus.uuids = {"GPU-shared"};
    spec.gpus.memory_limit_mib = 64;
    spec.gpus.compute_share_percent = guarantee;
    spec.gpus.compute_limit_percent = limit;
    spec.gpus.interposer = libc.dli_fname;
    return spec;
  };
  const fs::path root = dir_ / "tasks" / ".cuda-caps";
  auto caps = [&](const std::string& id) { return readFile((root / id / "caps").string()); };
  {
    ProcessRuntime& first = sandboxed();
    ASSERT_TRUE(first.start(share("bursty", 30, 100)).isOk());
    ASSERT_TRUE(waitFor([&] { return !log("bursty").empty(); }, 10s))
        << log("bursty", "stderr.log");
    EXPECT_EQ(log("bursty"),
              "TESSERA_CUDA_COMPUTE_SHARE=100\nTESSERA_CUDA_COMPUTE_GUARANTEE=30\n"
              "TESSERA_CUDA_MEMORY_LIMIT=64M\n");
    ASSERT_TRUE(first.start(share("steady", 50, 0)).isOk());
    ASSERT_TRUE(waitFor([&] { return !log("steady").empty(); }, 10s))
        << log("steady", "stderr.log");
    EXPECT_EQ(log("steady"), "TESSERA_CUDA_COMPUTE_SHARE=50\nTESSERA_CUDA_MEMORY_LIMIT=64M\n");
    EXPECT_TRUE(caps("bursty").starts_with("TESSERA_CUDA_COMPUTE_SHARE=50\n")) << caps("bursty");
    first.detach();
    runtime_.reset();  // The agent restarts; its tasks stay.
  }
  ProcessRuntime& second = sandboxed();
  ASSERT_EQ(second.adopt().size(), 2U);
  ASSERT_TRUE(second.stop("steady", 1s).isOk());
  ASSERT_TRUE(exitOf("steady", 30s).has_value());
  // The adopted share got its GPU's time back, and the gone one's caps went with it.
  EXPECT_TRUE(caps("bursty").starts_with("TESSERA_CUDA_COMPUTE_SHARE=100\n")) << caps("bursty");
  EXPECT_FALSE(fs::exists(root / "steady"));
  EXPECT_FALSE(fs::exists(root / "steady.share"));
  ASSERT_TRUE(second.stop("bursty", 1s).isOk());
  ASSERT_TRUE(exitOf("bursty", 30s).has_value());
  EXPECT_FALSE(fs::exists(root / "bursty"));
  EXPECT_EQ(log("bursty").find("writable"), std::string::npos) << log("bursty");
}

}  // namespace
}  // namespace tessera::agent
