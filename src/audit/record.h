// Audit records: what the server tells the audit log about a request or a response, and the exact
// line format a sink writes for it.
//
// A caller describes an event as an `AuditEvent`; each sink turns it into one JSON line of its own
// hash chain. A line is the canonical JSON serialization (nlohmann `dump()`: object keys sorted,
// no whitespace, UTF-8, invalid UTF-8 replaced by U+FFFD) of an object with these fields:
//
//   seq         1, 2, 3, ... per stream (per sink), checkpoints included.
//   time        RFC 3339 UTC with milliseconds, "2024-05-01T12:34:56.789Z", from `Clock::wallNow`.
//   type        "request" | "response" | "checkpoint".
//   request_id  pairs a request with its response.
//   tenant      the tenant the request is scoped to; "" for an operator (admin) request.
//   auth        {"accessor": token accessor (HMAC'd by default), "display_name": the token's
//               display name in clear ("" when unknown), "policies": [...]}; never a token
//               in clear. A refused request whose token did not authenticate (unknown, revoked,
//               expired) also has "token": the presented token, always HMAC'd, so that repeated
//               guesses of one token can be told apart and an operator can test a candidate
//               with `tessera audit hash`.
//   request     {"method", "path", "remote_address", "body": {...}}.
//   response    {"status", "body": {...}}; response records only.
//   error       "" or the error the server returned.
//   checkpoint  {"key_id", "signature"} and, from a sink that signs on a timer, "interval_ms":
//               its promise that no record waits longer than that for a checkpoint (signed with
//               the rest); "file": "end" on the last line of a file the sink rotated away from,
//               "start" on the first line of the file that follows it (audit/file_sink.h).
//               Checkpoint records only (they carry none of the above).
//   prev_hash   the previous record's `hash`; 64 zeros for seq 1.
//   hash        lowercase hex SHA-256 of the line's canonical serialization without `hash`.
//
// Because `hash` covers `prev_hash`, each record commits to every record before it. A valid line
// is byte-identical to the canonical serialization of what it parses to, so no byte can change
// without the change being detected (see audit/verify.h).
//
// Sensitive values are written as `hmac-sha256:<hex>` = HMAC-SHA256(key = the sink's salt,
// message = the value's UTF-8 bytes) for a string, or of its canonical JSON for any other value;
// an operator who holds the salt can test a candidate value with `tessera audit hash`. A value is
// sensitive if the event lists a JSON pointer to it, or if it sits in a request or response body
// under a key named in `kAlwaysSensitiveKeys`, or if it is a string (alone or in a list) under a
// key that `looksSecret` (a safety net for tokens and passwords: `env.DB_PASSWORD`).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace tessera::audit {

enum class AuditType { kRequest, kResponse };

struct AuditAuth {
  std::string accessor;  // The token's accessor; the token itself is never given to the log.
  std::vector<std::string> policies;
  // A token that did not authenticate (a refusal's record only): written only as its HMAC.
  std::string token = {};
  // The token's display name ("root", "team-1-admin", "ci-bot"), written in clear so that a
  // reader sees who acted without the salt (the accessor is HMAC'd).
  std::string display_name = {};
};

struct AuditRequest {
  std::string method;
  std::string path;
  std::string remote_address;
  nlohmann::json body = nlohmann::json::object();
  // What the client said about itself, where the server records it (the Kubernetes API:
  // user-agent, kubectl-command, kubectl-session); written only when there is something.
  std::map<std::string, std::string> client = {};
};

struct AuditResponse {
  int status = 0;
  nlohmann::json body = nlohmann::json::object();
};

struct AuditEvent {
  AuditType type = AuditType::kRequest;
  std::string request_id;
  std::string tenant;  // Empty for an operator (admin) request.
  AuditAuth auth;
  AuditRequest request;
  AuditResponse response;  // Written for kResponse only.
  std::string error;
  // JSON pointers (RFC 6901) into the record to HMAC, e.g. "/request/body/data/password". A
  // pointer to something absent is ignored; a pointer to a chain field (/seq, /hash, ...) or a
  // malformed pointer makes the write fail.
  std::vector<std::string> sensitive;
};

// Body keys whose values are always HMAC'd, at any depth of a request or response body.
inline constexpr std::string_view kAlwaysSensitiveKeys[] = {
    "token",      "client_token", "password", "secret_id", "private_key",
    "secret_key", "jwt",          "api_key",  "secret",    "credentials",
};

// Whether a key names something secret: case-insensitively, it contains "token", "passw",
// "secret" or "credential", or ends in "key" (`GITHUB_TOKEN`, `DB_PASSWORD`, `apiKey`,
// `AWS_SECRET_ACCESS_KEY`, `ssh_key`; not `keys` or `max_tokens`' number). Under such a key, string
// values are HMAC'd by the audit log and env values are sealed by the server's barrier.
bool looksSecret(std::string_view key);

// Whether the record of `event` hides part of its response: a `sensitive` pointer into the
// response, or an always-sensitive key anywhere in the response body. When it does not, the
// response reveals no secret (the server sends such answers without waiting for the disk).
bool responseIsSensitive(const AuditEvent& event);

// `prev_hash` of the first record of a stream.
inline constexpr std::string_view kZeroHash =
    "0000000000000000000000000000000000000000000000000000000000000000";

struct RedactionOptions {
  std::string salt;           // The sink's HMAC key; must not be empty.
  bool hmac_accessor = true;  // HMAC auth.accessor too (Vault's default).
};

// The record fields for `event` (everything but seq, time, prev_hash and hash), with sensitive
// values HMAC'd. Fails on a bad `sensitive` pointer.
core::Result<nlohmann::json> redactedEventJson(const AuditEvent& event,
                                               const RedactionOptions& options);

// The canonical serialization described above.
std::string canonicalJson(const nlohmann::json& value);

// The bytes a checkpoint's signature covers: "tessera-audit-checkpoint-v1\n" followed by the
// canonical serialization of the checkpoint record without `hash` and without
// `checkpoint.signature` (so it covers seq, time, prev_hash and key_id).
std::string checkpointSigningMessage(const nlohmann::json& checkpoint_record);

// One line of a stream, parsed and checked on its own: valid JSON, the required fields with the
// right types, canonical form and `hash`. Linking it to its neighbours is the verifier's job.
// NOLINTNEXTLINE(bugprone-exception-escape): nlohmann::json's move is noexcept in practice.
struct AuditRecord {
  uint64_t seq = 0;
  std::string type;  // "request", "response" or "checkpoint".
  std::string tenant;
  std::string prev_hash;
  std::string hash;
  nlohmann::json json;
};

// Parses `line` (without its newline). The error message says what is wrong with the record,
// e.g. "hash does not match the record's contents".
core::Result<AuditRecord> parseRecordLine(std::string_view line);

}  // namespace tessera::audit
