#include "agent/runtime.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "agent/exec_util.h"
#include "agent/sandbox.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) {
    out += (out.empty() ? "" : sep) + s;
  }
  return out;
}

int pidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// What goes through the start pipe: the shim sends the task's pid, and the task, if it cannot
// get to exec, the step that failed and errno. The pipe closes when both are done.
struct ChildMsg {
  int kind = 0;  // kPid or kError.
  pid_t pid = 0;
  int step = 0;
  int err = 0;
};
constexpr int kPid = 1;
constexpr int kError = 2;
constexpr const char* kSteps[] = {"",
                                  "joining its cgroup",
                                  "opening /dev/null",
                                  "changing to its folder",
                                  "taking its user's groups",
                                  "taking its user's group",
                                  "taking its user",
                                  "running the command",
                                  "starting its process"};

// Steps of setting up a task's view (agent/sandbox.h) go through the pipe as this plus theirs.
constexpr int kSandboxStepBase = 100;

[[noreturn]] void childFail(int fd, int step) {
  const ChildMsg e{kError, 0, step, errno};
  (void)!::write(fd, &e, sizeof e);
  ::_exit(127);
}

// Closes every descriptor from 3 up except `a`, `b`, `c` and `d` (-1: none; async-signal-safe:
// after fork).
void closeAllBut(int a, int b, int c, int d = -1) {
  int keep[4] = {a, b, c, d};
  // Sorted by hand: std::sort is not on the list of what a forked child may call.
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) {
      if (keep[j] < keep[i]) {
        const int t = keep[i];
        keep[i] = keep[j];
        keep[j] = t;
      }
    }
  }
  unsigned from = 3;
  for (int k : keep) {
    if (k >= 0 && static_cast<unsigned>(k) >= from) {
      if (static_cast<unsigned>(k) > from) {
        ::syscall(SYS_close_range, from, static_cast<unsigned>(k) - 1, 0U);
      }
      from = static_cast<unsigned>(k) + 1;
    }
  }
  ::syscall(SYS_close_range, from, ~0U, 0U);
}

int64_t monotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The deadline in `path` (a CLOCK_MONOTONIC time in ns, as text); 0 when the file cannot be
// read: the shim errs on the side of stopping. Async-signal-safe.
int64_t leaseDeadline(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return 0;
  }
  char buf[32];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  int64_t deadline = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) {
    deadline = deadline * 10 + (buf[i] - '0');
  }
  return deadline;
}

// Writes "<wait status> <fenced>\n" to `path`. Async-signal-safe.
// Written whole under a temporary name and renamed: a reader (a restarted agent adopting the
// task, which takes the file's presence to mean the task ended) never sees half of it.
void writeExit(const char* path, const char* tmp_path, int status, bool fenced) {
  char buf[32];
  char digits[16];
  int len = 0;
  auto u = static_cast<unsigned>(status);
  int nd = 0;
  do {
    digits[nd++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0 && nd < 16);
  while (nd > 0) {
    buf[len++] = digits[--nd];
  }
  buf[len++] = ' ';
  buf[len++] = fenced ? '1' : '0';
  buf[len++] = '\n';
  // The task's user owns the folder: whatever it put under this name is replaced, never
  // followed (a link to a file of root's would have the shim write there).
  ::unlink(tmp_path);
  const int fd = ::open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd >= 0) {
    const bool whole = ::write(fd, buf, static_cast<size_t>(len)) == len;
    ::close(fd);
    if (whole) {
      (void)::rename(tmp_path, path);
    }
  }
}

// The shim: the task's parent, outside its cgroup, in a session of its own. It waits for the
// task and keeps its exit status in the task's folder, so the agent learns it even if it was
// restarted meanwhile; and when the agent's lease runs out (the agent died or lost the server)
// it stops the task itself: SIGTERM to its group, SIGKILL after `grace_ns`. Only system calls:
// it runs in a fork of a threaded process.
// SIGKILL to every process listed in the cgroup.procs files `procs` (null-terminated; null:
// none). Async-signal-safe.
void killListed(const char* const* procs) {
  for (; procs != nullptr && *procs != nullptr; ++procs) {
    const int fd = ::open(*procs, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      continue;
    }
    char buf[4096];
    long pid = 0;
    bool digits = false;
    for (ssize_t n = ::read(fd, buf, sizeof buf); n > 0; n = ::read(fd, buf, sizeof buf)) {
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') {
          pid = pid * 10 + (buf[i] - '0');
          digits = true;
        } else {
          if (digits && pid > 0) {
            ::kill(static_cast<pid_t>(pid), SIGKILL);
          }
          pid = 0;
          digits = false;
        }
      }
    }
    if (digits && pid > 0) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
    ::close(fd);
  }
}

// Removes what the folder `dir_fd` holds, folders to a depth of 8 (a volume's files, in the
// credentials folder), never following a link. Async-signal-safe.
void removeEntriesAt(int dir_fd, int depth) {
  alignas(8) char buf[2048];
  for (long n = ::syscall(SYS_getdents64, dir_fd, buf, sizeof buf); n > 0;
       n = ::syscall(SYS_getdents64, dir_fd, buf, sizeof buf)) {
    for (long off = 0; off < n;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
      unsigned short reclen = 0;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      if (!(name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) &&
          ::unlinkat(dir_fd, name, 0) != 0 && errno == EISDIR && depth < 8) {
        const int sub = ::openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
          removeEntriesAt(sub, depth + 1);
          ::close(sub);
          (void)::unlinkat(dir_fd, name, AT_REMOVEDIR);
        }
      }
      off += reclen;
    }
  }
}

// Removes the folder `dir` with what it holds, then its parent if that is empty now (never
// following a link). Async-signal-safe.
void removeCredentialFolder(const char* dir, const char* parent) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    removeEntriesAt(fd, 0);
    ::close(fd);
  }
  (void)::rmdir(dir);
  if (parent != nullptr) {
    (void)::rmdir(parent);  // Only if no other task's folder is left in it.
  }
}

