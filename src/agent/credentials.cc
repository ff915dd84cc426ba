#include "agent/credentials.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "agent/exec_util.h"

namespace tessera::agent {
namespace {

// [a-z0-9][a-z0-9.-]*: no hidden files, no "." or "..", no path.
bool validName(const std::string& s) {
  return !s.empty() && s.size() <= 64 && s[0] != '.' && s[0] != '-' &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
         });
}

core::Status fail(const std::string& what) {
  return core::unavailable("credentials: " + what + ": " + std::strerror(errno));
}

}  // namespace

core::Status CredentialFiles::write(const std::string& task, const std::string& name,
                                    const std::string& content, const std::string& user) const {
  if (!validName(name) || task.empty() || task.find('/') != std::string::npos || task == "." ||
      task == "..") {
    return core::invalidArgument("credentials: bad file name '" + name + "' for task '" + task +
                                 "'");
  }
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (!user.empty()) {
    const std::optional<UnixUser> u = lookupUser(user);
    if (!u) {
      return core::failedPrecondition("credentials: no Unix user '" + user + "'");
    }
    uid = u->uid;
    gid = u->gid;
  }
  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  ::chmod(root_.c_str(), 0711);  // Others may pass through to their own folder, not list.
  const std::string d = dir(task);
  if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
    return fail("mkdir " + d);
  }
  if (::chown(d.c_str(), uid, gid) != 0 || ::chmod(d.c_str(), 0700) != 0) {
    return fail("chown " + d);
  }
  const std::string path = d + "/" + name;
  const std::string tmp = path + ".new";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
  if (fd < 0) {
    return fail("create " + tmp);
  }
  const bool ok = ::fchown(fd, uid, gid) == 0 && ::write(fd, content.data(), content.size()) ==
                                                     static_cast<ssize_t>(content.size());
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    errno = ok ? errno : saved;
    core::Status s = fail("write " + path);
    ::unlink(tmp.c_str());
    return s;
  }
  return core::Status::ok();
}

void CredentialFiles::remove(const std::string& task) const {
  if (task.empty() || task.find('/') != std::string::npos || task == "." || task == "..") {
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir(task), ec);
}

std::string CredentialFiles::defaultRoot(const std::string& node, const std::string& work_dir) {
  struct statfs fs {};
  if (::statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC &&
      ::access("/dev/shm", W_OK) == 0) {
    // One folder per agent work dir: two agents of the same node name (tests, dev servers) never
    // share one, and a restarted agent finds its own again.
    char suffix[17];
    std::snprintf(suffix, sizeof suffix, "%016zx", std::hash<std::string>{}(work_dir));
    return "/dev/shm/tessera-" + node + "-" + std::string(suffix, 8);
  }
  return work_dir + "/credentials";
}

}  // namespace tessera::agent
