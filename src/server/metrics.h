// Prometheus metrics: a writer of the text exposition format (version 0.0.4), histograms, and
// the request and eviction counts the control plane keeps (docs/metrics.md lists every family).
//
//   MetricsText out;
//   MetricFamily& f = out.family("tessera_nodes", MetricType::kGauge, "Nodes in service.");
//   f.add({{"state", "ready"}}, 3);
//   Histogram pass(kPassSecondsBounds);
//   pass.observe(0.004);
//   out.family("tessera_scheduler_pass_duration_seconds", MetricType::kHistogram, "...")
//       .addHistogram({}, pass.snapshot());
//   std::string body = out.text();   // Content-Type: kPrometheusContentType
//
// The writer groups samples by family whatever order they are added in, so every family has its
// HELP and TYPE exactly once and its samples together; it escapes label values and HELP text as
// the format requires, and drops a second sample with the same labels (noting it in problems()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::server {

inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4";

enum class MetricType { kCounter, kGauge, kHistogram };

// Label name -> value, in the order written.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A histogram's state: upper bounds (increasing, finite; not owned: the constants below, which
// outlive every histogram, so that thousands of them share one copy), per-bucket counts (not
// cumulative; one more than the bounds, the last for values above every bound), their sum and
// count. Not thread-safe: Histogram wraps one with a lock.
struct HistogramData {
  std::span<const double> bounds;
  std::vector<uint64_t> buckets;
  double sum = 0;
  uint64_t count = 0;

  HistogramData() = default;
  explicit HistogramData(std::span<const double> upper_bounds)
      : bounds(upper_bounds), buckets(bounds.size() + 1, 0) {}
  void observe(double value);
};

// Bounds in seconds for API requests (a node's watch waits up to its wait_ms, so the top ones).
inline constexpr double kRequestSecondsBounds[] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
// Bounds in seconds for a scheduling pass.
inline constexpr double kPassSecondsBounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                1,      2.5,     5,      10};

// A histogram that one thread observes and others read. Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::span<const double> upper_bounds) : data_(upper_bounds) {}
  void observe(double value);
  HistogramData snapshot() const;

 private:
  mutable std::mutex mu_;  // Guards data_.
  HistogramData data_;
};

// The samples of one family. Obtained from MetricsText::family; lives as long as the writer.
class MetricFamily {
 public:
  // A counter's or gauge's sample (ignored, and noted, for a histogram family).
  void add(const MetricLabels& labels, double value);
  // A histogram's _bucket (cumulative, with le="+Inf"), _sum and _count samples.
  void addHistogram(const MetricLabels& labels, const HistogramData& h);

 private:
  friend class MetricsText;
  MetricFamily(std::string name, MetricType type, std::string help,
               std::vector<std::string>* problems)
      : name_(std::move(name)), type_(type), help_(std::move(help)), problems_(problems) {}
  // The labels as written between braces (without them), or "" with a note on a bad name.
  std::string labelText(const MetricLabels& labels);
  bool firstSeries(const std::string& label_text);

  std::string name_;
  MetricType type_;
  std::string help_;
  std::vector<std::string>* problems_;
  std::vector<std::string> seen_;  // Label texts, sorted, for duplicate series.
  std::string samples_;            // Lines, each ending in '\n'.
};

// The text exposition format, version 0.0.4. Not thread-safe: one per scrape.
class MetricsText {
 public:
  MetricsText() = default;
  MetricsText(const MetricsText&) = delete;
  MetricsText& operator=(const MetricsText&) = delete;

  // The family `name`, created on first use (families are written in that order). A second
  // call with another type returns the first family and notes the clash; an invalid name too.
  MetricFamily& family(const std::string& name, MetricType type, const std::string& help);
  // Every family: # HELP, # TYPE, then its samples.
  std::string text() const;
  // What was refused or dropped (bad names, a duplicate series, a type clash): empty when all
  // went in. Tests assert it; the server logs it.
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
  std::vector<std::unique_ptr<MetricFamily>> families_;
  std::map<std::string, MetricFamily*> by_name_;
};

// Formats a sample value as the format wants it: integers without a fraction, "+Inf", "-Inf",
// "NaN", and otherwise the shortest text that reads back as the same double.
std::string formatMetricValue(double v);
// A label value with backslash, double quote and newline escaped.
std::string escapeLabelValue(std::string_view v);
// HELP text with backslash and newline escaped.
std::string escapeHelp(std::string_view v);
bool validMetricName(std::string_view name);
bool validLabelName(std::string_view name);

// Why a task was evicted, from the event text the driver gives its workload (WorkloadStatus::
// events): one of a fixed set, so that a label never carries free text or names.
//   preempted (by a higher-priority workload of its own queue), reclaimed (by another queue
//   taking back its fair share), moved (consolidation), drained (its node is drained), other.
std::string_view evictionReason(std::string_view event);
inline constexpr std::string_view kEvictionReasons[] = {"preempted", "reclaimed", "moved",
                                                        "drained", "other"};

// The API's requests (by route pattern and status code, and per tenant) and the evictions (by
// reason, per tenant), as the control plane counts them. Thread-safe; cheap to record (one
// lock, two map lookups).
// Seconds from a workload's submission to its start, and how long pending workloads have
// waited: from a second to a week (queues of GPU clusters wait hours).
inline constexpr double kWaitSecondsBounds[] = {1,    5,    15,    60,    300,   900,    1800,
                                                3600, 7200, 14400, 28800, 86400, 172800, 604800};

class RequestMetrics {
 public:
  // One answered request: `route` is the route's pattern (RouteMatch::label), never a caller's
  // name; `tenant` the scope's tenant ("" for the admin scope).
  void observe(const std::string& route, const std::string& tenant, unsigned code, double seconds);
  void countEviction(const std::string& tenant, std::string_view reason);

  struct RouteKey {
    std::string route;
    unsigned code = 0;
    auto operator<=>(const RouteKey&) const = default;
  };
  struct TenantTotals {
    uint64_t requests = 0;
    double seconds = 0;
  };
  // Every route and code's latency (tenant: only that tenant's requests).
  std::map<RouteKey, HistogramData> latency(const std::string* tenant = nullptr) const;
  // Requests and handler seconds per tenant ("" : the admin scope).
  std::map<std::string, TenantTotals> tenantTotals() const;
  // Evictions by reason (tenant: that tenant's only); every reason is there, 0 if none.
  std::map<std::string, uint64_t> evictions(const std::string* tenant = nullptr) const;
  // A workload of `tenant`'s queue `queue` ("team" or "default") started `seconds` after its
  // submission (its first start only).
  void observeStartDelay(const std::string& tenant, const std::string& queue, double seconds);
  // Those histograms by (tenant, queue) (tenant: that tenant's only).
  std::map<std::pair<std::string, std::string>, HistogramData> startDelays(
      const std::string* tenant = nullptr) const;
  // Forgets a deleted tenant's numbers (a tenant created again under the name starts at 0).
  void forgetTenant(const std::string& tenant);

 private:
  mutable std::mutex mu_;  // Guards everything below.
  std::map<RouteKey, HistogramData> latency_;
  std::map<std::string, std::map<RouteKey, HistogramData>> tenant_latency_;
  std::map<std::string, TenantTotals> tenant_totals_;
  std::map<std::string, std::map<std::string, uint64_t>> evictions_;  // tenant -> reason -> n
  std::map<std::pair<std::string, std::string>, HistogramData> start_delays_;
};

}  // namespace tessera::server
