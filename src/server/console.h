// The web console (docs/console.md): the files web/build.mjs bundles, embedded in the binary
// (console_assets.cc, generated at build time by embed_console_assets.cmake) and served on every
// API listener, with the listener's TLS, at `/ui/`; `GET /` redirects there.
//
//   if (std::optional<HttpResponse> r = consoleResponse(http, catalogue)) return *r;
//
// The files are static and public: no token, no tenant, no audit record. Everything the page
// shows it fetches from `/v1/...` with the user's token, through the same ACLs as any client.
// What is served is a fixed in-binary map from file name to bytes, so no request path can reach
// the filesystem. Every answer carries a strict Content-Security-Policy (scripts and styles from
// the console's own files only, no inline script, connections to this origin only), nosniff and
// no framing; bundles have content-hashed names and are cached for good, index.html is
// revalidated (ETag). Pure functions of the request; thread-safe.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "model/gpu_catalogue.h"
#include "server/http_server.h"

namespace tessera::server {

// One built file: its name under /ui/ and its bytes.
struct EmbeddedFile {
  std::string_view name;
  std::string_view bytes;
};

// The console's files, from the generated console_assets.cc.
std::span<const EmbeddedFile> embeddedConsoleFiles();

// The Content-Security-Policy of every console answer.
inline constexpr std::string_view kConsoleCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

// The answer to a console path (`/`, `/ui`, `/ui/<file>`; GET or HEAD), or nullopt for any other
// path (the API's to answer). `/ui/gpu-models.json` is generated from `catalogue`: each model's
// MIG profiles with their slices, which the fleet map sizes MIG tiles by.
std::optional<HttpResponse> consoleResponse(const HttpRequest& http,
                                            const model::GpuCatalogue& catalogue);

}  // namespace tessera::server
