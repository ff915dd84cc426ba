#include "store/sqlite_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/files.h"
#include "core/log.h"
#include "store/internal/checks.h"
#include "store/internal/sqlite.h"
#include "store/internal/watch_hub.h"

namespace tessera::store {
namespace {

using core::Result;
using core::Status;
using internal::Db;
using internal::Stmt;

constexpr int64_t kSchemaVersion = 1;

// kv: the current state. history: every change, keyed by (revision, order within the revision),
// with the key's state before it (prev_*: NULL prev_value when the key did not exist), which
// serves both watch events and reads at past revisions. meta: revision, compact_revision,
// next_lease_id, schema_version.
constexpr char kSchema[] = R"sql(
CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE kv (
  key BLOB PRIMARY KEY, value BLOB NOT NULL, create_rev INTEGER NOT NULL,
  mod_rev INTEGER NOT NULL, version INTEGER NOT NULL, lease INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX kv_by_lease ON kv (lease) WHERE lease != 0;
CREATE TABLE history (
  rev INTEGER NOT NULL, sub INTEGER NOT NULL, type INTEGER NOT NULL, key BLOB NOT NULL,
  value BLOB NOT NULL, create_rev INTEGER NOT NULL, mod_rev INTEGER NOT NULL,
  version INTEGER NOT NULL, lease INTEGER NOT NULL, prev_value BLOB,
  prev_create_rev INTEGER NOT NULL, prev_mod_rev INTEGER NOT NULL,
  prev_version INTEGER NOT NULL, prev_lease INTEGER NOT NULL,
  PRIMARY KEY (rev, sub)) WITHOUT ROWID;
CREATE TABLE leases (id INTEGER PRIMARY KEY, ttl_ns INTEGER NOT NULL);
INSERT INTO meta VALUES ('schema_version', 1), ('revision', 0), ('compact_revision', 0),
  ('next_lease_id', 1);
)sql";

// Notes (store.h): added after schema version 1 shipped, so also created in a store that lacks
// them; they need no other change.
constexpr char kNotesSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS notes (
  topic BLOB NOT NULL, id INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY (topic, id));
)sql";

// The statements every connection prepares once. Writes are prepared on readers too (they are
// cheap and never run there).
enum Q {
  kGetMeta,
  kSetMeta,
  kGetKv,
  kPutKv,
  kDeleteKv,
  kRangeBounded,
  kRangeOpen,
  kCountBounded,
  kCountOpen,
  kChangedAfterBounded,
  kChangedAfterOpen,
  kHistory,
  kAddHistory,
  kCompactHistory,
  kKvsOfLease,
  kLeaseExists,
  kAddLease,
  kDeleteLease,
  kAllLeases,
  kSavepoint,
  kRelease,
  kRollbackTo,
  kAddNote,
  kNotesOf,
  kDropNotes,
  kQueryCount,
};

constexpr std::array<const char*, kQueryCount> kQueries = {
    "SELECT value FROM meta WHERE name = ?1",
    "INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)",
    "SELECT key, value, create_rev, mod_rev, version, lease FROM kv WHERE key = ?1",
    "INSERT OR REPLACE INTO kv (key, value, create_rev, mod_rev, version, lease) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    "DELETE FROM kv WHERE key = ?1",
    "SELECT key, value, create_rev, mod_rev, version, lease FROM kv "
    "WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT ?3",
    "SELECT key, value, create_rev, mod_rev, version, lease FROM kv "
    "WHERE key >= ?1 ORDER BY key LIMIT ?3",
    "SELECT count(*) FROM kv WHERE key >= ?1 AND key < ?2",
    "SELECT count(*) FROM kv WHERE key >= ?1",
    "SELECT key, prev_value, prev_create_rev, prev_mod_rev, prev_version, prev_lease FROM history "
    "WHERE rev > ?3 AND key >= ?1 AND key < ?2 ORDER BY rev, sub",
    "SELECT key, prev_value, prev_create_rev, prev_mod_rev, prev_version, prev_lease FROM history "
    "WHERE rev > ?3 AND key >= ?1 ORDER BY rev, sub",
    "SELECT rev, type, key, value, create_rev, mod_rev, version, lease, prev_value, "
    "prev_create_rev, prev_mod_rev, prev_version, prev_lease FROM history "
    "WHERE rev >= ?1 AND rev <= ?2 ORDER BY rev, sub LIMIT ?3",
    "INSERT INTO history VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    "DELETE FROM history WHERE rev < ?1",
    "SELECT key, value, create_rev, mod_rev, version, lease FROM kv WHERE lease = ?1 "
    "ORDER BY key",
    "SELECT 1 FROM leases WHERE id = ?1",
    "INSERT INTO leases (id, ttl_ns) VALUES (?1, ?2)",
    "DELETE FROM leases WHERE id = ?1",
    "SELECT id, ttl_ns FROM leases",
    "SAVEPOINT write_request",
    "RELEASE write_request",
    "ROLLBACK TO write_request",
    "INSERT INTO notes (topic, id, body) VALUES (?1, ?2, ?3)",
    "SELECT id, body FROM notes WHERE topic = ?1 ORDER BY id",
    "DELETE FROM notes WHERE topic = ?1 AND id <= ?2",
};

// A connection with its prepared statements.
struct Conn {
  std::unique_ptr<Db> db;
  std::array<std::unique_ptr<Stmt>, kQueryCount> stmts;

