#include "audit/file_sink.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/rfc3339.h"

namespace tessera::audit {
namespace {

using core::Result;
using core::Status;

constexpr uint64_t kMaxRecordBytes = 64ull << 20;

using core::unavailable;

std::string errnoText(int err) { return std::strerror(err); }

Status fsyncParentDirectory(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) {
    dir = ".";
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return unavailable(dir.string() +
                       ": cannot open the directory to sync it: " + errnoText(errno));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return unavailable(dir.string() + ": cannot sync the directory: " + errnoText(err));
  }
  return Status::ok();
}

// Replaces the file at `path` with `content`, so that a reader sees the old or the new content
// whole, and the new one survives a crash once this returns OK.
Status replaceFile(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return unavailable(tmp + ": cannot create: " + errnoText(errno));
  }
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return unavailable(tmp + ": cannot write: " + errnoText(err));
    }
    done += static_cast<size_t>(n);
  }
  const int rc = ::fdatasync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return unavailable(tmp + ": cannot flush: " + errnoText(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return unavailable(path + ": cannot replace: " + errnoText(errno));
  }
  return fsyncParentDirectory(path);
}

// The last line of the file (without its newline), or nullopt for an empty file.
Result<std::optional<std::string>> readLastLine(int fd, uint64_t size, const std::string& path) {
  if (size == 0) {
    return std::optional<std::string>();
  }
  char last = 0;
  if (::pread(fd, &last, 1, static_cast<off_t>(size - 1)) != 1) {
    return unavailable(path + ": cannot read: " + errnoText(errno));
  }
  if (last != '\n') {
    return core::failedPrecondition(
        path +
        ": the last record is incomplete (the file does not end with a newline: a write was "
        "interrupted or the file was truncated); run `tessera audit verify " +
        path + "` and repair the tail before reopening");
  }
  // Read backwards from the final newline to the one before it.
  std::string line;
  uint64_t end = size - 1;  // Exclusive end of the unread part of the last line.
  char buf[64 * 1024];
  while (end > 0) {
    const uint64_t start = end > sizeof buf ? end - sizeof buf : 0;
    const ssize_t n = ::pread(fd, buf, end - start, static_cast<off_t>(start));
    if (n != static_cast<ssize_t>(end - start)) {
      return unavailable(path + ": cannot read: " + errnoText(errno));
    }
    const std::string_view chunk(buf, static_cast<size_t>(n));
    const size_t nl = chunk.rfind('\n');
    if (nl != std::string_view::npos) {
      line.insert(0, chunk.substr(nl + 1));
      break;
    }
    line.insert(0, chunk);
    if (line.size() > kMaxRecordBytes) {
      return core::failedPrecondition(path + ": the last line is over 64 MiB: not an audit log");
    }
    end = start;
  }
  return std::optional<std::string>(std::move(line));
}

// The first line of the file (without its newline), or nullopt if it has no complete line.
std::optional<std::string> readFirstLine(int fd, uint64_t size) {
  std::string line;
  char buf[64 * 1024];
  uint64_t at = 0;
  while (at < size && line.size() <= kMaxRecordBytes) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(at));
    if (n <= 0) {
      return std::nullopt;
    }
    const std::string_view chunk(buf, static_cast<size_t>(n));
    const size_t nl = chunk.find('\n');
    if (nl != std::string_view::npos) {
      line.append(chunk.substr(0, nl));
      return line;
    }
    line.append(chunk);
    at += static_cast<uint64_t>(n);
  }
  return std::nullopt;
}

// `2024-05-01T12:34:56.789Z` -> `20240501T123456.789Z`: a file name suffix that sorts by time.
std::string rotationStamp(core::WallTime t) {
  std::string stamp = core::formatRfc3339Millis(t);
  stamp.erase(
      std::remove_if(stamp.begin(), stamp.end(), [](char c) { return c == '-' || c == ':'; }),
      stamp.end());
  return stamp;
}

