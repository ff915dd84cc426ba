#include "audit/sink.h"

#include <algorithm>
#include <iterator>

namespace tessera::audit {

using core::Status;

internal::ChainOptions chainOptions(const SinkOptions& options) {
  return {{options.salt, options.hmac_accessor},
          options.signing_key,
          options.checkpoint_every,
          static_cast<uint64_t>(std::max<int64_t>(0, options.checkpoint_interval.count()))};
}

MemorySink::MemorySink(std::string name, const SinkOptions& options, const core::Clock& clock)
    : name_(std::move(name)), chain_(chainOptions(options), {}, clock) {}

Status MemorySink::store(std::string_view bytes) {
  if (fail_writes_) {
    return {core::StatusCode::kUnavailable, name_ + ": writes are failing (fault injected)"};
  }
  size_t start = 0;
  while (start < bytes.size()) {
    const size_t end = bytes.find('\n', start);
    lines_.emplace_back(bytes.substr(start, end - start));
    start = end + 1;
    ++stats_.records;
  }
  stats_.bytes += bytes.size();
  return Status::ok();
}

SinkStats MemorySink::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void noteFlush(SinkStats& stats, double seconds, bool ok) {
  constexpr size_t kBuckets = std::size(kFlushSecondsBounds) + 1;
  if (stats.flush_buckets.size() != kBuckets) {
    stats.flush_buckets.assign(kBuckets, 0);
  }
  if (!ok) {
    ++stats.flush_failures;
    return;
  }
  size_t i = 0;
  while (i < std::size(kFlushSecondsBounds) && seconds > kFlushSecondsBounds[i]) {
    ++i;
  }
  ++stats.flush_buckets[i];
  ++stats.flushes;
  stats.flush_seconds += seconds;
}

core::Result<WrittenRecord> MemorySink::storeLocked(const internal::RedactedRecord& record) {
  if (closed_) {
    return core::failedPrecondition(name_ + ": the audit sink is closed");
  }
  TESSERA_ASSIGN_OR_RETURN(internal::PendingLines pending, chain_.seal(record));
  TESSERA_RETURN_IF_ERROR(store(pending.bytes));
  WrittenRecord written{chain_.head().seq + 1, pending.bytes.substr(0, pending.bytes.find('\n'))};
  chain_.commit(std::move(pending));
  return written;
}

Status MemorySink::write(const AuditEvent& event, Durability /*durability*/) {
  return append(event).status();
}

core::Result<WrittenRecord> MemorySink::append(const AuditEvent& event) {
  TESSERA_ASSIGN_OR_RETURN(internal::RedactedRecord record, chain_.redact(event));
  std::lock_guard lock(mu_);
  return storeLocked(record);
}

uint64_t MemorySink::durableSeq() const {
  std::lock_guard lock(mu_);
  return chain_.head().seq;
}

Status MemorySink::writeRecovered(std::string_view line) {
  TESSERA_ASSIGN_OR_RETURN(internal::RedactedRecord record, internal::Chain::recovered(line));
  std::lock_guard lock(mu_);
  return storeLocked(record).status();
}

Status MemorySink::close() {
  std::lock_guard lock(mu_);
  if (closed_) {
    return Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(internal::PendingLines pending, chain_.prepareFinalCheckpoint());
  TESSERA_RETURN_IF_ERROR(store(pending.bytes));
  chain_.commit(std::move(pending));
  closed_ = true;
  return Status::ok();
}

std::vector<std::string> MemorySink::lines() const {
  std::lock_guard lock(mu_);
  return lines_;
}

void MemorySink::setFailWrites(bool fail) {
  std::lock_guard lock(mu_);
  fail_writes_ = fail;
}

}  // namespace tessera::audit
