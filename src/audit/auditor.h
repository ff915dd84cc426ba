// Auditor: the server's one entry point to the audit log. It writes every event to every sink
// and fails only when no sink could record it; the server then refuses the request (503), so
// nothing happens that the log did not record ("fail closed", as Vault does).
//
//   std::vector<std::unique_ptr<AuditSink>> sinks;
//   sinks.push_back(std::move(file_sink));
//   TESSERA_ASSIGN_OR_RETURN(auto auditor, Auditor::create(std::move(sinks)));
//   if (!auditor->record(event).isOk()) { /* refuse the request: 503 */ }
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "audit/record.h"
#include "audit/sink.h"
#include "core/status.h"

namespace tessera::audit {

struct SinkHealth {
  std::string name;
  std::string last_error;  // Empty if the sink's last write succeeded.
};

class Auditor {
 public:
  // Fails if `sinks` is empty: an auditor that can record nothing would refuse every request.
  static core::Result<std::unique_ptr<Auditor>> create(
      std::vector<std::unique_ptr<AuditSink>> sinks);

  // Writes `event` to every sink, in order. OK if at least one sink stored it; otherwise
  // UNAVAILABLE with every sink's error. Thread-safe.
  core::Status record(const AuditEvent& event);

  // Which sinks hold an appended record, and the record as each wrote it.
  struct Appended {
    std::vector<bool> sinks;
    std::vector<WrittenRecord> records;  // Per sink; empty (seq 0) where `sinks` is false.
  };
  // Appends `event` to every sink without waiting for stable storage (Durability::kAppended):
  // OK, with the sinks that took it, if at least one did. For a request whose effect is held
  // back until a later record is durable, e.g. a read whose answer is sent only after
  // `recordAfter(response, appended)` succeeds: one disk flush for both records; or one whose
  // change stores a copy of the records with it (the server's submissions, store::Note), which
  // the sinks then flush within their `appended_flush_delay`.
  core::Result<Appended> append(const AuditEvent& event);
  // Writes `event` durably to every sink. OK only if a sink that took `earlier` stored it too,
  // which makes `earlier` durable there as well (a sink flushes its records in order).
  core::Status recordAfter(const AuditEvent& event, const Appended& earlier);
  // recordAfter without a thread waiting for the disk: appends `event` to every sink and calls
  // `done` with what recordAfter would return once the sinks have flushed it (on a sink's
  // flusher thread, or at once on this one). `done` runs exactly once; it must be quick and must
  // not write to the auditor. Many callers' records then share each flush while the threads that
  // wrote them go on with other work.
  void recordAfterAsync(const AuditEvent& event, const Appended& earlier,
                        std::function<void(core::Status)> done);
  // recordAfter that does not wait for the disk at all: OK once `event` is appended to a sink
  // that took `earlier` (for a file, written to the kernel: it survives a crash of this process,
  // not of the machine). The sink flushes both soon by itself (FileSink: within
  // `appended_flush_delay`, or with the next durable record); if that flush fails, the sink
  // refuses every later record. For a read whose answer reveals nothing secret
  // (docs/server.md, `audit_durable_answers`).
  core::Status recordAppendedAfter(const AuditEvent& event, const Appended& earlier);

  // The sinks' names, in order: the index is the sink's in Appended, durableSeq and
  // writeRecovered.
  std::vector<std::string> sinkNames() const;
  // Every record of sink `i` up to this seq is on stable storage.
  uint64_t durableSeq(size_t i) const;
  // AuditSink::writeRecovered on sink `i`: a record it lost, from a copy kept elsewhere.
  core::Status writeRecovered(size_t i, std::string_view line);

  // Closes every sink (final checkpoints); returns the first error. Thread-safe.
  core::Status close();
  // AuditSink::reopen on every sink (SIGHUP after logrotate moved the files away); returns the
  // first error, after trying them all. Thread-safe.
  core::Status reopen();

  // Each sink and the error of its last write, for a health endpoint.
  std::vector<SinkHealth> health() const;
  // Each sink's counts (AuditSink::stats), in sinkNames() order, for metrics. Thread-safe.
  std::vector<SinkStats> stats() const;

 private:
  explicit Auditor(std::vector<std::unique_ptr<AuditSink>> sinks);
  // Writes to every sink; `stored[i]` says whether sink i took the event. With `records`, each
  // sink appends it (AuditSink::append) and `(*records)[i]` is its record as written.
  std::string writeAll(const AuditEvent& event, Durability durability, std::vector<bool>& stored,
                       std::vector<WrittenRecord>* records = nullptr);
  // The sinks that hold both an earlier record and this one.
  static std::vector<size_t> heldByBoth(const std::vector<bool>& stored, const Appended& earlier);
  static core::Status notHeldByBoth(const std::string& errors);
  // Calls `done` once each of `sinks` has answered whenDurable: OK if one flushed, otherwise
  // UNAVAILABLE with `failure` and every error (`errors` first).
  void whenFlushed(const std::vector<size_t>& sinks, std::string errors, std::string failure,
                   std::function<void(core::Status)> done);
  // Keeps a failed flush of sink `i` for health().
  void noteFlush(size_t i, const core::Status& flushed);

  // Before the sinks, so it outlives them: a sink being destroyed may still answer a
  // whenDurable callback, which notes its flush here.
  mutable std::mutex health_mu_;  // Guards health_.
  std::vector<SinkHealth> health_;
  const std::vector<std::unique_ptr<AuditSink>> sinks_;
};

}  // namespace tessera::audit
