// FileSink: an audit stream in an append-only file of JSON lines (the operator stream).
//
//   SinkOptions options{.salt = salt, .signing_key = key};
//   TESSERA_ASSIGN_OR_RETURN(auto sink, FileSink::open(path, {options}, clock));
//   TESSERA_RETURN_IF_ERROR(sink->write(event));  // durable (fdatasync'd) when this returns OK
//   sink->whenDurable([](core::Status s) { ... });  // later, on the sink's flusher thread
//   TESSERA_RETURN_IF_ERROR(sink->close());       // final signed checkpoint
//
// Opening an existing file resumes its chain from its last record (only that record is read and
// checked; run `verifyAuditFile` for the whole file). The file is locked (flock) while open, so
// two sinks never interleave one chain.
//
// Checkpoints: every `checkpoint_every` records, on close, and (with `sink.checkpoint_interval`)
// on the sink's flusher thread at most that long after the first record that follows the last
// one, so a live log's unsigned tail is never older than the interval. Each durable checkpoint
// is copied to `checkpoint_copy`.
//
// Rotation: with `rotate_bytes` or `rotate_interval` set, a record that would go into a file
// that has reached that size or age goes into a new file instead. The old file ends with a signed
// checkpoint marked "file": "end" and is renamed to `<path>.<UTC time of the rotation>`
// (`audit.log.20240501T123456.789Z`, with `-2`, `-3`, ... if that name is taken); the new file,
// under `path`, starts with a checkpoint marked "file": "start" whose prev_hash is the old file's
// last hash, so one chain runs through the whole set (`verifyAuditFiles`). `retain_files` keeps
// only that many rotated files (the oldest go). `reopen` does the same for a file that someone
// else renamed (logrotate, then SIGHUP): the renamed file gets the end checkpoint and a new file
// is started under `path`. Without a signing key the files are linked by prev_hash alone.
//
// Failures: a write that fails (disk full, file size limit, I/O error) is rolled back by
// truncating the file to its last complete record, so the file stays a valid chain; if even that
// fails, or an fdatasync fails (the kernel may then have dropped the data), the sink stops taking
// records ("broken") until it is reopened, which re-reads what is really on disk.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "audit/internal/chain.h"
#include "audit/sink.h"
#include "core/clock.h"
#include "core/status.h"