bool allDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool isRotatedName(std::string_view base, std::string_view name, std::string* order) {
  if (name.size() <= base.size() + 1 || name.substr(0, base.size()) != base ||
      name[base.size()] != '.') {
    return false;
  }
  const std::string_view rest = name.substr(base.size() + 1);
  // YYYYMMDDTHHMMSS.mmmZ, then optionally -N.
  constexpr size_t kStamp = 20;
  if (rest.size() < kStamp || !allDigits(rest.substr(0, 8)) || rest[8] != 'T' ||
      !allDigits(rest.substr(9, 6)) || rest[15] != '.' || !allDigits(rest.substr(16, 3)) ||
      rest[19] != 'Z') {
    return false;
  }
  const std::string_view suffix = rest.substr(kStamp);
  if (!suffix.empty() && (suffix[0] != '-' || !allDigits(suffix.substr(1)) || suffix.size() > 10)) {
    return false;
  }
  if (order != nullptr) {
    // The stamp, then the suffix's number padded, so that -10 sorts after -9.
    const std::string n = suffix.empty() ? "1" : std::string(suffix.substr(1));
    *order = std::string(rest.substr(0, kStamp)) + std::string(10 - n.size(), '0') + n;
  }
  return true;
}

Result<std::unique_ptr<FileSink>> FileSink::open(const std::string& path,
                                                 const FileSinkOptions& options,
                                                 const core::Clock& clock) {
  if (options.sink.salt.empty()) {
    return core::invalidArgument(path + ": the audit sink needs a non-empty HMAC salt");
  }
  struct stat st {};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return unavailable(path + ": cannot open the audit log: " + errnoText(errno));
  }
  auto fail = [fd](Status s) {
    ::close(fd);
    return s;
  };
  if (::fstat(fd, &st) != 0) {
    return fail(unavailable(path + ": cannot stat: " + errnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(core::failedPrecondition(path + ": not a regular file"));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return fail(core::failedPrecondition(
          path +
          ": the audit log is already open in another audit sink (this process or another)"));
    }
    return fail(unavailable(path + ": cannot lock: " + errnoText(errno)));
  }
  if (!existed) {
    // The new file's directory entry must be durable too, or a crash could lose the whole log.
    if (Status s = fsyncParentDirectory(path); !s.isOk()) {
      return fail(s);
    }
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto last = readLastLine(fd, size, path);
  if (!last.isOk()) {
    return fail(last.status());
  }
  internal::ChainHead head;
  bool ends_with_file_end = false;
  if (last->has_value()) {
    auto rec = parseRecordLine(**last);
    if (!rec.isOk()) {
      return fail(core::failedPrecondition(
          path + ": the last record is corrupt: " + rec.status().message() +
          "; run `tessera audit verify " + path + "`"));
    }
    head.seq = rec->seq;
    head.hash = rec->hash;
    // Unknown how many records follow the last checkpoint; 1 makes close() sign the tail.
    head.since_checkpoint = rec->type == "checkpoint" ? 0 : 1;
    ends_with_file_end =
        rec->type == "checkpoint" && rec->json["checkpoint"].value("file", "") == "end";
  }
  // The copy of the last checkpoint (kept since the log's last flush that made one durable)
  // never names a seq past the log's end, unless records were cut off the log: then the copy
  // is the evidence, and the sink does not write over it.
  uint64_t copy_seq = 0;
  if (!options.checkpoint_copy.empty() && std::filesystem::exists(options.checkpoint_copy)) {
    std::ifstream in(options.checkpoint_copy, std::ios::binary);
    std::string line;
    std::getline(in, line);
    auto rec = parseRecordLine(line);
    if (!rec.isOk() || rec->type != "checkpoint") {
      return fail(core::failedPrecondition(
          options.checkpoint_copy + ": not a copy of an audit checkpoint (" +
          (rec.isOk() ? "a " + rec->type + " record" : rec.status().message()) +
          "); move it away if it belongs to another log"));
    }
    copy_seq = rec->seq;
    if (copy_seq > head.seq) {
      return fail(core::failedPrecondition(fmt::format(
          "{}: the log ends at seq {}, but its last checkpoint was seq {} ({}): records were "
          "cut off the log. Run `tessera audit verify {}`; to start a new log, move both away",
          path, head.seq, copy_seq, options.checkpoint_copy, path)));
    }
  }
  // What is in the file now may be in the kernel's cache only (the process that wrote it was
  // killed before a flush): flushed now, it counts as durable (durableSeq) from the start.
  if (::fdatasync(fd) != 0) {
    return fail(unavailable(path + ": cannot flush: " + errnoText(errno)));
  }
  const uint64_t durable_seq = head.seq;
  const bool unsigned_tail = head.since_checkpoint > 0;
  internal::Chain chain(chainOptions(options.sink), std::move(head), clock);
  auto sink =
      std::unique_ptr<FileSink>(new FileSink(path, fd, size, options, std::move(chain), clock));
  sink->synced_seq_ = durable_seq;
  sink->copy_file_seq_ = copy_seq;
  sink->file_started_ = clock.wallNow();
  if (size > 0) {
    // The live file's age counts from its first record.
    if (auto first = readFirstLine(fd, size)) {
      auto rec = parseRecordLine(*first);
      if (rec.isOk()) {
        if (auto t = core::parseRfc3339(rec->json.value("time", ""))) {
          sink->file_started_ = *t;
        }
        if (rec->type == "checkpoint" && rec->json["checkpoint"].value("file", "") == "start") {
          sink->file_start_bytes_ = first->size() + 1;
        }
      }
    }
  }
  if (size == 0 && sink->checkpoint_interval_.count() > 0 && sink->chain_.signs()) {
    // A new log states its writer's checkpoint interval from its first line, so that a reader
    // can judge its first unsigned records too.
    std::unique_lock lock(sink->mu_);
    auto genesis = sink->chain_.prepareCheckpoint();
    if (!genesis.isOk()) {
      return genesis.status();
    }
    TESSERA_RETURN_IF_ERROR(sink->appendLocked(genesis->bytes));
    sink->noteSealedLocked(*genesis);
    sink->chain_.commit(std::move(genesis).value());
    ++sink->appended_;
    TESSERA_RETURN_IF_ERROR(sink->syncLocked(lock, sink->appended_));
  }
  {
    std::lock_guard lock(sink->mu_);
    sink->copied_seq_ = copy_seq;
    if (last->has_value() && !unsigned_tail) {
      // The log ends with a checkpoint: its copy is brought up to date (a log written before
      // copies were kept has none).
      sink->last_checkpoint_seq_ = durable_seq;
      sink->last_checkpoint_line_ = **last;
    }
    if (sink->last_checkpoint_seq_ > copy_seq && !sink->copy_path_.empty()) {
      sink->startFlusherLocked();
    }
    if (unsigned_tail && sink->checkpoint_interval_.count() > 0 && sink->chain_.signs()) {
      // A tail left unsigned (the writer was killed): signed within the interval from now.
      sink->unsigned_since_ = std::chrono::steady_clock::now();
      sink->startFlusherLocked();
    }
  }
  if (ends_with_file_end) {
    // A rotation was cut short (the process died after the old file's end checkpoint): it is
    // finished now, so that no record follows an "end" checkpoint in its file.
    sink->file_end_seq_ = durable_seq;
    std::unique_lock lock(sink->mu_);
    TESSERA_RETURN_IF_ERROR(sink->rotateLocked(lock, /*reopen=*/false));
  }
  return sink;
}

FileSink::FileSink(std::string path, int fd, uint64_t size, const FileSinkOptions& options,
                   internal::Chain chain, const core::Clock& clock)
    : path_(std::move(path)),
      name_("file:" + path_),
      sync_(options.sync),
      fdatasync_(options.fdatasync != nullptr ? options.fdatasync
                                              : [](int fd) { return ::fdatasync(fd); }),
      appended_flush_delay_(std::max(std::chrono::milliseconds(0), options.appended_flush_delay)),
      checkpoint_interval_(
          std::max(std::chrono::milliseconds(0), options.sink.checkpoint_interval)),
      copy_path_(options.checkpoint_copy),
      clock_(clock),
      rotate_bytes_(options.rotate_bytes),
      rotate_interval_(std::max(std::chrono::milliseconds(0), options.rotate_interval)),
      retain_files_(options.retain_files),
      fd_(fd),
      size_(size),
      chain_(std::move(chain)) {}

FileSink::~FileSink() {
  std::unique_lock lock(mu_);
  stopFlusher(lock);  // Callbacks still waiting are answered (after a last flush) before it goes.
  synced_cv_.wait(lock, [this] { return !syncing_; });
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

internal::ChainHead FileSink::head() const {
  std::lock_guard lock(mu_);
  return chain_.head();
}

Status FileSink::brokenError() const {
  return unavailable(name_ + ": the audit sink stopped taking records: " + broken_ +
                     "; reopen it to resume from what is on disk");
}

Status FileSink::closedError() const {
  return unavailable(name_ + ": the audit sink was closed before the record was flushed");
}

Status FileSink::appendLocked(std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      // Take back a partial record so the file stays a chain of complete records.
      if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
        broken_ = "a partial record could not be removed after a failed write (" + errnoText(err) +
                  ", then ftruncate: " + errnoText(errno) + ")";
        return brokenError();
      }
      return unavailable(name_ + ": cannot write the audit record: " + errnoText(err));
    }
    done += static_cast<size_t>(n);
  }
  size_ += bytes.size();
  stats_.bytes += bytes.size();
  stats_.records += static_cast<uint64_t>(std::count(bytes.begin(), bytes.end(), '\n'));
  return Status::ok();
}

