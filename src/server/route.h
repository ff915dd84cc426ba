// Request targets to scoped API paths: where tenancy is enforced before anything else runs.
//
//   auto p = scopeTarget("/v1/tenants/team-1/workloads/train?list=true", /*chroot=*/"");
//   // p->tenant == "team-1", p->path == "workloads/train", p->query == {{"list", "true"}}
//   auto q = scopeTarget("/v1/workloads/train", "team-1");    // a listener chrooted to team-1
//   // q->tenant == "team-1", q->path == "workloads/train"
//
// Rules (docs/server.md):
//   - Every API path starts with `/v1/`. Segments are percent-decoded, then must be non-empty
//     names of letters, digits, '-', '_', '.', '@', ':' (at most 128 bytes), not "." or "..".
//     An encoded '/', a '\', a NUL or any control character is refused. So "..", "%2e%2e",
//     "%2F" and "//" can never climb out of a scope: they are errors, not paths.
//   - On a plain listener, `/v1/tenants/<t>/<rest>` is tenant t's scope and `<rest>` the path
//     inside it; anything else is the admin scope (`sys/...`, `tenants` itself).
//   - On a listener chrooted to tenant T, every path is inside T: `/v1/<rest>`. There is no way
//     to name another tenant or the admin scope; `/v1/tenants/...` and `/v1/sys/...` are
//     refused as not found.
// Pure functions; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::server {

struct ScopedPath {
  std::optional<std::string> tenant;  // Empty optional: the admin scope.
  std::string path;                   // Inside the scope, no leading slash ("workloads/x").
  std::map<std::string, std::string> query;
};

// Maps a request target to its scope. Errors are kInvalidArgument for malformed targets and
// kNotFound for paths a chrooted listener cannot name (the caller answers 404 for both kinds
// that would reveal structure, see the server).
core::Result<ScopedPath> scopeTarget(std::string_view target, std::string_view chroot_tenant);

// Whether `name` is a valid object name (tenant, workload, policy, queue): 1..63 bytes of
// lowercase letters, digits and '-', starting with a letter or digit (DNS-label-like, so it
// is safe in paths, file names and Unix user names).
bool validName(std::string_view name);

}  // namespace tessera::server