namespace tessera::audit {

enum class SyncMode {
  // fdatasync after each record, holding the sink's lock: simplest, one disk flush per record.
  kEveryRecord,
  // Group commit: a writer appends its record, then waits until some fdatasync that started after
  // the append has finished; one flush makes every record appended before it durable, so
  // concurrent writers share flushes. Same guarantee per record, far more records per second
  // under concurrency.
  kGroupCommit,
};

struct FileSinkOptions {
  SinkOptions sink = {};
  SyncMode sync = SyncMode::kGroupCommit;
  // How the file is flushed: ::fdatasync when null. Tests pass one that fails (-1 with errno
  // set), since no real disk can be made to fail on demand.
  std::function<int(int fd)> fdatasync = nullptr;
  // A record written with Durability::kAppended that no durable write or whenDurable flushes
  // first is flushed by the flusher thread this long after it was appended (plus one flush).
  // Every flush briefly slows the appends that meet it (ext4 allocates the blocks and commits
  // its journal meanwhile), so fewer flushes keep the latency of answers that do not wait for
  // one low; the cost is how long such records may sit in the kernel's cache only, where a
  // crash of the machine (not of the server) loses them (docs/benchmarks.md).
  std::chrono::milliseconds appended_flush_delay{50};
  // Where a copy of the latest durable checkpoint is kept (one line, replaced atomically after
  // each checkpoint is on disk); empty: nowhere. `tessera audit verify` finds it beside the log
  // (`<log>.checkpoint`) and fails a log that lacks it or holds another record at its seq: a
  // log cut back to before its last checkpoint (audit/verify.h). Kept where the log's writer
  // cannot change it (another machine), it also holds against someone who can.
  std::string checkpoint_copy = {};
  // Rotation (see above): a new file once the live one holds this many bytes (0: never by size),
  // or once its first record is this old by the clock's wall time (0: never by age). Checked
  // when a record comes, so an idle log is not rotated.
  uint64_t rotate_bytes = 0;
  std::chrono::milliseconds rotate_interval{0};
  // Rotated files kept beside the log (0: all). Only the sink's own names
  // (`<path>.<YYYYMMDDTHHMMSS.mmmZ>[-N]`) count and go; files renamed by others stay.
  uint32_t retain_files = 0;
};

// Whether `name` (a file name, not a path) is one FileSink gives the log `base` (a file name) when
// it rotates it; `order` gets a key that sorts rotated files oldest first.
bool isRotatedName(std::string_view base, std::string_view name, std::string* order = nullptr);

class FileSink final : public AuditSink {
 public:
  // Opens or creates (mode 0600) the file at `path` and resumes its chain. Fails if the path is
  // not a regular file, another sink holds it, the salt is empty, the last line is not a
  // complete, self-consistent record ("the last record is incomplete ..."), or the checkpoint
  // copy holds a seq past the log's end (the log was cut back: its evidence is kept).
  static core::Result<std::unique_ptr<FileSink>> open(const std::string& path,
                                                      const FileSinkOptions& options,
                                                      const core::Clock& clock);
  // Closes the file without a final checkpoint if `close` was not called (after flushing what
  // was appended).
  ~FileSink() override;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  const std::string& name() const override { return name_; }
  core::Status write(const AuditEvent& event,
                     Durability durability = Durability::kDurable) override;
  // Group commit: `done` waits on a flusher thread of the sink's own (started by the first
  // call, or the first kAppended write), which flushes as soon as no writer is flushing, so
  // every record appended meanwhile shares the next flush. kEveryRecord: flushes at once, on the
  // caller's thread.
  void whenDurable(std::function<void(core::Status)> done) override;
  core::Result<WrittenRecord> append(const AuditEvent& event) override;
  uint64_t durableSeq() const override;
  core::Status writeRecovered(std::string_view line) override;
  core::Status close() override;
  SinkStats stats() const override;
  // For logrotate: if the file at `path` is no longer the one being written (it was renamed
  // away), ends the old file with a checkpoint marked "file": "end" and goes on in a new file at
  // `path` (missing or empty: logrotate's `create`) that starts with one marked "start". OK
  // and nothing done if `path` is still the file being written. Fails, and goes on writing the
  // old file, if `path` holds a non-empty file of its own. Thread-safe.
  core::Status reopen() override;
  // Rotates now, whatever the size or age (the rotation `rotate_bytes` would do). Thread-safe.
  core::Status rotate();

  // The head of the chain as stored: the last record's seq and hash.
  internal::ChainHead head() const;

 private:
  FileSink(std::string path, int fd, uint64_t size, const FileSinkOptions& options,
           internal::Chain chain, const core::Clock& clock);

  // Whether the next record goes into a new file (rotate_bytes, rotate_interval).
  bool rotationDueLocked() const;
  // Ends the current file with an "end" checkpoint and starts a new one at `path_` with a
  // "start" checkpoint: renaming the current file away first (`reopen` false), or after someone
  // else did (`reopen` true). On failure the sink goes on with the current file (or is broken).
  core::Status rotateLocked(std::unique_lock<std::mutex>& lock, bool reopen);
  // Removes the oldest rotated files beyond `retain_files_`.
  void pruneRotatedLocked();

