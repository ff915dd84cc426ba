#include "core/files.h"

#include <sys/stat.h>

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

}  // namespace tessera::core
