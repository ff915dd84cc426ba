#include "audit/auditor.h"

#include <algorithm>

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

std::string Auditor::writeAll(const AuditEvent& event, Durability durability,
                              std::vector<bool>& stored, std::vector<WrittenRecord>* records) {
  std::string errors;
  stored.assign(sinks_.size(), false);
  if (records != nullptr) {
    records->assign(sinks_.size(), WrittenRecord{});
  }
  for (size_t i = 0; i < sinks_.size(); ++i) {
    Status s;
    if (records != nullptr) {  // Appended (durability is kAppended), and the record kept.
      Result<WrittenRecord> written = sinks_[i]->append(event);
      s = written.status();
      if (s.isOk()) {
        (*records)[i] = std::move(written).value();
      }
    } else {
      s = sinks_[i]->write(event, durability);
    }
    stored[i] = s.isOk();
    if (!s.isOk()) {
      errors += (errors.empty() ? "" : "; ") + s.message();
    }
    std::lock_guard lock(health_mu_);
    health_[i].last_error = s.isOk() ? "" : s.message();
  }
  return errors;
}

Status Auditor::record(const AuditEvent& event) {
  std::vector<bool> stored;
  const std::string errors = writeAll(event, Durability::kDurable, stored);
  if (std::find(stored.begin(), stored.end(), true) == stored.end()) {
    return {core::StatusCode::kUnavailable, "no audit sink could record the event: " + errors};
  }
  return Status::ok();
}

Result<Auditor::Appended> Auditor::append(const AuditEvent& event) {
  Appended out;
  const std::string errors = writeAll(event, Durability::kAppended, out.sinks, &out.records);
  if (std::find(out.sinks.begin(), out.sinks.end(), true) == out.sinks.end()) {
    return Status{core::StatusCode::kUnavailable,
                  "no audit sink could record the event: " + errors};
  }
  return out;
}

std::vector<size_t> Auditor::heldByBoth(const std::vector<bool>& stored, const Appended& earlier) {
  std::vector<size_t> both;
  for (size_t i = 0; i < stored.size(); ++i) {
    if (stored[i] && i < earlier.sinks.size() && earlier.sinks[i]) {
      both.push_back(i);
    }
  }
  return both;
}

Status Auditor::notHeldByBoth(const std::string& errors) {
  return {core::StatusCode::kUnavailable, "no audit sink stored both the request and its response" +
                                              (errors.empty() ? std::string() : ": " + errors)};
}

void Auditor::noteFlush(size_t i, const Status& flushed) {
  if (!flushed.isOk()) {
    std::lock_guard lock(health_mu_);
    health_[i].last_error = flushed.message();
  }
}

Status Auditor::recordAfter(const AuditEvent& event, const Appended& earlier) {
  std::vector<bool> stored;
  const std::string errors = writeAll(event, Durability::kDurable, stored);
  return heldByBoth(stored, earlier).empty() ? notHeldByBoth(errors) : Status::ok();
}

Status Auditor::recordAppendedAfter(const AuditEvent& event, const Appended& earlier) {
  std::vector<bool> stored;
  const std::string errors = writeAll(event, Durability::kAppended, stored);
  return heldByBoth(stored, earlier).empty() ? notHeldByBoth(errors) : Status::ok();
}

void Auditor::recordAfterAsync(const AuditEvent& event, const Appended& earlier,
                               std::function<void(Status)> done) {
  std::vector<bool> stored;
  const std::string errors = writeAll(event, Durability::kAppended, stored);
  const std::vector<size_t> both = heldByBoth(stored, earlier);
  if (both.empty()) {
    done(notHeldByBoth(errors));
    return;
  }
  whenFlushed(both, errors, "no audit sink stored both the request and its response",
              std::move(done));
}

void Auditor::whenFlushed(const std::vector<size_t>& sinks, std::string errors, std::string failure,
                          std::function<void(Status)> done) {
  // The answer once every such sink has flushed: OK if one of them did.
  struct Pending {
    std::mutex mu;
    size_t left;
    bool durable = false;
    std::string failure;
    std::string errors;
    std::function<void(Status)> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = sinks.size();
  pending->failure = std::move(failure);
  pending->errors = std::move(errors);
  pending->done = std::move(done);
  for (const size_t i : sinks) {
    sinks_[i]->whenDurable([this, i, pending](const Status& s) {
      noteFlush(i, s);
      std::unique_lock lock(pending->mu);
      pending->durable = pending->durable || s.isOk();
      if (!s.isOk()) {
        pending->errors += (pending->errors.empty() ? "" : "; ") + s.message();
      }
      if (--pending->left > 0) {
        return;
      }
      lock.unlock();
      pending->done(pending->durable ? Status::ok()
                                     : Status{core::StatusCode::kUnavailable,
                                              pending->failure + ": " + pending->errors});
    });
  }
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

Status Auditor::reopen() {
  Status first;
  for (const auto& sink : sinks_) {
    Status s = sink->reopen();
    if (first.isOk() && !s.isOk()) {
      first = s;
    }
  }
  return first;
}

std::vector<std::string> Auditor::sinkNames() const {
  std::vector<std::string> names;
  for (const auto& sink : sinks_) {
    names.push_back(sink->name());
  }
  return names;
}

std::vector<SinkStats> Auditor::stats() const {
  std::vector<SinkStats> out;
  for (const auto& sink : sinks_) {
    out.push_back(sink->stats());
  }
  return out;
}

uint64_t Auditor::durableSeq(size_t i) const { return sinks_.at(i)->durableSeq(); }

Status Auditor::writeRecovered(size_t i, std::string_view line) {
  return sinks_.at(i)->writeRecovered(line);
}

std::vector<SinkHealth> Auditor::health() const {
  std::lock_guard lock(health_mu_);
  return health_;
}

}  // namespace tessera::audit