  // Appends `bytes` at the end; on failure truncates back to `size_` (or marks the sink broken).
  core::Status appendLocked(std::string_view bytes);
  // Seals and appends `record` (and a checkpoint when one is due); its ticket is `appended_`.
  // Rotates first when a rotation is due.
  core::Result<WrittenRecord> appendRecordLocked(std::unique_lock<std::mutex>& lock,
                                                 const internal::RedactedRecord& record);
  // Has the flusher flush what was appended within `appended_flush_delay_`.
  void flushSoonLocked();
  // After `pending` (lines just sealed, not yet committed) is appended: notes a checkpoint it
  // ends with (for the copy), or starts the clock of the checkpoint interval.
  void noteSealedLocked(const internal::PendingLines& pending);
  // The flusher's checkpoint on the interval: appends one and flushes it.
  void timedCheckpointLocked(std::unique_lock<std::mutex>& lock);
  // Writes the latest durable checkpoint to `checkpoint_copy` (without the lock meanwhile).
  void copyCheckpointLocked(std::unique_lock<std::mutex>& lock);
  // Replaces the copy's file with `line` if `seq` is newer than what it holds. Takes copy_mu_.
  void writeCopy(uint64_t seq, const std::string& line);
  // fdatasync on the caller's thread with the lock held, timed for stats(); a failure breaks
  // the sink.
  core::Status timedSyncLocked();
  // Makes everything appended up to `ticket` durable (see SyncMode).
  core::Status syncLocked(std::unique_lock<std::mutex>& lock, uint64_t ticket);
  // Flushes everything appended so far, without the lock meanwhile; requires !syncing_.
  void leadFlushLocked(std::unique_lock<std::mutex>& lock);
  // The flusher thread: runs whenDurable callbacks once their records are durable, and
  // flushes kAppended records within `appended_flush_delay_`.
  void flushLoop();
  void startFlusherLocked();
  // Stops the flusher (after it has answered every callback) and joins it.
  void stopFlusher(std::unique_lock<std::mutex>& lock);
  core::Status brokenError() const;
  // For a record that was appended but not flushed when the sink closed.
  core::Status closedError() const;

  const std::string path_;
  const std::string name_;
  const SyncMode sync_;
  const std::function<int(int fd)> fdatasync_;  // Never null.
  const std::chrono::milliseconds appended_flush_delay_;
  const std::chrono::milliseconds checkpoint_interval_;  // 0: no timer.
  const std::string copy_path_;                          // FileSinkOptions::checkpoint_copy.
  const core::Clock& clock_;
  const uint64_t rotate_bytes_;                      // 0: no rotation by size.
  const std::chrono::milliseconds rotate_interval_;  // 0: no rotation by age.
  const uint32_t retain_files_;                      // 0: keep every rotated file.
  std::mutex copy_mu_;          // Guards the two below; taken after mu_ (if both), or alone.
  uint64_t copy_file_seq_ = 0;  // The seq of the checkpoint in the copy's file.
  bool copy_failed_ = false;    // The last copy failed (said once on stderr until one works).
  mutable std::mutex mu_;       // Guards everything below.
  std::condition_variable synced_cv_;  // Signalled when `synced_` or `broken_` changes.
  int fd_;
  uint64_t size_;            // Bytes of complete records in the file.
  uint64_t appended_ = 0;    // Appends so far (tickets); the n-th append has ticket n.
  uint64_t synced_ = 0;      // Every append with ticket <= this is durable.
  uint64_t synced_seq_ = 0;  // And every record with seq <= this.
  bool syncing_ = false;     // A writer is in fdatasync (without the lock).
  std::string broken_;       // Why the sink stopped taking records; empty if it has not.
  bool closed_ = false;
  SinkStats stats_;
  internal::Chain chain_;
  struct Waiter {
    uint64_t ticket;  // Answered once `synced_` reaches it.
    std::function<void(core::Status)> done;
  };
  std::deque<Waiter> waiters_;          // whenDurable callbacks, in ticket order.
  std::condition_variable flusher_cv_;  // Signalled for the flusher: a waiter, a flush, a stop.
  bool stopping_ = false;               // The flusher answers what is left and ends.
  // When the oldest record that no flush has started on yet was appended (kAppended only).
  std::optional<std::chrono::steady_clock::time_point> unflushed_since_;
  // When the first record after the last checkpoint was appended (or the sink opened on a log
  // whose tail is unsigned); unset when every record is signed or nothing times checkpoints.
  std::optional<std::chrono::steady_clock::time_point> unsigned_since_;
  uint64_t last_checkpoint_seq_ = 0;  // The newest checkpoint appended, and its line.
  std::string last_checkpoint_line_;
  uint64_t copied_seq_ = 0;        // The newest checkpoint written to the copy (or being written).
  core::WallTime file_started_{};  // When the live file's first record was written.
  uint64_t file_start_bytes_ = 0;  // Bytes of its "start" checkpoint (none: 0).
  uint64_t file_end_seq_ = 0;      // The seq of the last "end" checkpoint written (0: none).
  // After a rotation failed, the next try waits until then (a full disk is not retried on
  // every record).
  std::optional<std::chrono::steady_clock::time_point> rotate_retry_at_;

  std::thread flusher_;  // Started by the first whenDurable or kAppended write.
};

}  // namespace tessera::audit
