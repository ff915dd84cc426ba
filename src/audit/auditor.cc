#include "audit/auditor.h"

namespace tessera::audit {

using core::Result;
using core::Status;

Result<std::unique_ptr<Auditor>> Auditor::create(std::vector<std::unique_ptr<AuditSink>> sinks) {
  if (sinks.empty()) {
    return core::invalidArgument("the auditor needs at least one audit sink");
  }
  for (const auto& sink : sinks) {
    if (sink == nullptr) {
      return core::invalidArgument("the auditor was given a null audit sink");
    }
  }
  return std::unique_ptr<Auditor>(new Auditor(std::move(sinks)));
}

Auditor::Auditor(std::vector<std::unique_ptr<AuditSink>> sinks) : sinks_(std::move(sinks)) {
  for (const auto& sink : sinks_) {
    health_.push_back({sink->name(), ""});
  }
}

Status Auditor::record(const AuditEvent& event) {
  bool stored = false;
  std::string errors;
  for (size_t i = 0; i < sinks_.size(); ++i) {
    const Status s = sinks_[i]->write(event);
    stored |= s.isOk();
    if (!s.isOk()) {
      errors += (errors.empty() ? "" : "; ") + s.message();
    }
    std::lock_guard lock(health_mu_);
    health_[i].last_error = s.isOk() ? "" : s.message();
  }
  if (!stored) {
    return {core::StatusCode::kUnavailable, "no audit sink could record the event: " + errors};
  }
  return Status::ok();
}

Status Auditor::close() {
  Status first;
  for (const auto& sink : sinks_) {
    Status s = sink->close();
    if (first.isOk() && !s.isOk()) {
      first = s;
    }
  }
  return first;
}

std::vector<SinkHealth> Auditor::health() const {
  std::lock_guard lock(health_mu_);
  return health_;
}

}  // namespace tessera::audit