Status FileSink::timedSyncLocked() {
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = fdatasync_(fd_);
  const int err = errno;
  noteFlush(stats_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            rc == 0);
  if (rc != 0) {
    broken_ = "fdatasync failed: " + errnoText(err);
    return brokenError();
  }
  return Status::ok();
}

SinkStats FileSink::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

Status FileSink::syncLocked(std::unique_lock<std::mutex>& lock, uint64_t ticket) {
  if (sync_ == SyncMode::kEveryRecord) {
    TESSERA_RETURN_IF_ERROR(timedSyncLocked());
    synced_ = std::max(synced_, ticket);
    synced_seq_ = chain_.head().seq;
    flusher_cv_.notify_one();  // A checkpoint durable now may be due for its copy.
    return Status::ok();
  }
  while (synced_ < ticket) {
    if (!broken_.empty()) {
      return brokenError();
    }
    if (syncing_) {
      synced_cv_.wait(lock);
      continue;
    }
    if (closed_) {
      return closedError();
    }
    leadFlushLocked(lock);
  }
  return Status::ok();
}

void FileSink::leadFlushLocked(std::unique_lock<std::mutex>& lock) {
  // Without the lock, so others keep appending (and join the next flush).
  syncing_ = true;
  const uint64_t target = appended_;
  const uint64_t target_seq = chain_.head().seq;
  unflushed_since_.reset();  // This flush covers every record appended so far.
  const int fd = fd_;        // close() waits for syncing_ to clear, so fd stays open.
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = fdatasync_(fd);
  const int err = errno;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lock.lock();
  noteFlush(stats_, seconds, rc == 0);
  syncing_ = false;
  if (rc != 0) {
    broken_ = "fdatasync failed: " + errnoText(err);
  } else {
    synced_ = std::max(synced_, target);
    synced_seq_ = std::max(synced_seq_, target_seq);
  }
  synced_cv_.notify_all();
  flusher_cv_.notify_one();
}

