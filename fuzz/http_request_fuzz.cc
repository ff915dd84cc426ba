// Fuzzes the HTTP request path up to authorization: raw bytes through Beast's request parser
// with the server's limits, then parseApiRequest on a plain and on a chrooted listener, the
// ACL on the scoped path, and the JSON bodies the API reads (workload, policy, durations).
// Checks that a chrooted request never leaves its tenant and that no scoped path can climb
// ("..", ".", empty segments). Never a crash, hang or leak.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/json_node.h"
#include "fuzz_check.h"
#include "model/codec.h"
#include "server/acl.h"
#include "server/request.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tessera::server::Policy;

const Policy& policy() {
  static const Policy p = *Policy::fromJson("dev", nlohmann::json::parse(R"({"path": {
      "workloads/*": {"capabilities": ["read", "list"]},
      "workloads/+/events": {"capabilities": ["deny"]},
      "tenants/+/workloads/*": {"capabilities": ["create"]}}})"));
  return p;
}

// No segment of a scoped path may be empty, "." or "..".
bool plainPath(const std::string& path) {
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    const std::string seg = path.substr(start, slash == std::string::npos ? slash : slash - start);
    if (seg.empty() || seg == "." || seg == "..") {
      return false;
    }
    if (slash == std::string::npos) {
      return true;
    }
    start = slash + 1;
  }
}

void checkBody(const nlohmann::json& body) {
  static const tessera::model::GpuCatalogue catalogue = tessera::model::GpuCatalogue::builtin();
  const std::string source = "body";
  tessera::core::JsonNode node(body, "", source);
  tessera::model::TaskRequest r;
  (void)tessera::model::parseTaskRequest(node, catalogue, {}, r);
  (void)Policy::fromJson("p", body.contains("policy") ? body["policy"] : body);
  for (const char* f : {"ttl", "explicit_max_ttl", "increment"}) {
    if (body.contains(f)) {
      (void)tessera::server::parseDurationSeconds(body[f], f);
    }
  }
  (void)body.dump();  // What the server stores and audits must serialize.
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(1024 * 1024);
  parser.eager(true);
  beast::error_code ec;
  size_t used = 0;
  while (used < size && !parser.is_done() && !ec) {
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (n == 0 && !ec) {
      break;  // Needs more input than there is.
    }
    used += n;
  }
  if (ec || !parser.is_done()) {
    return 0;
  }
  const auto& req = parser.get();
  tessera::server::HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (char& c : name) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    r.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  r.body = req.body();
  for (const std::string_view chroot : {std::string_view{}, std::string_view{"team-1"}}) {
    auto api = tessera::server::parseApiRequest(r, chroot);
    if (!api.isOk()) {
      FUZZ_CHECK(api.status().code() == tessera::core::StatusCode::kInvalidArgument ||
                 api.status().code() == tessera::core::StatusCode::kNotFound);
      continue;
    }
    FUZZ_CHECK(plainPath(api->scope.path));
    if (!chroot.empty()) {
      FUZZ_CHECK(api->scope.tenant == std::string(chroot));
    }
    if (api->scope.tenant) {
      FUZZ_CHECK(tessera::server::validName(*api->scope.tenant));
    }
    FUZZ_CHECK(api->body.is_object());
    const Policy* p = &policy();
    (void)tessera::server::resolve({p}, api->scope.path);
    checkBody(api->body);
  }
  return 0;
}
