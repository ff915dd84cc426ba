// A tenant's own audit stream, and the Prometheus metrics.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/record.h"
#include "audit/verify.h"
#include "core/json_node.h"
#include "core/strings.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

HttpResponse ControlPlane::metrics() {
  std::string out;
  out += "# HELP tessera_http_requests_total Requests handled, by route, tenant and status.\n";
  out += "# TYPE tessera_http_requests_total counter\n";
  std::string durations;
  durations += "# HELP tessera_http_request_seconds_sum Time spent handling requests.\n";
  durations += "# TYPE tessera_http_request_seconds_sum counter\n";
  {
    std::lock_guard lock(metrics_mu_);
    for (const auto& [key, m] : metrics_) {
      const size_t a = key.find('|');
      const size_t b = key.find('|', a + 1);
      const std::string labels = "route=\"" + key.substr(0, a) + "\",tenant=\"" +
                                 key.substr(a + 1, b - a - 1) + "\",code=\"" + key.substr(b + 1) +
                                 "\"";
      out += "tessera_http_requests_total{" + labels + "} " + std::to_string(m.count) + "\n";
      durations +=
          "tessera_http_request_seconds_sum{" + labels + "} " + std::to_string(m.seconds) + "\n";
    }
  }
  out += durations;
  out += "# HELP tessera_scheduler_pass_milliseconds Duration of the last scheduling pass.\n";
  out += "# TYPE tessera_scheduler_pass_milliseconds gauge\n";
  out += "tessera_scheduler_pass_milliseconds " + std::to_string(driver_.lastPassMs()) + "\n";
  out += "# TYPE tessera_scheduler_passes_total counter\n";
  out += "tessera_scheduler_passes_total " + std::to_string(driver_.passes()) + "\n";
  out += "# TYPE tessera_queue_pending_milli_gpu gauge\n";
  for (const QueueStatus& q : driver_.queues("")) {
    out += "tessera_queue_pending_milli_gpu{queue=\"" + q.name + "\"} " +
           std::to_string(q.pending_milli_gpu) + "\n";
    out += "tessera_queue_allocated_milli_gpu{queue=\"" + q.name + "\"} " +
           std::to_string(q.allocated_milli_gpu) + "\n";
  }
  HttpResponse r;
  r.body = std::move(out);
  r.content_type = "text/plain; version=0.0.4";
  return r;
}

HttpResponse ControlPlane::auditApi(Request& r) {
  if (r.method != "GET") {
    return error(405, "use GET");
  }
  if (!authorized(r, Capability::kRead)) {
    return error(403, "permission denied");
  }
  if (options_.audit_file.empty()) {
    return error(404, "this server has no audit file to read a view from");
  }
  auto number = [&](const char* name, int64_t lo, int64_t hi,
                    int64_t def) -> std::optional<int64_t> {
    auto it = r.scope.query.find(name);
    if (it == r.scope.query.end()) {
      return def;
    }
    int64_t v = 0;
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
      return std::nullopt;
    }
    return v;
  };
  const std::optional<int64_t> limit = number("limit", 1, 10000, 100);
  if (!limit) {
    return error(400, "limit: expected a whole number from 1 to 10000");
  }
  const std::optional<int64_t> after = number("after", 0, std::numeric_limits<int64_t>::max(), -1);
  if (!after) {
    return error(400, "after: expected a record's seq (a whole number, 0 or more)");
  }
  // The tenant's records only, byte for byte, each with its hash and prev_hash (docs/server.md
  // says what a tenant can verify from them): the last `limit`, or with `after` the first
  // `limit` whose seq is greater (to follow the log).
  auto view = audit::tenantViewOfFile(options_.audit_file, *r.scope.tenant);
  if (!view.isOk()) {
    return fromStatus(view.status());
  }
  // Records from before the tenant was created belong to a deleted tenant of the same name: the
  // view starts at the first record since (records are in time order).
  std::string created;
  {
    std::shared_lock lock(mu_);
    if (auto t = tenants_.find(*r.scope.tenant); t != tenants_.end()) {
      created = t->second.value("created_time", "");
    }
  }
  auto time_of = [](const std::string& line) {
    const json rec = json::parse(line, nullptr, false);
    return rec.is_object() ? rec.value("time", std::string()) : std::string();
  };
  size_t first = 0;
  while (!created.empty() && first < view->size() && time_of((*view)[first]) < created) {
    ++first;
  }
  view->erase(view->begin(), view->begin() + static_cast<std::ptrdiff_t>(first));
  json records = json::array();
  const auto n = static_cast<size_t>(*limit);
  if (*after >= 0) {
    for (const std::string& line : *view) {
      json rec = json::parse(line, nullptr, false);
      if (rec.is_object() && rec.value("seq", int64_t{0}) > *after) {
        records.push_back(std::move(rec));
        if (records.size() == n) {
          break;
        }
      }
    }
  } else {
    for (size_t i = view->size() > n ? view->size() - n : 0; i < view->size(); ++i) {
      records.push_back(json::parse((*view)[i], nullptr, false));
    }
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data", {{"records", records}, {"total", view->size()}}}});
}

}  // namespace tessera::server
