#include "server/console.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "server/route_table.h"

namespace tessera::server {
namespace {

using nlohmann::json;

struct Asset {
  std::string body;
  std::string content_type;
  std::string etag;
  bool immutable = false;  // A content-hashed name: the same name never has other bytes.
};

std::string_view contentType(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kTypes = {{
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".json", "application/json"},
  }};
  for (const auto& [ext, type] : kTypes) {
    if (name.ends_with(ext)) {
      return type;
    }
  }
  return "text/plain; charset=utf-8";
}

// A strong validator of the bytes (FNV-1a, 64 bits): enough to tell versions of one file apart.
std::string etagOf(std::string_view bytes) {
  uint64_t h = 14695981039346656037ULL;
  for (const char c : bytes) {
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  }
  char out[19];
  std::snprintf(out, sizeof out, "\"%016llx\"", static_cast<unsigned long long>(h));
  return out;
}

// Each GPU model with MIG: its memory and its profiles' compute and memory slices (of 7 and 8),
// so the fleet map draws a MIG instance as wide as the part of the GPU it holds.
std::string gpuModelsJson(const model::GpuCatalogue& catalogue) {
  json models = json::object();
  for (size_t i = 0; i < catalogue.size(); ++i) {
    const model::GpuModelInfo& m = catalogue.model(model::GpuModelId(static_cast<uint16_t>(i)));
    json profiles = json::object();
    for (const model::MigProfile& p : m.mig_profiles) {
      profiles[p.name] = {{"compute_slices", p.compute_slices},
                          {"memory_slices", p.memory_slices},
                          {"memory_mib", p.memory.value()}};
    }
    models[m.name] = {{"memory_mib", m.memory.value()}, {"mig_profiles", profiles}};
  }
  return json{{"models", models}, {"mig_memory_slices", 8}, {"mig_compute_slices", 7}}.dump();
}

// The embedded files by name; index.html also as "" (the request for `/ui/`).
const std::map<std::string, Asset, std::less<>>& assets() {
  static const std::map<std::string, Asset, std::less<>> files = [] {
    std::map<std::string, Asset, std::less<>> out;
    for (const EmbeddedFile& f : embeddedConsoleFiles()) {
      Asset a{std::string(f.bytes), std::string(contentType(f.name)), etagOf(f.bytes), false};
      // build.mjs names bundles <name>-<8 or more hash characters>.<ext>.
      const size_t dash = f.name.rfind('-');
      const size_t dot = f.name.rfind('.');
      a.immutable =
          dash != std::string_view::npos && dot != std::string_view::npos && dot > dash + 8;
      out.emplace(std::string(f.name), a);
      if (f.name == "index.html") {
        out.emplace("", std::move(a));
      }
    }
    return out;
  }();
  return files;
}

HttpResponse withConsoleHeaders(HttpResponse r, std::string_view cache_control) {
  r.headers.emplace_back("Content-Security-Policy", std::string(kConsoleCsp));
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("Cross-Origin-Opener-Policy", "same-origin");
  r.headers.emplace_back("Cross-Origin-Resource-Policy", "same-origin");
  r.headers.emplace_back("Cache-Control", std::string(cache_control));
  return r;
}

HttpResponse plain(unsigned status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.content_type = "text/plain; charset=utf-8";
  return withConsoleHeaders(std::move(r), "no-store");
}

HttpResponse redirect(std::string_view to) {
  HttpResponse r = plain(302, "the console is at " + std::string(to) + "\n");
  r.headers.emplace_back("Location", std::string(to));
  return r;
}

}  // namespace

std::optional<HttpResponse> consoleResponse(const HttpRequest& http,
                                            const model::GpuCatalogue& catalogue) {
  const std::string_view target(http.target);
  const std::string_view path = target.substr(0, target.find('?'));
  // HEAD is GET without the body (the HTTP server drops it); the route table lists GET.
  const RouteMatch m =
      matchRoute(RouteScope::kRoot, path, http.method == "HEAD" ? "GET" : http.method);
  if (m.route == nullptr || m.route->api != Api::kConsole) {
    return std::nullopt;
  }
  if (!m.allowed) {
    HttpResponse r = plain(405, "the console's files are read with GET or HEAD\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  // The table's matching drops a trailing '/': `/ui/` matches "/ui", and is the index.
  if (path == "/" || path == "/ui") {
    return redirect("/ui/");
  }
  const auto file = m.params.find("file");
  const std::string name = file == m.params.end() ? "" : file->second;
  if (name == "gpu-models.json") {
    static const std::string models = gpuModelsJson(catalogue);
    HttpResponse r;
    r.body = models;
    r.content_type = "application/json";
    return withConsoleHeaders(std::move(r), "no-cache");
  }
  const auto& files = assets();
  const auto it = files.find(name);
  if (it == files.end()) {
    return plain(404, "no such file in the console: /ui/" + name + "\n");
  }
  const Asset& a = it->second;
  HttpResponse r;
  r.content_type = a.content_type;
  r.headers.emplace_back("ETag", a.etag);
  if (http.header("if-none-match") == a.etag) {
    r.status = 304;
  } else {
    r.body = a.body;
  }
  return withConsoleHeaders(std::move(r),
                            a.immutable ? "public, max-age=31536000, immutable" : "no-cache");
}

}  // namespace tessera::server