  Stmt& operator[](Q q) { return *stmts[q]; }
};

Result<std::unique_ptr<Conn>> openConn(const std::string& path, bool create,
                                       const SqliteStoreOptions& options) {
  auto conn = std::make_unique<Conn>();
  TESSERA_ASSIGN_OR_RETURN(conn->db,
                           Db::open(path, create, static_cast<int>(options.busy_timeout.count())));
  TESSERA_RETURN_IF_ERROR(conn->db->exec("PRAGMA synchronous=FULL", "setting synchronous=FULL"));
  // Each write of a batch runs in a savepoint, whose statement journal (what undoes just that
  // write) would otherwise go to temporary files, opened, written and deleted by the writer
  // thread as it applies a batch. It holds one write's pages, and crash recovery never needs it
  // (the WAL does), so it belongs in memory: +10% submissions/s (docs/benchmarks.md).
  TESSERA_RETURN_IF_ERROR(conn->db->exec("PRAGMA temp_store=MEMORY", "setting temp_store=MEMORY"));
  return conn;
}

Status prepareAll(Conn& conn) {
  for (int q = 0; q < kQueryCount; ++q) {
    TESSERA_ASSIGN_OR_RETURN(conn.stmts[q], Stmt::prepare(*conn.db, kQueries[q]));
  }
  return Status::ok();
}

Result<std::unique_ptr<Conn>> openReader(const std::string& path,
                                         const SqliteStoreOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, openConn(path, false, options));
  TESSERA_RETURN_IF_ERROR(conn->db->exec("PRAGMA query_only=1", "making a read connection"));
  TESSERA_RETURN_IF_ERROR(prepareAll(*conn));
  return conn;
}

// [start, end) with etcd's range end resolved: a single key is [key, key + "\0"); no end is
// nullopt.
struct Bounds {
  std::string start;
  std::optional<std::string> end;
};

Bounds boundsOf(std::string_view key, std::string_view range_end) {
  Bounds b{std::string(key), std::nullopt};
  if (range_end.empty()) {
    b.end = std::string(key) + '\0';
  } else if (range_end != std::string_view("\0", 1)) {
    b.end = std::string(range_end);
  }
  return b;
}

void bindBounds(Stmt::Use& q, const Bounds& b) {
  q.bind(1, b.start);
  if (b.end) {
    q.bind(2, *b.end);
  }
}

// Reads a KeyValue from columns key, value, create_rev, mod_rev, version, lease at `first`.
KeyValue kvAt(const Stmt::Use& q, int first) {
  return KeyValue{q.bytes(first),       q.bytes(first + 1),   q.integer(first + 2),
                  q.integer(first + 3), q.integer(first + 4), LeaseId{q.integer(first + 5)}};
}

Result<int64_t> readMeta(Conn& c, const char* name) {
  Stmt::Use q(c[kGetMeta]);
  q.bindText(1, name);
  TESSERA_ASSIGN_OR_RETURN(bool row, q.step(std::string("reading meta ") + name));
  if (!row) {
    return core::failedPrecondition("sqlite store " + c.db->path() + ": meta '" + name +
                                    "' is missing: not a Tessera store, or damaged");
  }
  return q.integer(0);
}

Status writeMeta(Conn& c, const char* name, int64_t value) {
  Stmt::Use q(c[kSetMeta]);
  q.bindText(1, name);
  q.bind(2, value);
  return q.run(std::string("writing meta ") + name);
}

Result<std::optional<KeyValue>> readKv(Conn& c, std::string_view key) {
  Stmt::Use q(c[kGetKv]);
  q.bind(1, key);
  TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading a key"));
  if (!row) {
    return std::optional<KeyValue>();
  }
  return std::optional<KeyValue>(kvAt(q, 0));
}

// The current keys in `b`, at most `limit` (0: all), with the count of all of them.
Result<RangeResult> readRange(Conn& c, const Bounds& b, int64_t limit) {
  RangeResult r;
  {
    Stmt::Use q(c[b.end ? kRangeBounded : kRangeOpen]);
    bindBounds(q, b);
    q.bind(3, limit > 0 ? limit : -1);
    for (;;) {
      TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading a range"));
      if (!row) {
        break;
      }
      r.kvs.push_back(kvAt(q, 0));
    }
  }
  r.count = static_cast<int64_t>(r.kvs.size());
  if (limit > 0 && r.count == limit) {
    Stmt::Use q(c[b.end ? kCountBounded : kCountOpen]);
    bindBounds(q, b);
    TESSERA_ASSIGN_OR_RETURN(bool row, q.step("counting a range"));
    r.count = row ? q.integer(0) : r.count;
    r.more = r.count > limit;
  }
  return r;
}

