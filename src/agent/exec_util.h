// Small helpers for starting programs from a process with threads: everything a forked child
// needs is prepared before fork, so the child only makes system calls.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tessera::agent {

// The file `command` names: itself if it has a '/', else the first executable of that name in
// `path` (colon-separated). Errors name the command and the path.
core::Result<std::string> findExecutable(const std::string& command, const std::string& path);

// argv/envp for execve: pointers into `strings` (which must outlive them), then a null.
std::vector<char*> cStrings(std::vector<std::string>& strings);

// Whether `name` can be one path component: not empty, ".", ".." or containing '/', and at most
// 200 characters (task ids, cgroup names, GPU UUIDs and user names in folder names).
bool plainFileName(const std::string& name);

// The names in the folder `dir_fd` (not "." or "..").
std::vector<std::string> dirEntries(int dir_fd);

// Removes what the folder `dir_fd` holds, never following a link: each subfolder is opened with
// O_NOFOLLOW and taken back (owner this process's user, mode 0700) before it is emptied, so
// whoever owned it cannot swap anything in it meanwhile. Folders deeper than 32 levels are left.
void removeContents(int dir_fd);

// Removes `name` in the folder `parent_fd` and, if it is a folder, everything in it, as
// removeContents does. Nothing there: nothing to do.
void removeTreeAt(int parent_fd, const std::string& name);

struct UnixUser {
  uid_t uid = 0;
  gid_t gid = 0;
};
// The user's ids; nullopt when there is no such user.
std::optional<UnixUser> lookupUser(const std::string& name);

// Owns one file descriptor: closes it when it goes (-1: none).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace tessera::agent