// `status_fd` (-1: none): where the task's init (agent/sandbox.h) writes its command's wait
// status, which is the task's. `credentials` (null: none) and its parent: removed once the task
// has ended if the agent (`agent`, the shim's parent) is gone by then, since no agent may come to
// remove them.
[[noreturn]] void runShim(pid_t task, int status_fd, const char* lease, const char* exit_path,
                          const char* exit_tmp_path, int64_t grace_ns,
                          const char* const* kill_procs, const char* credentials,
                          const char* credentials_root, pid_t agent) {
  ::prctl(PR_SET_NAME, "tessera-shim");  // In ps and top; its command line is the agent's.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, task, 0));
  bool fenced = false;
  int64_t kill_at = 0;
  // The lease file is read again only when the deadline last read has passed, so a node's
  // shims cost a read per renewal period each, not one per wake-up.
  int64_t deadline = lease != nullptr ? leaseDeadline(lease) : INT64_MAX;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(task, &status, WNOHANG);
    if (r == task) {
      // The command's own status when the init passed it on; else the init's (killed).
      int command_status = 0;
      if (status_fd >= 0 && ::read(status_fd, &command_status, sizeof command_status) ==
                                static_cast<ssize_t>(sizeof command_status)) {
        status = command_status;
      }
      writeExit(exit_path, exit_tmp_path, status, fenced);
      if (credentials != nullptr && ::getppid() != agent) {
        removeCredentialFolder(credentials, credentials_root);
      }
      ::_exit(0);
    }
    if (r < 0 && errno == ECHILD) {
      ::_exit(1);
    }
    int64_t now = monotonicNs();
    if (!fenced && now >= deadline) {
      deadline = leaseDeadline(lease);
      if (now >= deadline) {
        fenced = true;
        ::kill(-task, SIGTERM);
        kill_at = now + grace_ns;
      }
    }
    if (fenced && kill_at != 0 && now >= kill_at) {
      ::kill(-task, SIGKILL);
      // A container's processes are not in the runtime's process group (their pid namespace's
      // init is the runtime's child in a session of its own): they are found by their cgroup.
      killListed(kill_procs);
      kill_at = 0;
    }
    // Sleep until the task exits, the deadline (or the kill) is due, or a minute at most.
    const int64_t until = fenced ? (kill_at != 0 ? kill_at : now + 60'000'000'000)
                                 : std::min(deadline, now + 60'000'000'000);
    const int timeout_ms = static_cast<int>(std::max<int64_t>(1, (until - now) / 1'000'000 + 1));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      (void)::poll(&p, 1, timeout_ms);
    } else {
      const int ms = std::min(timeout_ms, 200);
      const timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1'000'000};
      ::nanosleep(&ts, nullptr);
    }
  }
}

// Who a task runs as.
struct Identity {
  bool switch_user = false;
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
};

// `user` ("" : the agent's own), who gets the task's folder `dir`.
core::Result<Identity> identityOf(const std::string& user, const std::string& dir,
                                  const std::string& where) {
  Identity who;
  who.uid = ::getuid();
  who.gid = ::getgid();
  if (user.empty()) {
    return who;
  }
  const std::optional<UnixUser> found = lookupUser(user);
  if (!found) {
    return core::failedPrecondition(where + ": no Unix user '" + user + "'");
  }
  who.switch_user = true;
  who.user = user;
  who.uid = found->uid;
  who.gid = found->gid;
  if (::chown(dir.c_str(), who.uid, who.gid) != 0) {
    return core::unavailable(where + ": cannot give " + dir + " to " + user + ": " +
                             std::strerror(errno));
  }
  return who;
}

}  // namespace

std::map<std::string, std::string> rendezvousEnvironment(const TaskSpec& spec,
                                                         const std::string& dir) {
  const Rendezvous& r = spec.rendezvous;
  std::map<std::string, std::string> env;
  env["TESSERA_TASK_COUNT"] = std::to_string(r.task_count);
  for (const auto& [name, port] : r.ports) {
    std::string var = "TESSERA_PORT_" + name;
    for (char& c : var) {
      c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    env[var] = std::to_string(port);
  }
  if (r.task_count <= 1) {
    return env;
  }
  // PyTorch's names (torchrun, torch.distributed), and the hosts for MPI and DeepSpeed.
  env["WORLD_SIZE"] = std::to_string(r.task_count);
  env["RANK"] = std::to_string(spec.index);
  env["NODE_RANK"] = std::to_string(spec.index);
  env["LOCAL_WORLD_SIZE"] = std::to_string(r.slots);
  std::string hosts;
  for (const std::string& h : r.hosts) {
    hosts += (hosts.empty() ? "" : ",") + h;
  }
  env["TESSERA_HOSTS"] = hosts;
  env["TESSERA_HOSTFILE"] = dir + "/hostfile";
  if (!r.hosts.empty() && !r.hosts[0].empty()) {
    env["MASTER_ADDR"] = r.hosts[0];
  }
  if (r.master_port > 0) {
    env["MASTER_PORT"] = std::to_string(r.master_port);
  }
  return env;
}

std::string hostfileText(const Rendezvous& r) {
  std::string out;
  for (const std::string& h : r.hosts) {
    if (!h.empty()) {
      out += h + " slots=" + std::to_string(r.slots) + "\n";
    }
  }
  return out;
}

namespace {

// "KEY=value" strings: a clean base (HOME is the task's folder), the workload's own, then what the
// agent sets (which the workload cannot override).
std::vector<std::string> taskEnvironment(const TaskSpec& spec, const std::string& path,
                                         const std::string& home, const Identity& who) {
  std::map<std::string, std::string> env = {{"PATH", path}, {"HOME", home}, {"LANG", "C.UTF-8"}};
  if (who.switch_user) {
    env["USER"] = who.user;
    env["LOGNAME"] = who.user;
  }
  for (const auto& [k, v] : spec.env) {
    env[k] = v;
  }
  for (const auto& [k, v] : gpuEnvironment(spec.gpus)) {
    if (k == "LD_PRELOAD" && env.contains(k) && !env[k].empty()) {
      env[k] = v + " " + env[k];  // The interposer first; the workload's own preloads stay.
    } else {
      env[k] = v;
    }
  }
  env["TESSERA_TASK"] = spec.id;
  env["TESSERA_WORKLOAD"] = spec.workload;
  env["TESSERA_TENANT"] = spec.tenant;
  env["TESSERA_TASK_INDEX"] = std::to_string(spec.index);
  for (const auto& [k, v] : rendezvousEnvironment(spec, home)) {
    env[k] = v;
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) {
    out.push_back(k + "=" + v);
  }
  return out;
}

// The start time of a process (field 22 of /proc/<pid>/stat, in clock ticks since boot), which
// tells it from a later process that reuses its pid; 0 when it is gone.
uint64_t processStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) {
    return 0;
  }
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) {
      return std::strtoull(field.c_str(), nullptr, 10);
    }
  }
  return 0;
}

