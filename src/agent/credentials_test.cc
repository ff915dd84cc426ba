#include "agent/credentials.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "agent/agent.h"
#include "agent/exec_util.h"
#include "core/clock.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Mode {
  unsigned mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

Mode modeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return {st.st_mode & 07777, st.st_uid, st.st_gid};
}

// Runs `probe` in a child process as uid:gid (root only) and returns its exit code.
int runAs(uid_t uid, gid_t gid, const std::function<int()>& probe) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(1, &gid) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) {
      ::_exit(99);
    }
    ::_exit(probe());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// 0 if `path` opens for reading, else its errno.
int openErrno(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  ::close(fd);
  return 0;
}

std::string slurpFile(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CredentialFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("tessera-creds-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_);
    ::chmod(base_.c_str(), 0755);
    root_ = (base_ / "root").string();
  }
  void TearDown() override { fs::remove_all(base_); }

  fs::path base_;
  std::string root_;
};

TEST_F(CredentialFilesTest, ATasksFolderIsItsUsersToReadAndNobodyElsesToListOrEnter) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root: files are given to the task's user";
  }
  const std::optional<UnixUser> nobody = lookupUser("nobody");
  if (!nobody) {
    GTEST_SKIP() << "no user 'nobody' on this machine";
  }
  const CredentialFiles files(root_);
  ASSERT_TRUE(files.write("t.w.0", "identity-token", "jwt-of-nobody", "nobody").isOk());
  ASSERT_TRUE(files.write("u.w.0", "identity-token", "jwt-of-the-agent", "").isOk());
  const Mode root = modeOf(root_);
  EXPECT_EQ(root.mode, 0711U);
  EXPECT_EQ(root.uid, 0U);
  const Mode folder = modeOf(files.dir("t.w.0"));
  EXPECT_EQ(folder.mode, 0750U);  // The agent's; the task's group reads it, cannot write in it.
  EXPECT_EQ(folder.uid, 0U);
  EXPECT_EQ(folder.gid, nobody->gid);
  const Mode token = modeOf(files.dir("t.w.0") + "/identity-token");
  EXPECT_EQ(token.mode, 0400U);
  EXPECT_EQ(token.uid, nobody->uid);
  EXPECT_EQ(modeOf(files.dir("u.w.0")).mode, 0700U);  // The agent's own user's task.
  const std::string own = files.dir("t.w.0") + "/identity-token";
  const std::string other = files.dir("u.w.0") + "/identity-token";
  // The task's user reads its token and lists its folder; cannot list the root, or add a file.
  EXPECT_EQ(runAs(nobody->uid, nobody->gid, [&] { return openErrno(own); }), 0);
  EXPECT_EQ(runAs(nobody->uid, nobody->gid, [&] { return openErrno(files.dir("t.w.0")); }), 0);
  EXPECT_EQ(runAs(nobody->uid, nobody->gid, [&] { return openErrno(root_); }), EACCES);
  EXPECT_EQ(runAs(nobody->uid, nobody->gid,
                  [&] {
                    const int fd = ::open((files.dir("t.w.0") + "/x").c_str(),
                                          O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                    return fd < 0 ? errno : 0;
                  }),
            EACCES);
  // Another user (a uid with no name, its own group) reaches neither, nor lists the root.
  const uid_t stranger = 54321;
  EXPECT_EQ(runAs(stranger, stranger, [&] { return openErrno(own); }), EACCES);
  EXPECT_EQ(runAs(stranger, stranger, [&] { return openErrno(files.dir("t.w.0")); }), EACCES);
  EXPECT_EQ(runAs(stranger, stranger, [&] { return openErrno(root_); }), EACCES);
  EXPECT_EQ(runAs(nobody->uid, nobody->gid, [&] { return openErrno(other); }), EACCES);
}

