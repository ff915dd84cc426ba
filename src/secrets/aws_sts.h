// An AWS engine that calls STS itself (issue #26; docs/secrets.md "AWS STS sessions"): a tenant
// names an STS endpoint and roles; a read of a role's creds mints the caller's workload identity
// JWT (audience sts.amazonaws.com), sends it to STS AssumeRoleWithWebIdentity (no AWS keys, no
// SigV4) and answers the session's credentials. Tessera chooses DurationSeconds, so a session can
// be clamped to a grant's window (clampStsDuration). STS sessions cannot be revoked: they are
// expire-only, like the identity JWT.
//
//   AwsEngine aws(store, keys);
//   aws.putConfig("team-1", {{"sts_endpoint", "https://sts.eu-west-1.amazonaws.com"}});
//   aws.putRole("team-1", "s3", {{"role_arn", "arn:aws:iam::123456789012:role/s3"}});
//   auto creds = aws.assumeRoleWithWebIdentity("team-1", "s3", jwt, "tessera-team-1", 3600);
//
// Records (sealed for the tenant and the key): /secrets/<tenant>/aws/config and
// /secrets/<tenant>/aws/roles/<name> (so deleting the tenant shreds them, and rewrap covers them).
// Thread-safe (the store and the key manager are).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "secrets/keys.h"
#include "store/store.h"

namespace tessera::secrets {

// STS's bounds on DurationSeconds.
inline constexpr int64_t kStsMinDurationSeconds = 900;
inline constexpr int64_t kStsMaxDurationSeconds = 43200;
// The default session length of a role.
inline constexpr int64_t kStsDefaultTtlSeconds = 3600;

struct StsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string expiration;  // As STS wrote it (RFC 3339).
};

// The credentials in an AssumeRoleWithWebIdentityResponse (or AssumeRoleResponse). An STS
// ErrorResponse is failed precondition "STS refused: <Code>: <Message>"; anything else (not XML,
// truncated, a field missing or empty) is internal error naming what is missing. Never throws.
core::Result<StsCredentials> parseStsResponse(std::string_view xml);

// The text between the first <tag> (no attributes) and its </tag> inside `xml`, with XML's five
// entities decoded; nullopt if absent or unterminated.
std::optional<std::string> xmlTagText(std::string_view xml, std::string_view tag);

// DurationSeconds for a session: the least of the role's ttl, its max_ttl (0: none), the seconds
// left of the grant the caller came in on (nullopt: none) and of the caller's token (nullopt:
// never expires). Below STS's 900 s minimum: invalid argument saying so (never lengthened);
// above its 43200 s maximum: cut to it.
core::Result<int64_t> clampStsDuration(int64_t role_ttl_s, int64_t role_max_ttl_s,
                                       std::optional<int64_t> grant_left_s,
                                       std::optional<int64_t> token_left_s);

// A parsed endpoint: "https://host[:port][/path]", or "http://" to a loopback address only
// (127.0.0.1, localhost, [::1]; for tests and local fakes).
struct StsEndpoint {
  bool tls = true;
  std::string host;
  std::string port;
  std::string target;  // "/" or the path.
};
core::Result<StsEndpoint> parseStsEndpoint(std::string_view url);

// The form body of an AssumeRoleWithWebIdentity request (values URL-encoded).
std::string assumeRoleWithWebIdentityForm(const std::string& role_arn,
                                          const std::string& session_name,
                                          const std::string& web_identity_token,
                                          int64_t duration_s);

// A RoleSessionName STS accepts ([\w+=,.@-], 2 to 64 characters) made from `name`.
std::string stsSessionName(std::string_view name);

// POSTs `form` to `endpoint` and parses the answer. Any failure (connect, TLS, timeout, an STS
// error, a malformed answer) is unavailable, and its message names the endpoint.
core::Result<StsCredentials> callSts(const StsEndpoint& endpoint, const std::string& form,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(10));

class AwsEngine {
 public:
  AwsEngine(store::Store& store, const KeyManager& keys) : store_(store), keys_(keys) {}

  // {"sts_endpoint": URL, "region": optional}. Invalid argument for anything else.
  core::Status putConfig(const std::string& tenant, const nlohmann::json& body);
  core::Result<nlohmann::json> readConfig(const std::string& tenant) const;
  // {"role_arn": "arn:...", "ttl": seconds or "1h" (default 1h), "max_ttl": (0: none)}.
  core::Status putRole(const std::string& tenant, const std::string& name,
                       const nlohmann::json& body);
  core::Result<nlohmann::json> readRole(const std::string& tenant, const std::string& name) const;
  core::Status deleteRole(const std::string& tenant, const std::string& name);
  core::Result<std::vector<std::string>> listRoles(const std::string& tenant) const;

  static core::Status checkRoleName(const std::string& name);

 private:
  store::Store& store_;
  const KeyManager& keys_;
};

}  // namespace tessera::secrets
