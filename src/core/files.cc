#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::core {

std::optional<unsigned> openToOthers(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & 077) == 0) {
    return std::nullopt;
  }
  return static_cast<unsigned>(st.st_mode & 07777);
}

Result<std::optional<unsigned>> restrictToOwner(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return std::optional<unsigned>();
    }
    return unavailable("cannot check the mode of " + path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & 077) == 0) {
    return std::optional<unsigned>();
  }
  if (::chmod(path.c_str(), st.st_mode & 0700) != 0) {
    return unavailable("cannot make " + path +
                       " its owner's alone (chmod 0600): " + std::strerror(errno));
  }
  return std::optional<unsigned>(static_cast<unsigned>(st.st_mode & 07777));
}

Status writeFileAtomic(const std::string& path, const std::string& data, unsigned mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    return internalError("cannot create " + tmp + ": " + std::strerror(errno));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return internalError("cannot write " + tmp + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return internalError("cannot write " + path + ": " + std::strerror(err));
  }
  return Status::ok();
}

}  // namespace tessera::core