// The keys in `b` as they were at `revision`: the current keys, except that a key changed since
// then takes the state from before its first change after `revision`.
Result<RangeResult> readRangeAt(Conn& c, const Bounds& b, int64_t limit, int64_t revision) {
  std::map<std::string, std::optional<KeyValue>> changed;
  {
    Stmt::Use q(c[b.end ? kChangedAfterBounded : kChangedAfterOpen]);
    bindBounds(q, b);
    q.bind(3, revision);
    for (;;) {
      TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading history for a past revision"));
      if (!row) {
        break;
      }
      std::string key = q.bytes(0);
      if (changed.contains(key)) {
        continue;
      }
      std::optional<KeyValue> before;
      if (!q.isNull(1)) {
        before = KeyValue{key,          q.bytes(1),   q.integer(2),
                          q.integer(3), q.integer(4), LeaseId{q.integer(5)}};
      }
      changed.emplace(std::move(key), std::move(before));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(RangeResult now, readRange(c, b, 0));
  std::map<std::string, KeyValue> then;
  for (KeyValue& kv : now.kvs) {
    if (!changed.contains(kv.key)) {
      std::string key = kv.key;
      then.emplace(std::move(key), std::move(kv));
    }
  }
  for (auto& [key, before] : changed) {
    if (before) {
      then.emplace(key, std::move(*before));
    }
  }
  RangeResult r;
  r.count = static_cast<int64_t>(then.size());
  for (auto& [key, kv] : then) {
    if (limit > 0 && static_cast<int64_t>(r.kvs.size()) == limit) {
      r.more = true;
      break;
    }
    r.kvs.push_back(std::move(kv));
  }
  r.revision = revision;
  return r;
}

// Events with from <= revision <= to, whole revisions, about `max_events` (see HistoryReader).
Result<internal::HistoryChunk> readHistory(Conn& c, int64_t from, int64_t to, size_t max_events) {
  internal::HistoryChunk chunk;
  TESSERA_ASSIGN_OR_RETURN(chunk.compact_revision, readMeta(c, "compact_revision"));
  from = std::max(from, chunk.compact_revision);
  chunk.last_revision = to;
  if (from > to) {
    return chunk;
  }
  auto read = [&](int64_t lo, int64_t hi, int64_t limit) -> Status {
    Stmt::Use q(c[kHistory]);
    q.bind(1, lo);
    q.bind(2, hi);
    q.bind(3, limit);
    for (;;) {
      TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading the watch history"));
      if (!row) {
        return Status::ok();
      }
      Event e;
      e.type = q.integer(1) == 0 ? EventType::kPut : EventType::kDelete;
      e.kv = KeyValue{q.bytes(2),   q.bytes(3),   q.integer(4),
                      q.integer(5), q.integer(6), LeaseId{q.integer(7)}};
      if (!q.isNull(8)) {
        e.prev_kv = KeyValue{e.kv.key,      q.bytes(8),    q.integer(9),
                             q.integer(10), q.integer(11), LeaseId{q.integer(12)}};
      }
      chunk.events.push_back(std::move(e));
    }
  };
  TESSERA_RETURN_IF_ERROR(read(from, to, static_cast<int64_t>(max_events)));
  if (chunk.events.size() < max_events) {
    return chunk;
  }
  // Full: keep whole revisions only. If one revision alone fills the chunk, read all of it.
  const int64_t last = chunk.events.back().kv.mod_revision;
  if (chunk.events.front().kv.mod_revision == last) {
    chunk.events.clear();
    TESSERA_RETURN_IF_ERROR(read(last, last, -1));
    chunk.last_revision = last;
    return chunk;
  }
  std::erase_if(chunk.events, [&](const Event& e) { return e.kv.mod_revision == last; });
  chunk.last_revision = last - 1;
  return chunk;
}

// Runs `read` in one read transaction, so that everything it reads is one snapshot.
template <typename T>
Result<T> inReadTxn(Conn& c, const std::function<Result<T>()>& read) {
  TESSERA_RETURN_IF_ERROR(c.db->exec("BEGIN", "starting a read"));
  Result<T> r = read();
  Status end = c.db->exec(r.isOk() ? "COMMIT" : "ROLLBACK", "ending a read");
  if (r.isOk() && !end.isOk()) {
    return end;
  }
  return r;
}

bool compareHolds(const std::optional<KeyValue>& kv, const Compare& c) {
  // The key's side against the compare's: negative, zero or positive. A missing key counts as
  // version and revisions 0, and has no value to compare.
  auto order = [](int64_t a, int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); };
  int cmp = 0;
  switch (c.target) {
    case Compare::Target::kValue:
      if (!kv) {
        return false;
      }
      cmp = kv->value.compare(c.bytes);
      break;
    case Compare::Target::kVersion:
      cmp = order(kv ? kv->version : 0, c.number);
      break;
    case Compare::Target::kCreateRevision:
      cmp = order(kv ? kv->create_revision : 0, c.number);
      break;
    case Compare::Target::kModRevision:
      cmp = order(kv ? kv->mod_revision : 0, c.number);
      break;
  }
  switch (c.relation) {
    case Compare::kEqual:
      return cmp == 0;
    case Compare::kNotEqual:
      return cmp != 0;
    case Compare::kLess:
      return cmp < 0;
    case Compare::kGreater:
      return cmp > 0;
  }
  return false;
}

// A write waiting for the writer thread, on its caller's stack until `finished`.
struct WriteRequest {
  enum class Kind { kTxn, kGrant, kRevoke, kExpire, kCompact, kDropNotes };

  Kind kind = Kind::kTxn;
  Txn txn;                // kTxn.
  LeaseId lease;          // kRevoke.
  core::Duration ttl{};   // kGrant.
  core::TimePoint now{};  // kGrant, kExpire: when the caller asked.
  int64_t revision = 0;   // kCompact.
  std::string topic;      // kDropNotes: the notes of `topic` with an id up to `up_to`.
  uint64_t up_to = 0;

  // The answer, written by the writer thread before it sets `finished`.
  Status status;
  TxnResult result;              // kTxn; `revision` also for kRevoke.
  LeaseId granted;               // kGrant.
  std::vector<LeaseId> expired;  // kExpire.
  bool finished = false;         // Guarded by the store's done_mu_.
  std::condition_variable cv;    // Notified (under done_mu_) when finished.
};

struct LeaseState {
  core::Duration ttl{};
  core::TimePoint deadline{};
};

class SqliteStoreImpl final : public Store {
 public:
  SqliteStoreImpl(std::string path, SqliteStoreOptions options, core::Clock& clock, int lock_fd,
                  std::unique_ptr<Conn> writer, std::unique_ptr<Conn> reader, int64_t revision,
                  int64_t compact_revision, int64_t next_lease_id,
                  std::map<int64_t, LeaseState> leases)
      : path_(std::move(path)),
        options_(options),
        clock_(clock),
        lock_fd_(lock_fd),
        writer_(std::move(writer)),
        leases_(std::move(leases)),
        next_lease_id_(next_lease_id),
        revision_(revision),
        compact_revision_(compact_revision) {
    idle_readers_.push_back(std::move(reader));
    hub_ = std::make_unique<internal::WatchHub>(
        [this](int64_t from, int64_t to, size_t max_events) {
          return withReader<internal::HistoryChunk>(
              [&](Conn& c) { return readHistory(c, from, to, max_events); });
        },
        revision, compact_revision, options_.max_buffered_events);
    writer_thread_ = std::thread([this] { writerLoop(); });
    if (options_.lease_check_interval.count() > 0) {
      lease_thread_ = std::thread([this] { leaseLoop(); });
    }
  }

  ~SqliteStoreImpl() override {
    {
      std::lock_guard lock(lease_thread_mu_);
      stop_lease_thread_ = true;
    }
    lease_thread_cv_.notify_all();
    if (lease_thread_.joinable()) {
      lease_thread_.join();
    }
    {
      std::lock_guard lock(queue_mu_);
      closing_ = true;
    }
    queue_cv_.notify_all();
    writer_thread_.join();  // Finishes the writes already queued.
    hub_.reset();
    idle_readers_.clear();
    writer_.reset();
    close(lock_fd_);  // Last: the file is ours until every connection is closed.
  }

  Result<RangeResult> range(std::string_view key, std::string_view range_end, int64_t limit,
                            int64_t revision) override {
    TESSERA_RETURN_IF_ERROR(internal::checkRange(key, range_end));
    if (limit < 0 || revision < 0) {
      return core::invalidArgument("range of " + internal::describeKey(key) +
                                   ": limit and revision must not be negative");
    }
    const Bounds b = boundsOf(key, range_end);
    return withReader<RangeResult>([&](Conn& c) {
      return inReadTxn<RangeResult>(c, [&]() -> Result<RangeResult> {
        TESSERA_ASSIGN_OR_RETURN(int64_t current, readMeta(c, "revision"));
        if (revision == 0 || revision == current) {
          TESSERA_ASSIGN_OR_RETURN(RangeResult r, readRange(c, b, limit));
          r.revision = current;
          return r;
        }
        if (revision > current) {
          return core::outOfRange("cannot read at revision " + std::to_string(revision) +
                                  ": the current revision is " + std::to_string(current));
        }
        TESSERA_ASSIGN_OR_RETURN(int64_t compacted, readMeta(c, "compact_revision"));
        if (revision < compacted) {
          return core::outOfRange("cannot read at revision " + std::to_string(revision) +
                                  ": the history before revision " + std::to_string(compacted) +
                                  " has been compacted");
        }
        return readRangeAt(c, b, limit, revision);
      });
    });
  }

  Result<int64_t> put(std::string_view key, std::string_view value, LeaseId lease) override {
    TESSERA_RETURN_IF_ERROR(internal::checkKey(key));
    TESSERA_RETURN_IF_ERROR(internal::checkValue(key, value));
    WriteRequest req;
    req.txn.success.push_back(Op::put(std::string(key), std::string(value), lease));
    TESSERA_RETURN_IF_ERROR(submit(req));
    return req.result.revision;
  }

  Result<DeleteResult> deleteRange(std::string_view key, std::string_view range_end) override {
    TESSERA_RETURN_IF_ERROR(internal::checkRange(key, range_end));
    WriteRequest req;
    req.txn.success.push_back(Op::del(std::string(key), std::string(range_end)));
    TESSERA_RETURN_IF_ERROR(submit(req));
    return DeleteResult{req.result.results.front().deleted, req.result.revision};
  }

  Result<TxnResult> txn(Txn txn) override {
    TESSERA_RETURN_IF_ERROR(internal::checkTxn(txn));
    WriteRequest req;
    req.txn = std::move(txn);
    TESSERA_RETURN_IF_ERROR(submit(req));
    return std::move(req.result);
  }

  Result<WatchId> watch(std::string_view key, std::string_view range_end, int64_t from_revision,
                        WatchCallback callback) override {
    TESSERA_RETURN_IF_ERROR(internal::checkRange(key, range_end));
    if (from_revision < 0 || !callback) {
      return core::invalidArgument("watch of " + internal::describeKey(key) +
                                   ": needs a callback and a revision >= 0");
    }
    return hub_->add(std::string(key), std::string(range_end), from_revision, std::move(callback));
  }

  void cancelWatch(WatchId id) override { hub_->cancel(id); }

  Result<LeaseId> grant(core::Duration ttl) override {
    if (ttl <= core::Duration::zero()) {
      return core::invalidArgument("lease ttl must be positive, got " +
                                   std::to_string(ttl.count()) + "ns");
    }
    WriteRequest req;
    req.kind = WriteRequest::Kind::kGrant;
    req.ttl = ttl;
    req.now = clock_.now();
    TESSERA_RETURN_IF_ERROR(submit(req));
    return req.granted;
  }

  Result<core::Duration> keepAlive(LeaseId id) override {
    const core::TimePoint now = clock_.now();
    std::lock_guard lock(leases_mu_);
    auto it = leases_.find(id.value());
    if (it == leases_.end()) {
      return core::notFound("lease " + std::to_string(id.value()) +
                            " not found: it expired or was revoked");
    }
    it->second.deadline = now + it->second.ttl;
    return it->second.ttl;
  }

  Result<int64_t> revoke(LeaseId id) override {
    WriteRequest req;
    req.kind = WriteRequest::Kind::kRevoke;
    req.lease = id;
    TESSERA_RETURN_IF_ERROR(submit(req));
    return req.result.revision;
  }

  Result<std::vector<LeaseId>> expireLeases() override {
    WriteRequest req;
    req.kind = WriteRequest::Kind::kExpire;
    req.now = clock_.now();
    {
      std::lock_guard lock(leases_mu_);
      bool any_due = false;
      for (const auto& [id, lease] : leases_) {
        any_due = any_due || lease.deadline <= req.now;
      }
      if (!any_due) {
        return std::vector<LeaseId>();
      }
    }
    TESSERA_RETURN_IF_ERROR(submit(req));
    return std::move(req.expired);
  }

  Status compact(int64_t revision) override {
    WriteRequest req;
    req.kind = WriteRequest::Kind::kCompact;
    req.revision = revision;
    return submit(req);
  }

  Result<std::vector<Note>> notes(std::string_view topic) override {
    return withReader<std::vector<Note>>([&](Conn& c) -> Result<std::vector<Note>> {
      std::vector<Note> out;
      Stmt::Use q(c[kNotesOf]);
      q.bind(1, topic);
      for (;;) {
        TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading notes"));
        if (!row) {
          return out;
        }
        out.push_back({std::string(topic), static_cast<uint64_t>(q.integer(0)), q.bytes(1)});
      }
    });
  }

  Status dropNotes(std::string_view topic, uint64_t up_to) override {
    WriteRequest req;
    req.kind = WriteRequest::Kind::kDropNotes;
    req.topic = std::string(topic);
    req.up_to = up_to;
    return submit(req);
  }

  StoreStats stats() const override {
    StoreStats s;
    s.revision = revision_.load();
    s.compact_revision = compact_revision_.load();
    s.write_requests = write_requests_.load();
    s.commits = commits_.load();
    std::lock_guard lock(queue_mu_);
    s.queued_write_requests = static_cast<int64_t>(queue_.size());
    return s;
  }

 private:
  // The writer's view of a batch in progress: what commit will make visible.
  struct Batch {
    int64_t revision = 0;
    int64_t compact_revision = 0;
    int64_t next_lease_id = 0;
    std::vector<Event> events;
    std::vector<std::pair<int64_t, LeaseState>> granted;
    std::vector<int64_t> revoked;
    std::vector<std::pair<int64_t, LeaseState>> taken;  // Expired leases, out of leases_ now.
  };
  // How far a batch had got, to undo a failed request.
  struct Mark {
    int64_t revision;
    int64_t compact_revision;
    int64_t next_lease_id;
    size_t events;
    size_t granted;
    size_t revoked;
    size_t taken;
  };

  // Queues `req` for the writer and waits until its batch has committed (or failed).
  Status submit(WriteRequest& req) {
    {
      std::lock_guard lock(queue_mu_);
      if (closing_) {
        return core::Status(core::StatusCode::kUnavailable,
                            "sqlite store " + path_ + ": the store is closing");
      }
      queue_.push_back(&req);
    }
    queue_cv_.notify_one();
    std::unique_lock lock(done_mu_);
    req.cv.wait(lock, [&] { return req.finished; });
    return req.status;
  }

  void writerLoop() {
    for (;;) {
      {
        std::unique_lock lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty()) {
          return;  // Closing, and every queued write is answered.
        }
      }
      // Take the batch only once the transaction has begun, so that writes queued while it
      // waited for the lock join this batch.
      Status begin = writer_->db->exec("BEGIN IMMEDIATE", "starting a write transaction");
      std::vector<WriteRequest*> batch;
      {
        std::lock_guard lock(queue_mu_);
        while (!queue_.empty() && batch.size() < options_.max_batch_writes) {
          batch.push_back(queue_.front());
          queue_.pop_front();
        }
      }
      if (!begin.isOk()) {
        finish(batch, begin);
        continue;
      }
      commitBatch(batch);
    }
  }

  void commitBatch(const std::vector<WriteRequest*>& batch) {
    Batch b;
    b.revision = revision_.load();
    b.compact_revision = compact_revision_.load();
    b.next_lease_id = next_lease_id_;
    Status failed;
    for (WriteRequest* req : batch) {
      failed = applyOne(*req, b);
      if (!failed.isOk()) {
        break;
      }
    }
    if (failed.isOk()) {
      failed = finishTransaction(b, batch.size());
    }
    if (!failed.isOk()) {
      Status rollback = writer_->db->exec("ROLLBACK", "rolling back a failed batch");
      (void)rollback;  // Fails only if SQLite already rolled back; nothing else to do.
      restoreTaken(b, 0);
      finish(batch, failed);
      return;
    }
    // Committed. Publish before answering, so that a caller who watches "from now" after its
    // write returned does not see that write again.
    revision_.store(b.revision);
    compact_revision_.store(b.compact_revision);
    next_lease_id_ = b.next_lease_id;
    {
      std::lock_guard lock(leases_mu_);
      for (auto& [id, lease] : b.granted) {
        leases_[id] = lease;
      }
      for (int64_t id : b.revoked) {
        leases_.erase(id);
      }
    }
    hub_->compacted(b.compact_revision);
    hub_->publish(b.revision, std::move(b.events));
    write_requests_ += std::count_if(batch.begin(), batch.end(),
                                     [](const WriteRequest* req) { return req->status.isOk(); });
    commits_ += 1;
    finish(batch, Status::ok());
  }

  // Applies one request inside a savepoint: on a request error only that request is undone and
  // answered with it; returns an error only if the whole batch must fail.
  Status applyOne(WriteRequest& req, Batch& b) {
    TESSERA_RETURN_IF_ERROR(runStmt(kSavepoint, "starting a write"));
    const Mark mark = markOf(b);
    req.status = apply(req, b);
    if (req.status.isOk()) {
      return runStmt(kRelease, "finishing a write");
    }
    req.result = TxnResult();
    undoTo(b, mark);
    TESSERA_RETURN_IF_ERROR(runStmt(kRollbackTo, "undoing a failed write"));
    return runStmt(kRelease, "undoing a failed write");
  }

  Status apply(WriteRequest& req, Batch& b) {
    switch (req.kind) {
      case WriteRequest::Kind::kTxn:
        return applyTxn(req, b);
      case WriteRequest::Kind::kGrant:
        return applyGrant(req, b);
      case WriteRequest::Kind::kRevoke: {
        TESSERA_ASSIGN_OR_RETURN(bool exists, leaseExists(req.lease.value()));
        if (!exists) {
          return core::notFound("lease " + std::to_string(req.lease.value()) +
                                " not found: it expired or was revoked");
        }
        TESSERA_RETURN_IF_ERROR(revokeLease(req.lease.value(), b));
        req.result.revision = b.revision;
        return Status::ok();
      }
      case WriteRequest::Kind::kExpire:
        return applyExpire(req, b);
      case WriteRequest::Kind::kCompact:
        return applyCompact(req, b);
      case WriteRequest::Kind::kDropNotes: {
        Stmt::Use q((*writer_)[kDropNotes]);
        q.bind(1, req.topic);
        // SQLite's integers are signed: an id above its largest drops every note of the topic.
        q.bind(2, static_cast<int64_t>(
                      std::min<uint64_t>(req.up_to, std::numeric_limits<int64_t>::max())));
        return q.run("dropping notes");
      }
    }
    return core::internalError("unknown write kind");
  }

  Status applyTxn(WriteRequest& req, Batch& b) {
    Txn& txn = req.txn;
    for (const Compare& c : txn.guard) {
      TESSERA_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, readKv(*writer_, c.key));
      if (!compareHolds(kv, c)) {
        req.result.guard_failed = true;
        req.result.revision = b.revision;
        return Status::ok();
      }
    }
    for (const Note& note : txn.notes) {
      Stmt::Use q((*writer_)[kAddNote]);
      q.bind(1, note.topic);
      q.bind(2, static_cast<int64_t>(note.id));
      q.bind(3, note.body);
      TESSERA_RETURN_IF_ERROR(q.run("storing a note"));
    }
    bool holds = true;
    for (const Compare& c : txn.compares) {
      TESSERA_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, readKv(*writer_, c.key));
      if (!compareHolds(kv, c)) {
        holds = false;
        break;
      }
    }
    const std::vector<Op>& ops = holds ? txn.success : txn.failure;
    const int64_t rev = b.revision + 1;
    int64_t sub = 0;
    TxnResult& result = req.result;
    result.succeeded = holds;
    for (const Op& op : ops) {
      OpResult& out = result.results.emplace_back();
      out.kind = op.kind;
      switch (op.kind) {
        case Op::Kind::kRange: {
          TESSERA_ASSIGN_OR_RETURN(out.range,
                                   readRange(*writer_, boundsOf(op.key, op.range_end), op.limit));
          break;
        }
        case Op::Kind::kPut: {
          if (op.lease.value() != 0) {
            // Earlier ops may have written already: the savepoint in applyOne undoes them.
            TESSERA_ASSIGN_OR_RETURN(bool exists, leaseExists(op.lease.value()));
            if (!exists) {
              return core::notFound("cannot attach key " + internal::describeKey(op.key) +
                                    " to lease " + std::to_string(op.lease.value()) +
                                    ": lease not found (expired or revoked)");
            }
          }
          TESSERA_ASSIGN_OR_RETURN(std::optional<KeyValue> prev, readKv(*writer_, op.key));
          KeyValue kv{op.key,
                      op.value,
                      prev ? prev->create_revision : rev,
                      rev,
                      prev ? prev->version + 1 : 1,
                      op.lease};
          {
            Stmt::Use q((*writer_)[kPutKv]);
            q.bind(1, kv.key);
            q.bind(2, kv.value);
            q.bind(3, kv.create_revision);
            q.bind(4, kv.mod_revision);
            q.bind(5, kv.version);
            q.bind(6, kv.lease.value());
            TESSERA_RETURN_IF_ERROR(q.run("writing a key"));
          }
          TESSERA_RETURN_IF_ERROR(
              addEvent({EventType::kPut, std::move(kv), std::move(prev)}, sub++, b));
          break;
        }
        case Op::Kind::kDelete: {
          TESSERA_ASSIGN_OR_RETURN(RangeResult doomed,
                                   readRange(*writer_, boundsOf(op.key, op.range_end), 0));
          for (KeyValue& kv : doomed.kvs) {
            TESSERA_RETURN_IF_ERROR(deleteKey(std::move(kv), rev, sub++, b));
          }
          out.deleted = static_cast<int64_t>(doomed.kvs.size());
          break;
        }
      }
    }
    if (sub > 0) {
      b.revision = rev;
    }
    result.revision = b.revision;
    for (OpResult& out : result.results) {
      out.range.revision = b.revision;
    }
    return Status::ok();
  }

  Status applyGrant(WriteRequest& req, Batch& b) {
    const int64_t id = b.next_lease_id++;
    {
      Stmt::Use q((*writer_)[kAddLease]);
      q.bind(1, id);
      q.bind(2, static_cast<int64_t>(req.ttl.count()));
      TESSERA_RETURN_IF_ERROR(q.run("granting a lease"));
    }
    b.granted.emplace_back(id, LeaseState{req.ttl, req.now + req.ttl});
    req.granted = LeaseId{id};
    return Status::ok();
  }

  Status applyExpire(WriteRequest& req, Batch& b) {
    const size_t first = b.taken.size();
    {
      std::lock_guard lock(leases_mu_);
      for (auto it = leases_.begin(); it != leases_.end();) {
        if (it->second.deadline <= req.now) {
          b.taken.emplace_back(*it);
          it = leases_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (size_t i = first; i < b.taken.size(); ++i) {
      const int64_t id = b.taken[i].first;
      TESSERA_ASSIGN_OR_RETURN(bool exists, leaseExists(id));
      if (exists) {  // Else revoked earlier in this batch.
        TESSERA_RETURN_IF_ERROR(revokeLease(id, b));
        req.expired.emplace_back(id);
      }
    }
    return Status::ok();
  }

  Status applyCompact(WriteRequest& req, Batch& b) {
    if (req.revision > b.revision) {
      return core::outOfRange("cannot compact at revision " + std::to_string(req.revision) +
                              ": the current revision is " + std::to_string(b.revision));
    }
    b.compact_revision = std::max(b.compact_revision, req.revision);
    return Status::ok();
  }

  // Deletes the keys attached to lease `id` at one new revision, and the lease.
  Status revokeLease(int64_t id, Batch& b) {
    std::vector<KeyValue> attached;
    {
      Stmt::Use q((*writer_)[kKvsOfLease]);
      q.bind(1, id);
      for (;;) {
        TESSERA_ASSIGN_OR_RETURN(bool row, q.step("finding the keys of a lease"));
        if (!row) {
          break;
        }
        attached.push_back(kvAt(q, 0));
      }
    }
    const int64_t rev = b.revision + 1;
    int64_t sub = 0;
    for (KeyValue& kv : attached) {
      TESSERA_RETURN_IF_ERROR(deleteKey(std::move(kv), rev, sub++, b));
    }
    if (sub > 0) {
      b.revision = rev;
    }
    Stmt::Use q((*writer_)[kDeleteLease]);
    q.bind(1, id);
    TESSERA_RETURN_IF_ERROR(q.run("revoking a lease"));
    b.revoked.push_back(id);
    return Status::ok();
  }

  Status deleteKey(KeyValue prev, int64_t rev, int64_t sub, Batch& b) {
    {
      Stmt::Use q((*writer_)[kDeleteKv]);
      q.bind(1, prev.key);
      TESSERA_RETURN_IF_ERROR(q.run("deleting a key"));
    }
    Event e;
    e.type = EventType::kDelete;
    e.kv.key = prev.key;
    e.kv.mod_revision = rev;
    e.prev_kv = std::move(prev);
    return addEvent(std::move(e), sub, b);
  }

  Status addEvent(Event e, int64_t sub, Batch& b) {
    {
      Stmt::Use q((*writer_)[kAddHistory]);
      q.bind(1, e.kv.mod_revision);
      q.bind(2, sub);
      q.bind(3, e.type == EventType::kPut ? 0 : 1);
      q.bind(4, e.kv.key);
      q.bind(5, e.kv.value);
      q.bind(6, e.kv.create_revision);
      q.bind(7, e.kv.mod_revision);
      q.bind(8, e.kv.version);
      q.bind(9, e.kv.lease.value());
      const KeyValue none;
      const KeyValue& prev = e.prev_kv ? *e.prev_kv : none;
      if (e.prev_kv) {
        q.bind(10, prev.value);
      } else {
        q.bindNull(10);
      }
      q.bind(11, prev.create_revision);
      q.bind(12, prev.mod_revision);
      q.bind(13, prev.version);
      q.bind(14, prev.lease.value());
      TESSERA_RETURN_IF_ERROR(q.run("recording history"));
    }
    b.events.push_back(std::move(e));
    return Status::ok();
  }

  Result<bool> leaseExists(int64_t id) {
    Stmt::Use q((*writer_)[kLeaseExists]);
    q.bind(1, id);
    return q.step("looking up a lease");
  }

  // Writes the batch's meta changes and its compaction, then commits: the one fsync.
  Status finishTransaction(Batch& b, size_t writes) {
    if (b.revision != revision_.load()) {
      TESSERA_RETURN_IF_ERROR(writeMeta(*writer_, "revision", b.revision));
    }
    if (b.next_lease_id != next_lease_id_) {
      TESSERA_RETURN_IF_ERROR(writeMeta(*writer_, "next_lease_id", b.next_lease_id));
    }
    int64_t compact_to = b.compact_revision;
    if (options_.history_revisions > 0) {
      // Keep the last `history_revisions` revisions; compact in steps of a tenth of that so the
      // cost is paid now and then, not on every batch.
      const int64_t keep_from = b.revision - options_.history_revisions + 1;
      const int64_t step = std::max<int64_t>(1, options_.history_revisions / 10);
      if (keep_from - compact_to >= step) {
        compact_to = keep_from;
      }
    }
    if (compact_to != compact_revision_.load()) {
      Stmt::Use q((*writer_)[kCompactHistory]);
      q.bind(1, compact_to);
      TESSERA_RETURN_IF_ERROR(q.run("compacting history"));
      TESSERA_RETURN_IF_ERROR(writeMeta(*writer_, "compact_revision", compact_to));
      b.compact_revision = compact_to;
    }
    return writer_->db->exec("COMMIT", "committing " + std::to_string(writes) + " writes");
  }

  Status runStmt(Q q, std::string_view doing) {
    Stmt::Use use((*writer_)[q]);
    return use.run(doing);
  }

  static Mark markOf(const Batch& b) {
    return {b.revision,       b.compact_revision, b.next_lease_id, b.events.size(),
            b.granted.size(), b.revoked.size(),   b.taken.size()};
  }

  // Forgets what the batch gained since `mark`, giving expired leases taken since back.
  void undoTo(Batch& b, const Mark& mark) {
    b.revision = mark.revision;
    b.compact_revision = mark.compact_revision;
    b.next_lease_id = mark.next_lease_id;
    b.events.resize(mark.events);
    b.granted.resize(mark.granted);
    b.revoked.resize(mark.revoked);
    restoreTaken(b, mark.taken);
  }

  void restoreTaken(Batch& b, size_t from) {
    std::lock_guard lock(leases_mu_);
    for (size_t i = from; i < b.taken.size(); ++i) {
      leases_.emplace(b.taken[i]);
    }
    b.taken.resize(from);
  }

  // Answers every request of `batch`. Notifying under the lock keeps each request (on its
  // caller's stack) alive until the writer is done with it.
  void finish(const std::vector<WriteRequest*>& batch, const Status& batch_error) {
    std::lock_guard lock(done_mu_);
    for (WriteRequest* req : batch) {
      if (!batch_error.isOk()) {
        req->status = batch_error;
      }
      req->finished = true;
      req->cv.notify_one();
    }
  }

  void leaseLoop() {
    std::unique_lock lock(lease_thread_mu_);
    while (!lease_thread_cv_.wait_for(lock, options_.lease_check_interval,
                                      [&] { return stop_lease_thread_; })) {
      lock.unlock();
      // A failure here recurs on the next tick or surfaces to the next writer; nothing to add.
      Result<std::vector<LeaseId>> expired = expireLeases();
      (void)expired;
      lock.lock();
    }
  }

  template <typename T>
  Result<T> withReader(const std::function<Result<T>(Conn&)>& read) {
    std::unique_ptr<Conn> conn;
    {
      std::lock_guard lock(readers_mu_);
      if (!idle_readers_.empty()) {
        conn = std::move(idle_readers_.back());
        idle_readers_.pop_back();
      }
    }
    if (conn == nullptr) {
      TESSERA_ASSIGN_OR_RETURN(conn, openReader(path_, options_));
    }
    Result<T> r = read(*conn);
    std::lock_guard lock(readers_mu_);
    idle_readers_.push_back(std::move(conn));
    return r;
  }

  const std::string path_;
  const SqliteStoreOptions options_;
  core::Clock& clock_;
  const int lock_fd_;

  // Writer thread only (after construction).
  std::unique_ptr<Conn> writer_;

  std::mutex readers_mu_;  // Guards idle_readers_.
  std::vector<std::unique_ptr<Conn>> idle_readers_;

  std::mutex done_mu_;  // Guards WriteRequest::finished of every request.

  mutable std::mutex queue_mu_;  // Guards queue_ and closing_.
  std::condition_variable queue_cv_;
  std::deque<WriteRequest*> queue_;
  bool closing_ = false;

  std::mutex leases_mu_;                  // Guards leases_.
  std::map<int64_t, LeaseState> leases_;  // Committed leases by id, with in-memory deadlines.

  int64_t next_lease_id_;  // Writer thread only.
  // Committed state, written by the writer thread, read anywhere.
  std::atomic<int64_t> revision_;
  std::atomic<int64_t> compact_revision_;
  std::atomic<int64_t> write_requests_{0};
  std::atomic<int64_t> commits_{0};

  std::unique_ptr<internal::WatchHub> hub_;
  std::thread writer_thread_;

  std::mutex lease_thread_mu_;  // Guards stop_lease_thread_.
  std::condition_variable lease_thread_cv_;
  bool stop_lease_thread_ = false;
  std::thread lease_thread_;
};

// Takes the exclusive lock file "<path>.lock"; returns its descriptor.
Result<int> lockStore(const std::string& path) {
  const std::string lock_path = path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return core::Status(
        core::StatusCode::kUnavailable,
        "sqlite store " + path + ": cannot create lock file " + lock_path + ": " + strerror(errno));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return core::failedPrecondition("sqlite store " + path +
                                      ": already open (another process or store holds " +
                                      lock_path + ")");
    }
    return core::Status(core::StatusCode::kUnavailable, "sqlite store " + path + ": cannot lock " +
                                                            lock_path + ": " + strerror(err));
  }
  return fd;
}

