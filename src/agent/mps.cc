#include "agent/mps.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "agent/exec_util.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPath = "/usr/local/bin:/usr/bin:/bin";

// `user`'s uid and gid ("" : ours).
core::Result<std::pair<uid_t, gid_t>> idsOf(const std::string& user) {
  if (user.empty()) {
    return std::make_pair(::getuid(), ::getgid());
  }
  const std::optional<UnixUser> found = lookupUser(user);
  if (!found) {
    return core::failedPrecondition("mps: no Unix user '" + user + "'");
  }
  return std::make_pair(found->uid, found->gid);
}

// Runs `program args` with `env` as `user` (or ourselves), `input` on its standard input;
// returns its exit status. Errors say what could not be done.
core::Result<int> runAs(const std::string& program, const std::vector<std::string>& args,
                        const std::vector<std::string>& env, const std::string& user,
                        const std::string& input) {
  TESSERA_ASSIGN_OR_RETURN(const auto ids, idsOf(user));
  const auto [uid, gid] = ids;
  auto exe = findExecutable(program, kPath);
  if (!exe.isOk()) {
    return exe.status().withContext("mps");
  }
  const std::string binary = std::move(exe).value();
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = env;
  const std::vector<char*> argv = cStrings(argv_s);
  const std::vector<char*> envp = cStrings(env_s);
  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    return core::unavailable(std::string("mps: pipe: ") + std::strerror(errno));
  }
  const bool switch_user = !user.empty();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    if (switch_user && (::setgroups(1, &gid) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)) {
      ::_exit(126);
    }
    ::execve(binary.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  if (pid < 0) {
    ::close(in[1]);
    return core::unavailable(std::string("mps: fork: ") + std::strerror(errno));
  }
  // A short command: its input fits the pipe, and SIGPIPE is not ours to take if it exits early.
  struct sigaction ignore {};
  struct sigaction old {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  (void)!::write(in[1], input.data(), input.size());
  ::sigaction(SIGPIPE, &old, nullptr);
  ::close(in[1]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 127) {
      return core::failedPrecondition("mps: cannot run " + binary);
    }
    if (WEXITSTATUS(status) == 126) {
      return core::failedPrecondition("mps: cannot become user '" + user + "'");
    }
    return WEXITSTATUS(status);
  }
  return 128 + WTERMSIG(status);
}

std::vector<std::string> daemonEnv(const MpsDaemon& d) {
  return {std::string("PATH=") + kPath, "CUDA_VISIBLE_DEVICES=" + d.gpu_uuid,
          "CUDA_MPS_PIPE_DIRECTORY=" + d.pipe_directory,
          "CUDA_MPS_LOG_DIRECTORY=" + d.log_directory};
}

}  // namespace

core::Status ProcessMpsControl::start(const MpsDaemon& d) {
  TESSERA_ASSIGN_OR_RETURN(int rc, runAs(binary_, {"-d"}, daemonEnv(d), d.user, ""));
  if (rc != 0) {
    return core::unavailable("mps: " + binary_ + " -d for " + d.gpu_uuid + " exited " +
                             std::to_string(rc) + " (see " + d.log_directory + "/control.log)");
  }
  return core::Status::ok();
}

core::Status ProcessMpsControl::stop(const MpsDaemon& d) {
  TESSERA_ASSIGN_OR_RETURN(int rc, runAs(binary_, {}, daemonEnv(d), d.user, "quit\n"));
  if (rc != 0) {
    return core::unavailable("mps: quit for " + d.gpu_uuid + " exited " + std::to_string(rc));
  }
  return core::Status::ok();
}

core::Status RecordingMpsControl::start(const MpsDaemon& d) {
  std::lock_guard lock(mu_);
  calls_.push_back("start " + d.gpu_uuid + " " + d.user + " " + d.pipe_directory);
  return core::Status::ok();
}

core::Status RecordingMpsControl::stop(const MpsDaemon& d) {
  std::lock_guard lock(mu_);
  calls_.push_back("stop " + d.gpu_uuid + " " + d.user + " " + d.pipe_directory);
  return core::Status::ok();
}

std::vector<std::string> RecordingMpsControl::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

void MpsDaemons::adopt(const std::string& gpu_uuid, const std::string& user) {
  std::lock_guard lock(mu_);
  auto key = std::make_pair(gpu_uuid, user);
  if (auto it = daemons_.find(key); it != daemons_.end()) {
    ++it->second.clients;
    return;
  }
  const std::string base =
      run_dir_ + "/mps/" + gpu_uuid + "-" + (user.empty() ? std::string("agent") : user);
  daemons_.emplace(key, Entry{MpsDaemon{gpu_uuid, user, base + "/pipe", base + "/log"}, 1});
}

void MpsDaemons::detach() {
  std::lock_guard lock(mu_);
  daemons_.clear();
}

MpsDaemons::~MpsDaemons() {
  for (auto& [key, e] : daemons_) {
    (void)control_.stop(e.daemon);
  }
}

