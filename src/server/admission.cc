// Admission, before a request waits for a worker (ControlPlane::admit): whom it counts against,
// that tenant's rate limit (a token bucket) and how many of its requests may run and wait.
#include <algorithm>

#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

namespace {

// Requests of a tenant that may wait for a worker: kQueuedPerRunning per request it may have
// running, and at least kMinQueued.
constexpr size_t kQueuedPerRunning = 8;
constexpr size_t kMinQueued = 64;

FairLimits fairLimits(int max_in_flight) {
  return {max_in_flight, std::max(kMinQueued, kQueuedPerRunning *
                                                  static_cast<size_t>(std::max(1, max_in_flight)))};
}

}  // namespace

ControlPlane::Bucket& ControlPlane::bucketLocked(const std::string& key) {
  std::unique_ptr<Bucket>& slot = buckets_[key];
  if (slot == nullptr) {
    slot = std::make_unique<Bucket>();
    applyLimitsLocked(key);
  }
  return *slot;
}

void ControlPlane::applyLimitsLocked(const std::string& key) {
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    return;  // Created with the current limits on first use.
  }
  Bucket& b = *it->second;
  auto t = tenants_.find(key);
  const json config = t == tenants_.end() ? json::object() : t->second;
  b.rate = config.value("request_rate", options_.tenant_rate_per_s);
  b.burst = config.value("request_burst", options_.tenant_burst);
  b.max_in_flight = config.value("request_concurrency", options_.tenant_max_in_flight);
  b.tokens = std::min(b.tokens, b.burst);
}

Admission ControlPlane::admit(const HttpRequest& http,
                              const std::vector<ListenerConfig>& listeners) {
  Admission a;
  a.reject_delay = options_.reject_delay;
  const std::string secret = requestToken(http);
  auto token = secret.empty() ? core::Result<TokenInfo>(core::notFound("no token"))
                              : tokens_->lookup(secret);
  if (!token.isOk()) {
    // Health checks and requests that will be refused (403): one key of their own, so they
    // can neither starve a tenant nor be starved.
    a.key = "/unauthenticated";
    a.limits = fairLimits(options_.tenant_max_in_flight);
    return a;
  }
  a.key = token->tenant.empty() ? "/admin" : token->tenant;
  if (token->tenant.empty()) {
    // An agent's heartbeat (it may wait for news): its node's own key, so agents neither wait
    // behind operators nor hold their turns. Only declared agent nodes get one (a bounded set).
    constexpr std::string_view kPrefix = "/v1/sys/nodes/";
    const std::string_view target =
        std::string_view(http.target)
            .substr(0, std::min(http.target.size(), http.target.find('?')));
    const std::string_view rest =
        target.starts_with(kPrefix) ? target.substr(kPrefix.size()) : std::string_view();
    const size_t slash = rest.find('/');
    if (slash != std::string_view::npos &&
        (rest.substr(slash) == "/heartbeat" || rest.substr(slash) == "/tasks" ||
         rest.substr(slash).starts_with("/logs/"))) {
      const std::string node(rest.substr(0, slash));
      if (driver_.isAgentNode(node)) {
        a.key = "/node/" + node;
        a.limits = fairLimits(2);
        return a;
      }
    }
  }
  std::shared_lock tenants_lock(mu_);  // A new bucket reads the tenant's limits.
  std::lock_guard lock(buckets_mu_);
  Bucket& b = bucketLocked(a.key);
  const core::TimePoint now = clock_.now();
  if (b.last == core::TimePoint{}) {
    b.tokens = b.burst;
  } else {
    const double dt = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(b.burst, b.tokens + dt * b.rate);
  }
  b.last = now;
  if (b.tokens < 1) {
    HttpResponse resp = error(429, "too many requests for this tenant; slow down");
    resp.headers.emplace_back("Retry-After", "1");
    resp.delay = options_.reject_delay;
    a.response = std::move(resp);
    recordRefusal(http, *a.response, listeners);
    return a;
  }
  b.tokens -= 1;
  a.limits = fairLimits(b.max_in_flight);
  a.run_now = isOwnStatusRead(http, listeners, *token);
  return a;
}

bool ControlPlane::isOwnStatusRead(const HttpRequest& http,
                                   const std::vector<ListenerConfig>& listeners,
                                   const TokenInfo& token) {
  if (http.method != "GET") {
    return false;
  }
  const std::string chroot =
      http.listener < listeners.size() ? listeners[http.listener].chroot_tenant : "";
  auto parsed = parseApiRequest(http, chroot);
  if (!parsed.isOk() || parsed->method != "GET" || !parsed->scope.tenant) {
    return false;
  }
  // Its own tenant's, or an operator's: never one that could come in on a grant, whose answer
  // waits for the audit log's flush on the thread that handles it.
  if (!token.tenant.empty() && token.tenant != *parsed->scope.tenant) {
    return false;
  }
  const std::vector<std::string> parts = split(parsed->scope.path);
  return parts.size() == 2 && parts[0] == "workloads";
}

}  // namespace tessera::server
