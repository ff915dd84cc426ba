#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace tessera::server {

void HistogramData::observe(double value) {
  // The first bucket whose bound is >= value (Prometheus' buckets are "less than or equal").
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  if (buckets.size() != bounds.size() + 1) {
    buckets.assign(bounds.size() + 1, 0);
  }
  ++buckets[i];
  sum += value;
  ++count;
}

void Histogram::observe(double value) {
  std::lock_guard lock(mu_);
  data_.observe(value);
}

HistogramData Histogram::snapshot() const {
  std::lock_guard lock(mu_);
  return data_;
}

std::string formatMetricValue(double v) {
  if (std::isnan(v)) {
    return "NaN";
  }
  if (std::isinf(v)) {
    return v > 0 ? "+Inf" : "-Inf";
  }
  char buf[64];
  // Whole numbers (counts, bytes) as integers, up to where a double still holds them exactly.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v));
    return std::string(buf, end);
  }
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

std::string escapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string escapeHelp(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

bool nameChar(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return alpha || (colon && c == ':') || (!first && c >= '0' && c <= '9');
}

}  // namespace

bool validMetricName(std::string_view name) {
  if (name.empty()) {
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!nameChar(name[i], i == 0, true)) {
      return false;
    }
  }
  return true;
}

bool validLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) {  // Reserved for Prometheus' own labels.
    return false;
  }
  for (size_t i = 0; i < name.size(); ++i) {
    if (!nameChar(name[i], i == 0, false)) {
      return false;
    }
  }
  return true;
}

std::string MetricFamily::labelText(const MetricLabels& labels) {
  std::string out;
  for (const auto& [name, value] : labels) {
    if (!validLabelName(name) || (type_ == MetricType::kHistogram && name == "le")) {
      problems_->push_back(name_ + ": invalid label name '" + name + "'");
      return "\x01";  // Never a valid label text: the caller drops the sample.
    }
    if (!out.empty()) {
      out += ',';
    }
    out += name;
    out += "=\"";
    out += escapeLabelValue(value);
    out += '"';
  }
  return out;
}

bool MetricFamily::firstSeries(const std::string& label_text) {
  if (label_text == "\x01") {
    return false;
  }
  auto it = std::lower_bound(seen_.begin(), seen_.end(), label_text);
  if (it != seen_.end() && *it == label_text) {
    problems_->push_back(name_ + ": duplicate series {" + label_text + "} dropped");
    return false;
  }
  seen_.insert(it, label_text);
  return true;
}

void MetricFamily::add(const MetricLabels& labels, double value) {
  if (type_ == MetricType::kHistogram) {
    problems_->push_back(name_ + ": a plain sample in a histogram family");
    return;
  }
  const std::string text = labelText(labels);
  if (!firstSeries(text)) {
    return;
  }
  samples_ += name_;
  if (!text.empty()) {
    samples_ += '{' + text + '}';
  }
  samples_ += ' ' + formatMetricValue(value) + '\n';
}

void MetricFamily::addHistogram(const MetricLabels& labels, const HistogramData& h) {
  if (type_ != MetricType::kHistogram) {
    problems_->push_back(name_ + ": a histogram in a " +
                         (type_ == MetricType::kCounter ? "counter" : "gauge") + " family");
    return;
  }
  const std::string text = labelText(labels);
  if (!firstSeries(text)) {
    return;
  }
  const std::string prefix = text.empty() ? "" : text + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += i < h.buckets.size() ? h.buckets[i] : 0;
    samples_ += name_ + "_bucket{" + prefix + "le=\"" + formatMetricValue(h.bounds[i]) + "\"} " +
                std::to_string(cumulative) + '\n';
  }
  // +Inf is every observation: the count, whatever the buckets say.
  samples_ += name_ + "_bucket{" + prefix + "le=\"+Inf\"} " + std::to_string(h.count) + '\n';
  const std::string braces = text.empty() ? "" : '{' + text + '}';
  samples_ += name_ + "_sum" + braces + ' ' + formatMetricValue(h.sum) + '\n';
  samples_ += name_ + "_count" + braces + ' ' + std::to_string(h.count) + '\n';
}

MetricFamily& MetricsText::family(const std::string& name, MetricType type,
                                  const std::string& help) {
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    if (it->second->type_ != type) {
      problems_.push_back(name + ": asked for again with another type");
    }
    return *it->second;
  }
  std::string checked = name;
  if (!validMetricName(name)) {
    problems_.push_back("invalid metric name '" + name + "'");
    checked = "invalid_metric_name";  // Its samples land here, and are never written.
  }
  families_.push_back(
      std::unique_ptr<MetricFamily>(new MetricFamily(checked, type, help, &problems_)));
  by_name_.emplace(name, families_.back().get());
  return *families_.back();
}