// Opens a file the agent or a shim wrote in a task's folder, for reading: never through a link,
// and only if it is the agent's (a task running as its own user may write in its folder, but
// cannot make a file of the agent's user). -1 otherwise.
int openAgentFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The content of such a file (up to 4 KiB); nullopt when there is none of the agent's.
std::optional<std::string> readAgentFile(const std::string& path) {
  const int fd = openAgentFile(path);
  if (fd < 0) {
    return std::nullopt;
  }
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n < 0) {
    return std::nullopt;
  }
  return std::string(buf, static_cast<size_t>(n));
}

bool agentFileExists(const std::string& path) {
  const int fd = openAgentFile(path);
  if (fd >= 0) {
    ::close(fd);
  }
  return fd >= 0;
}

// Writes a file of the agent's in a task's folder whole: under a temporary name created afresh
// (never through a link the task left), then renamed.
bool writeAgentFile(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return false;
  }
  const bool whole =
      ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ::close(fd);
  if (!whole || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// Reads what writeExit wrote.
bool readExitFile(const std::string& path, int& status, bool& fenced) {
  const int fd = openAgentFile(path);
  FILE* f = fd >= 0 ? ::fdopen(fd, "r") : nullptr;
  if (f == nullptr) {
    if (fd >= 0) {
      ::close(fd);
    }
    return false;
  }
  int fenced_flag = 0;
  const int n = std::fscanf(f, "%d %d", &status, &fenced_flag);
  std::fclose(f);
  fenced = fenced_flag != 0;
  return n == 2;
}

}  // namespace

std::map<std::string, std::string> gpuEnvironment(const GpuPinning& pin) {
  std::map<std::string, std::string> env;
  env["CUDA_VISIBLE_DEVICES"] = join(pin.uuids, ",");
  if (pin.mode == GpuPinning::Mode::kNone || pin.uuids.empty()) {
    env["CUDA_VISIBLE_DEVICES"] = "";
    return env;
  }
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  if (pin.mode == GpuPinning::Mode::kMps) {
    env["CUDA_MPS_PIPE_DIRECTORY"] = pin.mps_pipe_directory;
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(pin.mps_thread_percentage);
    if (pin.mps_memory_limit_mib > 0) {
      // Per visible device, by its index among CUDA_VISIBLE_DEVICES.
      std::vector<std::string> limits;
      for (size_t i = 0; i < pin.uuids.size(); ++i) {
        limits.push_back(std::to_string(i) + "=" + std::to_string(pin.mps_memory_limit_mib) + "M");
      }
      env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = join(limits, ",");
    }
  }
  if (pin.mode == GpuPinning::Mode::kFractional) {
    env["TESSERA_CUDA_MEMORY_LIMIT"] = std::to_string(pin.memory_limit_mib) + "M";
    env["TESSERA_CUDA_COMPUTE_SHARE"] = std::to_string(pin.compute_share_percent);
    if (!pin.interposer.empty()) {
      env["LD_PRELOAD"] = pin.interposer;
    }
  }
  return env;
}

std::string cudaCapsText(const GpuPinning& pin, int share_now) {
  std::string text;
  if (pin.mode == GpuPinning::Mode::kFractional && !pin.interposer.empty() && !pin.uuids.empty()) {
    for (const auto& [k, v] : gpuEnvironment(pin)) {
      if (k == "TESSERA_CUDA_COMPUTE_SHARE") {
        text += k + "=" + (share_now > 0 ? std::to_string(share_now) : v) + "\n";
        if (pin.compute_limit_percent > pin.compute_share_percent) {
          text += "TESSERA_CUDA_COMPUTE_GUARANTEE=" + v + "\n";
        }
      } else if (k.starts_with("TESSERA_CUDA_")) {
        text += k + "=" + v + "\n";
      }
    }
  }
  return text;
}

std::map<std::string, int> burstShares(const std::vector<BurstSharer>& sharers) {
  std::map<std::string, int> now;
  int free = 100;
  for (const BurstSharer& s : sharers) {
    now[s.task] = s.guarantee;
    free -= s.guarantee;
  }
  // Water filling, in whole percents: each round splits what is free among those still under
  // their limit by their guarantees; one that reaches its limit leaves the rest to the others.
  while (free > 0) {
    int64_t weight = 0;
    for (const BurstSharer& s : sharers) {
      if (now[s.task] < s.limit) {
        weight += std::max(s.guarantee, 1);
      }
    }
    if (weight == 0) {
      break;
    }
    int given = 0;
    for (const BurstSharer& s : sharers) {
      int& share = now[s.task];
      if (share < s.limit) {
        const int part = static_cast<int>(free * std::max(s.guarantee, 1) / weight);
        const int take = std::min(part, s.limit - share);
        share += take;
        given += take;
      }
    }
    if (given == 0) {  // Less than one percent each: the first ones under their limit get it.
      for (const BurstSharer& s : sharers) {
        if (free - given > 0 && now[s.task] < s.limit) {
          ++now[s.task];
          ++given;
        }
      }
    }
    free -= given;
  }
  return now;
}

core::Status writeLease(const std::string& lease_file, std::chrono::milliseconds valid_for) {
  const std::string text =
      std::to_string(monotonicNs() + int64_t{valid_for.count()} * 1'000'000) + "\n";
  const std::string tmp = lease_file + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return core::unavailable("cannot write " + tmp + ": " + std::strerror(errno));
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), lease_file.c_str()) != 0) {
    return core::unavailable("cannot write " + lease_file + ": " + std::strerror(errno));
  }
  return core::Status::ok();
}

std::string TaskExit::describe() const {
  std::string s;
  if (exit_code >= 0) {
    s = "exited " + std::to_string(exit_code);
  } else {
    s = "killed by signal " + std::to_string(signal);
    if (signal > 0 && signal < NSIG) {
      s += std::string(" (") + ::strsignal(signal) + ")";
    }
  }
  if (oom_killed) {
    s += ", out of memory";
  }
  if (stopped) {
    s += ", stopped";
  }
  return s;
}

struct ProcessRuntime::Impl {
  struct Task {
    std::string id;
    pid_t pid = 0;   // The task's first process (its process group).
    pid_t shim = 0;  // Its parent, our child: pidfd and waitpid are the shim's.
    int pidfd = -1;
    std::string exit_file;  // Where the shim keeps the task's exit status.
    bool container = false;
    Clock::time_point started;
    std::optional<TaskCgroup> cgroup;
    bool stopped = false;
    std::optional<Clock::time_point> kill_at;  // SIGKILL then (after a stop's grace).
  };

