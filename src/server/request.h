// The untrusted part of a request, read before anything is authorized: its scope, method, token
// and JSON body. Kept apart from the handlers so that it can be fuzzed on its own
// (fuzz/http_request_fuzz.cc).
//
//   auto r = parseApiRequest(http_request, listener.chroot_tenant);
//   if (!r.isOk()) ...  // kNotFound -> 404, kInvalidArgument -> 400
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "server/http_server.h"
#include "server/route.h"

namespace tessera::server {

struct ApiRequest {
  ScopedPath scope;
  std::string method;  // GET, LIST (also GET ?list=true), POST (also PUT), DELETE, ...
  std::string token;   // From X-Tessera-Token or "Authorization: Bearer"; may be empty.
  nlohmann::json body = nlohmann::json::object();  // Always an object.
};

// The token a request carries (X-Tessera-Token, else "Authorization: Bearer"), or "".
std::string requestToken(const HttpRequest& http);

core::Result<ApiRequest> parseApiRequest(const HttpRequest& http, std::string_view chroot_tenant);

// Vault-style durations: whole seconds as a number, or "90s", "30m", "4h", "7d".
core::Result<int64_t> parseDurationSeconds(const nlohmann::json& j, const std::string& field);

}  // namespace tessera::server
