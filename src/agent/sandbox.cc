#include "agent/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/exec_util.h"

namespace tessera::agent {
namespace {

// "/proc/self/fd/<fd>" in `buf` (32 bytes): a path that names what the descriptor is, so a
// mount goes exactly there (never through a link someone swapped into a path meanwhile).
const char* fdPath(char (&buf)[32], int fd) {
  static constexpr char kPrefix[] = "/proc/self/fd/";
  size_t n = 0;
  for (; kPrefix[n] != '\0'; ++n) {
    buf[n] = kPrefix[n];
  }
  char digits[12];
  int nd = 0;
  auto u = static_cast<unsigned>(fd);
  do {
    digits[nd++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0 && nd < 12);
  while (nd > 0) {
    buf[n++] = digits[--nd];
  }
  buf[n] = '\0';
  return buf;
}

int bindFd(int source, int target) {
  char from[32];
  char to[32];
  return ::mount(fdPath(from, source), fdPath(to, target), nullptr, MS_BIND | MS_REC, nullptr);
}

// Walks `rel` below the folder `dir_fd`, making what is missing (folders of root's, mode 0711;
// for the last component an empty file when `dir` is false), never following a link. Returns
// an O_PATH descriptor of the last component, or -1 with errno. Async-signal-safe.
int makeMountPoint(int dir_fd, const char* rel, bool dir) {
  int cur = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  const char* p = rel;
  while (cur >= 0) {
    while (*p == '/') {
      ++p;
    }
    if (*p == '\0') {
      return cur;
    }
    char name[256];
    size_t len = 0;
    while (p[len] != '\0' && p[len] != '/') {
      if (len + 1 >= sizeof name) {
        ::close(cur);
        errno = ENAMETOOLONG;
        return -1;
      }
      name[len] = p[len];
      ++len;
    }
    name[len] = '\0';
    p += len;
    while (*p == '/') {
      ++p;
    }
    const bool last = *p == '\0';
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.')) {
      ::close(cur);
      errno = EINVAL;
      return -1;
    }
    int next = -1;
    if (!last || dir) {
      if (::mkdirat(cur, name, 0711) == 0 || errno == EEXIST) {
        next = ::openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
    } else {
      if (::mknodat(cur, name, S_IFREG | 0600, 0) == 0 || errno == EEXIST) {
        next = ::openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st {};
        if (next >= 0 && (::fstat(next, &st) != 0 || !S_ISREG(st.st_mode))) {
          ::close(next);
          next = -1;
          errno = EEXIST;
        }
      }
    }
    const int saved = errno;
    ::close(cur);
    errno = saved;
    cur = next;
  }
  return -1;
}

// Writes `text` to a new file `name` in the folder `dir_fd`, mode 0644.
// `from` bound at `to`, read-only (system calls only).
bool bindReadOnly(const char* from, const char* to) {
  return ::mount(from, to, nullptr, MS_BIND, nullptr) == 0 &&
         ::mount(nullptr, to, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) == 0;
}

bool writeNew(int dir_fd, const char* name, const std::string& text) {
  const int fd = ::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return false;
  }
  const bool whole = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return whole;
}

int failAt(int* step, int at) {
  const int e = errno != 0 ? errno : EIO;
  *step = at;
  return e;
}

// A passwd line of an existing user, or the one given.
std::string passwdLine(const char* name, uid_t uid, gid_t gid, const std::string& home,
                       const char* shell) {
  return std::string(name) + ":x:" + std::to_string(uid) + ":" + std::to_string(gid) + "::" + home +
         ":" + shell + "\n";
}

std::string groupName(gid_t gid) {
  group gr{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return gr.gr_name;
  }
  return "";
}

}  // namespace

const char* sandboxStepName(int step) {
  switch (step) {
    case kSandboxNamespaces:
      return "making its namespaces";
    case kSandboxPropagation:
      return "keeping its mounts from the node's";
    case kSandboxOpen:
      return "opening what it keeps of the node";
    case kSandboxStage:
      return "writing its /etc/passwd and /etc/group";
    case kSandboxCuda:
      return "binding its /etc/ld.so.preload and CUDA caps";
    case kSandboxTmp:
      return "mounting its /tmp";
    case kSandboxShm:
      return "mounting its /dev/shm";
    case kSandboxKeep:
      return "binding its folders into its view";
    case kSandboxCgroups:
      return "showing it its own cgroups only";
    case kSandboxProc:
      return "mounting its /proc";
    default:
      return "setting up its view of the node";
  }
}

core::Result<SandboxPlan> planSandbox(const SandboxInput& in) {
  namespace fs = std::filesystem;
  SandboxPlan plan;
  plan.tmp_dir = in.tmp_dir;
  plan.private_shm = !in.mps_client;
  const int64_t shm_kib = in.memory_limit_mib > 0
                              ? in.memory_limit_mib * 1024
                              : ::sysconf(_SC_PHYS_PAGES) / 2 * (::sysconf(_SC_PAGESIZE) / 1024);
  plan.shm_options = "mode=1777,size=" + std::to_string(std::max<int64_t>(shm_kib, 1024)) + "k";
  plan.passwd = passwdLine("root", 0, 0, "/root", "/bin/sh");
  plan.group = "root:x:0:\n";
  if (!in.user.empty() && in.uid != 0 && in.uid != 65534) {
    plan.passwd += passwdLine(in.user.c_str(), in.uid, in.gid, in.home, "/bin/sh");
    const std::string g = groupName(in.gid);
    if (in.gid != 0 && in.gid != 65534) {
      plan.group += (g.empty() ? in.user : g) + ":x:" + std::to_string(in.gid) + ":\n";
    }
  }
  plan.passwd += passwdLine("nobody", 65534, 65534, "/nonexistent", "/usr/sbin/nologin");
  plan.group += "nogroup:x:65534:\n";
  if (!in.cuda_interposer.empty()) {
    if (in.cuda_caps_dir.empty()) {
      return core::invalidArgument("a time-sliced task's view needs the caps of its interposer");
    }
    std::error_code ec;
    if (!fs::is_directory(kCudaCapsDir, ec) || !fs::is_regular_file("/etc/ld.so.preload", ec)) {
      return core::failedPrecondition(
          std::string("the node has no folder ") + kCudaCapsDir +
          " or /etc/ld.so.preload to bind the task's over (the agent makes them at start)");
    }
    std::ifstream node_preload("/etc/ld.so.preload");
    std::ostringstream theirs;
    theirs << node_preload.rdbuf();
    plan.preload = in.cuda_interposer + "\n" + theirs.str();
    plan.cuda_caps_dir = in.cuda_caps_dir;
    const std::string stand_in = driverStandIn(in.cuda_interposer);
    if (!in.cuda_driver.empty() && !stand_in.empty()) {
      if (!fs::is_regular_file(kDriverInView, ec)) {
        return core::failedPrecondition(std::string("the node has no ") + kDriverInView +
                                        " to bind its driver at (the agent makes it at start)");
      }
      plan.cuda_driver = in.cuda_driver;
      plan.cuda_stand_in = stand_in;
      plan.cuda_driver_files = driverFilesBeside(in.cuda_driver);
      plan.preload = stand_in + "\n" + theirs.str();
    }
  }
  // What the task needs from under what its view covers, shortest first: a path under one
  // already bound back comes with it.
  std::vector<std::string> keep;
  for (const std::string& k : in.keep) {
    if (!k.empty() && k[0] == '/') {
      keep.push_back(fs::path(k).lexically_normal().string());
    }
  }
  std::sort(keep.begin(), keep.end(),
            [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  auto under = [](const std::string& path, const std::string& root) {
    return path.size() > root.size() + 1 && path.compare(0, root.size(), root) == 0 &&
           path[root.size()] == '/';
  };
  for (const std::string& k : keep) {
    std::string root;
    for (const char* r : {"/tmp", "/dev/shm"}) {
      if (under(k, r) && (r != std::string("/dev/shm") || plan.private_shm)) {
        root = r;
      }
    }
    if (root.empty() || std::any_of(plan.keeps.begin(), plan.keeps.end(), [&](const auto& kept) {
          return kept.path == k || under(k, kept.path);
        })) {
      continue;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(k, ec);
    if (ec || !fs::exists(st)) {
      continue;  // Nothing there to carry: the task finds nothing there either.
    }
    if (plan.keeps.size() >= SandboxPlan::kMaxKeeps) {
      return core::invalidArgument("more than " + std::to_string(SandboxPlan::kMaxKeeps) +
                                   " paths under /tmp or /dev/shm to carry into the task's view");
    }
    plan.keeps.push_back({k, root, k.substr(root.size() + 1), fs::is_directory(st)});
  }
  if (in.cgroup_dirs.size() > SandboxPlan::kMaxCgroups ||
      in.cgroup_view_roots.size() != in.cgroup_dirs.size()) {
    return core::invalidArgument("the task's cgroups and their view roots do not match");
  }
  for (size_t i = 0; i < in.cgroup_dirs.size(); ++i) {
    const std::string& dir = in.cgroup_dirs[i];
    const std::string& root = in.cgroup_view_roots[i];
    if (!under(dir, root)) {
      return core::invalidArgument("cgroup " + dir + " is not below " + root);
    }
    plan.cgroup_dirs.push_back(dir);
    plan.cgroup_roots.push_back(root);
    plan.cgroup_paths.push_back(dir.substr(root.size() + 1));
  }
  return plan;
}

int enterSandbox(const SandboxPlan& plan, int* step) {
  errno = 0;
  const int flags = CLONE_NEWNS | (plan.private_shm ? CLONE_NEWIPC : 0);
  if (::unshare(flags) != 0) {
    return failAt(step, kSandboxNamespaces);
  }
  // Mounts of the node's reach the task (a dataset mounted later), the task's never leave.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
    return failAt(step, kSandboxPropagation);
  }
  // Everything the view binds back is opened before anything covers it.
  int keep_fds[SandboxPlan::kMaxKeeps];
  int cgroup_fds[SandboxPlan::kMaxCgroups];
  const int tmp_fd = ::open(plan.tmp_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (tmp_fd < 0) {
    return failAt(step, kSandboxOpen);
  }
  for (size_t i = 0; i < plan.keeps.size(); ++i) {
    keep_fds[i] = ::open(plan.keeps[i].path.c_str(), O_PATH | O_CLOEXEC);
    if (keep_fds[i] < 0) {
      return failAt(step, kSandboxOpen);
    }
  }
  for (size_t i = 0; i < plan.cgroup_dirs.size(); ++i) {
    cgroup_fds[i] = ::open(plan.cgroup_dirs[i].c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cgroup_fds[i] < 0) {
      return failAt(step, kSandboxOpen);
    }
  }
  // /etc/passwd and /etc/group from files on a tmpfs that nothing else sees: written, bound,
  // and the tmpfs let go (the binds keep what they show).
  // On a time-sliced share: the agent's caps folder; where the node's driver is known, the
  // driver where only the stand-in looks for it, and the stand-in wherever the driver's files
  // were (all before /tmp is covered, as they may be under it).
  if (!plan.cuda_caps_dir.empty() && !bindReadOnly(plan.cuda_caps_dir.c_str(), kCudaCapsDir)) {
    return failAt(step, kSandboxCuda);
  }
  if (!plan.cuda_stand_in.empty() && !bindReadOnly(plan.cuda_driver.c_str(), kDriverInView)) {
    return failAt(step, kSandboxCuda);
  }
  for (const std::string& file : plan.cuda_driver_files) {
    if (!bindReadOnly(plan.cuda_stand_in.c_str(), file.c_str())) {
      return failAt(step, kSandboxCuda);
    }
  }
  if (::mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=64k") !=
      0) {
    return failAt(step, kSandboxStage);
  }
  {
    const int stage = ::open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (stage < 0 || !writeNew(stage, "passwd", plan.passwd) ||
        !writeNew(stage, "group", plan.group) ||
        ::mount("/tmp/passwd", "/etc/passwd", nullptr, MS_BIND, nullptr) != 0 ||
        ::mount("/tmp/group", "/etc/group", nullptr, MS_BIND, nullptr) != 0) {
      return failAt(step, kSandboxStage);
    }
    // On a time-sliced share: the interposer in every program, and its caps, read-only.
    if (!plan.cuda_caps_dir.empty() &&
        (!writeNew(stage, "preload", plan.preload) ||
         ::mount("/tmp/preload", "/etc/ld.so.preload", nullptr, MS_BIND, nullptr) != 0 ||
         ::mount(nullptr, "/etc/ld.so.preload", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY,
                 nullptr) != 0)) {
      return failAt(step, kSandboxCuda);
    }
    if (::umount2("/tmp", MNT_DETACH) != 0) {
      return failAt(step, kSandboxStage);
    }
    ::close(stage);
  }
  char from[32];
  if (::mount(fdPath(from, tmp_fd), "/tmp", nullptr, MS_BIND, nullptr) != 0 ||
      ::mount(nullptr, "/tmp", nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, nullptr) !=
          0) {
    return failAt(step, kSandboxTmp);
  }
  ::close(tmp_fd);
  if (plan.private_shm &&
      ::mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, plan.shm_options.c_str()) != 0) {
    return failAt(step, kSandboxShm);
  }
  for (size_t i = 0; i < plan.keeps.size(); ++i) {
    const SandboxPlan::Keep& k = plan.keeps[i];
    const int root = ::open(k.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    const int target = root >= 0 ? makeMountPoint(root, k.rel.c_str(), k.dir) : -1;
    if (target < 0 || bindFd(keep_fds[i], target) != 0) {
      return failAt(step, kSandboxKeep);
    }
    ::close(target);
    ::close(root);
    ::close(keep_fds[i]);
  }
  // Each hierarchy shows this task's group alone, at the path /proc/self/cgroup names: other
  // tasks' names (their tenants') and usage, other agents' on the machine and whatever else
  // has groups there stay out of sight.
  for (size_t i = 0; i < plan.cgroup_dirs.size(); ++i) {
    const char* root = plan.cgroup_roots[i].c_str();
    if (::mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=16k") !=
        0) {
      return failAt(step, kSandboxCgroups);
    }
    const int dir = ::open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    const int target = dir >= 0 ? makeMountPoint(dir, plan.cgroup_paths[i].c_str(), true) : -1;
    if (target < 0 || bindFd(cgroup_fds[i], target) != 0) {
      return failAt(step, kSandboxCgroups);
    }
    ::close(target);
    ::close(dir);
    ::close(cgroup_fds[i]);
  }
  // Last, since the binds above name descriptors through the node's /proc: the task's own.
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0) {
    return failAt(step, kSandboxProc);
  }
  return 0;
}

void runTaskInit(pid_t cmd, int status_fd) {
  // As pid 1 of its namespace, a signal it has no handler for never reaches it (SIGKILL from
  // the agent's namespace aside): the task's processes cannot stop it, and a SIGTERM to the
  // task's process group is for the command. Whatever the agent had is undone.
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    ::signal(sig, SIG_DFL);
  }
  // Never the memory cgroup's victim: its pages are mostly the agent's, shared copy-on-write,
  // and the task's own processes are what went over.
  const int adj = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (adj >= 0) {
    (void)!::write(adj, "-1000", 5);
    ::close(adj);
  }
  while (true) {
    int status = 0;
    const pid_t p = ::waitpid(-1, &status, 0);
    if (p == cmd) {
      (void)!::write(status_fd, &status, sizeof status);
      ::_exit(0);
    }
    if (p < 0 && errno == ECHILD) {
      ::_exit(127);
    }
  }
}

core::Result<std::string> findNodeDriver(const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (flag == "none" || flag.empty()) {
    return std::string();
  }
  if (flag != "auto") {
    const fs::path real = fs::canonical(flag, ec);
    if (ec || !fs::is_regular_file(real, ec) || ::access(real.c_str(), R_OK) != 0) {
      return core::invalidArgument("--cuda-driver '" + flag + "': not a readable file");
    }
    return real.string();
  }
  for (const char* folder : kDriverFolders) {
    const fs::path real = fs::canonical(fs::path("/") / folder / "libcuda.so.1", ec);
    if (!ec && fs::is_regular_file(real, ec) && real.string() != kDriverInView) {
      return real.string();
    }
  }
  return std::string();
}

std::string driverStandIn(const std::string& interposer) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::path(interposer).parent_path() / kDriverStandIn;
  return !interposer.empty() && std::filesystem::is_regular_file(p, ec) ? p.string() : "";
}

std::string preloadWithStandIn(std::string preload, const std::string& interposer,
                               const std::string& stand_in) {
  for (size_t at = interposer.empty() ? std::string::npos : preload.find(interposer);
       at != std::string::npos; at = preload.find(interposer, at + stand_in.size())) {
    preload.replace(at, interposer.size(), stand_in);
  }
  return preload;
}

std::vector<std::string> driverFilesBeside(const std::string& driver) {
  namespace fs = std::filesystem;
  std::vector<std::string> out = {driver};
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(driver).parent_path(), ec)) {
    if (!e.path().filename().string().starts_with("libcuda.so")) {
      continue;
    }
    std::error_code bad;
    const fs::path real = fs::canonical(e.path(), bad);
    if (!bad && fs::is_regular_file(real, bad) &&
        std::find(out.begin(), out.end(), real.string()) == out.end()) {
      out.push_back(real.string());
    }
  }
  return out;
}