// A volume's files (docs/agent.md "Volumes"): in folders of its own, each version complete
// before `..data` points at it, so a task that reads through the volume never sees half of one;
// what a new version drops is gone, and the old version with it.
TEST_F(CredentialFilesTest, AVolumesNewVersionReplacesTheOldAtOnce) {
  const CredentialFiles files(root_);
  const std::string vol = files.dir("t.w.0") + "/volume-0";
  ASSERT_TRUE(files
                  .writeVolume("t.w.0", "volume-0",
                               {{"password", "one"}, {"conf/model.yaml", "lr: 0.1"}}, "")
                  .isOk());
  EXPECT_EQ(slurpFile(vol + "/password"), "one");
  EXPECT_EQ(slurpFile(vol + "/conf/model.yaml"), "lr: 0.1");
  EXPECT_EQ(modeOf(vol + "/..data/password").mode, 0400U);
  EXPECT_TRUE(fs::is_symlink(vol + "/password"));  // Through ..data, as Kubernetes' are.
  const std::string first = fs::read_symlink(vol + "/..data").string();
  ASSERT_TRUE(
      files.writeVolume("t.w.0", "volume-0", {{"password", "two"}, {"user", "alice"}}, "").isOk());
  EXPECT_EQ(slurpFile(vol + "/password"), "two");
  EXPECT_EQ(slurpFile(vol + "/user"), "alice");
  EXPECT_FALSE(fs::exists(vol + "/conf"));  // Dropped with its version.
  EXPECT_NE(fs::read_symlink(vol + "/..data").string(), first);
  EXPECT_FALSE(fs::exists(vol + "/" + first));
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(vol)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names.size(), 4U);  // ..data, its version, password, user.
  // Names that would leave the volume are refused before anything is written.
  for (const char* bad : {"../escape", "a/../../escape", "/etc/passwd"}) {
    EXPECT_FALSE(files.writeVolume("t.w.0", "volume-0", {{bad, "x"}}, "").isOk()) << bad;
  }
  EXPECT_FALSE(files.writeVolume("t.w.0", "../volume", {{"a", "x"}}, "").isOk());
  EXPECT_EQ(slurpFile(vol + "/password"), "two");
  // The task's folder goes with everything in it.
  files.remove("t.w.0");
  EXPECT_FALSE(fs::exists(files.dir("t.w.0")));
}

TEST_F(CredentialFilesTest, ARootSomeoneElseMadeOrLeftOpenIsRefusedNeverUsed) {
  // A folder of the right mode that the agent made (or an earlier agent did) is used.
  ASSERT_TRUE(CredentialFiles(root_).prepare().isOk());
  EXPECT_EQ(modeOf(root_).mode, 0711U);
  ASSERT_TRUE(CredentialFiles(root_).prepare().isOk());
  // Open to others: refused (it could be /dev/shm itself, or someone's trap).
  for (unsigned mode : {0755U, 0777U, 01777U, 0700U}) {
    ASSERT_EQ(::chmod(root_.c_str(), mode), 0);
    const core::Status s = CredentialFiles(root_).write("t.w.0", "identity-token", "jwt", "");
    ASSERT_FALSE(s.isOk()) << std::oct << mode;
    EXPECT_NE(s.message().find("not 0711"), std::string::npos) << s.message();
    EXPECT_FALSE(fs::exists(root_ + "/t.w.0"));
  }
  fs::remove_all(root_);
  // A link planted where the root goes: refused, and nothing is written where it points.
  fs::create_directories(base_ / "elsewhere");
  fs::create_directory_symlink(base_ / "elsewhere", root_);
  const core::Status link = CredentialFiles(root_).prepare();
  ASSERT_FALSE(link.isOk());
  EXPECT_NE(link.message().find("not a folder"), std::string::npos) << link.message();
  EXPECT_FALSE(CredentialFiles(root_).write("t.w.0", "identity-token", "jwt", "").isOk());
  EXPECT_TRUE(fs::is_empty(base_ / "elsewhere"));
  fs::remove(root_);
  if (::geteuid() != 0) {
    return;  // Only root can make a folder that another user owns.
  }
  // Made first by another user, with the very mode the agent wants: refused.
  ASSERT_EQ(::mkdir(root_.c_str(), 0711), 0);
  ASSERT_EQ(::chown(root_.c_str(), 54321, 54321), 0);
  const core::Status taken = CredentialFiles(root_).prepare();
  ASSERT_FALSE(taken.isOk());
  EXPECT_NE(taken.message().find("belongs to uid 54321"), std::string::npos) << taken.message();
  EXPECT_FALSE(CredentialFiles(root_).write("t.w.0", "identity-token", "jwt", "").isOk());
  EXPECT_TRUE(fs::is_empty(root_));
}