std::string MetricsText::text() const {
  std::string out;
  for (const auto& f : families_) {
    if (f->name_ == "invalid_metric_name") {
      continue;
    }
    out += "# HELP " + f->name_ + ' ' + escapeHelp(f->help_) + '\n';
    out += "# TYPE " + f->name_ + ' ';
    out += f->type_ == MetricType::kCounter ? "counter"
           : f->type_ == MetricType::kGauge ? "gauge"
                                            : "histogram";
    out += '\n';
    out += f->samples_;
  }
  return out;
}

std::string_view evictionReason(std::string_view event) {
  // The driver's texts (sched::evictionEvent, SchedulerDriver::applyDrains) start with these.
  if (event.starts_with("preempted by ")) {
    return "preempted";
  }
  if (event.starts_with("reclaimed by ")) {
    return "reclaimed";
  }
  if (event.starts_with("moved to make room")) {
    return "moved";
  }
  if (event.starts_with("drained:")) {
    return "drained";
  }
  return "other";
}

void RequestMetrics::observe(const std::string& route, const std::string& tenant, unsigned code,
                             double seconds) {
  const RouteKey key{route, code};
  std::lock_guard lock(mu_);
  auto add = [&](std::map<RouteKey, HistogramData>& m) {
    auto it = m.find(key);
    if (it == m.end()) {
      it = m.emplace(key, HistogramData(kRequestSecondsBounds)).first;
    }
    it->second.observe(seconds);
  };
  add(latency_);
  add(tenant_latency_[tenant]);
  TenantTotals& t = tenant_totals_[tenant];
  ++t.requests;
  t.seconds += seconds;
}

void RequestMetrics::countEviction(const std::string& tenant, std::string_view reason) {
  std::lock_guard lock(mu_);
  ++evictions_[tenant][std::string(reason)];
}

std::map<RequestMetrics::RouteKey, HistogramData> RequestMetrics::latency(
    const std::string* tenant) const {
  std::lock_guard lock(mu_);
  if (tenant == nullptr) {
    return latency_;
  }
  auto it = tenant_latency_.find(*tenant);
  return it == tenant_latency_.end() ? std::map<RouteKey, HistogramData>{} : it->second;
}

std::map<std::string, RequestMetrics::TenantTotals> RequestMetrics::tenantTotals() const {
  std::lock_guard lock(mu_);
  return tenant_totals_;
}

std::map<std::string, uint64_t> RequestMetrics::evictions(const std::string* tenant) const {
  std::map<std::string, uint64_t> out;
  for (std::string_view reason : kEvictionReasons) {
    out[std::string(reason)] = 0;
  }
  std::lock_guard lock(mu_);
  for (const auto& [t, reasons] : evictions_) {
    if (tenant != nullptr && t != *tenant) {
      continue;
    }
    for (const auto& [reason, n] : reasons) {
      out[reason] += n;
    }
  }
  return out;
}

void RequestMetrics::observeStartDelay(const std::string& tenant, const std::string& queue,
                                       double seconds) {
  std::lock_guard lock(mu_);
  auto key = std::make_pair(tenant, queue);
  auto it = start_delays_.find(key);
  if (it == start_delays_.end()) {
    it = start_delays_.emplace(std::move(key), HistogramData(kWaitSecondsBounds)).first;
  }
  it->second.observe(std::max(0.0, seconds));
}

std::map<std::pair<std::string, std::string>, HistogramData> RequestMetrics::startDelays(
    const std::string* tenant) const {
  std::lock_guard lock(mu_);
  std::map<std::pair<std::string, std::string>, HistogramData> out;
  for (const auto& [key, h] : start_delays_) {
    if (tenant == nullptr || key.first == *tenant) {
      out.emplace(key, h);
    }
  }
  return out;
}

void RequestMetrics::forgetTenant(const std::string& tenant) {
  std::lock_guard lock(mu_);
  tenant_latency_.erase(tenant);
  tenant_totals_.erase(tenant);
  std::erase_if(start_delays_, [&](const auto& kv) { return kv.first.first == tenant; });
  // The fleet's eviction totals stay counters (never go down): only the tenant's view forgets.
  // A deleted tenant's evictions move to "(deleted)", which no tenant can be named (lowercase
  // letters, digits, '-'), so the fleet's totals keep them.
  if (auto it = evictions_.find(tenant); it != evictions_.end() && !tenant.empty()) {
    for (const auto& [reason, n] : it->second) {
      evictions_["(deleted)"][reason] += n;
    }
    evictions_.erase(it);
  }
}

}  // namespace tessera::server