  ProcessRuntimeOptions options;
  std::unique_ptr<Containers> containers;  // Tasks with an image.
  OnExit on_exit;
  bool detached = false;
  mutable std::mutex mu;
  std::map<std::string, Task> tasks;  // Running ones.
  int epoll = -1;
  int wake = -1;  // eventfd: a stop deadline changed, or shutting down.
  bool stopping = false;
  std::thread monitor;

  // <work_dir>/.tmp/<id>: a sandboxed task's /tmp, made afresh for each start (root's, 01777,
  // like the node's /tmp) after whatever an earlier run left there is removed.
  core::Result<std::string> freshTmp(const std::string& id) const {
    const std::string parent = options.work_dir + "/.tmp";
    if (::mkdir(parent.c_str(), 0711) != 0 && errno != EEXIST) {
      return core::unavailable("cannot create " + parent + ": " + std::strerror(errno));
    }
    const Fd pfd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (pfd.get() < 0 || ::fstat(pfd.get(), &st) != 0 || st.st_uid != ::geteuid()) {
      return core::unavailable(parent + " is not a folder of this agent's");
    }
    (void)::fchmod(pfd.get(), 0711);
    removeTreeAt(pfd.get(), id);
    if (::mkdirat(pfd.get(), id.c_str(), 0700) != 0) {
      return core::unavailable("cannot create " + parent + "/" + id + ": " + std::strerror(errno));
    }
    const Fd dir(::openat(pfd.get(), id.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.get() < 0 || ::fchmod(dir.get(), 01777) != 0) {
      return core::unavailable("cannot make " + parent + "/" + id +
                               " a /tmp: " + std::strerror(errno));
    }
    return parent + "/" + id;
  }
  // Removes a task's /tmp, if it had one.
  void removeTmp(const std::string& id) const {
    const Fd pfd(::open((options.work_dir + "/.tmp").c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (pfd.get() >= 0) {
      removeTreeAt(pfd.get(), id);
    }
  }

  // Time-sliced shares' caps (docs/agent.md, "Burst limits"): each one's file is
  // <work_dir>/.cuda-caps/<id>/caps, the agent's (the task reads it through a read-only bind of
  // the folder, at kCudaCapsDir), with <id>.share beside it: the pin, read again on adoption.
  // When a share starts or ends, the others on its GPU are given what burstShares says now.
  struct CudaShare {
    GpuPinning pin;
    int now = 0;  // The share its file says.
  };
  std::mutex shares_mu;
  std::map<std::string, CudaShare> shares;  // By task; guarded by shares_mu.

  std::string capsRoot() const { return options.work_dir + "/.cuda-caps"; }

  // Makes the task's caps folder and records its share; the files are written by rebalance.
  core::Result<std::string> addShare(const std::string& id, GpuPinning pin) {
    const std::string root = capsRoot();
    if (::mkdir(root.c_str(), 0711) != 0 && errno != EEXIST) {
      return core::unavailable("cannot create " + root + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      return core::unavailable(root + " is not a folder of this agent's");
    }
    const std::string dir = root + "/" + id;
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (::mkdir(dir.c_str(), 0755) != 0) {
      return core::unavailable("cannot create " + dir + ": " + std::strerror(errno));
    }
    pin.caps_dir = dir;
    const std::string record = pin.uuids.front() + " " + std::to_string(pin.memory_limit_mib) +
                               " " + std::to_string(pin.compute_share_percent) + " " +
                               std::to_string(pin.compute_limit_percent) + "\n" + pin.interposer +
                               "\n";
    if (!writeAgentFile(dir + ".share", record)) {
      return core::unavailable("cannot write " + dir + ".share");
    }
    std::lock_guard lock(shares_mu);
    shares[id] = {std::move(pin), 0};
    rebalanceLocked(shares[id].pin.uuids.front());
    if (shares[id].now == 0) {
      shares.erase(id);
      return core::unavailable("cannot write the CUDA caps in " + dir);
    }
    return dir;
  }

  // The share a restarted agent finds (its record), as it was.
  void adoptShare(const std::string& id) {
    const std::string dir = capsRoot() + "/" + id;
    const std::optional<std::string> record = readAgentFile(dir + ".share");
    if (!record) {
      return;
    }
    std::istringstream in(*record);
    GpuPinning pin;
    std::string uuid;
    in >> uuid >> pin.memory_limit_mib >> pin.compute_share_percent >> pin.compute_limit_percent;
    in.ignore(1);
    std::getline(in, pin.interposer);
    if (!in || uuid.empty()) {
      return;
    }
    pin.mode = GpuPinning::Mode::kFractional;
    pin.uuids = {uuid};
    pin.caps_dir = dir;
    std::lock_guard lock(shares_mu);
    shares[id] = {std::move(pin), -1};  // Written again by the next rebalance.
    rebalanceLocked(uuid);
  }

  void removeShare(const std::string& id) {
    std::lock_guard lock(shares_mu);
    auto it = shares.find(id);
    const std::string dir = capsRoot() + "/" + id;
    std::error_code ec;
    fs::remove_all(dir, ec);
    ::unlink((dir + ".share").c_str());
    if (it == shares.end()) {
      return;
    }
    const std::string uuid = it->second.pin.uuids.front();
    shares.erase(it);
    rebalanceLocked(uuid);
  }

  // Gives every share on `uuid` what burstShares says, rewriting the files that change (whole,
  // by a rename: the interposer never reads half of one). Requires shares_mu.
  void rebalanceLocked(const std::string& uuid) {
    std::vector<BurstSharer> on_gpu;
    for (const auto& [id, s] : shares) {
      if (s.pin.uuids.front() == uuid) {
        on_gpu.push_back({id, s.pin.compute_share_percent, s.pin.compute_limit_percent});
      }
    }
    for (const auto& [id, share] : burstShares(on_gpu)) {
      CudaShare& s = shares[id];
      if (s.now != share && writeAgentFile(s.pin.caps_dir + "/caps", cudaCapsText(s.pin, share))) {
        s.now = share;
      }
    }
  }

  // Starts watching a task's shim. Requires mu.
  void watch(Task t) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = t.pidfd;
    ::epoll_ctl(epoll, EPOLL_CTL_ADD, t.pidfd, &ev);
    tasks.emplace(t.id, std::move(t));
  }

  void killTree(const Task& t, int sig) const {
    ::kill(-t.pid, sig);  // The process group (its own session's).
    // A container's runtime passes a SIGTERM to the container's first process only, as Docker
    // does; sweeping the cgroup with it would signal every process there, the first one twice.
    // A SIGKILL sweeps everything.
    if (t.cgroup && (!t.container || sig == SIGKILL)) {
      for (pid_t p : t.cgroup->pids()) {
        ::kill(p, sig);  // Whatever left the group but not the cgroup.
      }
    }
  }

  void run() {
    while (true) {
      int timeout_ms = -1;
      {
        std::lock_guard lock(mu);
        if (stopping) {
          return;
        }
        const Clock::time_point now = Clock::now();
        for (auto& [id, t] : tasks) {
          if (t.kill_at && *t.kill_at <= now) {
            killTree(t, SIGKILL);
            t.kill_at.reset();
          } else if (t.kill_at) {
            const auto ms =
                std::chrono::duration_cast<std::chrono::milliseconds>(*t.kill_at - now).count();
            timeout_ms = timeout_ms < 0 ? static_cast<int>(ms + 1)
                                        : std::min(timeout_ms, static_cast<int>(ms + 1));
          }
        }
      }
      epoll_event events[16];
      const int n = ::epoll_wait(epoll, events, 16, timeout_ms);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == wake) {
          uint64_t v = 0;
          (void)!::read(wake, &v, sizeof v);
          continue;
        }
        reap(events[i].data.fd);
      }
    }
  }

  // The task whose pidfd is `fd` has exited: collect it, clean up, report.
  void reap(int fd) {
    Task t;
    {
      std::lock_guard lock(mu);
      auto it = std::find_if(tasks.begin(), tasks.end(),
                             [fd](const auto& kv) { return kv.second.pidfd == fd; });
      if (it == tasks.end()) {
        return;
      }
      t = std::move(it->second);
      tasks.erase(it);
    }
    ::epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    int status = 0;
    while (::waitpid(t.shim, &status, 0) < 0 && errno == EINTR) {
    }
    TaskExit e;
    e.run_time = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t.started);
    // The task's own status, as its shim kept it; without it (the shim was killed) the task's
    // fate is unknown: reported as killed.
    bool fenced = false;
    int task_status = 0;
    if (!readExitFile(t.exit_file, task_status, fenced)) {
      task_status = SIGKILL;  // As if WIFSIGNALED with SIGKILL.
    }
    if (WIFEXITED(task_status)) {
      e.exit_code = WEXITSTATUS(task_status);
    } else if (WIFSIGNALED(task_status)) {
      e.signal = WTERMSIG(task_status);
    }
    e.stopped = t.stopped || fenced;
    ::unlink((options.work_dir + "/" + t.id + "/shim").c_str());  // Nothing left to adopt.
    // The first process is gone: so is the rest of its tree.
    killTree(t, SIGKILL);
    containers->cleanup(t.id);  // Its container's remains, if it ran one.
    removeTmp(t.id);
    removeShare(t.id);  // Its GPU's time goes back to the others.
    if (t.cgroup) {
      e.oom_killed = t.cgroup->oomKills() > 0;
      (void)options.cgroups->remove(*t.cgroup);
    }
    on_exit(t.id, e);
  }
};