TEST_F(CredentialFilesTest, RemovingAFolderNeverFollowsALinkInIt) {
  const CredentialFiles files(root_);
  ASSERT_TRUE(files.write("t.w.0", "identity-token", "jwt", "").isOk());
  // What an older agent's task could leave in a folder it owned: links out, a folder of links.
  const fs::path outside = base_ / "precious";
  fs::create_directories(outside);
  std::ofstream(outside / "file") << "keep me";
  const fs::path folder = files.dir("t.w.0");
  fs::create_directory_symlink(outside, folder / "link-to-folder");
  fs::create_symlink(outside / "file", folder / "link-to-file");
  fs::create_directories(folder / "sub" / "deeper");
  fs::create_directory_symlink(outside, folder / "sub" / "deeper" / "link");
  EXPECT_EQ(files.list(), std::vector<std::string>{"t.w.0"});
  files.remove("t.w.0");
  EXPECT_FALSE(fs::exists(folder));
  EXPECT_EQ(files.list(), std::vector<std::string>{});
  std::ifstream in(outside / "file");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep me");
  EXPECT_TRUE(fs::exists(outside));
}

// What an agent's loop needs from the server and the runtime, for the credentials' lifetimes.
class Server : public ControlPlaneClient {
 public:
  core::Result<std::vector<TaskAssignment>> heartbeat(const std::string&, const NodeGpus&,
                                                      const std::vector<TaskReport>&) override {
    if (down) {
      return core::unavailable("connection refused");
    }
    return assigned;
  }
  bool down = false;
  std::vector<TaskAssignment> assigned;
};

class Tasks : public Runtime {
 public:
  core::Status start(const TaskSpec& spec) override {
    started[spec.id] = spec;
    running_.insert(spec.id);
    return core::Status::ok();
  }
  core::Status stop(const std::string& id, std::chrono::milliseconds) override {
    stopped.insert(id);
    return running_.contains(id) ? core::Status::ok() : core::notFound(id);
  }
  std::vector<std::string> running() const override { return {running_.begin(), running_.end()}; }
  std::set<std::string> stopped;
  std::map<std::string, TaskSpec> started;

 private:
  std::set<std::string> running_;
};

TaskAssignment withToken(const std::string& id, const std::string& token) {
  TaskAssignment a;
  a.spec.id = id;
  a.spec.command = {"true"};
  a.generation = 1;
  a.credentials["identity-token"] = token;
  return a;
}