core::Result<std::string> MpsDaemons::acquire(const std::string& gpu_uuid,
                                              const std::string& user) {
  if (!plainFileName(gpu_uuid) || (!user.empty() && !plainFileName(user))) {
    return core::invalidArgument("mps: bad GPU '" + gpu_uuid + "' or user '" + user + "'");
  }
  std::lock_guard lock(mu_);
  auto key = std::make_pair(gpu_uuid, user);
  if (auto it = daemons_.find(key); it != daemons_.end()) {
    ++it->second.clients;
    return it->second.daemon.pipe_directory;
  }
  const std::string base =
      run_dir_ + "/mps/" + gpu_uuid + "-" + (user.empty() ? std::string("agent") : user);
  MpsDaemon d{gpu_uuid, user, base + "/pipe", base + "/log"};
  std::error_code ec;
  for (const std::string& dir : {d.pipe_directory, d.log_directory}) {
    fs::create_directories(dir, ec);
    if (ec) {
      return core::unavailable("mps: cannot create " + dir + ": " + ec.message());
    }
  }
  if (!user.empty() && control_.runsAsUser()) {
    TESSERA_ASSIGN_OR_RETURN(const auto ids, idsOf(user));
    for (const std::string& dir : {base, d.pipe_directory, d.log_directory}) {
      if (::chown(dir.c_str(), ids.first, ids.second) != 0) {
        return core::unavailable("mps: cannot give " + dir + " to " + user + ": " +
                                 std::strerror(errno));
      }
    }
  }
  TESSERA_RETURN_IF_ERROR(control_.start(d));
  daemons_.emplace(key, Entry{d, 1});
  return d.pipe_directory;
}

core::Status MpsDaemons::release(const std::string& gpu_uuid, const std::string& user) {
  std::lock_guard lock(mu_);
  auto it = daemons_.find({gpu_uuid, user});
  if (it == daemons_.end()) {
    return core::notFound("mps: no daemon for " + gpu_uuid + " and user '" + user + "'");
  }
  if (--it->second.clients > 0) {
    return core::Status::ok();
  }
  const MpsDaemon d = it->second.daemon;
  daemons_.erase(it);
  return control_.stop(d);
}

std::map<std::pair<std::string, std::string>, int> MpsDaemons::clients() const {
  std::lock_guard lock(mu_);
  std::map<std::pair<std::string, std::string>, int> out;
  for (const auto& [key, e] : daemons_) {
    out[key] = e.clients;
  }
  return out;
}

Runtime::OnExit MpsRuntime::exitHandler() {
  return [this](const std::string& id, const TaskExit& e) {
    releaseFor(id);
    on_exit_(id, e);
  };
}

void MpsRuntime::saveHolds() {
  if (holds_file_.empty()) {
    return;
  }
  // One line per task and daemon: task, GPU, user ("-" for the agent's own). All plain names.
  std::string text;
  for (const auto& [id, daemons] : held_) {
    for (const auto& [gpu, user] : daemons) {
      text += id + " " + gpu + " " + (user.empty() ? "-" : user) + "\n";
    }
  }
  const std::string tmp = holds_file_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "we");
  if (f == nullptr) {
    return;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) == 0 && ok) {
    (void)std::rename(tmp.c_str(), holds_file_.c_str());
  }
}

core::Status MpsRuntime::restore() {
  if (holds_file_.empty()) {
    return core::Status::ok();
  }
  std::FILE* f = std::fopen(holds_file_.c_str(), "re");
  if (f == nullptr) {
    return errno == ENOENT
               ? core::Status::ok()
               : core::unavailable("mps: cannot read " + holds_file_ + ": " + std::strerror(errno));
  }
  char id[256];
  char gpu[256];
  char user[256];
  std::lock_guard lock(mu_);
  while (std::fscanf(f, "%255s %255s %255s", id, gpu, user) == 3) {
    const std::string u = std::string(user) == "-" ? "" : user;
    if (!plainFileName(id) || !plainFileName(gpu) || (!u.empty() && !plainFileName(u))) {
      continue;  // Not a line of ours.
    }
    held_[id].emplace_back(gpu, u);
    daemons_.adopt(gpu, u);
  }
  std::fclose(f);
  return core::Status::ok();
}

void MpsRuntime::forgetGone(const std::set<std::string>& running) {
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, daemons] : held_) {
      if (!running.contains(id)) {
        gone.push_back(id);
      }
    }
  }
  for (const std::string& id : gone) {
    releaseFor(id);
  }
}

void MpsRuntime::releaseFor(const std::string& id) {
  std::vector<std::pair<std::string, std::string>> held;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(id);
    if (it == held_.end()) {
      return;
    }
    held = std::move(it->second);
    held_.erase(it);
    saveHolds();
  }
  for (const auto& [gpu, user] : held) {
    (void)daemons_.release(gpu, user);
  }
}

core::Status MpsRuntime::start(const TaskSpec& spec) {
  if (spec.gpus.mode != GpuPinning::Mode::kMps) {
    return inner_->start(spec);
  }
  TaskSpec with_daemons = spec;
  std::vector<std::pair<std::string, std::string>> held;
  core::Status st;
  for (const std::string& gpu : spec.gpus.uuids) {
    auto pipe = daemons_.acquire(gpu, spec.user);
    if (!pipe.isOk()) {
      st = pipe.status().withContext("task " + spec.id);
      break;
    }
    held.emplace_back(gpu, spec.user);
    // One pipe folder per task: a task with several GPUs gets its first GPU's daemon (MPS
    // clients talk to one control daemon).
    if (with_daemons.gpus.mps_pipe_directory.empty()) {
      with_daemons.gpus.mps_pipe_directory = *pipe;
    }
  }
  if (st.isOk()) {
    {
      std::lock_guard lock(mu_);
      held_[spec.id] = held;
      saveHolds();  // Before the task runs: a restart must find its daemons.
    }
    st = inner_->start(with_daemons);
    if (st.isOk()) {
      return st;
    }
    std::lock_guard lock(mu_);
    held_.erase(spec.id);
    saveHolds();
  }
  for (const auto& [gpu, user] : held) {
    (void)daemons_.release(gpu, user);
  }
  return st;
}

}  // namespace tessera::agent
