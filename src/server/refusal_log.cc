#include "server/refusal_log.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/rfc3339.h"
#include "server/api_util.h"

namespace tessera::server {

namespace {

constexpr size_t kSummarySources = 10;  // The sources a summary names, most refusals first.
constexpr std::string_view kOtherSource = "ip:other";

}  // namespace

std::string RefusalLog::sourceOf(const std::string& remote, const std::string* tenant) {
  if (tenant != nullptr) {
    return tenant->empty() ? "/admin" : "tenant:" + *tenant;
  }
  const size_t colon = remote.rfind(':');
  std::string address = colon == std::string::npos ? remote : remote.substr(0, colon);
  if (address.empty()) {
    address = "unknown";
  }
  return "ip:" + address;
}

bool RefusalLog::take(Bucket& b, double rate, double burst, core::TimePoint now) {
  if (!b.started) {
    b.started = true;
    b.tokens = burst;
  } else {
    const double dt = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(burst, b.tokens + std::max(0.0, dt) * rate);
  }
  b.last = now;
  if (b.tokens < 1) {
    return false;
  }
  b.tokens -= 1;
  return true;
}

bool RefusalLog::record(const std::string& source, const audit::AuditEvent& event) {
  const bool unauthenticated = source.starts_with("ip:");
  {
    std::lock_guard lock(mu_);
    const core::TimePoint now = clock_.now();
    std::string key = source;
    if (unauthenticated && !sources_.contains(key) && sources_.size() >= options_.max_sources) {
      key = kOtherSource;
    }
    Bucket& own = sources_[key];
    // The source's own bucket first: a source over its budget does not drain the shared one.
    bool ok = take(own, options_.per_source_rate, options_.per_source_burst, now);
    if (ok && unauthenticated) {
      ok = take(unauthenticated_, options_.unauthenticated_rate, options_.unauthenticated_burst,
                now);
      if (!ok) {
        own.tokens += 1;  // Not spent: the record was not written.
      }
    }
    if (!ok) {
      Dropped& d = dropped_[event.tenant];
      if (d.count == 0) {
        d.since = core::formatRfc3339Millis(clock_.wallNow());
      }
      ++d.count;
      ++d.by_status[event.response.status];
      ++d.by_source[key];
      ++counts_.dropped;
      return false;
    }
  }
  // A refusal is answered whatever happens here; a log that cannot take it refuses the next
  // request that needs a record anyway.
  const bool written = auditor_.append(event).isOk();
  std::lock_guard lock(mu_);
  if (written) {
    ++counts_.recorded;
  } else {
    ++counts_.dropped;
  }
  return written;
}

void RefusalLog::flushSummaries() {
  std::map<std::string, Dropped> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.swap(dropped_);
    // Forget the buckets that have refilled: a new one starts full, the same.
    const core::TimePoint now = clock_.now();
    std::erase_if(sources_, [&](const auto& entry) {
      const Bucket& b = entry.second;
      const double dt = std::chrono::duration<double>(now - b.last).count();
      return b.tokens + dt * options_.per_source_rate >= options_.per_source_burst;
    });
  }
  for (auto& [stream, d] : dropped) {
    std::vector<std::pair<std::string, uint64_t>> sources(d.by_source.begin(), d.by_source.end());
    std::sort(sources.begin(), sources.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    nlohmann::json top = nlohmann::json::object();
    for (size_t i = 0; i < std::min(kSummarySources, sources.size()); ++i) {
      top[sources[i].first] = sources[i].second;
    }
    nlohmann::json by_status = nlohmann::json::object();
    for (const auto& [status, n] : d.by_status) {
      by_status[std::to_string(status)] = n;
    }
    audit::AuditEvent ev;
    ev.type = audit::AuditType::kResponse;
    ev.request_id = api::requestId();
    ev.tenant = stream;
    ev.request.method = "DROPPED";
    ev.request.path = "refused requests";
    ev.request.body = {{"dropped", d.count},
                       {"by_status", by_status},
                       {"sources", top},
                       {"source_count", sources.size()},
                       {"since", d.since}};
    ev.response.status = 0;
    ev.error = std::to_string(d.count) +
               " more refused requests not recorded (over the budget for refusals' records) "
               "since " +
               d.since;
    (void)auditor_.append(ev);
  }
}

RefusalCounts RefusalLog::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace tessera::server