// The database is its owner's alone (mode 0600): tokens' hashes, workloads, the sealed keys.
// A new one is created so before SQLite opens it (SQLite takes an empty file as a new database,
// and gives its -wal and -shm files the database's mode); an existing one, or its -wal or -shm,
// readable by others is made 0600, with a warning.
Status restrictDatabase(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
  }
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string file = path + suffix;
    TESSERA_ASSIGN_OR_RETURN(const std::optional<unsigned> was, core::restrictToOwner(file));
    if (was) {
      core::logWarn("sqlite store: {} was mode {:04o}, readable by others; made it 0600", file,
                    *was);
    }
  }
  return Status::ok();
}

// Creates the schema in a new database, or checks that an existing one is ours.
Status initSchema(Conn& c) {
  Db& db = *c.db;
  TESSERA_RETURN_IF_ERROR(db.exec("BEGIN IMMEDIATE", "starting to read the schema"));
  auto body = [&]() -> Status {
    TESSERA_ASSIGN_OR_RETURN(
        std::unique_ptr<Stmt> tables,
        Stmt::prepare(db, "SELECT name FROM sqlite_master WHERE type = 'table'"));
    bool any = false;
    bool has_meta = false;
    {
      Stmt::Use q(*tables);
      for (;;) {
        TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading the schema"));
        if (!row) {
          break;
        }
        any = true;
        has_meta = has_meta || q.bytes(0) == "meta";
      }
    }
    if (!any) {
      TESSERA_RETURN_IF_ERROR(db.exec(kSchema, "creating the schema"));
      return db.exec(kNotesSchema, "creating the notes table");
    }
    if (!has_meta) {
      return core::failedPrecondition("sqlite store " + db.path() +
                                      ": the database has tables but is not a Tessera store");
    }
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stmt> version,
                             Stmt::prepare(db,
                                           "SELECT value FROM meta WHERE name = "
                                           "'schema_version'"));
    Stmt::Use q(*version);
    TESSERA_ASSIGN_OR_RETURN(bool row, q.step("reading the schema version"));
    if (!row || q.integer(0) != kSchemaVersion) {
      return core::failedPrecondition("sqlite store " + db.path() + ": schema version " +
                                      (row ? std::to_string(q.integer(0)) : std::string("(none)")) +
                                      ", but this build reads version " +
                                      std::to_string(kSchemaVersion));
    }
    return db.exec(kNotesSchema, "creating the notes table");
  };
  Status s = body();
  Status end = db.exec(s.isOk() ? "COMMIT" : "ROLLBACK", "finishing the schema");
  return s.isOk() ? end : s;
}

}  // namespace

