// What is particular to the SQLite backend: durability across kill -9, group commit, files,
// locking, history compaction, the watch fallback to the history table, and lease expiry on the
// injected clock.
#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "store/event_queue.h"
#include "store/test_util.h"

namespace tessera::store {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = std::chrono::seconds(10);
const std::string kAll(1, '\0');

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Waits (real time, up to kWait) until `done` holds; false if it never did.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class SqliteStoreTest : public ::testing::Test {
 protected:
  core::Result<std::unique_ptr<Store>> open(SqliteStoreOptions options = testOptions()) {
    return SqliteStore::open(path_, options, clock_);
  }

  TempDir dir_;
  std::string path_ = dir_.file("store.db");
  ThreadSafeFakeClock clock_;
};

TEST_F(SqliteStoreTest, ReopenKeepsNotes) {
  {
    TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
    Txn txn{{}, {Op::put("a", "1")}, {}};
    txn.notes = {{"audit", 7, "kept"}};
    ASSERT_TRUE(store->txn(std::move(txn)).isOk());
  }
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> notes, store->notes("audit"));
  ASSERT_EQ(notes.size(), 1U);
  EXPECT_EQ(notes[0].id, 7U);
  EXPECT_EQ(notes[0].body, "kept");
}

TEST_F(SqliteStoreTest, ReopenKeepsKeysRevisionsAndLeases) {
  LeaseId lease;
  {
    TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
    TESSERA_ASSERT_OK_AND_ASSIGN(lease, store->grant(10s));
    ASSERT_TRUE(store->put("a", "1").isOk());
    ASSERT_TRUE(store->put("a", "2").isOk());
    ASSERT_TRUE(store->put("leased", "1", lease).isOk());
    clock_.advance(9s);  // Nearly expired when the store closes.
  }
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  EXPECT_EQ(store->stats().revision, 3);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> a, store->get("a"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (KeyValue{"a", "2", 1, 2, 2, LeaseId{}}));
  EXPECT_EQ(store->put("b", "1").value(), 4);
  // The history survives too: a watch from revision 2 replays it.
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch("a", "", 2, q.callback()));
  std::vector<Event> events = q.waitFor(1, kWait);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kv.value, "2");
  store->cancelWatch(w);
  // The lease lives on with a full ttl from the reopen, and new leases get new ids.
  clock_.advance(9s);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<LeaseId> expired, store->expireLeases());
  EXPECT_TRUE(expired.empty());
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId next, store->grant(10s));
  EXPECT_GT(next.value(), lease.value());
  clock_.advance(1s);
  TESSERA_ASSERT_OK_AND_ASSIGN(expired, store->expireLeases());
  EXPECT_EQ(expired, std::vector<LeaseId>{lease});
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> leased, store->get("leased"));
  EXPECT_FALSE(leased.has_value());
}

TEST_F(SqliteStoreTest, OneOpenAtATime) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> first, open());
  core::Result<std::unique_ptr<Store>> second = open();
  ASSERT_FALSE(second.isOk());
  EXPECT_EQ(second.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(second.status().message(), path_)) << second.status().message();
  EXPECT_TRUE(contains(second.status().message(), "already open")) << second.status().message();
  first.reset();
  EXPECT_TRUE(open().isOk());
}

unsigned modeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// The store is its owner's alone: the database, its WAL, shared memory and lock files are made
// 0600 (even under a permissive umask), and an existing database open to others is made 0600.
TEST_F(SqliteStoreTest, ItsFilesAreItsOwnersAlone) {
  const mode_t old_umask = ::umask(0);
  {
    TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
    ASSERT_TRUE(store->put("/k", "v").isOk());
    for (const char* suffix : {"", "-wal", "-shm", ".lock"}) {
      EXPECT_EQ(modeOf(path_ + suffix), 0600U) << path_ + suffix;
    }
  }
  ::umask(old_umask);
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
  {
    TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
    EXPECT_EQ(modeOf(path_), 0600U);
    TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult r, store->range("/k"));
    ASSERT_EQ(r.kvs.size(), 1U);  // The same store, only its mode changed.
  }
}

