// Store: the revisioned key-value store every durable piece of Tessera state lives in (DESIGN.md
// §5). The interface follows etcd v3 so that an etcd backend can replace the embedded SQLite one
// (store/sqlite_store.h) without anything above this layer noticing.
//
// Keys and values are byte strings. The store has one global revision: 0 when empty, +1 for each
// committed write (a txn with several writes counts once; a write that changes nothing, such as
// deleting a missing key, does not count). Each key carries the revision that created it, the
// revision that last modified it, its version (1 on creation, +1 per put) and an optional lease.
// Ranges follow etcd: an empty `range_end` names one key, `range_end == "\0"` means every key
// >= `key`, and `prefixEnd(p)` turns a prefix into its range end. The history of changes is kept
// for watches that start in the past and for reads at past revisions, until it is compacted
// (by `compact()` or the backend's retention, see sqlite_store.h); below the compact revision
// both fail with OUT_OF_RANGE.
//
//   std::unique_ptr<Store> s = ...;  // e.g. SqliteStore::open(...)
//   TESSERA_ASSIGN_OR_RETURN(int64_t rev, s->put("/nodes/n1", "{...}"));
//   TESSERA_ASSIGN_OR_RETURN(RangeResult nodes, s->range("/nodes/", prefixEnd("/nodes/")));
//   // Compare-and-swap: write only if nobody changed the key since we read it at `rev`.
//   Txn cas{.compares = {Compare::modRevision("/nodes/n1", Compare::kEqual, rev)},
//           .success = {Op::put("/nodes/n1", "{...v2}")}};
//   TESSERA_ASSIGN_OR_RETURN(TxnResult r, s->txn(std::move(cas)));  // r.succeeded?
//   // Watch everything under /nodes/ that happens after the range above.
//   TESSERA_ASSIGN_OR_RETURN(WatchId w, s->watch("/nodes/", prefixEnd("/nodes/"),
//                                                nodes.revision + 1, onNodeEvents));
//
// Thread-safety: every method of a Store may be called from any thread concurrently. Writes are
// linearizable: when a write returns, every later read (from any thread) sees it, and it is
// durable. Watch callbacks run on a thread owned by the store, one callback at a time, never with
// a store lock held, so they may call back into the store (but should be quick: a slow callback
// delays every watch). The server posts events from callbacks to its own executor. No callback
// runs once the store's destructor has returned; the destructor must not run inside a callback,
// nor while other threads still call the store.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "core/strong_id.h"

namespace tessera::store {

// A lease id; the default (0) means "no lease".
struct LeaseTag {};
using LeaseId = core::StrongId<LeaseTag, int64_t>;

struct WatchTag {};
using WatchId = core::StrongId<WatchTag, int64_t>;

// Limits on what one request may carry (etcd's defaults for values and txn size).
inline constexpr size_t kMaxKeyBytes = size_t{4} * 1024;
inline constexpr size_t kMaxValueBytes = size_t{1536} * 1024;
inline constexpr size_t kMaxTxnOps = 128;

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;  // 1 when created, +1 per put; a deleted key starts again at 1.
  LeaseId lease;

  bool operator==(const KeyValue&) const = default;
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // In key order, at most `limit` of them.
  int64_t count = 0;          // Keys in the range, ignoring `limit`.
  bool more = false;          // `limit` cut the answer short.
  int64_t revision = 0;       // The revision read: the one asked for, or the current one.
};

struct DeleteResult {
  int64_t deleted = 0;   // Keys deleted.
  int64_t revision = 0;  // The store revision after the delete.
};

// One condition of a txn, on a key's current state. A missing key has version, create and mod
// revision 0, and every comparison of its value is false (as in etcd).
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  // Unscoped (but nested) so that call sites read `Compare::kEqual`.
  enum Relation { kEqual, kNotEqual, kLess, kGreater };

  std::string key;
  Target target = Target::kVersion;
  Relation relation = kEqual;
  int64_t number = 0;  // For kVersion, kCreateRevision and kModRevision.
  std::string bytes;   // For kValue (compared bytewise).

  static Compare version(std::string key, Relation relation, int64_t version);
  static Compare createRevision(std::string key, Relation relation, int64_t revision);
  static Compare modRevision(std::string key, Relation relation, int64_t revision);
  static Compare value(std::string key, Relation relation, std::string value);
};