ProcessRuntime::ProcessRuntime(ProcessRuntimeOptions options, OnExit on_exit)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (impl_->options.container.dir.empty()) {
    impl_->options.container.dir = impl_->options.work_dir + "/containers";
  }
  impl_->containers = std::make_unique<Containers>(impl_->options.container);
  impl_->on_exit = std::move(on_exit);
  impl_->epoll = ::epoll_create1(EPOLL_CLOEXEC);
  impl_->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = impl_->wake;
  ::epoll_ctl(impl_->epoll, EPOLL_CTL_ADD, impl_->wake, &ev);
  impl_->monitor = std::thread([this] { impl_->run(); });
}

ProcessRuntime::~ProcessRuntime() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  const uint64_t one = 1;
  (void)!::write(impl_->wake, &one, sizeof one);
  impl_->monitor.join();
  for (auto& [id, t] : impl_->tasks) {
    if (impl_->detached) {
      ::close(t.pidfd);  // The shim keeps watching it; the next agent adopts it.
      continue;
    }
    impl_->killTree(t, SIGKILL);
    int status = 0;
    ::waitpid(t.shim, &status, 0);
    ::close(t.pidfd);
    impl_->containers->cleanup(id);
    impl_->removeTmp(id);
    if (t.cgroup) {
      (void)impl_->options.cgroups->remove(*t.cgroup);
    }
  }
  ::close(impl_->wake);
  ::close(impl_->epoll);
}

std::string ProcessRuntime::taskDir(const std::string& id) const {
  return impl_->options.work_dir + "/" + id;
}

std::optional<pid_t> ProcessRuntime::pidOf(const std::string& id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->tasks.find(id);
  return it == impl_->tasks.end() ? std::nullopt : std::optional<pid_t>(it->second.pid);
}

std::vector<std::string> ProcessRuntime::running() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [id, t] : impl_->tasks) {
    out.push_back(id);
  }
  return out;
}

namespace {

// A task started again at a new generation (a retry, a placement anew) keeps the earlier one's
// logs beside its own: stdout.log and stderr.log become stdout.<generation>.log and
// stderr.<generation>.log, the last kKeptLogs generations' of them.
constexpr size_t kKeptLogs = 8;

void keepEarlierLogs(const std::string& dir, const std::string& tag) {
  // The generation whose logs these are: the agent's file (a task's user cannot make one).
  const std::optional<std::string> record = readAgentFile(dir + "/logs-generation");
  (void)writeAgentFile(dir + "/logs-generation", tag + "\n");
  if (!record) {
    return;
  }
  std::string earlier = record->substr(0, record->find('\n'));
  if (earlier.empty() || earlier == tag ||
      earlier.find_first_not_of("0123456789") != std::string::npos) {
    return;
  }
  for (const char* stream : {"stdout", "stderr"}) {
    // rename() replaces a name the task's user may have put there; it never follows it.
    (void)::rename((dir + "/" + stream + ".log").c_str(),
                   (dir + "/" + stream + "." + earlier + ".log").c_str());
  }
  // The oldest go past kKeptLogs generations.
  std::vector<std::pair<fs::file_time_type, fs::path>> kept;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("stdout.") && name.ends_with(".log") && name != "stdout.log" &&
        e.is_regular_file(ec) && !e.is_symlink(ec)) {
      kept.emplace_back(e.last_write_time(ec), e.path());
    }
  }
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + kKeptLogs < kept.size(); ++i) {
    const std::string gen = kept[i].second.filename().string().substr(7);  // "<gen>.log".
    fs::remove(kept[i].second, ec);
    fs::remove(fs::path(dir) / ("stderr." + gen), ec);
  }
}

}  // namespace

