// Audit sinks: where audit records go. Each sink keeps its own hash chain (seq, prev_hash) and its
// own HMAC salt, so one event becomes a different, independently verifiable line in each sink.
//
//   auto sink = FileSink::open("/var/lib/tessera/audit.log", options, clock);  // audit/file_sink.h
//   MemorySink mem("test", options, clock);
//   TESSERA_RETURN_IF_ERROR(mem.write(event));  // the record is stored when this returns OK
//
// Sinks are thread-safe: concurrent writes are ordered into one chain per sink. They use a lock
// rather than a writer thread because every caller must know its own record is stored before
// the request may proceed (fail closed); the lock orders the chain and group commit
// (audit/file_sink.h) lets waiting writers share one disk flush. A caller that need not wait
// (an answer held back until its record is durable) appends and asks `whenDurable` instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "audit/crypto.h"
#include "audit/internal/chain.h"
#include "audit/record.h"
#include "core/clock.h"
#include "core/status.h"

namespace tessera::audit {

// How a sink turns events into records.
struct SinkOptions {
  std::string salt = {};      // HMAC key for sensitive values; required, keep it secret.
  bool hmac_accessor = true;  // Write token accessors HMAC'd, as Vault does by default.
  // Signs a checkpoint record every `checkpoint_every` records and on close. Null: no
  // checkpoints (the chain still links every record, but nothing is signed).
  std::shared_ptr<const SigningKey> signing_key = nullptr;
  uint64_t checkpoint_every = 1000;  // 0: a checkpoint only on close.
  // FileSink: a checkpoint at most this long after the first record that follows the last one
  // (0: none on a timer). Each checkpoint says so ("interval_ms"), which is how `tessera audit
  // verify` tells a live server's young unsigned tail from one left behind (audit/verify.h).
  std::chrono::milliseconds checkpoint_interval{0};
};

// When a write returns.
enum class Durability {
  kDurable,   // Once the record (and every record appended before it) is on stable storage.
  kAppended,  // Once the record is in the chain; it becomes durable with the next durable write
              // to the same sink, a whenDurable, its close, or (FileSink) a flush of its own
              // shortly after (FileSinkOptions::appended_flush_delay). For a record whose
              // effect waits on a later one, or that may be answered before it is durable.
};

// What a sink has done since it opened, for the server's metrics (docs/metrics.md): lines
// written (records and checkpoints) and their bytes, and its flushes to stable storage with how
// long each took: a count per bucket of kFlushSecondsBounds (not cumulative), the last bucket
// for those slower than every bound.
struct SinkStats {
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t flushes = 0;
  uint64_t flush_failures = 0;
  double flush_seconds = 0;  // Sum over the flushes.
  std::vector<uint64_t> flush_buckets;
};
inline constexpr double kFlushSecondsBounds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
// Notes one flush that took `seconds` (ok: it succeeded) in `stats`.
void noteFlush(SinkStats& stats, double seconds, bool ok);

// A record as a sink wrote it.
struct WrittenRecord {
  uint64_t seq = 0;
  std::string line;  // Without its newline.
};

class AuditSink {
 public:
  virtual ~AuditSink() = default;

  // A short name for error messages and health ("file:/var/log/tessera/audit.log").
  virtual const std::string& name() const = 0;

  // Appends the record for `event` (and a checkpoint when one is due) to this sink's chain. OK
  // means the record is stored (for a file, with kDurable: on stable storage); an error means it
  // is not part of the chain. Thread-safe.
  virtual core::Status write(const AuditEvent& event,
                             Durability durability = Durability::kDurable) = 0;

  // Calls `done` once every record appended to this sink so far is on stable storage: with OK,
  // or with the error that keeps them from it (the sink failed, or was closed first). For an
  // answer held back until its record is durable, without a thread waiting meanwhile. `done`
  // runs exactly once, at once on this thread or later on a thread of the sink's (before close
  // or destruction returns); it must be quick and must not write to this sink. Thread-safe.
  virtual void whenDurable(std::function<void(core::Status)> done) = 0;

  // write(event, Durability::kAppended) that also returns the record as written: for a copy
  // kept elsewhere, on stable storage, until this sink has it there too (durableSeq). A
  // checkpoint that follows it is not part of `line`.
  virtual core::Result<WrittenRecord> append(const AuditEvent& event) = 0;

  // Every record of this sink up to this seq is on stable storage.
  virtual uint64_t durableSeq() const = 0;

  // Appends, durably, a record of this sink's stream that the stream lost (the tail of its file
  // in a crash of the machine, before a flush), from a copy kept elsewhere (`line`, as append
  // returned it). It goes in as a new record: the old one's fields, a seq, time and hashes of
  // its own, and "recovered": the old seq, time and hash. Fails if `line` is not a record.
  virtual core::Status writeRecovered(std::string_view line) = 0;

  // Writes the final checkpoint (if there is a signing key and records since the last one) and
  // stops: later writes fail. Thread-safe; a second close is a no-op.
  virtual core::Status close() = 0;

  // What it has written and flushed so far (all zero for a sink that does not count).
  // Thread-safe.
  virtual SinkStats stats() const { return {}; }

  // Reopens the sink's storage after someone else moved it away (SIGHUP after logrotate); a
  // no-op for a sink with nothing to reopen. Thread-safe.
  virtual core::Status reopen() { return core::Status::ok(); }
};

// Keeps the lines in memory: for tests and for a process that ships records elsewhere. Can be
// told to fail writes, to test fail-closed behaviour.
class MemorySink final : public AuditSink {
 public:
  MemorySink(std::string name, const SinkOptions& options, const core::Clock& clock);

  const std::string& name() const override { return name_; }
  core::Status write(const AuditEvent& event,
                     Durability durability = Durability::kDurable) override;
  // Records are stored when write returns: `done` runs at once, with OK.
  void whenDurable(std::function<void(core::Status)> done) override { done(core::Status::ok()); }
  core::Result<WrittenRecord> append(const AuditEvent& event) override;
  uint64_t durableSeq() const override;
  core::Status writeRecovered(std::string_view line) override;
  core::Status close() override;
  SinkStats stats() const override;

  // Every line written so far, each without its newline.
  std::vector<std::string> lines() const;
  // While set, writes fail with UNAVAILABLE and nothing is stored.
  void setFailWrites(bool fail);

 private:
  core::Status store(std::string_view bytes);
  // Seals `record`, stores it and moves the chain on; returns the record's seq and line.
  core::Result<WrittenRecord> storeLocked(const internal::RedactedRecord& record);

  const std::string name_;
  mutable std::mutex mu_;  // Guards everything below.
  internal::Chain chain_;
  std::vector<std::string> lines_;
  SinkStats stats_;
  bool fail_writes_ = false;
  bool closed_ = false;
};

// The chain options a sink derives from its `SinkOptions`.
internal::ChainOptions chainOptions(const SinkOptions& options);

}  // namespace tessera::audit
