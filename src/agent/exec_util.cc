#include "agent/exec_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tessera::agent {

core::Result<std::string> findExecutable(const std::string& command, const std::string& path) {
  if (command.find('/') != std::string::npos) {
    return command;
  }
  size_t start = 0;
  while (start <= path.size()) {
    const size_t colon = std::min(path.find(':', start), path.size());
    const std::string candidate = path.substr(start, colon - start) + "/" + command;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = colon + 1;
  }
  return core::failedPrecondition("command '" + command + "' not found in PATH " + path);
}

std::vector<char*> cStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) {
    out.push_back(s.data());
  }
  out.push_back(nullptr);
  return out;
}

bool plainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.size() <= 200;
}

std::vector<std::string> dirEntries(int dir_fd) {
  std::vector<std::string> out;
  const int copy = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    return out;
  }
  DIR* d = ::fdopendir(copy);
  if (d == nullptr) {
    ::close(copy);
    return out;
  }
  ::rewinddir(d);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") {
      out.push_back(name);
    }
  }
  ::closedir(d);
  return out;
}

namespace {

// Deeper folders are left rather than recursed into without end.
constexpr int kMaxRemoveDepth = 32;

void removeContentsAt(int dir_fd, int depth) {
  for (const std::string& name : dirEntries(dir_fd)) {
    if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno != EISDIR || depth >= kMaxRemoveDepth) {
      continue;
    }
    const Fd sub(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (sub.get() < 0) {
      continue;
    }
    (void)!::fchown(sub.get(), ::geteuid(), ::getegid());
    (void)!::fchmod(sub.get(), 0700);
    removeContentsAt(sub.get(), depth + 1);
    (void)::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);
  }
}

}  // namespace

void removeContents(int dir_fd) { removeContentsAt(dir_fd, 0); }

void removeTreeAt(int parent_fd, const std::string& name) {
  if (::unlinkat(parent_fd, name.c_str(), 0) == 0 || errno != EISDIR) {
    return;
  }
  const Fd dir(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) {
    return;
  }
  (void)!::fchown(dir.get(), ::geteuid(), ::getegid());
  (void)!::fchmod(dir.get(), 0700);
  removeContentsAt(dir.get(), 1);
  (void)::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR);
}

std::optional<UnixUser> lookupUser(const std::string& name) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return UnixUser{pw.pw_uid, pw.pw_gid};
}

}  // namespace tessera::agent