TEST_F(SqliteStoreTest, OpenErrorsNameTheFileAndTheProblem) {
  const std::string missing_dir = dir_.file("no/such/dir/store.db");
  core::Result<std::unique_ptr<Store>> r = SqliteStore::open(missing_dir, testOptions(), clock_);
  ASSERT_FALSE(r.isOk());
  EXPECT_TRUE(contains(r.status().message(), missing_dir)) << r.status().message();

  std::ofstream(path_) << "this is not a database, just some text that is long enough to matter "
                          "because SQLite reads a 100-byte header before it decides";
  r = open();
  ASSERT_FALSE(r.isOk());
  EXPECT_TRUE(contains(r.status().message(), path_)) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "not a database")) << r.status().message();

  const std::string foreign = dir_.file("foreign.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  r = SqliteStore::open(foreign, testOptions(), clock_);
  ASSERT_FALSE(r.isOk());
  EXPECT_TRUE(contains(r.status().message(), "not a Tessera store")) << r.status().message();
}

// Group commit, made deterministic: another connection holds SQLite's write lock while 16
// writers queue up; when it lets go, the writer commits all 16 in one transaction.
TEST_F(SqliteStoreTest, QueuedWritersShareOneCommit) {
  constexpr int kWriters = 16;
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  ASSERT_TRUE(store->put("warm-up", "v").isOk());
  const StoreStats before = store->stats();

  sqlite3* blocker = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &blocker), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  std::vector<std::future<core::Result<int64_t>>> writes;
  for (int i = 0; i < kWriters; ++i) {
    writes.push_back(
        std::async(std::launch::async, [&store, i] { return store->put(numbered("k", i), "v"); }));
  }
  const bool queued = eventually([&] { return store->stats().queued_write_requests == kWriters; });
  EXPECT_EQ(sqlite3_exec(blocker, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(blocker);
  ASSERT_TRUE(queued) << "writers never queued up: " << store->stats().queued_write_requests;

  std::vector<int64_t> revisions;
  for (auto& w : writes) {
    core::Result<int64_t> r = w.get();
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    revisions.push_back(*r);
  }
  const StoreStats after = store->stats();
  EXPECT_EQ(after.commits - before.commits, 1);
  EXPECT_EQ(after.write_requests - before.write_requests, kWriters);
  // Each write still got a revision of its own.
  std::sort(revisions.begin(), revisions.end());
  for (int i = 0; i < kWriters; ++i) {
    EXPECT_EQ(revisions[i], before.revision + 1 + i);
  }
}

// Group commit as it happens: concurrent writers need far fewer commits (fsyncs) than writes.
TEST_F(SqliteStoreTest, ConcurrentWritersNeedFarFewerCommitsThanWrites) {
  constexpr int kWriters = 16;
  constexpr int kPerWriter = 40;
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerWriter; ++i) {
        if (!store->put(numbered("w", t, i), "v").isOk()) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  const StoreStats stats = store->stats();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(stats.write_requests, kWriters * kPerWriter);
  EXPECT_EQ(stats.revision, kWriters * kPerWriter);
  EXPECT_LE(stats.commits * 4, stats.write_requests)
      << stats.commits << " commits for " << stats.write_requests << " writes";
}

// The child opens the store and writes from 16 threads; after each put returns it reports the
// key on the pipe. The parent kills it with SIGKILL mid-burst and checks that every reported key
// is in the reopened store.
[[noreturn]] void runDurabilityChild(const std::string& path, int report_fd) {
  core::RealClock clock;
  auto store = SqliteStore::open(path, testOptions(), clock);
  if (!store.isOk()) {
    const std::string line = "ERR " + store.status().toString() + "\n";
    (void)!write(report_fd, line.data(), line.size());
    _exit(2);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0;; ++i) {
        const std::string key = numbered("/d/", t, i);
        auto r = (*store)->put(key, "v" + key);
        // One write() per line: lines from different threads never interleave (< PIPE_BUF).
        const std::string line = (r.isOk() ? key : "ERR " + r.status().toString()) + "\n";
        (void)!write(report_fd, line.data(), line.size());
        if (!r.isOk()) {
          _exit(3);
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  _exit(0);
}

TEST_F(SqliteStoreTest, AcknowledgedWritesSurviveKill9) {
  constexpr size_t kKillAfter = 600;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    runDurabilityChild(path_, fds[1]);
  }
  close(fds[1]);
  FILE* reports = fdopen(fds[0], "r");
  ASSERT_NE(reports, nullptr);
  std::vector<std::string> acked;
  std::vector<std::string> errors;
  char line[512];
  bool killed = false;
  while (fgets(line, sizeof line, reports) != nullptr) {
    std::string text(line);
    text.pop_back();  // '\n'
    (text.starts_with("ERR") ? errors : acked).push_back(text);
    if (!killed && acked.size() >= kKillAfter) {
      kill(child, SIGKILL);
      killed = true;  // Keep reading: what the child reported before it died was acknowledged.
    }
  }
  fclose(reports);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(errors.empty()) << errors.front();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child ended before it was killed, status " << status;
  ASSERT_GE(acked.size(), kKillAfter);

  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  size_t missing = 0;
  for (const std::string& key : acked) {
    TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, store->get(key));
    if (!kv.has_value() || kv->value != "v" + key) {
      ++missing;
      ADD_FAILURE() << "acknowledged key " << key << " is missing after kill -9";
    }
    if (missing > 10) {
      break;
    }
  }
  // The store is consistent: one revision per key written, and it accepts writes.
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult all, store->range(kAll, kAll));
  EXPECT_EQ(all.count, all.revision);
  EXPECT_GE(all.revision, static_cast<int64_t>(acked.size()));
  EXPECT_TRUE(store->put("after", "v").isOk());
}