core::Status prepareCudaMountPoints(bool driver) {
  std::vector<std::filesystem::path> folders = {kCudaCapsDir};
  std::vector<const char*> files = {"/etc/ld.so.preload"};
  if (driver) {
    folders.push_back(std::filesystem::path(kDriverInView).parent_path());
    files.push_back(kDriverInView);
  }
  std::error_code ec;
  for (const std::filesystem::path& folder : folders) {
    std::filesystem::create_directories(folder, ec);
    if (ec) {
      return core::unavailable("cannot make the folder " + folder.string() + ": " + ec.message());
    }
  }
  for (const char* path : files) {
    // Only where missing: the node's own /etc/ld.so.preload stays as it is.
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
    } else if (errno != EEXIST) {
      return core::unavailable(std::string("cannot make ") + path + ": " + std::strerror(errno));
    }
  }
  return core::Status::ok();
}

core::Status probeSandbox() {
  if (::geteuid() != 0) {
    return core::failedPrecondition("not root");
  }
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return core::unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t child = ::fork();
  if (child == 0) {
    int err = 0;
    if (::unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0 ||
        ::mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=16k") != 0) {
      err = errno;
    } else {
      const pid_t init = ::fork();
      if (init == 0) {
        const int e =
            ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") == 0
                ? 0
                : errno;
        ::_exit(e);
      }
      int status = 0;
      err = init < 0                                                   ? errno
            : ::waitpid(init, &status, 0) == init && WIFEXITED(status) ? WEXITSTATUS(status)
                                                                       : EIO;
    }
    (void)!::write(err_pipe[1], &err, sizeof err);
    ::_exit(0);
  }
  ::close(err_pipe[1]);
  int err = EIO;
  if (child < 0 || ::read(err_pipe[0], &err, sizeof err) != static_cast<ssize_t>(sizeof err)) {
    err = child < 0 ? errno : EIO;
  }
  ::close(err_pipe[0]);
  if (child > 0) {
    int status = 0;
    ::waitpid(child, &status, 0);
  }
  if (err != 0) {
    return core::failedPrecondition(std::string("cannot make a task's namespaces here: ") +
                                    std::strerror(err));
  }
  return core::Status::ok();
}

}  // namespace tessera::agent
