#include "agent/credentials.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "agent/agent_config.h"
#include "agent/exec_util.h"
#include "protocol/node_protocol.h"

namespace tessera::agent {
namespace {

// [a-z0-9][a-z0-9.-]*: no hidden files, no "." or "..", no path.
bool validName(const std::string& s) {
  return !s.empty() && s.size() <= 64 && s[0] != '.' && s[0] != '-' &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
         });
}

bool validTask(const std::string& task) { return plainFileName(task) && task[0] != '.'; }

core::Status fail(const std::string& what) {
  return core::unavailable("credentials: " + what + ": " + std::strerror(errno));
}

}  // namespace

core::Result<int> CredentialFiles::openRoot() const {
  if (root_.empty()) {
    return core::invalidArgument("credentials: no folder given");
  }
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(root_).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);  // mkdir below says what failed.
  }
  // Made here (mkdir is atomic: nobody else made it first), or found: then it must be ours.
  const bool made = ::mkdir(root_.c_str(), 0700) == 0;
  if (!made && errno != EEXIST) {
    return fail("cannot create " + root_);
  }
  const int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return core::failedPrecondition("credentials: " + root_ +
                                      " is not a folder (a link or a file); remove it, or choose "
                                      "another folder (--credentials-dir)");
    }
    return fail("cannot open " + root_);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    core::Status s = fail("cannot stat " + root_);
    ::close(fd);
    return s;
  }
  if (st.st_uid != ::geteuid()) {
    ::close(fd);
    return core::failedPrecondition(fmt::format(
        "credentials: {} belongs to uid {}, not to this agent's user (uid {}): another user made "
        "it first; remove it, or choose another folder (--credentials-dir)",
        root_, st.st_uid, ::geteuid()));
  }
  if (made) {
    if (::fchmod(fd, 0711) != 0) {
      core::Status s = fail("cannot chmod " + root_);
      ::close(fd);
      return s;
    }
  } else if ((st.st_mode & 07777) != 0711) {
    ::close(fd);
    return core::failedPrecondition(fmt::format(
        "credentials: {} has mode {:04o}, not 0711: the agent keeps credentials only in a folder "
        "of its own that nobody else can list or write; remove it (the agent makes it again), or "
        "choose another folder (--credentials-dir)",
        root_, st.st_mode & 07777));
  }
  return fd;
}

core::Status CredentialFiles::prepare() const {
  TESSERA_ASSIGN_OR_RETURN(const int fd, openRoot());
  ::close(fd);
  return core::Status::ok();
}