void FileSink::whenDurable(std::function<void(Status)> done) {
  std::unique_lock lock(mu_);
  Status now = Status::ok();
  if (!broken_.empty()) {
    now = brokenError();
  } else if (synced_ < appended_ && closed_) {
    now = closedError();
  } else if (synced_ < appended_ && sync_ == SyncMode::kEveryRecord) {
    now = syncLocked(lock, appended_);
  } else if (synced_ < appended_) {
    waiters_.push_back({appended_, std::move(done)});
    startFlusherLocked();
    flusher_cv_.notify_one();
    return;
  }
  lock.unlock();
  done(now);
}

void FileSink::startFlusherLocked() {
  if (!flusher_.joinable()) {
    flusher_ = std::thread([this] { flushLoop(); });
  }
}

void FileSink::flushLoop() {
  std::unique_lock lock(mu_);
  std::vector<std::pair<std::function<void(Status)>, Status>> ready;
  // Whether appended records without a waiter wait for a flush of the flusher's own, and
  // whether it is due (at once when stopping). A broken or closed sink flushes nothing more.
  auto appended_pending = [this] {
    return unflushed_since_ && !syncing_ && broken_.empty() && !closed_;
  };
  auto appended_due = [&] {
    return appended_pending() && (stopping_ || std::chrono::steady_clock::now() >=
                                                   *unflushed_since_ + appended_flush_delay_);
  };
  // A checkpoint on the interval: records wait unsigned, and nothing keeps one from being
  // written now (close writes its own).
  auto checkpoint_pending = [this] {
    return unsigned_since_ && !syncing_ && broken_.empty() && !closed_ && !stopping_;
  };
  auto checkpoint_due = [&] {
    return checkpoint_pending() &&
           std::chrono::steady_clock::now() >= *unsigned_since_ + checkpoint_interval_;
  };
  // A durable checkpoint not yet in the copy's file.
  auto copy_due = [this] {
    return !copy_path_.empty() && last_checkpoint_seq_ > copied_seq_ &&
           synced_seq_ >= last_checkpoint_seq_;
  };
  while (true) {
    auto woken = [&] {
      return stopping_ ||
             (!waiters_.empty() &&
              (!broken_.empty() || closed_ || !syncing_ || waiters_.front().ticket <= synced_)) ||
             appended_due() || checkpoint_due() || copy_due();
    };
    while (!woken()) {
      // Re-decided at each wake-up: an append may have set a deadline meanwhile.
      std::optional<std::chrono::steady_clock::time_point> deadline;
      if (appended_pending() && waiters_.empty()) {
        deadline = *unflushed_since_ + appended_flush_delay_;
      }
      if (checkpoint_pending()) {
        const auto at = *unsigned_since_ + checkpoint_interval_;
        deadline = deadline ? std::min(*deadline, at) : at;
      }
      if (deadline) {
        flusher_cv_.wait_until(lock, *deadline);
      } else {
        flusher_cv_.wait(lock);
      }
    }
    // Answer what is durable; once the sink is broken or closed, the rest with the error.
    const Status failed = !broken_.empty() ? brokenError() : closed_ ? closedError() : Status::ok();
    while (!waiters_.empty() && (!failed.isOk() || waiters_.front().ticket <= synced_)) {
      Waiter& w = waiters_.front();
      ready.emplace_back(std::move(w.done), w.ticket <= synced_ ? Status::ok() : failed);
      waiters_.pop_front();
    }
    if (!ready.empty()) {
      lock.unlock();
      for (auto& [done, status] : ready) {
        try {
          done(status);
        } catch (...) {
          // A callback must not throw; if one does, the others are still answered.
        }
      }
      ready.clear();
      lock.lock();
    } else if ((!waiters_.empty() || appended_due()) && !syncing_) {
      leadFlushLocked(lock);
    } else if (checkpoint_due()) {
      timedCheckpointLocked(lock);
    } else if (copy_due()) {
      copyCheckpointLocked(lock);
    } else if (waiters_.empty() && stopping_) {
      return;
    }
  }
}

