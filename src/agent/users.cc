#include "agent/users.h"

#include <fmt/format.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "agent/exec_util.h"

namespace tessera::agent {
namespace {

constexpr size_t kMaxUserName = 32;  // Linux's limit (useradd refuses longer).

bool tenantName(const std::string& t) {
  if (t.empty() || t.size() > 63 || t.front() == '-') {
    return false;
  }
  for (char c : t) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return false;
    }
  }
  return true;
}

uint32_t fnv1a32(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

}  // namespace

core::Result<std::string> UserMapping::nameFor(const std::string& tenant) const {
  if (options_.pattern.empty()) {
    return std::string();
  }
  const size_t at = options_.pattern.find("{tenant}");
  if (at == std::string::npos) {
    return core::invalidArgument("user mapping '" + options_.pattern + "' has no {tenant}");
  }
  if (!tenantName(tenant)) {
    return core::invalidArgument("'" + tenant + "' is not a tenant name");
  }
  std::string name = options_.pattern.substr(0, at) + tenant + options_.pattern.substr(at + 8);
  if (name.size() > kMaxUserName) {
    // Keep the start (readable), end with a hash of the whole tenant name (distinct).
    const std::string tail = fmt::format("-{:08x}", fnv1a32(tenant));
    name = name.substr(0, kMaxUserName - tail.size()) + tail;
  }
  return name;
}

core::Result<std::string> UserMapping::ensure(const std::string& tenant) {
  TESSERA_ASSIGN_OR_RETURN(std::string name, nameFor(tenant));
  if (name.empty() || lookupUser(name).has_value()) {
    return name;
  }
  if (!options_.create) {
    return core::failedPrecondition("no Unix user '" + name + "' for tenant '" + tenant +
                                    "'; create it (useradd --system " + name +
                                    ") or let the agent create users");
  }
  std::lock_guard lock(mu_);
  if (lookupUser(name).has_value()) {
    return name;  // Another task of the tenant created it meanwhile.
  }
  std::vector<std::string> args = {options_.useradd,
                                   "--system",
                                   "--no-create-home",
                                   "--home-dir",
                                   "/nonexistent",
                                   "--shell",
                                   "/usr/sbin/nologin",
                                   "--comment",
                                   "Tessera tenant " + tenant,
                                   name};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(argv[0], argv.data(), envp);
    ::_exit(127);
  }
  if (pid < 0) {
    return core::unavailable(std::string("useradd: fork: ") + std::strerror(errno));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (lookupUser(name).has_value()) {
      return name;  // Made meanwhile by another agent of this machine (`tessera dev` runs several).
    }
    return core::unavailable("cannot create Unix user '" + name + "' for tenant '" + tenant +
                             "': " + options_.useradd + " exited " +
                             std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  }
  return name;
}

}  // namespace tessera::agent
