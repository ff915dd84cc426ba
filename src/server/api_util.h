// What the control plane's API handlers share (control_plane.cc, api/*.cc): the request in
// flight, how answers and errors are written, and the helpers several families use. Internal to
// src/server.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "audit/crypto.h"
#include "core/clock.h"
#include "core/json_node.h"
#include "core/status.h"
#include "sched/tenant_queues.h"
#include "secrets/keys.h"
#include "server/control_plane.h"
#include "server/driver.h"
#include "server/grants.h"
#include "server/http_server.h"
#include "server/route.h"
#include "server/route_table.h"
#include "server/tokens.h"
#include "server/workload_record.h"
#include "store/store.h"

namespace tessera::server {

struct ControlPlane::Request {
  const HttpRequest& http;
  ScopedPath scope;
  std::string method;  // GET, LIST, POST, PUT, DELETE (LIST also for GET ?list=true).
  std::string request_id;
  TokenInfo token;
  std::string route;  // For metrics: the route's pattern (RouteMatch::label).
  nlohmann::json body = nlohmann::json::object();
  // Set when a token of another tenant comes in on a grant (server/grants.h): what it may do.
  std::optional<Grant> grant;
  // Set for a change whose request record is only appended to the audit log before it is
  // routed (ControlPlane::serve): a copy of that record per sink, which the change's one store
  // txn stores with it (store::Note), so the record is on stable storage no later than the
  // change, while the log flushes it by itself soon after.
  std::vector<store::Note> audit_notes = {};
  RouteMatch match = {};  // The route table's entry for this path and method (ControlPlane::serve).
  // Set by a handler that answers later (a node's watch): the pipeline calls it with where the
  // answer goes, after the handler returns (whose own answer is then ignored). The handler's
  // request (`http`, this struct) is gone by the time the answer comes: capture copies.
  std::function<void(std::function<void(HttpResponse)>)> defer = {};
  // A routine agent call the audit log does not record (ControlPlane::routineNodeCall), and
  // for a heartbeat the digest of the discovery it carries ("" if none).
  bool routine = false;
  std::string beat_digest = {};
  // For a route that asks (RouteSpec::asks_sudo): whether the token holds sudo on the path too.
  bool sudo = false;
};

namespace api {

inline HttpResponse reply(unsigned status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  // A message may quote the caller's bytes, cut anywhere: invalid UTF-8 becomes U+FFFD rather
  // than an exception.
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

inline HttpResponse error(unsigned status, const std::string& message) {
  return reply(status, {{"errors", {message}}});
}

// {"data": {"keys": [...]}} from the names of a map.
template <typename Map>
HttpResponse keysReply(const std::string& request_id, const Map& names) {
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& entry : names) {
    keys.push_back(entry.first);
  }
  return reply(200, {{"request_id", request_id}, {"data", {{"keys", keys}}}});
}

inline HttpResponse noContent() {
  HttpResponse r;
  r.status = 204;
  r.content_type = "application/json";
  return r;
}

inline unsigned httpStatus(const core::Status& s) {
  switch (s.code()) {
    case core::StatusCode::kInvalidArgument:
      return 400;
    case core::StatusCode::kNotFound:
      return 404;
    case core::StatusCode::kAlreadyExists:
    case core::StatusCode::kFailedPrecondition:
      return 409;
    case core::StatusCode::kPermissionDenied:
      return 403;
    case core::StatusCode::kUnauthenticated:
      return 401;
    case core::StatusCode::kResourceExhausted:
      return 429;
    case core::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

inline HttpResponse fromStatus(const core::Status& s) { return error(httpStatus(s), s.message()); }

// A request's id: 16 hex digits, unique in practice. It is no secret (answers and the audit log
// carry it), so a generator per thread seeded once from the OS is enough: RAND_bytes for every
// request cost about 3% of a GET's CPU.
inline std::string requestId() {
  thread_local std::mt19937_64 next = [] {
    std::random_device os;
    return std::mt19937_64((uint64_t{os()} << 32) ^ os());
  }();
  return fmt::format("{:016x}", next());
}

// "a/b/c" -> {"a", "b", "c"}; "" -> {""}.
inline std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    out.push_back(
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) {
      break;
    }
    start = slash + 1;
  }
  return out;
}

constexpr std::string_view kVersion = "0.1.0";

// A workload's tasks, at most; and what its record may grow by for each task's status (a
// running task on 8 GPUs of a long-named node) and for its events (at most 100 kept).
constexpr int64_t kMaxWorkloadTasks = 10000;
constexpr size_t kTaskStatusBytes = 128;
constexpr size_t kEventsBytes = 100 * 400;
constexpr size_t kAttemptsBytes = kMaxAttemptsKept * 400;

// Tokens are leases too (docs/secrets.md "Leases"): "auth/token/create/<accessor>", with the
// token's own expiry, renewal and revocation (the token manager keeps them, restart-safe).
constexpr std::string_view kTokenLeasePrefix = "auth/token/create/";

// A Vault-style duration field (server/request.h) as a duration.
core::Result<core::Duration> parseDuration(const nlohmann::json& j, const std::string& field);

// The body's integer `field`, in [lo, hi]; left out, its value in `base` (the stored settings
// being changed; empty when creating), else `def`.
core::Result<int64_t> intOr(const core::JsonNode& n, const nlohmann::json& base, const char* field,
                            int64_t lo, int64_t hi, int64_t def);

// A queue's settings, a tenant's or a team's, from a request body; what it leaves out keeps its
// value in `base`, as intOr.
// A GPU limit that is none (`-1`, or left out); 0 is zero: no GPU at all.
inline constexpr int64_t kNoGpuLimit = sched::kNoGpuLimit;

struct QueueNumbers {
  int64_t quota = 0;            // Milli-GPU.
  int64_t limit = kNoGpuLimit;  // Milli-GPU, 0 included; kNoGpuLimit: none.
  int64_t weight = 1;
  int64_t priority = 100;
  int64_t max_unsaved_gpu_s = -1;  // -1: the scheduler's default.
};
core::Result<QueueNumbers> queueNumbers(const core::JsonNode& n, const nlohmann::json& base,
                                        const std::string& source);

// Store keys.
std::string tenantKey(const std::string& t);
std::string policyKey(const std::string& scope, const std::string& name);
std::string workloadKey(const std::string& t, const std::string& name);

// The default policy of a tenant: everything inside the tenant except creating more policies
// is the tenant admin's call.
nlohmann::json tenantAdminPolicy();
// A tenant's policy as stored, brought up to date: a `tenant-admin` still as tenants were made
// with it before it had `patch` is read as today's, so its holders keep KV PATCH; any other
// (an edited one too) is returned as it is.
nlohmann::json upgradedTenantPolicy(const std::string& name, nlohmann::json stored);

nlohmann::json sealJson(const secrets::SealStatus& s);
HttpResponse noSecrets();  // 503: the server runs without secrets.
std::string tokenLeaseId(const TokenInfo& t);
nlohmann::json tokenLeaseJson(const TokenInfo& t, core::WallTime now);
// A renewal's "increment" ("1h" or seconds); zero when absent (the lease's own TTL).
core::Result<core::Duration> incrementOf(const nlohmann::json& body);
// Everything after the first `skip` parts, joined with '/'.
std::string rest(const std::vector<std::string>& parts, size_t skip);
// ?version=N (absent: 0, the current version).
core::Result<int64_t> versionParam(const ScopedPath& scope);
// {"versions": [1, 2]} of delete/undelete/destroy.
core::Result<std::vector<int64_t>> versionsField(const nlohmann::json& body, bool required);

}  // namespace api
}  // namespace tessera::server