// One operation of a txn. Ops run in order and each sees the writes of the ones before it.
struct Op {
  enum class Kind { kPut, kDelete, kRange };

  Kind kind = Kind::kRange;
  std::string key;
  std::string range_end;  // kDelete, kRange: as for Store::range.
  std::string value;      // kPut.
  LeaseId lease;          // kPut.
  int64_t limit = 0;      // kRange.

  static Op put(std::string key, std::string value, LeaseId lease = LeaseId{});
  static Op del(std::string key, std::string range_end = "");
  static Op get(std::string key, std::string range_end = "", int64_t limit = 0);
};

// A note: bytes stored with a txn, atomically (durable when its change is), outside the keys:
// in no revision, never watched, never compacted; kept until dropped. For a copy of something
// that must be on stable storage no later than the txn's change, while its own flush to where it
// belongs comes later: the server's audit record of a submission (docs/server.md, "A request's
// path", step 5). Notes of one topic are told apart, and dropped, by `id`.
struct Note {
  std::string topic;
  uint64_t id = 0;
  std::string body;
};

// If every compare holds, the success ops run, otherwise the failure ops; atomically, at one
// revision. A key may be written (put, or covered by a delete) at most once per branch.
//
// `guard`: conditions checked first. If one fails, nothing of the txn happens (neither branch
// runs, no note is stored, the revision stays) and the result says `guard_failed`. For a fence
// around everything a writer does (the leader's key: server/fenced_store.h), without mixing it
// into the txn's own compares and branches.
struct Txn {
  std::vector<Compare> compares;
  std::vector<Op> success;
  std::vector<Op> failure;
  std::vector<Note> notes = {};  // Stored with the txn, whichever branch runs.
  std::vector<Compare> guard = {};
  // Applying it twice does what applying it once does (puts of values it sets, nothing that
  // reads what it writes): a backend may send it again when the first try's outcome is unknown,
  // rather than fail (the scheduler's status writes; etcd_store.h, "Failover").
  bool idempotent = false;
  // How long the whole call may take, tries on other members included (0: the store's own
  // request timeout). Past it the call fails UNAVAILABLE, its outcome unknown unless idempotent,
  // and the store's next call goes to another member: a caller with a period of its own (the
  // scheduler's pass) tries again next period instead of waiting out a member whose leader is
  // gone. A local store (SQLite) answers within it or not at all: it does not read it.
  std::chrono::milliseconds deadline{0};
};

struct OpResult {
  Op::Kind kind = Op::Kind::kRange;
  RangeResult range;    // kRange.
  int64_t deleted = 0;  // kDelete.
};

struct TxnResult {
  bool guard_failed = false;      // A guard compare failed: nothing ran (results empty).
  bool succeeded = false;         // The compares held and the success branch ran.
  int64_t revision = 0;           // The store revision after the txn.
  std::vector<OpResult> results;  // One per op of the branch that ran.
};

enum class EventType { kPut, kDelete };

struct Event {
  EventType type = EventType::kPut;
  // The key after the change. For a delete only `key` and `mod_revision` (the revision of the
  // delete) are set, as in etcd.
  KeyValue kv;
  std::optional<KeyValue> prev_kv;  // The key before the change; empty if it did not exist.
};

// What a watch callback receives: the matching events of one revision, in the order the
// revision's txn applied them. A response with a failed `error` is the last one of its watch.
struct WatchResponse {
  int64_t revision = 0;
  std::vector<Event> events;
  core::Status error;  // E.g. OUT_OF_RANGE when the history the watch needed was compacted.
};

using WatchCallback = std::function<void(const WatchResponse&)>;

struct StoreStats {
  int64_t revision = 0;               // Current revision.
  int64_t compact_revision = 0;       // History below this revision is gone.
  int64_t write_requests = 0;         // Writes that succeeded (put, delete, txn, lease calls).
  int64_t commits = 0;                // Storage transactions committed (SQLite: one fsync each).
  int64_t queued_write_requests = 0;  // Writes waiting for the writer now.
};