TEST_F(CredentialFilesTest, AFencedAgentRemovesItsTasksCredentialsWithTheTasks) {
  const CredentialFiles files(root_);
  core::FakeClock clock;
  Server server;
  Tasks tasks;
  AgentOptions options;
  options.fence_after = 10s;
  options.fence_grace = 1s;
  options.credentials = &files;
  Agent agent("gpu-01", NodeGpus{}, server, tasks, clock, options);
  server.assigned = {withToken("t.w.0", "jwt-0"), withToken("t.w.1", "jwt-1")};
  ASSERT_TRUE(agent.tick().isOk());
  ASSERT_TRUE(fs::exists(files.dir("t.w.0") + "/identity-token"));
  ASSERT_TRUE(fs::exists(files.dir("t.w.1") + "/identity-token"));
  // The server is gone: before fence_after, the tasks and their tokens stay.
  server.down = true;
  clock.advance(5s);
  EXPECT_FALSE(agent.tick().isOk());
  EXPECT_TRUE(fs::exists(files.dir("t.w.0") + "/identity-token"));
  clock.advance(5s);
  EXPECT_FALSE(agent.tick().isOk());
  ASSERT_TRUE(agent.fenced());
  EXPECT_EQ(tasks.stopped, (std::set<std::string>{"t.w.0", "t.w.1"}));
  EXPECT_EQ(files.list(), std::vector<std::string>{});  // No token left for a fenced task.
  // The server comes back and gives one task back: its token is written again.
  server.down = false;
  server.assigned = {withToken("t.w.0", "jwt-0")};
  ASSERT_TRUE(agent.tick().isOk());
  EXPECT_EQ(files.list(), std::vector<std::string>{"t.w.0"});
}

// A container's volumes: its files kept in its credentials folder and bound at their paths,
// rewritten when the server sends new ones; tmpfs folders left to the runtime.
TEST_F(CredentialFilesTest, AnAgentKeepsATasksVolumeFilesBesideItsCredentials) {
  const CredentialFiles files(root_);
  core::FakeClock clock;
  Server server;
  Tasks tasks;
  AgentOptions options;
  options.credentials = &files;
  Agent agent("gpu-01", NodeGpus{}, server, tasks, clock, options);
  TaskAssignment a;
  a.spec.id = "t.w.0";
  a.spec.container.image = "oci:/images/busybox:latest";
  a.generation = 1;
  a.volumes = {{.path = "/etc/db", .files = {{"password", "one"}}},
               {.path = "/dev/shm", .files = {}, .tmpfs = true, .size_mib = 64}};
  server.assigned = {a};
  ASSERT_TRUE(agent.tick().isOk());
  ASSERT_TRUE(tasks.started.contains("t.w.0"));
  const std::vector<ContainerSpec::Volume>& mounts = tasks.started["t.w.0"].container.volumes;
  ASSERT_EQ(mounts.size(), 2U);
  EXPECT_EQ(mounts[0].path, "/etc/db");
  EXPECT_EQ(mounts[0].source, files.dir("t.w.0") + "/volume-0");
  EXPECT_EQ(mounts[1].path, "/dev/shm");
  EXPECT_EQ(mounts[1].source, "");
  EXPECT_EQ(mounts[1].size_mib, 64);
  EXPECT_EQ(slurpFile(mounts[0].source + "/password"), "one");
  // The secret changed: the running task's file changes in place.
  server.assigned[0].volumes[0].files["password"] = "two";
  ASSERT_TRUE(agent.tick().isOk());
  EXPECT_EQ(slurpFile(mounts[0].source + "/password"), "two");
  EXPECT_EQ(tasks.started.size(), 1U);  // Not started again.
}

TEST_F(CredentialFilesTest, FoldersAnEarlierAgentLeftGoUnlessTheirTaskIsStillHere) {
  const CredentialFiles files(root_);
  // An agent that died with its tasks fenced by their shims left these.
  ASSERT_TRUE(files.write("old.w.0", "identity-token", "stale", "").isOk());
  ASSERT_TRUE(files.write("kept.w.0", "identity-token", "stale", "").isOk());
  core::FakeClock clock;
  Server server;
  Tasks tasks;
  AgentOptions options;
  options.credentials = &files;
  Agent agent("gpu-01", NodeGpus{}, server, tasks, clock, options);
  server.assigned = {withToken("kept.w.0", "fresh")};
  ASSERT_TRUE(agent.tick().isOk());
  EXPECT_EQ(files.list(), std::vector<std::string>{"kept.w.0"});
  std::ifstream in(files.dir("kept.w.0") + "/identity-token");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "fresh");
}

}  // namespace
}  // namespace tessera::agent