void FileSink::stopFlusher(std::unique_lock<std::mutex>& lock) {
  if (!flusher_.joinable()) {
    return;
  }
  stopping_ = true;
  flusher_cv_.notify_one();
  lock.unlock();
  flusher_.join();
  lock.lock();
}

Result<WrittenRecord> FileSink::appendRecordLocked(std::unique_lock<std::mutex>& lock,
                                                   const internal::RedactedRecord& record) {
  if (closed_) {
    return core::failedPrecondition(name_ + ": the audit sink is closed");
  }
  if (!broken_.empty()) {
    return brokenError();
  }
  if (rotationDueLocked()) {
    if (Status s = rotateLocked(lock, /*reopen=*/false); !s.isOk()) {
      // The record goes into the current file; the rotation is tried again a while later.
      core::logWarn("audit: cannot rotate {}: {}", path_, s.message());
      rotate_retry_at_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      if (!broken_.empty()) {
        return brokenError();
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(internal::PendingLines pending, chain_.seal(record));
  TESSERA_RETURN_IF_ERROR(appendLocked(pending.bytes));
  WrittenRecord written{chain_.head().seq + 1, pending.bytes.substr(0, pending.bytes.find('\n'))};
  noteSealedLocked(pending);
  chain_.commit(std::move(pending));
  ++appended_;
  return written;
}

void FileSink::noteSealedLocked(const internal::PendingLines& pending) {
  if (pending.bytes.empty()) {
    return;
  }
  if (pending.head.since_checkpoint == 0) {
    // The lines end with a checkpoint (due by count, or made on close or on the interval).
    const size_t start = pending.bytes.rfind('\n', pending.bytes.size() - 2);
    last_checkpoint_seq_ = pending.head.seq;
    last_checkpoint_line_ = pending.bytes.substr(start == std::string::npos ? 0 : start + 1);
    last_checkpoint_line_.pop_back();  // Its newline.
    unsigned_since_.reset();
    if (!copy_path_.empty()) {
      startFlusherLocked();  // It copies the checkpoint once a flush has made it durable.
    }
  } else if (!unsigned_since_ && checkpoint_interval_.count() > 0 && chain_.signs()) {
    unsigned_since_ = std::chrono::steady_clock::now();
    startFlusherLocked();
    flusher_cv_.notify_one();
  }
}

void FileSink::timedCheckpointLocked(std::unique_lock<std::mutex>& lock) {
  auto pending = chain_.prepareFinalCheckpoint();
  if (!pending.isOk() || pending->bytes.empty()) {
    // Nothing to sign, or the key cannot sign (said by the close that fails the same way).
    unsigned_since_.reset();
    return;
  }
  if (!appendLocked(pending->bytes).isOk()) {
    // A full disk, say: tried again an interval later (or the sink is broken now).
    unsigned_since_ = std::chrono::steady_clock::now();
    return;
  }
  noteSealedLocked(*pending);
  chain_.commit(std::move(pending).value());
  ++appended_;
  leadFlushLocked(lock);  // Durable now: the copy follows in the flusher's next turn.
}

void FileSink::copyCheckpointLocked(std::unique_lock<std::mutex>& lock) {
  const uint64_t seq = last_checkpoint_seq_;
  const std::string line = last_checkpoint_line_;
  copied_seq_ = seq;
  lock.unlock();
  writeCopy(seq, line);
  lock.lock();
}

void FileSink::writeCopy(uint64_t seq, const std::string& line) {
  std::lock_guard copy_lock(copy_mu_);
  if (seq <= copy_file_seq_) {
    return;
  }
  if (Status s = replaceFile(copy_path_, line + "\n"); !s.isOk()) {
    // The log itself is fine; only what detects a cut-off log is behind. Said once, and tried
    // again with the next checkpoint.
    if (!copy_failed_) {
      core::logWarn("audit: cannot keep the copy of the last checkpoint: {}", s.message());
    }
    copy_failed_ = true;
    return;
  }
  copy_failed_ = false;
  copy_file_seq_ = seq;
}

void FileSink::flushSoonLocked() {
  if (!unflushed_since_) {
    unflushed_since_ = std::chrono::steady_clock::now();
    startFlusherLocked();
    flusher_cv_.notify_one();
  }
}

Status FileSink::write(const AuditEvent& event, Durability durability) {
  // Serializing and HMAC'ing need no lock (chain_'s options never change); only the join,
  // the hash and the append are ordered.
  TESSERA_ASSIGN_OR_RETURN(internal::RedactedRecord record, chain_.redact(event));
  std::unique_lock lock(mu_);
  TESSERA_RETURN_IF_ERROR(appendRecordLocked(lock, record).status());
  if (durability == Durability::kAppended) {
    flushSoonLocked();
    return Status::ok();
  }
  return syncLocked(lock, appended_);
}

Result<WrittenRecord> FileSink::append(const AuditEvent& event) {
  TESSERA_ASSIGN_OR_RETURN(internal::RedactedRecord record, chain_.redact(event));
  std::unique_lock lock(mu_);
  TESSERA_ASSIGN_OR_RETURN(WrittenRecord written, appendRecordLocked(lock, record));
  flushSoonLocked();
  return written;
}

uint64_t FileSink::durableSeq() const {
  std::lock_guard lock(mu_);
  return synced_seq_;
}

Status FileSink::writeRecovered(std::string_view line) {
  TESSERA_ASSIGN_OR_RETURN(internal::RedactedRecord record, internal::Chain::recovered(line));
  std::unique_lock lock(mu_);
  TESSERA_RETURN_IF_ERROR(appendRecordLocked(lock, record).status());
  return syncLocked(lock, appended_);
}

Status FileSink::close() {
  std::unique_lock lock(mu_);
  if (closed_) {
    return Status::ok();
  }
  synced_cv_.wait(lock, [this] { return !syncing_; });
  Status status;
  if (broken_.empty()) {
    auto pending = chain_.prepareFinalCheckpoint();
    if (pending.isOk()) {
      status = appendLocked(pending->bytes);
      if (status.isOk()) {
        noteSealedLocked(*pending);
        chain_.commit(std::move(pending).value());
        ++appended_;
      }
    } else {
      status = pending.status();
    }
    // Flush even without a checkpoint: writers may be waiting for their records' flush.
    if (broken_.empty()) {
      if (Status synced = timedSyncLocked(); !synced.isOk()) {
        status = synced;
      } else {
        synced_ = appended_;
        synced_seq_ = chain_.head().seq;
      }
    }
  } else {
    status = brokenError();
  }
  closed_ = true;
  ::close(fd_);
  fd_ = -1;
  synced_cv_.notify_all();
  // The flusher answers its callbacks (durable now, unless the last flush failed) and ends.
  stopFlusher(lock);
  // The final checkpoint's copy, once it is durable.
  if (!copy_path_.empty() && last_checkpoint_seq_ > 0 && synced_seq_ >= last_checkpoint_seq_) {
    const uint64_t seq = last_checkpoint_seq_;
    const std::string line = last_checkpoint_line_;
    copied_seq_ = seq;
    lock.unlock();
    writeCopy(seq, line);
  }
  return status;
}

bool FileSink::rotationDueLocked() const {
  if (size_ <= file_start_bytes_) {
    return false;  // Nothing in the live file but its start: a rotation would only add files.
  }
  if (rotate_retry_at_ && std::chrono::steady_clock::now() < *rotate_retry_at_) {
    return false;
  }
  return (rotate_bytes_ > 0 && size_ >= rotate_bytes_) ||
         (rotate_interval_.count() > 0 && clock_.wallNow() - file_started_ >= rotate_interval_);
}

Status FileSink::rotate() {
  std::unique_lock lock(mu_);
  if (closed_) {
    return core::failedPrecondition(name_ + ": the audit sink is closed");
  }
  return rotateLocked(lock, /*reopen=*/false);
}

Status FileSink::reopen() {
  std::unique_lock lock(mu_);
  if (closed_) {
    return core::failedPrecondition(name_ + ": the audit sink is closed");
  }
  struct stat at_path {};
  struct stat open_file {};
  if (::stat(path_.c_str(), &at_path) == 0 && ::fstat(fd_, &open_file) == 0 &&
      at_path.st_dev == open_file.st_dev && at_path.st_ino == open_file.st_ino) {
    return Status::ok();  // Not moved: nothing to do.
  }
  return rotateLocked(lock, /*reopen=*/true);
}

Status FileSink::rotateLocked(std::unique_lock<std::mutex>& lock, bool reopen) {
  synced_cv_.wait(lock, [this] { return !syncing_; });  // A flush holds fd_ without the lock.
  if (!broken_.empty()) {
    return brokenError();
  }
  // The new file first: if it cannot be made, nothing has changed.
  const std::string new_path = reopen ? path_ : path_ + ".new";
  const int new_fd = ::open(new_path.c_str(),
                            O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | (reopen ? 0 : O_TRUNC), 0600);
  if (new_fd < 0) {
    return unavailable(new_path + ": cannot create the next audit log file: " + errnoText(errno));
  }
  auto drop_new = [&](Status s) {
    ::close(new_fd);
    if (!reopen) {
      ::unlink(new_path.c_str());
    }
    return s;
  };
  struct stat st {};
  if (::fstat(new_fd, &st) != 0) {
    return drop_new(unavailable(new_path + ": cannot stat: " + errnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return drop_new(core::failedPrecondition(new_path + ": not a regular file"));
  }
  if (st.st_size != 0) {
    return drop_new(core::failedPrecondition(fmt::format(
        "{}: the audit log was moved away, but a file of {} bytes took its place; still writing "
        "to the moved file. Move that file away and send SIGHUP again",
        new_path, st.st_size)));
  }
  if (::flock(new_fd, LOCK_EX | LOCK_NB) != 0) {
    return drop_new(unavailable(new_path + ": cannot lock: " + errnoText(errno)));
  }
  // The old file ends with a signed checkpoint that says so (unless it already does: a
  // rotation resumed after a crash), and everything in it is flushed.
  if (file_end_seq_ == 0 || file_end_seq_ != chain_.head().seq) {
    auto end = chain_.prepareCheckpoint("end");
    if (!end.isOk()) {
      return drop_new(end.status());
    }
    if (!end->bytes.empty()) {
      if (Status s = appendLocked(end->bytes); !s.isOk()) {
        return drop_new(s);
      }
      noteSealedLocked(*end);
      chain_.commit(std::move(end).value());
      ++appended_;
      file_end_seq_ = chain_.head().seq;
    }
  }
  if (Status s = timedSyncLocked(); !s.isOk()) {
    return drop_new(s);
  }
  synced_ = appended_;
  synced_seq_ = chain_.head().seq;
  synced_cv_.notify_all();
  flusher_cv_.notify_one();
  if (!reopen) {
    // A second name for the old file, unless it has one already (a rotation resumed after a
    // crash that came after this step).
    struct stat old {};
    if (::fstat(fd_, &old) != 0) {
      return drop_new(unavailable(path_ + ": cannot stat: " + errnoText(errno)));
    }
    if (old.st_nlink < 2) {
      const std::string stamp = path_ + "." + rotationStamp(clock_.wallNow());
      // Names sort oldest first: within one millisecond, after every name of it already taken
      // (one freed by retain_files is not taken again).
      int n = 1;
      {
        const std::filesystem::path log(path_);
        const std::string base = log.filename().string();
        const std::string prefix = std::filesystem::path(stamp).filename().string();
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(
                 log.parent_path().empty() ? std::filesystem::path(".") : log.parent_path(), ec)) {
          const std::string name = entry.path().filename().string();
          if (name.rfind(prefix, 0) == 0 && isRotatedName(base, name)) {
            const int taken =
                name.size() == prefix.size() ? 1 : std::atoi(name.c_str() + prefix.size() + 1);
            n = std::max(n, taken + 1);
          }
        }
      }
      std::string rotated = n == 1 ? stamp : stamp + "-" + std::to_string(n);
      int rc = -1;
      for (int tries = 0; tries < 1000; ++tries) {
        rc = ::link(path_.c_str(), rotated.c_str());
        if (rc == 0 || errno != EEXIST) {
          break;
        }
        rotated = stamp + "-" + std::to_string(++n);
      }
      if (rc != 0) {
        return drop_new(unavailable(
            rotated + ": cannot rename the audit log for rotation: " + errnoText(errno)));
      }
    }
  }
  // From here the new file is the live one.
  const int old_fd = fd_;
  fd_ = new_fd;
  size_ = 0;
  file_start_bytes_ = 0;
  file_started_ = clock_.wallNow();
  auto start = chain_.prepareCheckpoint("start");
  if (start.isOk() && !start->bytes.empty()) {
    if (appendLocked(start->bytes).isOk()) {
      noteSealedLocked(*start);
      chain_.commit(std::move(start).value());
      ++appended_;
      file_start_bytes_ = size_;
    }
  }
  // Without its start checkpoint (no key, or it could not be written) the file's first record
  // still links to the old file's last by prev_hash.
  Status synced = timedSyncLocked();
  if (synced.isOk() && !reopen) {
    if (::rename(new_path.c_str(), path_.c_str()) != 0) {
      broken_ = "the next audit log file " + new_path + " could not be renamed to " + path_ + ": " +
                errnoText(errno);
      synced = brokenError();
    }
  }
  if (synced.isOk()) {
    synced = fsyncParentDirectory(path_);
  }
  ::close(old_fd);
  synced_ = appended_;
  synced_seq_ = chain_.head().seq;
  synced_cv_.notify_all();
  flusher_cv_.notify_one();
  rotate_retry_at_.reset();
  if (!synced.isOk()) {
    return synced;
  }
  if (!reopen) {
    pruneRotatedLocked();
  }
  return Status::ok();
}

void FileSink::pruneRotatedLocked() {
  if (retain_files_ == 0) {
    return;
  }
  const std::filesystem::path log(path_);
  std::filesystem::path dir = log.parent_path();
  if (dir.empty()) {
    dir = ".";
  }
  const std::string base = log.filename().string();
  std::vector<std::pair<std::string, std::filesystem::path>> rotated;  // (order, path)
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string order;
    if (isRotatedName(base, entry.path().filename().string(), &order)) {
      rotated.emplace_back(std::move(order), entry.path());
    }
  }
  if (ec) {
    core::logWarn("audit: cannot list {} to remove old rotated logs: {}", dir.string(),
                  ec.message());
    return;
  }
  if (rotated.size() <= retain_files_) {
    return;
  }
  std::sort(rotated.begin(), rotated.end());
  for (size_t i = 0; i + retain_files_ < rotated.size(); ++i) {
    if (!std::filesystem::remove(rotated[i].second, ec) || ec) {
      core::logWarn("audit: cannot remove the old rotated log {}: {}", rotated[i].second.string(),
                    ec ? ec.message() : "not found");
    }
  }
}

}  // namespace tessera::audit
