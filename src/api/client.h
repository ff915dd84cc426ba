// The one API client (used by the `tessera` commands and the agent's link to the server): one
// HTTP/1.1 keep-alive connection (TLS for https://) to the control plane, reused for every request
// a command makes.
//
//   ClientConfig c;
//   c.address = "https://127.0.0.1:8200";
//   c.ca_cert_file = "/tmp/dev/ca.pem";       // empty: the system's trusted CAs
//   c.token = "tsr.…";
//   auto client = ApiClient::create(c);
//   auto r = (*client)->call("LIST", "/v1/tenants");
//   if (r.isOk()) { for (auto& k : (*r)["data"]["keys"]) ... }
//
// Errors are written for the person at the terminal. A request the server refuses keeps its
// HTTP status in the message ("403: permission denied: ..."); the code follows the status
// (403 kPermissionDenied, 404 kNotFound, 409 kAlreadyExists, 429 kResourceExhausted, 5xx
// kUnavailable, any other 4xx kFailedPrecondition). No server error maps to kInvalidArgument:
// the commands keep that code for the user's own mistakes. A server that cannot be reached is
// kUnavailable, and the message names the address, the reason and what to check.
//
// Not thread-safe: one client per command, used from one thread.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::api {

struct ClientConfig {
  // "https://HOST:PORT" (a port-less address means 443), or "http://HOST:PORT" for a
  // listener with TLS disabled (loopback test servers only). Several servers (replicas, docs/
  // server.md "High availability"): a comma-separated list. The first is tried first; one that
  // cannot be reached is left for the next (a change only when it cannot have been received, a
  // read always), and a standby's redirect (307) to the leader is followed.
  std::string address = "https://127.0.0.1:8200";
  std::string ca_cert_file;  // PEM CA certificate(s) to trust; empty: the system's.
  std::string token;         // Sent as X-Tessera-Token; empty: none.
  // PEM client certificate (chain) and its key, for listeners that require one (mTLS, like
  // Vault's VAULT_CLIENT_CERT/KEY): both or neither.
  std::string client_cert_file;
  std::string client_key_file;
  // Connecting, the TLS handshake, and each request's write and read must each finish in it.
  std::chrono::milliseconds timeout{60'000};
  // Failover (docs/server.md, "High availability"): how long one call keeps trying, with
  // backoff, while no replica answers as the leader: a standby that knows no leader (503), a
  // redirect that leads nowhere (to itself, or round in a loop), a replica that cannot be
  // reached (only with several addresses: one server that is down is an error at once), a
  // write whose answer was lost on the way. It counts from the call's first failure, not its
  // start (a long poll may wait long before its server goes). 0: one round of the list.
  std::chrono::milliseconds retry_for{30'000};
};

class ApiClient {
 public:
  // Checks the address and loads the CA file; connects only at the first call.
  static core::Result<std::unique_ptr<ApiClient>> create(ClientConfig config);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // Sends `method` (GET, LIST, POST, DELETE, ...) to `target` ("/v1/..."), with `body` as JSON
  // unless it is null. Returns the response's JSON (an empty object for 204), or an error as
  // described above. When a reused connection fails before any byte of the response arrives
  // (the server closed it while idle), the request is sent once more on a new connection.
  //
  // Every change (any method but GET and LIST) carries an `Idempotency-Key` header, the same on
  // every try of the call, so the server applies it once however often it is sent: a change
  // whose answer was lost (the leader died after applying it, say) is sent again, and the
  // server answers from its record of the first. A 3xx is never a success.
  core::Result<nlohmann::json> call(std::string_view method, const std::string& target,
                                    const nlohmann::json& body = nullptr);

  // The server in use now (one of the list, or the leader a standby named).
  const std::string& address() const;
  // A header of the last answer the last call received (errors included; a server that could
  // not be reached gives none), "" if it had none or no server answered: e.g.
  // X-Tessera-Leader ("none": no replica can act now, docs/server.md "High availability").
  std::string lastHeader(std::string_view name) const;
  // The tenant the server's listener is chrooted to, as its last answer said
  // (X-Tessera-Chroot); empty for a listener that serves every scope.
  const std::string& chrootTenant() const;

  struct Impl;

 private:
  explicit ApiClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Percent-encodes one path segment (a tenant, workload or policy name given by the user), so
// that whatever it holds stays one segment; the server then judges it.
std::string pathSegment(std::string_view name);

}  // namespace tessera::api