// A watcher slower than the writes: its buffered events are dropped and read back from the
// history, with nothing lost or repeated.
TEST_F(SqliteStoreTest, SlowWatcherCatchesUpFromTheHistory) {
  SqliteStoreOptions options = testOptions();
  options.max_buffered_events = 2;
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open(options));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex mu;
  std::vector<int64_t> seen;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch(kAll, kAll, 0, [&](const WatchResponse& r) {
    released.wait();  // The first callback holds up every later one.
    std::lock_guard lock(mu);
    for (const Event& e : r.events) {
      seen.push_back(e.kv.mod_revision);
    }
  }));
  constexpr int kWrites = 50;
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(store->put(numbered("k", i), "v").isOk());
  }
  release.set_value();
  EXPECT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return seen.size() >= kWrites;
  }));
  store->cancelWatch(w);
  std::vector<int64_t> want(kWrites);
  std::iota(want.begin(), want.end(), 1);
  std::lock_guard lock(mu);
  EXPECT_EQ(seen, want);
}

// Catching up across more history than one read chunk (1000 events), including one revision
// bigger than a chunk.
TEST_F(SqliteStoreTest, WatchReplaysLongHistoryInOrder) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  constexpr int kTxns = 25;
  constexpr int kPutsPerTxn = 100;
  for (int t = 0; t < kTxns; ++t) {
    Txn txn;
    for (int i = 0; i < kPutsPerTxn; ++i) {
      txn.success.push_back(Op::put(numbered("k/", t * kPutsPerTxn + i), "v"));
    }
    ASSERT_TRUE(store->txn(std::move(txn)).isOk());
  }
  TESSERA_ASSERT_OK_AND_ASSIGN(DeleteResult d, store->deleteRange("k/", prefixEnd("k/")));
  ASSERT_EQ(d.deleted, kTxns * kPutsPerTxn);
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch(kAll, kAll, 1, q.callback()));
  std::vector<Event> events = q.waitFor(2 * kTxns * kPutsPerTxn, kWait);
  store->cancelWatch(w);
  ASSERT_EQ(events.size(), 2u * kTxns * kPutsPerTxn);
  for (int t = 0; t < kTxns; ++t) {
    for (int i = 0; i < kPutsPerTxn; ++i) {
      const Event& e = events[t * kPutsPerTxn + i];
      ASSERT_EQ(e.kv.mod_revision, t + 1);
      ASSERT_EQ(e.type, EventType::kPut);
    }
  }
  for (size_t i = kTxns * kPutsPerTxn; i < events.size(); ++i) {
    ASSERT_EQ(events[i].type, EventType::kDelete);
    ASSERT_EQ(events[i].kv.mod_revision, kTxns + 1);
  }
}

TEST_F(SqliteStoreTest, KeepsOnlyTheConfiguredHistory) {
  SqliteStoreOptions options = testOptions();
  options.history_revisions = 10;
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open(options));
  for (int i = 1; i <= 30; ++i) {
    ASSERT_TRUE(store->put("k", std::to_string(i)).isOk());
  }
  const StoreStats stats = store->stats();
  // At least the last 10 revisions are kept; compaction went in steps of 1.
  EXPECT_EQ(stats.compact_revision, 21);
  EXPECT_EQ(store->range("k", "", 0, 20).status().code(), core::StatusCode::kOutOfRange);
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult at21, store->range("k", "", 0, 21));
  ASSERT_EQ(at21.kvs.size(), 1u);
  EXPECT_EQ(at21.kvs[0].value, "21");
  EventQueue q;
  EXPECT_EQ(store->watch("k", "", 20, q.callback()).status().code(), core::StatusCode::kOutOfRange);
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch("k", "", 21, q.callback()));
  EXPECT_EQ(q.waitFor(10, kWait).size(), 10u);
  store->cancelWatch(w);
}