Result<std::unique_ptr<Store>> SqliteStore::open(const std::string& path,
                                                 const SqliteStoreOptions& options,
                                                 core::Clock& clock) {
  if (options.max_batch_writes == 0) {
    return core::invalidArgument("sqlite store " + path + ": max_batch_writes must be positive");
  }
  TESSERA_ASSIGN_OR_RETURN(int lock_fd, lockStore(path));
  auto opened = [&]() -> Result<std::unique_ptr<Store>> {
    TESSERA_RETURN_IF_ERROR(restrictDatabase(path));
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Conn> writer, openConn(path, true, options));
    {
      TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stmt> wal,
                               Stmt::prepare(*writer->db, "PRAGMA journal_mode=WAL"));
      Stmt::Use q(*wal);
      TESSERA_ASSIGN_OR_RETURN(bool row, q.step("switching to WAL mode"));
      if (!row || q.bytes(0) != "wal") {
        return core::failedPrecondition("sqlite store " + path +
                                        ": cannot use WAL mode (journal mode is " +
                                        (row ? q.bytes(0) : std::string("unknown")) + ")");
      }
    }
    TESSERA_RETURN_IF_ERROR(initSchema(*writer));
    TESSERA_RETURN_IF_ERROR(prepareAll(*writer));
    TESSERA_ASSIGN_OR_RETURN(int64_t revision, readMeta(*writer, "revision"));
    TESSERA_ASSIGN_OR_RETURN(int64_t compact_revision, readMeta(*writer, "compact_revision"));
    TESSERA_ASSIGN_OR_RETURN(int64_t next_lease_id, readMeta(*writer, "next_lease_id"));
    // Deadlines do not survive a restart (the clock is monotonic): every lease starts a full ttl.
    std::map<int64_t, LeaseState> leases;
    const core::TimePoint now = clock.now();
    {
      Stmt::Use q((*writer)[kAllLeases]);
      for (;;) {
        TESSERA_ASSIGN_OR_RETURN(bool row, q.step("loading leases"));
        if (!row) {
          break;
        }
        const core::Duration ttl(q.integer(1));
        leases[q.integer(0)] = LeaseState{ttl, now + ttl};
      }
    }
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Conn> reader, openReader(path, options));
    return std::unique_ptr<Store>(std::make_unique<SqliteStoreImpl>(
        path, options, clock, lock_fd, std::move(writer), std::move(reader), revision,
        compact_revision, next_lease_id, std::move(leases)));
  };
  Result<std::unique_ptr<Store>> store = opened();
  if (!store.isOk()) {
    close(lock_fd);
  }
  return store;
}

}  // namespace tessera::store