core::Result<CredentialFiles::TaskFolder> CredentialFiles::openTaskFolder(
    const std::string& task, const std::string& user) const {
  TaskFolder out{.uid = ::geteuid(), .gid = ::getegid()};
  if (!user.empty()) {
    const std::optional<UnixUser> u = lookupUser(user);
    if (!u) {
      return core::failedPrecondition("credentials: no Unix user '" + user + "'");
    }
    out.uid = u->uid;
    out.gid = u->gid;
  }
  TESSERA_ASSIGN_OR_RETURN(const int root_fd, openRoot());
  const Fd root(root_fd);
  const std::string d = dir(task);
  if (::mkdirat(root.get(), task.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail("mkdir " + d);
  }
  out.fd = ::openat(root.get(), task.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (out.fd < 0) {
    return fail("open " + d);
  }
  // The agent's, so the task cannot put anything in it; the task's group may read it.
  if (::fchown(out.fd, ::geteuid(), user.empty() ? ::getegid() : out.gid) != 0 ||
      ::fchmod(out.fd, user.empty() ? 0700 : 0750) != 0) {
    core::Status s = fail("chown " + d);
    ::close(out.fd);
    return s;
  }
  return out;
}

namespace {

// Writes `content` to a new file `name` in `dir_fd` (mode 0400, `uid`:`gid`).
bool writeNewFile(int dir_fd, const std::string& name, const std::string& content, uid_t uid,
                  gid_t gid) {
  ::unlinkat(dir_fd, name.c_str(), 0);
  const Fd fd(
      ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400));
  if (fd.get() < 0) {
    return false;
  }
  bool ok = ::fchown(fd.get(), uid, gid) == 0 && ::fchmod(fd.get(), 0400) == 0;
  for (size_t done = 0; ok && done < content.size();) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  return ok;
}

// A folder `name` in `dir_fd` (made if new), the agent's with group `gid`, 0750, opened.
int openFolder(int dir_fd, const std::string& name, gid_t gid) {
  if (::mkdirat(dir_fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
    return -1;
  }
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && (::fchown(fd, ::geteuid(), gid) != 0 || ::fchmod(fd, 0750) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

core::Status CredentialFiles::write(const std::string& task, const std::string& name,
                                    const std::string& content, const std::string& user) const {
  if (!validName(name) || !validTask(task)) {
    return core::invalidArgument("credentials: bad file name '" + name + "' for task '" + task +
                                 "'");
  }
  TESSERA_ASSIGN_OR_RETURN(const TaskFolder tf, openTaskFolder(task, user));
  const Fd folder(tf.fd);
  const std::string path = dir(task) + "/" + name;
  const std::string tmp = "." + name + ".new";  // Never a valid name: no credential's.
  if (!writeNewFile(folder.get(), tmp, content, tf.uid, tf.gid) ||
      ::renameat(folder.get(), tmp.c_str(), folder.get(), name.c_str()) != 0) {
    core::Status s = fail("write " + path);
    ::unlinkat(folder.get(), tmp.c_str(), 0);
    return s;
  }
  return core::Status::ok();
}

core::Status CredentialFiles::writeVolume(const std::string& task, const std::string& name,
                                          const std::map<std::string, std::string>& files,
                                          const std::string& user) const {
  if (!validName(name) || !validTask(task)) {
    return core::invalidArgument("credentials: bad volume name '" + name + "' for task '" + task +
                                 "'");
  }
  for (const auto& [file, content] : files) {
    if (!protocol::isVolumeFilePath(file)) {
      return core::invalidArgument("credentials: volume " + name + ": bad file name '" + file +
                                   "'");
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const TaskFolder tf, openTaskFolder(task, user));
  const Fd folder(tf.fd);
  const std::string where = dir(task) + "/" + name;
  const Fd volume(openFolder(folder.get(), name, tf.gid));
  if (volume.get() < 0) {
    return fail("mkdir " + where);
  }
  // The new version, complete, in a folder of its own.
  static std::atomic<uint64_t> versions{0};
  const std::string version =
      fmt::format("..v{}-{}", std::chrono::steady_clock::now().time_since_epoch().count(),
                  versions.fetch_add(1));
  {
    const Fd v(openFolder(volume.get(), version, tf.gid));
    if (v.get() < 0) {
      return fail("mkdir " + where + "/" + version);
    }
    for (const auto& [file, content] : files) {
      // Its folders first (isVolumeFilePath: no "..", no empty component).
      std::vector<std::string> parts;
      for (size_t at = 0;;) {
        const size_t slash = file.find('/', at);
        parts.push_back(file.substr(at, slash - at));
        if (slash == std::string::npos) {
          break;
        }
        at = slash + 1;
      }
      std::vector<Fd> dirs;
      int at = v.get();
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        dirs.emplace_back(openFolder(at, parts[i], tf.gid));
        at = dirs.back().get();
        if (at < 0) {
          removeTreeAt(volume.get(), version);
          return fail("mkdir " + where + "/" + file);
        }
      }
      if (!writeNewFile(at, parts.back(), content, tf.uid, tf.gid)) {
        core::Status s = fail("write " + where + "/" + file);
        removeTreeAt(volume.get(), version);
        return s;
      }
    }
  }
  // ..data points at it now, in one rename; then the top-level names through it.
  ::unlinkat(volume.get(), "..data_tmp", 0);
  if (::symlinkat(version.c_str(), volume.get(), "..data_tmp") != 0 ||
      ::renameat(volume.get(), "..data_tmp", volume.get(), "..data") != 0) {
    core::Status s = fail("link " + where + "/..data");
    removeTreeAt(volume.get(), version);
    return s;
  }
  std::set<std::string> top;
  for (const auto& [file, content] : files) {
    top.insert(file.substr(0, file.find('/')));
  }
  for (const std::string& entry : dirEntries(volume.get())) {
    if (entry.starts_with("..")) {
      if (entry.starts_with("..v") && entry != version) {
        removeTreeAt(volume.get(), entry);  // An older version.
      }
    } else if (!top.contains(entry)) {
      ::unlinkat(volume.get(), entry.c_str(), 0);  // A file the new version no longer has.
    }
  }
  for (const std::string& t : top) {
    const std::string target = "..data/" + t;
    if (::symlinkat(target.c_str(), volume.get(), t.c_str()) != 0 && errno != EEXIST) {
      return fail("link " + where + "/" + t);
    }
  }
  return core::Status::ok();
}

void CredentialFiles::remove(const std::string& task) const {
  if (!validTask(task)) {
    return;
  }
  auto root_fd = openRoot();
  if (!root_fd.isOk()) {
    return;  // Not ours: nothing of ours to remove.
  }
  const Fd root(*root_fd);
  const Fd folder(
      ::openat(root.get(), task.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (folder.get() < 0) {
    (void)::unlinkat(root.get(), task.c_str(), 0);  // Whatever else has the name goes.
    return;
  }
  // Taken back first: a folder an older agent gave to the task's user may still be written to.
  (void)!::fchown(folder.get(), ::geteuid(), ::getegid());
  (void)!::fchmod(folder.get(), 0700);
  removeContents(folder.get());
  (void)::unlinkat(root.get(), task.c_str(), AT_REMOVEDIR);
}

std::vector<std::string> CredentialFiles::list() const {
  std::vector<std::string> out;
  auto root_fd = openRoot();
  if (!root_fd.isOk()) {
    return out;
  }
  const Fd root(*root_fd);
  for (const std::string& name : dirEntries(root.get())) {
    struct stat st {};
    if (validTask(name) && ::fstatat(root.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode)) {
      out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CredentialFiles::removeRootIfEmpty() const {
  if (!root_.empty()) {
    (void)::rmdir(root_.c_str());  // Fails, as it should, while a task's folder is left.
  }
}

std::string CredentialFiles::defaultRoot(const std::string& node, const std::string& work_dir) {
  struct statfs fs {};
  if (::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC &&
      ::access("/dev/shm", W_OK) == 0) {
    // One folder per agent work dir: two agents of the same node name (tests, dev servers) never
    // share one, and a restarted agent finds its own again.
    return "/dev/shm/tessera-" + agentInstance(node, work_dir);
  }
  return work_dir + "/credentials";
}

}  // namespace tessera::agent
