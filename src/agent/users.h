// Which Unix user a tenant's tasks run as, and creating it on demand. The mapping is a pattern
// with `{tenant}` in it ("tessera-{tenant}" by default); a name too long for Linux (32
// characters) is shortened with a hash of the tenant, so two tenants never share a user.
//
//   UserMapping users({.pattern = "tessera-{tenant}", .create = true});
//   TESSERA_ASSIGN_OR_RETURN(std::string user, users.ensure("team-a"));  // useradd if missing
#pragma once

#include <mutex>
#include <set>
#include <string>

#include "core/status.h"

namespace tessera::agent {

struct UserMappingOptions {
  std::string pattern = "tessera-{tenant}";  // "" : tasks run as the agent's own user.
  bool create = false;                       // Create a missing user (a system user, no login).
  std::string useradd = "/usr/sbin/useradd";
};

class UserMapping {
 public:
  explicit UserMapping(UserMappingOptions options) : options_(std::move(options)) {}

  // The user name for `tenant` ("" when the pattern is empty). Errors: a pattern without
  // {tenant}, or a tenant name that is not a plain tenant name.
  core::Result<std::string> nameFor(const std::string& tenant) const;
  // nameFor, and the user exists afterwards: created when missing and `create` is set, else an
  // error that says how to create it.
  core::Result<std::string> ensure(const std::string& tenant);

 private:
  UserMappingOptions options_;
  std::mutex mu_;  // One useradd at a time.
};

}  // namespace tessera::agent