// What the message of a write's error says when the write may have been applied all the same
// (the store took it, then its answer was lost): the server answers such a write 503 with
// `X-Tessera-Applied: unknown` (docs/server.md, "High availability").
inline constexpr std::string_view kOutcomeUnknown = "the write may or may not have been applied";

// The range end that covers every key starting with `prefix`: the prefix with its last byte that
// is not 0xff incremented and the rest dropped; "\0" (no end) if there is no such byte.
std::string prefixEnd(std::string_view prefix);

class Store {
 public:
  virtual ~Store() = default;

  // Reads keys in [key, range_end) (see the file comment for `range_end`), at most `limit` of
  // them (0: no limit), as they were at `revision` (0: now). Reading below the compact revision
  // fails with OUT_OF_RANGE, as does reading a revision that does not exist yet.
  virtual core::Result<RangeResult> range(std::string_view key, std::string_view range_end = {},
                                          int64_t limit = 0, int64_t revision = 0) = 0;

  // Sets `key` to `value`, attached to `lease` (a granted lease, or none) and detached from any
  // lease it had. Returns the new revision once the write is durable.
  virtual core::Result<int64_t> put(std::string_view key, std::string_view value,
                                    LeaseId lease = LeaseId{}) = 0;

  // Deletes the keys in [key, range_end). The revision moves only if something was deleted.
  virtual core::Result<DeleteResult> deleteRange(std::string_view key,
                                                 std::string_view range_end = {}) = 0;

  // Runs `txn` atomically. A txn whose branch writes nothing keeps the revision.
  virtual core::Result<TxnResult> txn(Txn txn) = 0;

  // Calls `callback` with every change to keys in [key, range_end) from `from_revision` on (0:
  // from the next revision), in revision order with no gaps or repeats: past revisions are
  // replayed from the history, then live ones follow. Fails with OUT_OF_RANGE if
  // `from_revision` is below the compact revision. See the file comment for the thread that
  // calls `callback`.
  virtual core::Result<WatchId> watch(std::string_view key, std::string_view range_end,
                                      int64_t from_revision, WatchCallback callback) = 0;

  // Stops a watch. When this returns, its callback is not running and will not be called again
  // (if called from inside the callback itself: once that callback returns). Unknown ids are
  // ignored.
  virtual void cancelWatch(WatchId id) = 0;

  // Grants a lease that expires `ttl` after its last keepAlive (or grant). Durable.
  virtual core::Result<LeaseId> grant(core::Duration ttl) = 0;

  // Restarts the lease's ttl from now; returns the ttl. NOT_FOUND if it expired or was revoked.
  virtual core::Result<core::Duration> keepAlive(LeaseId id) = 0;

  // Revokes the lease and deletes the keys attached to it (one revision, with DELETE events).
  // Returns the revision afterwards. NOT_FOUND if it is unknown.
  virtual core::Result<int64_t> revoke(LeaseId id) = 0;

  // Revokes every lease whose ttl has run out by the store's clock, as `revoke` does, and
  // returns their ids. Owners call it on a timer; backends may also run it themselves.
  virtual core::Result<std::vector<LeaseId>> expireLeases() = 0;

  // Drops the history below `revision`: afterwards reads at older revisions and watches from
  // them fail with OUT_OF_RANGE. `revision` must not be above the current revision.
  virtual core::Status compact(int64_t revision) = 0;

  virtual StoreStats stats() const = 0;

  // The notes of `topic` (see Note), in id order.
  virtual core::Result<std::vector<Note>> notes(std::string_view topic) = 0;

  // Drops the notes of `topic` whose id is at most `up_to`. Durable when it returns.
  virtual core::Status dropNotes(std::string_view topic, uint64_t up_to) = 0;

  // The key's current value, or nullopt if it does not exist.
  core::Result<std::optional<KeyValue>> get(std::string_view key);
};

}  // namespace tessera::store