bool ProcessRuntime::needsPull(const TaskSpec& spec) const {
  return Containers::pullsFromRegistry(spec);
}

core::Status ProcessRuntime::pull(const TaskSpec& spec) { return impl_->containers->pull(spec); }

core::Status ProcessRuntime::start(const TaskSpec& spec) {
  if (!plainFileName(spec.id)) {
    return core::invalidArgument("task id '" + spec.id + "' is not a plain name");
  }
  const bool container = !spec.container.image.empty();
  if ((spec.command.empty() && !container) || (!spec.command.empty() && spec.command[0].empty())) {
    return core::invalidArgument("task " + spec.id + ": no command");
  }
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->tasks.contains(spec.id)) {
      return core::Status(core::StatusCode::kAlreadyExists,
                          "task " + spec.id + " is already running");
    }
  }
  const std::string where = "task " + spec.id;
  // Everything the child needs is prepared here: after fork it may only make system calls.
  const std::string dir = taskDir(spec.id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return core::unavailable(where + ": cannot create " + dir + ": " + ec.message());
  }
  // The task's own (identityOf gives it to the task's user): nobody else may enter it.
  if (::chmod(dir.c_str(), 0700) != 0) {
    return core::unavailable(where + ": cannot chmod " + dir + ": " + std::strerror(errno));
  }
  TESSERA_ASSIGN_OR_RETURN(const Identity who, identityOf(spec.user, dir, where));
  // The logs are the task's files, in a folder its user owns (an earlier generation of the task
  // ran there): opened without following a link, and only a plain file with one name is given
  // to the user, so no file of root's can be had by linking it here.
  auto open_log = [&](const char* name) {
    Fd fd(::open((dir + "/" + name).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
                 0640));
    struct stat st {};
    if (fd.get() >= 0 &&
        (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)) {
      errno = EPERM;
      return Fd(-1);
    }
    if (fd.get() >= 0 && who.switch_user) {
      (void)!::fchown(fd.get(), who.uid, who.gid);
    }
    return fd;
  };
  keepEarlierLogs(dir, spec.tag);
  const Fd out = open_log("stdout.log");
  const Fd err = open_log("stderr.log");
  if (out.get() < 0 || err.get() < 0) {
    return core::unavailable(where + ": cannot open its logs in " + dir + ": " +
                             std::strerror(errno));
  }
  if (spec.rendezvous.task_count > 1) {
    // The agent's file, readable by the task: a name the task's user left there (a link, say) is
    // removed first, and the new file is made only if nothing took the name meanwhile.
    const std::string hostfile = dir + "/hostfile";
    (void)::unlink(hostfile.c_str());
    Fd fd(::open(hostfile.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    const std::string text = hostfileText(spec.rendezvous);
    if (fd.get() < 0 || ::fchmod(fd.get(), 0644) != 0 ||
        ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      return core::unavailable(where + ": cannot write its hostfile in " + dir + ": " +
                               std::strerror(errno));
    }
  }
  std::vector<std::string> env = taskEnvironment(spec, impl_->options.path, dir, who);
  // A time-sliced share in a view (a container, or a sandbox): its caps in a file of the agent's,
  // rewritten as bursts on its GPU start and end. Given back if the task does not start.
  const bool time_sliced = !cudaCapsText(spec.gpus).empty();
  std::string caps_dir;
  if ((container || impl_->options.sandbox) && time_sliced) {
    auto made = impl_->addShare(spec.id, spec.gpus);
    if (!made.isOk()) {
      return made.status().withContext(where);
    }
    caps_dir = *made;
  }
  struct ShareRelease {
    Impl* impl;
    std::string id;
    bool armed;
    ~ShareRelease() {
      if (armed) {
        impl->removeShare(id);
      }
    }
  } release{impl_.get(), spec.id, !caps_dir.empty()};
  // A sandboxed share where the node's driver is known: its view preloads the stand-in, and so
  // does the variable (planSandbox makes the same choice).
  const std::string stand_in =
      impl_->options.sandbox && !container && !impl_->options.cuda_driver.empty() && time_sliced
          ? driverStandIn(spec.gpus.interposer)
          : "";
  for (std::string& kv : env) {
    if (!stand_in.empty() && kv.starts_with("LD_PRELOAD=")) {
      kv = preloadWithStandIn(kv, spec.gpus.interposer, stand_in);
    }
  }
  std::vector<std::string> args = spec.command;
  // Who the child becomes before exec: a container's runtime runs as the agent's user and puts
  // the container's process under the task's user itself.
  Identity run_as = who;
  if (container) {
    TaskSpec with_caps = spec;
    with_caps.gpus.caps_dir = caps_dir;
    auto launch = impl_->containers->prepare(with_caps, env, who.uid, who.gid);
    if (!launch.isOk()) {
      return launch.status();
    }
    args = std::move(launch).value();
    run_as.switch_user = false;
    // The task's variables are in the bundle; the runtime itself gets none of them (an
    // interposer in LD_PRELOAD is for the workload, not for runc).
    env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"};
  } else {
    std::string path = impl_->options.path;
    if (auto it = spec.env.find("PATH"); it != spec.env.end()) {
      path = it->second;
    }
    auto found = findExecutable(spec.command[0], path);
    if (!found.isOk()) {
      return found.status().withContext(where);
    }
    args[0] = std::move(found).value();
  }
  const std::string exe = args[0];
  if (!container) {
    args[0] = spec.command[0];  // argv[0] as given.
  }
  const std::vector<char*> envp = cStrings(env);
  const std::vector<char*> argv = cStrings(args);
  // Device nodes: their numbers, for the devices rule.
  CgroupLimits limits = spec.limits;
  for (const std::string& node : spec.device_nodes) {
    struct stat st {};
    if (::stat(node.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
      return core::failedPrecondition(where + ": device node " + node +
                                      " is not a character device");
    }
    limits.devices.push_back({major(st.st_rdev), minor(st.st_rdev)});
  }
  if (container) {
    // The runtime writes the container's device rules in the container's own group, under the
    // task's: a rule there may allow only what its parent allows, and runc's defaults (mknod of
    // any device, which opening still needs a rule for) are more than the task's list.
    limits.restrict_devices = false;
    limits.devices.clear();
  }
  Impl::Task t;
  t.id = spec.id;
  t.container = container;
  if (impl_->options.cgroups != nullptr) {
    auto g = impl_->options.cgroups->create(spec.id, limits);
    if (!g.isOk()) {
      if (container) {
        impl_->containers->cleanup(spec.id);
      }
      return g.status().withContext(where);
    }
    t.cgroup = std::move(g).value();
  }
  // From here on a failure must also remove the cgroup (and the container's bundle).
  auto fail = [&](core::Status s) {
    if (container) {
      impl_->containers->cleanup(spec.id);
    }
    if (t.cgroup) {
      (void)impl_->options.cgroups->remove(*t.cgroup);
    }
    return s;
  };
  const std::vector<std::string> join_paths =
      t.cgroup ? t.cgroup->joinPaths() : std::vector<std::string>{};
  std::vector<const char*> joins;
  joins.reserve(join_paths.size());
  for (const std::string& p : join_paths) {
    joins.push_back(p.c_str());
  }
  // Where the shim finds a container's processes when it must kill them itself (fencing).
  std::vector<std::string> kill_paths;
  if (container && t.cgroup) {
    for (const std::string& d : t.cgroup->dirs) {
      kill_paths.push_back(d + "/" + Containers::cgroupName(spec.id) + "/cgroup.procs");
    }
  }
  std::vector<const char*> kill_procs;
  for (const std::string& p : kill_paths) {
    kill_procs.push_back(p.c_str());
  }
  kill_procs.push_back(nullptr);
  // The task's own view of the node (agent/sandbox.h): its /tmp is made afresh, and what it
  // needs from under /tmp and /dev/shm is carried in.
  const bool sandboxed = impl_->options.sandbox && !container;
  SandboxPlan plan;
  if (sandboxed) {
    auto tmp = impl_->freshTmp(spec.id);
    if (!tmp.isOk()) {
      return fail(tmp.status().withContext(where));
    }
    SandboxInput in;
    in.tmp_dir = *tmp;
    in.user = who.switch_user ? who.user : "";
    in.uid = who.uid;
    in.gid = who.gid;
    in.home = dir;
    in.memory_limit_mib = limits.memory_mib;
    in.mps_client = spec.gpus.mode == GpuPinning::Mode::kMps;
    in.keep = {dir, spec.credentials_dir, spec.gpus.interposer, spec.gpus.mps_pipe_directory};
    // A time-sliced share: the interposer in /etc/ld.so.preload and its caps in a read-only
    // file, so that a task that clears LD_PRELOAD or sets the variables is still held.
    in.cuda_caps_dir = caps_dir;
    if (!in.cuda_caps_dir.empty()) {
      in.cuda_interposer = spec.gpus.interposer;
      in.cuda_driver = stand_in.empty() ? "" : impl_->options.cuda_driver;
      if (!stand_in.empty()) {
        in.keep.push_back(stand_in);
      }
    }
    in.keep.insert(in.keep.end(), spec.device_nodes.begin(), spec.device_nodes.end());
    if (t.cgroup) {
      in.cgroup_dirs = t.cgroup->dirs;
      in.cgroup_view_roots = t.cgroup->view_roots;
    }
    auto planned = planSandbox(in);
    if (!planned.isOk()) {
      impl_->removeTmp(spec.id);
      return fail(planned.status().withContext(where));
    }
    plan = std::move(planned).value();
  }
  const std::string exit_file = dir + "/exit";
  const std::string exit_tmp_file = dir + "/exit.tmp";
  const pid_t agent_pid = ::getpid();
  const char* credentials = spec.credentials_dir.empty() ? nullptr : spec.credentials_dir.c_str();
  const std::string credentials_root =
      spec.credentials_dir.empty() ? "" : fs::path(spec.credentials_dir).parent_path().string();
  ::unlink(exit_file.c_str());  // A previous generation's.
  const char* lease =
      impl_->options.lease_file.empty() ? nullptr : impl_->options.lease_file.c_str();
  const int64_t fence_grace_ns = impl_->options.fence_grace.count() * 1'000'000;
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    return fail(core::unavailable(where + ": pipe: " + std::strerror(errno)));
  }
  const Fd report_read(report[0]);
  const pid_t shim = ::fork();
  if (shim == 0) {
    // The shim, then the task: async-signal-safe calls only.
    const int w = report[1];
    ::setsid();
    // A sandboxed task's first process is pid 1 of a PID namespace of its own: an init of ours
    // that passes its command's status to the shim through this pipe.
    int status_pipe[2] = {-1, -1};
    if (sandboxed && ::unshare(CLONE_NEWPID) != 0) {
      childFail(w, kSandboxStepBase + kSandboxNamespaces);
    }
    if (sandboxed && ::pipe2(status_pipe, O_CLOEXEC) != 0) {
      childFail(w, 8);
    }
    const pid_t task = ::fork();
    if (task < 0) {
      childFail(w, 8);
    }
    if (task > 0) {
      const ChildMsg m{kPid, task, 0, 0};
      (void)!::write(w, &m, sizeof m);
      // Nothing of the agent's stays open in the shim (sockets, the store, the pipe).
      closeAllBut(status_pipe[0], -1, -1);
      runShim(task, status_pipe[0], lease, exit_file.c_str(), exit_tmp_file.c_str(), fence_grace_ns,
              kill_procs.data(), credentials,
              credentials_root.empty() ? nullptr : credentials_root.c_str(), agent_pid);
    }
    ::setpgid(0, 0);  // Its own process group, which stop() signals.
    // No descriptor of the agent's (sockets, the store) reaches the task. All but the three it
    // needs until exec are closed now rather than at exec: joining a cgroup can wait (an RCU
    // grace period), and meanwhile a copy of, say, the server's store lock would keep a
    // restarted server out after a crash.
    closeAllBut(w, out.get(), err.get(), status_pipe[1]);
    ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
    for (const char* p : joins) {
      const int fd = ::open(p, O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) {
        childFail(w, 1);
      }
      ::close(fd);
    }
    if (sandboxed) {
      int step = 0;
      const int e = enterSandbox(plan, &step);
      if (e != 0) {
        errno = e;
        childFail(w, kSandboxStepBase + step);
      }
      const pid_t command = ::fork();
      if (command < 0) {
        childFail(w, 8);
      }
      if (command > 0) {
        // The init keeps nothing of the task's or the agent's open: the pipe closes when the
        // command has exec'd, and its logs are the command's.
        ::close(w);
        ::close(out.get());
        ::close(err.get());
        for (int fd = 0; fd < 3; ++fd) {
          ::close(fd);
        }
        runTaskInit(command, status_pipe[1]);
      }
    }
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd < 0) {
      childFail(w, 2);
    }
    ::dup2(null_fd, 0);
    ::dup2(out.get(), 1);
    ::dup2(err.get(), 2);
    if (::chdir(dir.c_str()) != 0) {
      childFail(w, 3);
    }
    if (run_as.switch_user) {
      if (::setgroups(1, &run_as.gid) != 0) {
        childFail(w, 4);
      }
      if (::setgid(run_as.gid) != 0) {
        childFail(w, 5);
      }
      if (::setuid(run_as.uid) != 0) {
        childFail(w, 6);
      }
    }
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) {
      ::signal(sig, SIG_DFL);
    }
    ::execve(exe.c_str(), argv.data(), envp.data());
    childFail(w, 7);
  }
  const int fork_errno = errno;
  ::close(report[1]);
  if (shim < 0) {
    return fail(core::unavailable(where + ": fork: " + std::strerror(fork_errno)));
  }
  // The pipe carries the task's pid (from the shim) and, if the task could not get to exec,
  // why; it closes once the shim has let go of it and the task has exec'd (or died).
  pid_t task = 0;
  std::optional<ChildMsg> error;
  while (true) {
    ChildMsg m;
    const ssize_t got = ::read(report_read.get(), &m, sizeof m);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got != static_cast<ssize_t>(sizeof m)) {
      break;
    }
    if (m.kind == kPid) {
      task = m.pid;
    } else {
      error = m;
    }
  }
  if (error || task <= 0) {
    if (task > 0) {
      ::kill(-task, SIGKILL);
      ::kill(task, SIGKILL);
    }
    int status = 0;
    ::waitpid(shim, &status, 0);
    const int step = error ? error->step : 8;
    const int err_no = error ? error->err : EIO;
    if (sandboxed) {
      impl_->removeTmp(spec.id);
    }
    const std::string what = step >= kSandboxStepBase ? sandboxStepName(step - kSandboxStepBase)
                             : step > 0 && step < static_cast<int>(std::size(kSteps))
                                 ? kSteps[step]
                                 : "starting its process";
    return fail(core::failedPrecondition(where + ": cannot start '" + args[0] + "': " + what +
                                         ": " + std::strerror(err_no)));
  }
  t.pid = task;
  t.shim = shim;
  t.exit_file = exit_file;
  t.pidfd = pidfdOpen(shim);
  t.started = Clock::now();
  if (t.pidfd < 0) {
    const int e = errno;
    impl_->killTree(t, SIGKILL);
    int status = 0;
    ::waitpid(shim, &status, 0);
    impl_->removeTmp(spec.id);
    return fail(core::unavailable(where + ": pidfd_open: " + std::strerror(e) +
                                  " (Linux 5.3 or later is needed)"));
  }
  // What a later runtime needs to adopt it: the shim (and its start time, against pid reuse),
  // the task's process group, and the caller's tag.
  (void)writeAgentFile(dir + "/shim", std::to_string(shim) + " " + std::to_string(task) + " " +
                                          std::to_string(processStartTime(shim)) + "\n" + spec.tag +
                                          "\n");
  release.armed = false;  // The task runs: its share goes when it ends (reap).
  std::lock_guard lock(impl_->mu);
  impl_->watch(std::move(t));
  return core::Status::ok();
}

