#include "agent/exec_util.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>

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
