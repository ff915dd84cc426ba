// SqliteStore: the embedded backend of Store (store/store.h), one SQLite file in WAL mode with
// `synchronous=FULL`. What `tessera server` and `tessera dev` use unless told to use etcd.
//
//   core::RealClock clock;
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
//                            SqliteStore::open("/var/lib/tessera/store.db", {}, clock));
//   TESSERA_ASSIGN_OR_RETURN(int64_t rev, store->put("/nodes/n1", "{...}"));  // Durable now.
//
// Writes: one writer thread owns the write connection. Callers queue their writes and block; the
// writer takes everything queued, applies it in one SQLite transaction (each write keeps its own
// revision and fails or succeeds on its own), commits it with one fsync, and only then answers
// the callers. So concurrent writers share fsyncs (group commit), and a write that returned
// survives `kill -9` and power loss. `stats().commits` counts those transactions.
//
// Reads run on a pool of read connections, concurrently with each other and with the writer
// (WAL), each in one read transaction, so a range is a consistent snapshot.
//
// History: every change is also written to a history table keyed by revision. It serves watches
// that start in the past and reads at past revisions. The writer keeps the latest
// `history_revisions` revisions and compacts older history as it goes (and `compact()` drops more
// on demand); reads and watches below the compact revision fail with OUT_OF_RANGE.
//
// Leases: granted leases are stored with their ttl. Deadlines live in memory only: keepAlive
// does not write to disk, and on open every stored lease gets a full ttl from then (what etcd
// does on leader change), since the clock is monotonic and means nothing across restarts.
// Expiry follows the injected clock; a lease thread calls expireLeases() every
// `lease_check_interval` of real time (0 turns it off, e.g. in tests that drive a FakeClock).
//
// One process at a time: open takes an exclusive lock on "<path>.lock" (flock, released when the
// process dies), so a second open of the same path fails instead of corrupting revisions.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "store/store.h"

namespace tessera::store {

struct SqliteStoreOptions {
  // Revisions of history kept for watches and past reads; older history is compacted away.
  int64_t history_revisions = 100'000;
  // Published events held in memory for watchers before they read from the history instead.
  size_t max_buffered_events = 10'000;
  // Most writes taken into one SQLite transaction.
  size_t max_batch_writes = 1'000;
  // How often (real time) the lease thread expires leases; 0: never (call expireLeases()).
  std::chrono::milliseconds lease_check_interval{500};
  // How long a connection waits for a SQLite lock before failing.
  std::chrono::milliseconds busy_timeout{10'000};
};

class SqliteStore {
 public:
  // Opens the store at `path`, creating it if missing. `clock` must outlive the store and is read
  // from several store threads (a FakeClock only with `lease_check_interval` 0, advanced while no
  // store call is running). Fails with a message naming `path` if the file cannot be opened,
  // is not a Tessera store, or is open in another process.
  static core::Result<std::unique_ptr<Store>> open(const std::string& path,
                                                   const SqliteStoreOptions& options,
                                                   core::Clock& clock);
};

}  // namespace tessera::store