// What follows was in the backend-independent suite until the etcd backend: etcd keeps lease time
// itself (etcd_store_test.cc has its lease tests), and its revisions do not start at 0.

TEST_F(SqliteStoreTest, EmptyStoreIsAtRevisionZero) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  EXPECT_EQ(store->stats().revision, 0);
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult r, store->range(kAll, kAll));
  EXPECT_EQ(r.revision, 0);
  EXPECT_EQ(store->put("a", "1").value(), 1);
}

TEST_F(SqliteStoreTest, ExpiredLeaseDeletesItsKeysWithDeleteEvents) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId lease, store->grant(10s));
  ASSERT_TRUE(store->put("/l/a", "1", lease).isOk());
  ASSERT_TRUE(store->put("/l/b", "1", lease).isOk());
  ASSERT_TRUE(store->put("/l/c", "1").isOk());
  EXPECT_EQ(store->stats().revision, 3);
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch("/l/", prefixEnd("/l/"), 0, q.callback()));

  clock_.advance(9s);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<LeaseId> expired, store->expireLeases());
  EXPECT_TRUE(expired.empty());
  EXPECT_EQ(store->stats().revision, 3);
  clock_.advance(1s);
  TESSERA_ASSERT_OK_AND_ASSIGN(expired, store->expireLeases());
  EXPECT_EQ(expired, std::vector<LeaseId>{lease});
  EXPECT_EQ(store->stats().revision, 4);  // Both keys in one revision.
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult left, store->range("/l/", prefixEnd("/l/")));
  ASSERT_EQ(left.kvs.size(), 1u);
  EXPECT_EQ(left.kvs[0].key, "/l/c");
  std::vector<Event> events = q.waitFor(2, kWait);
  ASSERT_EQ(events.size(), 2u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].type, EventType::kDelete);
    EXPECT_EQ(events[i].kv.key, i == 0 ? "/l/a" : "/l/b");
    EXPECT_EQ(events[i].kv.mod_revision, 4);
  }
  EXPECT_EQ(store->keepAlive(lease).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(store->put("/l/d", "1", lease).status().code(), core::StatusCode::kNotFound);
  store->cancelWatch(w);
}

TEST_F(SqliteStoreTest, KeepAliveRestartsTheTtl) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId lease, store->grant(10s));
  ASSERT_TRUE(store->put("k", "v", lease).isOk());
  clock_.advance(8s);
  TESSERA_ASSERT_OK_AND_ASSIGN(core::Duration ttl, store->keepAlive(lease));
  EXPECT_EQ(ttl, core::Duration(10s));
  clock_.advance(8s);  // 16s after the grant, 8s after the keepAlive.
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<LeaseId> expired, store->expireLeases());
  EXPECT_TRUE(expired.empty());
  EXPECT_TRUE(store->get("k")->has_value());
  clock_.advance(2s);
  TESSERA_ASSERT_OK_AND_ASSIGN(expired, store->expireLeases());
  EXPECT_EQ(expired, std::vector<LeaseId>{lease});
  EXPECT_FALSE(store->get("k")->has_value());
}

TEST_F(SqliteStoreTest, ExpirySkipsRevokedLeases) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId lease, store->grant(60s));
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId other, store->grant(60s));
  ASSERT_TRUE(store->put("a", "1", lease).isOk());
  ASSERT_TRUE(store->put("c", "1", other).isOk());
  ASSERT_TRUE(store->revoke(lease).isOk());
  clock_.advance(61s);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<LeaseId> expired, store->expireLeases());
  EXPECT_EQ(expired, std::vector<LeaseId>{other});
}

// The lease thread expires leases by the injected clock without anyone calling expireLeases().
TEST_F(SqliteStoreTest, LeaseThreadExpiresLeases) {
  SqliteStoreOptions options = testOptions();
  options.lease_check_interval = 1ms;
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open(options));
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId lease, store->grant(5s));
  ASSERT_TRUE(store->put("k", "v", lease).isOk());
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch("k", "", 0, q.callback()));
  clock_.advance(5s);
  std::vector<Event> events = q.waitFor(1, kWait);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, EventType::kDelete);
  store->cancelWatch(w);
}

}  // namespace
}  // namespace tessera::store