void ProcessRuntime::detach() {
  std::lock_guard lock(impl_->mu);
  impl_->detached = true;
}

std::vector<AdoptedTask> ProcessRuntime::adopt() {
  std::vector<AdoptedTask> out;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(impl_->options.work_dir, ec)) {
    const std::string id = entry.path().filename().string();
    const std::string dir = entry.path().string();
    // Only a record the agent wrote: a task's user, who owns the folder, cannot forge one (it
    // names the processes a restarted agent watches and kills).
    const std::optional<std::string> record = readAgentFile(dir + "/shim");
    if (!entry.is_directory(ec) || !plainFileName(id) || !record) {
      continue;
    }
    std::istringstream rec(*record);
    pid_t shim = 0;
    pid_t task = 0;
    uint64_t start_time = 0;
    std::string tag;
    rec >> shim >> task >> start_time;
    rec.ignore(1);
    std::getline(rec, tag);
    {
      std::lock_guard lock(impl_->mu);
      if (impl_->tasks.contains(id)) {
        continue;
      }
    }
    Impl::Task t;
    t.id = id;
    t.pid = task;
    t.shim = shim;
    t.exit_file = dir + "/exit";
    if (impl_->options.cgroups != nullptr) {
      TaskCgroup g = impl_->options.cgroups->existing(id);
      if (!g.dirs.empty()) {
        t.cgroup = std::move(g);
      }
    }
    // The shim writes the exit file just before it exits: with the file there, the task ended.
    const bool alive = shim > 0 && processStartTime(shim) == start_time && start_time != 0 &&
                       !agentFileExists(t.exit_file);
    if (alive) {
      t.pidfd = pidfdOpen(shim);
    }
    if (t.pidfd >= 0) {
      t.started = Clock::now();
      {
        std::lock_guard lock(impl_->mu);
        impl_->watch(std::move(t));
      }
      impl_->adoptShare(id);
      out.push_back({id, tag, std::nullopt});
      continue;
    }
    // It ended while no agent watched it: its shim kept the status (or, if the shim itself was
    // killed, nobody did: reported as killed). Whatever is left of it goes.
    TaskExit e;
    bool fenced = false;
    int status = 0;
    if (!readExitFile(t.exit_file, status, fenced)) {
      status = SIGKILL;
    }
    if (WIFEXITED(status)) {
      e.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      e.signal = WTERMSIG(status);
    }
    e.stopped = fenced;
    impl_->containers->cleanup(id);
    impl_->removeTmp(id);
    impl_->removeShare(id);
    if (t.cgroup) {
      e.oom_killed = t.cgroup->oomKills() > 0;
      (void)impl_->options.cgroups->remove(*t.cgroup);
    }
    ::unlink((dir + "/shim").c_str());
    int shim_status = 0;
    (void)::waitpid(shim, &shim_status, WNOHANG);  // Reaped if it was ours (a runtime in this
                                                   // process before); else init reaps it.
    out.push_back({id, tag, e});
  }
  return out;
}

core::Status ProcessRuntime::stop(const std::string& id, std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->tasks.find(id);
    if (it == impl_->tasks.end()) {
      return core::notFound("task " + id + " is not running");
    }
    Impl::Task& t = it->second;
    t.stopped = true;
    impl_->killTree(t, SIGTERM);
    const Clock::time_point at = Clock::now() + grace;
    if (!t.kill_at || at < *t.kill_at) {
      t.kill_at = at;
    }
  }
  const uint64_t one = 1;
  (void)!::write(impl_->wake, &one, sizeof one);
  return core::Status::ok();
}

}  // namespace tessera::agent
