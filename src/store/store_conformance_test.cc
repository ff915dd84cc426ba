// StoreConformance: the behaviour of the Store interface (etcd semantics), run against every
// backend: SqliteStore, and EtcdStore on a real 3-member etcd cluster (etcd_test_cluster.h) under
// a key prefix of the test's own. Backend-specific behaviour is in sqlite_store_test.cc
// (durability, group commit, files, leases on a fake clock) and etcd_store_test.cc (failover,
// leases on etcd's clock, options).
//
// An etcd cluster's revision is shared by everything stored in it, so revisions here are counted
// from the store's revision when the test began: `put` and `revision()` return them so,
// `rev(n)` turns one back into the store's, and `describe` prints events with them.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/etcd_store.h"
#include "store/etcd_test_cluster.h"
#include "store/event_queue.h"
#include "store/sqlite_store.h"
#include "store/store.h"
#include "store/test_util.h"

namespace tessera::store {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = std::chrono::seconds(10);  // For events from the store's thread.
const std::string kAll(1, '\0');                  // As a range end: no end.

std::vector<std::string> keysOf(const RangeResult& r) {
  std::vector<std::string> keys;
  for (const KeyValue& kv : r.kvs) {
    keys.push_back(kv.key);
  }
  return keys;
}

// A backend the suite runs against.
struct Backend {
  std::string name;
  // Opens an empty store for one test: a new SQLite file in `dir`, or `prefix` on the shared etcd
  // cluster.
  std::function<core::Result<std::unique_ptr<Store>>(const TempDir& dir, core::Clock& clock,
                                                     const std::string& prefix)>
      open;
  // etcd keeps notes as keys (etcd_store.h): a txn of notes alone takes a revision.
  bool notes_take_revisions = false;
};

void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

class StoreConformance : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    static int tests = 0;
    const std::string prefix = "/conformance/" + std::to_string(++tests) + "-" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name();
    auto store = GetParam().open(dir_, clock_, prefix);
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    store_ = std::move(store).value();
    base_ = store_->stats().revision;
  }

  void TearDown() override {
    // The etcd cluster is shared: leave no key a lease could delete during a later test.
    if (store_ != nullptr) {
      (void)store_->deleteRange(kAll, kAll);
    }
  }

  // The store's revision `n` writes after the test began.
  int64_t rev(int64_t n) const { return base_ + n; }

  // Puts and returns the revision (counted from the test's start), failing the test on error.
  int64_t put(const std::string& key, const std::string& value, LeaseId lease = LeaseId{}) {
    auto r = store_->put(key, value, lease);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return r.isOk() ? *r - base_ : -1;
  }

  // "PUT k=v @rev" or "DELETE k @rev" (rev counted from the test's start), to compare event
  // sequences at a glance.
  std::string describe(const Event& e) const {
    const std::string at = " @" + std::to_string(e.kv.mod_revision - base_);
    if (e.type == EventType::kPut) {
      return "PUT " + e.kv.key + "=" + e.kv.value + at;
    }
    return "DELETE " + e.kv.key + at;
  }

  std::vector<std::string> describe(const std::vector<Event>& events) const {
    std::vector<std::string> out;
    for (const Event& e : events) {
      out.push_back(describe(e));
    }
    return out;
  }

  std::vector<std::string> keysIn(const std::string& key, const std::string& end,
                                  int64_t limit = 0) {
    auto r = store_->range(key, end, limit);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return r.isOk() ? keysOf(*r) : std::vector<std::string>{};
  }

  // The store's revision now, counted from the test's start.
  int64_t revision() { return store_->stats().revision - base_; }

  TempDir dir_;
  ThreadSafeFakeClock clock_;
  std::unique_ptr<Store> store_;
  int64_t base_ = 0;  // The store's revision when the test began.
};

TEST(PrefixEndTest, IncrementsTheLastByteBelowFf) {
  EXPECT_EQ(prefixEnd("a"), "b");
  EXPECT_EQ(prefixEnd("/nodes/"), "/nodes0");
  EXPECT_EQ(prefixEnd("a\xff"), "b");
  EXPECT_EQ(prefixEnd("a\xff\xff"), "b");
  EXPECT_EQ(prefixEnd("\xff"), kAll);
  EXPECT_EQ(prefixEnd(""), kAll);
}

TEST_P(StoreConformance, EmptyStoreHasNoKeys) {
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult r, store_->range(kAll, kAll));
  EXPECT_TRUE(r.kvs.empty());
  EXPECT_EQ(r.count, 0);
  EXPECT_EQ(r.revision, rev(0));
  EXPECT_EQ(revision(), 0);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> missing, store_->get("a"));
  EXPECT_FALSE(missing.has_value());
}

TEST_P(StoreConformance, PutsTrackRevisionsVersionsAndCreation) {
  EXPECT_EQ(put("a", "1"), 1);
  EXPECT_EQ(put("b", "1"), 2);
  EXPECT_EQ(put("a", "2"), 3);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> a, store_->get("a"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (KeyValue{"a", "2", /*create=*/rev(1), /*mod=*/rev(3), /*version=*/2, LeaseId{}}));

  TESSERA_ASSERT_OK_AND_ASSIGN(DeleteResult d, store_->deleteRange("a"));
  EXPECT_EQ(d.deleted, 1);
  EXPECT_EQ(d.revision, rev(4));
  // Recreated: a new life with a new create revision, version 1.
  EXPECT_EQ(put("a", "3"), 5);
  TESSERA_ASSERT_OK_AND_ASSIGN(a, store_->get("a"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (KeyValue{"a", "3", rev(5), rev(5), 1, LeaseId{}}));
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult r, store_->range("a"));
  EXPECT_EQ(r.revision, rev(5));
}

TEST_P(StoreConformance, RangeFollowsEtcdSemantics) {
  for (const char* key : {"a", "b", "b/1", "b/2", "c"}) {
    put(key, "v");
  }
  struct Case {
    std::string key, end;
    int64_t limit;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"b", "", 0, {"b"}},                             // Empty end: one key.
      {"bb", "", 0, {}},                               // Missing key.
      {"b", "c", 0, {"b", "b/1", "b/2"}},              // [key, end).
      {"b/", prefixEnd("b/"), 0, {"b/1", "b/2"}},      // Prefix.
      {"b/1", kAll, 0, {"b/1", "b/2", "c"}},           // "\0": every key >= key.
      {kAll, kAll, 0, {"a", "b", "b/1", "b/2", "c"}},  // Everything.
      {kAll, kAll, 2, {"a", "b"}},                     // Limit.
      {"c", "a", 0, {}},                               // End before key: nothing.
  };
  for (const Case& c : cases) {
    EXPECT_EQ(keysIn(c.key, c.end, c.limit), c.want)
        << "key '" << c.key << "' end '" << c.end << "' limit " << c.limit;
  }
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult limited, store_->range(kAll, kAll, 2));
  EXPECT_EQ(limited.count, 5);
  EXPECT_TRUE(limited.more);
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult whole, store_->range(kAll, kAll, 5));
  EXPECT_EQ(whole.count, 5);
  EXPECT_FALSE(whole.more);
}

TEST_P(StoreConformance, KeysAndValuesAreBytesOrderedBytewise) {
  const std::string low("k\0", 2);
  const std::string mid("k\x01", 2);
  const std::string high("k\xff", 2);
  const std::string value("\0\xff\n", 3);
  put(high, value);
  put(low, value);
  put(mid, value);
  EXPECT_EQ(keysIn("k", prefixEnd("k")), (std::vector<std::string>{low, mid, high}));
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, store_->get(low));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, value);
  // "k" itself is not "k\0".
  EXPECT_EQ(keysIn("k", ""), std::vector<std::string>{});
}

TEST_P(StoreConformance, DeleteRangeMovesTheRevisionOnlyWhenItDeletes) {
  put("p/1", "v");
  put("p/2", "v");
  put("q", "v");
  TESSERA_ASSERT_OK_AND_ASSIGN(DeleteResult none, store_->deleteRange("missing"));
  EXPECT_EQ(none.deleted, 0);
  EXPECT_EQ(none.revision, rev(3));
  TESSERA_ASSERT_OK_AND_ASSIGN(DeleteResult some, store_->deleteRange("p/", prefixEnd("p/")));
  EXPECT_EQ(some.deleted, 2);
  EXPECT_EQ(some.revision, rev(4));  // Two keys, one revision.
  EXPECT_EQ(keysIn(kAll, kAll), std::vector<std::string>{"q"});
}

TEST_P(StoreConformance, CompareAndSwapTakesTheRightBranch) {
  const int64_t written = rev(put("n", "v1"));
  auto cas = [&](int64_t expected_mod) {
    return Txn{{Compare::modRevision("n", Compare::kEqual, expected_mod)},
               {Op::put("n", "v2")},
               {Op::get("n")}};
  };
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult won, store_->txn(cas(written)));
  EXPECT_TRUE(won.succeeded);
  EXPECT_EQ(won.revision, written + 1);
  ASSERT_EQ(won.results.size(), 1u);
  EXPECT_EQ(won.results[0].kind, Op::Kind::kPut);

  // The same swap again: the key moved on, so the failure branch reads the current value and
  // nothing is written.
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult lost, store_->txn(cas(written)));
  EXPECT_FALSE(lost.succeeded);
  EXPECT_EQ(lost.revision, written + 1);
  ASSERT_EQ(lost.results.size(), 1u);
  ASSERT_EQ(lost.results[0].range.kvs.size(), 1u);
  EXPECT_EQ(lost.results[0].range.kvs[0].value, "v2");
  EXPECT_EQ(lost.results[0].range.kvs[0].mod_revision, written + 1);
  EXPECT_EQ(rev(revision()), written + 1);
}

TEST_P(StoreConformance, ComparesOnEveryTargetAndRelation) {
  put("other", "x");  // Revision 1.
  put("k", "m");      // 2: k created.
  put("k", "m");      // 3: k modified, version 2.
  struct Case {
    Compare compare;
    bool holds;
  };
  const std::vector<Case> cases = {
      {Compare::version("k", Compare::kEqual, 2), true},
      {Compare::version("k", Compare::kNotEqual, 2), false},
      {Compare::version("k", Compare::kLess, 3), true},
      {Compare::version("k", Compare::kGreater, 2), false},
      {Compare::createRevision("k", Compare::kEqual, rev(2)), true},
      {Compare::createRevision("k", Compare::kLess, rev(2)), false},
      {Compare::modRevision("k", Compare::kEqual, rev(3)), true},
      {Compare::modRevision("k", Compare::kGreater, rev(2)), true},
      {Compare::value("k", Compare::kEqual, "m"), true},
      {Compare::value("k", Compare::kNotEqual, "m"), false},
      {Compare::value("k", Compare::kLess, "n"), true},
      {Compare::value("k", Compare::kGreater, "n"), false},
      {Compare::value("k", Compare::kGreater, "l"), true},
      // A missing key has version and revisions 0, and no value to compare.
      {Compare::version("missing", Compare::kEqual, 0), true},
      {Compare::createRevision("missing", Compare::kEqual, 0), true},
      {Compare::modRevision("missing", Compare::kGreater, 0), false},
      {Compare::value("missing", Compare::kEqual, ""), false},
      {Compare::value("missing", Compare::kNotEqual, ""), false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult r, store_->txn(Txn{{cases[i].compare}, {}, {}}));
    EXPECT_EQ(r.succeeded, cases[i].holds) << "case " << i;
  }
  // Several compares: all must hold.
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult both,
                               store_->txn(Txn{{Compare::version("k", Compare::kEqual, 2),
                                                Compare::value("other", Compare::kEqual, "y")},
                                               {},
                                               {}}));
  EXPECT_FALSE(both.succeeded);
  EXPECT_EQ(revision(), 3);
}

TEST_P(StoreConformance, TxnWritesShareOneRevisionAndSeeEachOther) {
  put("gone", "v");
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult r,
                               store_->txn(Txn{{},
                                               {Op::put("x", "1"), Op::put("y", "2"), Op::get("x"),
                                                Op::del("gone"), Op::get("gone")},
                                               {}}));
  EXPECT_TRUE(r.succeeded);
  EXPECT_EQ(r.revision, rev(2));
  ASSERT_EQ(r.results.size(), 5u);
  ASSERT_EQ(r.results[2].range.kvs.size(), 1u);
  EXPECT_EQ(r.results[2].range.kvs[0].value, "1");
  EXPECT_EQ(r.results[3].deleted, 1);
  EXPECT_TRUE(r.results[4].range.kvs.empty());
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult all, store_->range(kAll, kAll));
  ASSERT_EQ(keysOf(all), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(all.kvs[0].mod_revision, rev(2));
  EXPECT_EQ(all.kvs[1].mod_revision, rev(2));
}

TEST_P(StoreConformance, FailedTxnWritesNothing) {
  put("keep", "v");
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch(kAll, kAll, 0, q.callback()));
  // The third op names a lease that does not exist: the first two must not stay written, nor
  // reach watchers.
  core::Result<TxnResult> r = store_->txn(
      Txn{{}, {Op::put("a", "1"), Op::del("keep"), Op::put("b", "2", LeaseId{99})}, {}});
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), core::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("lease 99"), std::string::npos) << r.status().message();
  EXPECT_EQ(keysIn(kAll, kAll), std::vector<std::string>{"keep"});
  EXPECT_EQ(revision(), 1);
  // The store goes on normally afterwards.
  EXPECT_EQ(put("a", "2"), 2);
  EXPECT_EQ(describe(q.waitFor(1, kWait)), std::vector<std::string>{"PUT a=2 @2"});
  store_->cancelWatch(w);
}

TEST_P(StoreConformance, NotesAreStoredWithTheirTxnOutsideTheKeys) {
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch(kAll, kAll, 0, q.callback()));
  Txn txn{{}, {Op::put("a", "1")}, {}};
  txn.notes = {{"audit", 2, "second"}, {"audit", 1, "first"}, {"other", 1, "elsewhere"}};
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult r, store_->txn(std::move(txn)));
  EXPECT_EQ(r.revision, rev(1));
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> notes, store_->notes("audit"));
  ASSERT_EQ(notes.size(), 2U);
  EXPECT_EQ(notes[0].topic, "audit");
  EXPECT_EQ(notes[0].id, 1U);
  EXPECT_EQ(notes[0].body, "first");
  EXPECT_EQ(notes[1].id, 2U);
  EXPECT_EQ(notes[1].body, "second");
  // No key, no revision and no event of their own (etcd: no revision of their own when they go
  // with other writes).
  EXPECT_EQ(keysIn(kAll, kAll), std::vector<std::string>{"a"});
  EXPECT_EQ(describe(q.waitFor(1, kWait)), std::vector<std::string>{"PUT a=1 @1"});
  Txn only_notes{{}, {}, {}};
  only_notes.notes = {{"audit", 3, "third"}};
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult r2, store_->txn(std::move(only_notes)));
  const int64_t taken = GetParam().notes_take_revisions ? 1 : 0;
  EXPECT_EQ(r2.revision, rev(1 + taken));
  EXPECT_EQ(revision(), 1 + taken);
  // The next event is the next put's: the notes made none.
  EXPECT_EQ(put("b", "1"), 2 + taken);
  EXPECT_EQ(describe(q.waitFor(1, kWait)),
            std::vector<std::string>{"PUT b=1 @" + std::to_string(2 + taken)});
  EXPECT_TRUE(q.poll().empty());
  store_->cancelWatch(w);
}

TEST_P(StoreConformance, NotesGoWithWhicheverBranchRunsAndNotWithAFailedTxn) {
  Txn failing{{Compare::version("a", Compare::kGreater, 0)}, {Op::put("a", "2")}, {}};
  failing.notes = {{"audit", 1, "compare failed"}};
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult r, store_->txn(std::move(failing)));
  EXPECT_FALSE(r.succeeded);
  // A txn that fails (a lease that does not exist) stores nothing, its notes included.
  Txn refused{{}, {Op::put("b", "1", LeaseId{99})}, {}};
  refused.notes = {{"audit", 2, "refused"}};
  EXPECT_EQ(store_->txn(std::move(refused)).status().code(), core::StatusCode::kNotFound);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> notes, store_->notes("audit"));
  ASSERT_EQ(notes.size(), 1U);
  EXPECT_EQ(notes[0].body, "compare failed");
}

TEST_P(StoreConformance, AFailedGuardRunsNeitherBranchAndStoresNoNote) {
  const int64_t fence = rev(put("fence", "me"));
  put("a", "1");
  // The guard holds: the txn runs as if unguarded, its own compares choosing the branch.
  Txn held{{Compare::value("a", Compare::kEqual, "0")}, {Op::put("a", "2")}, {Op::get("a")}};
  held.guard = {Compare::createRevision("fence", Compare::kEqual, fence)};
  held.notes = {{"audit", 1, "held"}};
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult r, store_->txn(std::move(held)));
  EXPECT_FALSE(r.guard_failed);
  EXPECT_FALSE(r.succeeded);
  ASSERT_EQ(r.results.size(), 1U);
  ASSERT_EQ(r.results[0].range.kvs.size(), 1U);
  EXPECT_EQ(r.results[0].range.kvs[0].value, "1");
  // The fence key made again (another leader's): the same guard fails, and nothing happens.
  ASSERT_TRUE(store_->deleteRange("fence").isOk());
  put("fence", "someone else");
  const int64_t before = store_->stats().revision;
  Txn fenced{{}, {Op::put("a", "3"), Op::del("fence")}, {Op::put("b", "1")}};
  fenced.guard = {Compare::createRevision("fence", Compare::kEqual, fence)};
  fenced.notes = {{"audit", 2, "fenced"}};
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult out, store_->txn(std::move(fenced)));
  EXPECT_TRUE(out.guard_failed);
  EXPECT_FALSE(out.succeeded);
  EXPECT_TRUE(out.results.empty());
  EXPECT_EQ(store_->stats().revision, before);
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult a, store_->range("a"));
  ASSERT_EQ(a.kvs.size(), 1U);
  EXPECT_EQ(a.kvs[0].value, "1");
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult b, store_->range("b"));
  EXPECT_TRUE(b.kvs.empty());
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult f, store_->range("fence"));
  EXPECT_EQ(f.kvs.size(), 1U);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> notes, store_->notes("audit"));
  ASSERT_EQ(notes.size(), 1U);
  EXPECT_EQ(notes[0].body, "held");
}

TEST_P(StoreConformance, DropNotesDropsOneTopicsUpToAnId) {
  Txn txn{{}, {}, {}};
  for (uint64_t id = 1; id <= 4; ++id) {
    txn.notes.push_back({"audit", id, "a" + std::to_string(id)});
  }
  txn.notes.push_back({"other", 1, "o1"});
  ASSERT_TRUE(store_->txn(std::move(txn)).isOk());
  ASSERT_TRUE(store_->dropNotes("audit", 2).isOk());
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> left, store_->notes("audit"));
  ASSERT_EQ(left.size(), 2U);
  EXPECT_EQ(left[0].id, 3U);
  EXPECT_EQ(left[1].id, 4U);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> other, store_->notes("other"));
  EXPECT_EQ(other.size(), 1U);
  ASSERT_TRUE(store_->dropNotes("audit", UINT64_MAX).isOk());
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> none, store_->notes("audit"));
  EXPECT_TRUE(none.empty());
}

TEST_P(StoreConformance, TxnMayWriteAKeyOnlyOncePerBranch) {
  auto twice = store_->txn(Txn{{}, {Op::put("a", "1"), Op::put("a", "2")}, {}});
  EXPECT_EQ(twice.status().code(), core::StatusCode::kInvalidArgument);
  auto put_and_delete =
      store_->txn(Txn{{}, {Op::put("p/a", "1"), Op::del("p/", prefixEnd("p/"))}, {}});
  EXPECT_EQ(put_and_delete.status().code(), core::StatusCode::kInvalidArgument);
  // The same key in both branches is fine: only one runs.
  EXPECT_TRUE(store_->txn(Txn{{}, {Op::put("a", "1")}, {Op::put("a", "2")}}).isOk());
}

TEST_P(StoreConformance, RejectsBadInputWithoutWriting) {
  const std::string long_key(kMaxKeyBytes + 1, 'k');
  const std::string big_value(kMaxValueBytes + 1, 'v');
  struct Case {
    std::string what;
    core::Status status;
  };
  const std::vector<Case> cases = {
      {"empty key put", store_->put("", "v").status()},
      {"empty key range", store_->range("").status()},
      {"empty key delete", store_->deleteRange("").status()},
      {"empty key watch", store_->watch("", "", 0, [](const WatchResponse&) {}).status()},
      {"long key", store_->put(long_key, "v").status()},
      {"big value", store_->put("k", big_value).status()},
      {"negative limit", store_->range("k", "", -1).status()},
      {"watch without callback", store_->watch("k", "", 0, nullptr).status()},
      {"big value in txn", store_->txn(Txn{{}, {Op::put("k", big_value)}, {}}).status()},
      {"too many txn ops",
       store_->txn(Txn{{}, std::vector<Op>(kMaxTxnOps + 1, Op::get("k")), {}}).status()},
      {"zero ttl", store_->grant(core::Duration::zero()).status()},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), core::StatusCode::kInvalidArgument)
        << c.what << ": " << c.status.toString();
  }
  EXPECT_NE(cases[5].status.message().find("1.5 MiB"), std::string::npos);
  EXPECT_NE(cases[4].status.message().find("4096"), std::string::npos);
  EXPECT_EQ(revision(), 0);
  // Exactly at the limits is fine.
  EXPECT_TRUE(store_->put(std::string(kMaxKeyBytes, 'k'), std::string(kMaxValueBytes, 'v')).isOk());
}

TEST_P(StoreConformance, ReadsAtPastRevisions) {
  put("a", "1");                   // 1
  put("b", "1");                   // 2
  put("a", "2");                   // 3
  (void)store_->deleteRange("b");  // 4
  put("c", "1");                   // 5
  auto at = [&](int64_t n) {
    std::vector<std::string> out;
    auto r = store_->range(kAll, kAll, 0, n == 0 ? 0 : rev(n));
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    if (r.isOk()) {
      EXPECT_EQ(r->revision, rev(n == 0 ? 5 : n));
      for (const KeyValue& kv : r->kvs) {
        out.push_back(kv.key + "=" + kv.value + "@" + std::to_string(kv.mod_revision - base_));
      }
    }
    return out;
  };
  EXPECT_EQ(at(1), (std::vector<std::string>{"a=1@1"}));
  EXPECT_EQ(at(2), (std::vector<std::string>{"a=1@1", "b=1@2"}));
  EXPECT_EQ(at(3), (std::vector<std::string>{"a=2@3", "b=1@2"}));
  EXPECT_EQ(at(4), (std::vector<std::string>{"a=2@3"}));
  EXPECT_EQ(at(5), (std::vector<std::string>{"a=2@3", "c=1@5"}));
  EXPECT_EQ(at(0), at(5));
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult limited, store_->range(kAll, kAll, 1, rev(3)));
  EXPECT_EQ(keysOf(limited), std::vector<std::string>{"a"});
  EXPECT_EQ(limited.count, 2);
  EXPECT_TRUE(limited.more);

  EXPECT_EQ(store_->range("a", "", 0, rev(6)).status().code(), core::StatusCode::kOutOfRange);
  TESSERA_ASSERT_OK(store_->compact(rev(3)));
  EXPECT_EQ(store_->stats().compact_revision, rev(3));
  EXPECT_EQ(store_->range("a", "", 0, rev(2)).status().code(), core::StatusCode::kOutOfRange);
  EXPECT_EQ(at(3), (std::vector<std::string>{"a=2@3", "b=1@2"}));
  EXPECT_EQ(store_->compact(rev(6)).code(), core::StatusCode::kOutOfRange);
  TESSERA_ASSERT_OK(store_->compact(rev(2)));  // Below the compact revision: nothing to do.
  EXPECT_EQ(store_->stats().compact_revision, rev(3));
}

TEST_P(StoreConformance, WatchSeesLiveEventsUnderItsPrefix) {
  put("/w/old", "1");  // Before the watch: not seen.
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch("/w/", prefixEnd("/w/"), 0, q.callback()));
  put("/w/a", "1");
  put("/x", "1");  // Outside the prefix.
  put("/w/a", "2");
  (void)store_->deleteRange("/w/a");
  std::vector<Event> events = q.waitFor(3, kWait);
  EXPECT_EQ(describe(events),
            (std::vector<std::string>{"PUT /w/a=1 @2", "PUT /w/a=2 @4", "DELETE /w/a @5"}));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_FALSE(events[0].prev_kv.has_value());
  ASSERT_TRUE(events[1].prev_kv.has_value());
  EXPECT_EQ(events[1].prev_kv->value, "1");
  EXPECT_EQ(events[1].kv.version, 2);
  EXPECT_EQ(events[1].kv.create_revision, rev(2));
  ASSERT_TRUE(events[2].prev_kv.has_value());
  EXPECT_EQ(events[2].prev_kv->value, "2");
  store_->cancelWatch(w);
}

TEST_P(StoreConformance, WatchOfOneKeyOrARange) {
  EventQueue one;
  EventQueue range;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w1, store_->watch("k", "", 0, one.callback()));
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w2, store_->watch("b", "d", 0, range.callback()));
  for (const char* key : {"k2", "a", "b", "c", "d", "k"}) {
    put(key, "v");
  }
  EXPECT_EQ(describe(one.waitFor(1, kWait)), std::vector<std::string>{"PUT k=v @6"});
  EXPECT_EQ(describe(range.waitFor(2, kWait)),
            (std::vector<std::string>{"PUT b=v @3", "PUT c=v @4"}));
  store_->cancelWatch(w1);
  store_->cancelWatch(w2);
  EXPECT_TRUE(one.poll().empty());
  EXPECT_TRUE(range.poll().empty());
}

TEST_P(StoreConformance, WatchFromAPastRevisionReplaysExactlyTheMissedEvents) {
  put("/r/a", "1");                                                         // 1
  put("/r/b", "1");                                                         // 2
  put("/other", "1");                                                       // 3
  (void)store_->txn(Txn{{}, {Op::put("/r/a", "2"), Op::del("/r/b")}, {}});  // 4
  put("/r/c", "1");                                                         // 5
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w,
                               store_->watch("/r/", prefixEnd("/r/"), rev(2), q.callback()));
  put("/r/d", "1");  // 6: live, after the replay.
  EXPECT_EQ(describe(q.waitFor(5, kWait)),
            (std::vector<std::string>{"PUT /r/b=1 @2", "PUT /r/a=2 @4", "DELETE /r/b @4",
                                      "PUT /r/c=1 @5", "PUT /r/d=1 @6"}));
  put("/r/e", "1");
  EXPECT_EQ(describe(q.waitFor(1, kWait)), std::vector<std::string>{"PUT /r/e=1 @7"});
  store_->cancelWatch(w);
  EXPECT_TRUE(q.poll().empty());
}

TEST_P(StoreConformance, WatchFromTheFutureStartsThere) {
  put("f", "1");
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch("f", "", rev(3), q.callback()));
  put("f", "2");  // 2: before the watch's start.
  put("f", "3");  // 3
  EXPECT_EQ(describe(q.waitFor(1, kWait)), std::vector<std::string>{"PUT f=3 @3"});
  store_->cancelWatch(w);
}

TEST_P(StoreConformance, OneResponsePerRevisionHoldsAllOfATxnsEvents) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<WatchResponse> responses;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch(kAll, kAll, 0, [&](const WatchResponse& r) {
    std::lock_guard lock(mu);
    responses.push_back(r);
    cv.notify_all();
  }));
  (void)store_->txn(Txn{{}, {Op::put("a", "1"), Op::put("b", "1"), Op::put("c", "1")}, {}});
  put("z", "1");
  {
    // Two responses, or more if the txn's events were split (which the checks below catch).
    std::unique_lock lock(mu);
    cv.wait_for(lock, kWait, [&] { return responses.size() >= 2; });
  }
  store_->cancelWatch(w);
  std::lock_guard lock(mu);
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[0].revision, rev(1));
  EXPECT_EQ(describe(responses[0].events),
            (std::vector<std::string>{"PUT a=1 @1", "PUT b=1 @1", "PUT c=1 @1"}));
  EXPECT_EQ(responses[1].revision, rev(2));
}

TEST_P(StoreConformance, CancelStopsDelivery) {
  EventQueue cancelled;
  EventQueue sentinel;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch("c", "", 0, cancelled.callback()));
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId s, store_->watch("s", "", 0, sentinel.callback()));
  put("c", "1");
  ASSERT_EQ(cancelled.waitFor(1, kWait).size(), 1u);
  store_->cancelWatch(w);
  put("c", "2");
  put("s", "1");
  // Live watchers get each revision before the next, so once the sentinel has seen revision 3
  // the cancelled watch would have seen revision 2.
  ASSERT_EQ(sentinel.waitFor(1, kWait).size(), 1u);
  EXPECT_TRUE(cancelled.poll().empty());
  store_->cancelWatch(s);
  store_->cancelWatch(w);  // Twice is fine.
}

TEST_P(StoreConformance, CallbacksMayWriteAndCancelThemselves) {
  EventQueue echoes;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId e, store_->watch("echo", "", 0, echoes.callback()));
  std::atomic<int64_t> self{0};
  std::atomic<int> calls{0};
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch("ping", "", 0, [&](const WatchResponse& r) {
    ++calls;
    EXPECT_TRUE(store_->put("echo", r.events[0].kv.value).isOk());
    store_->cancelWatch(WatchId{self.load()});
  }));
  self = w.value();
  put("ping", "1");
  EXPECT_EQ(describe(echoes.waitFor(1, kWait)), std::vector<std::string>{"PUT echo=1 @2"});
  put("ping", "2");  // 3: the ping watch cancelled itself.
  put("echo", "end");
  EXPECT_EQ(describe(echoes.waitFor(1, kWait)), std::vector<std::string>{"PUT echo=end @4"});
  EXPECT_EQ(calls.load(), 1);
  store_->cancelWatch(e);
}

TEST_P(StoreConformance, WatchBelowTheCompactRevisionFails) {
  for (int i = 0; i < 5; ++i) {
    put("k", std::to_string(i));
  }
  TESSERA_ASSERT_OK(store_->compact(rev(4)));
  EventQueue q;
  core::Result<WatchId> old = store_->watch("k", "", rev(3), q.callback());
  EXPECT_EQ(old.status().code(), core::StatusCode::kOutOfRange);
  EXPECT_NE(old.status().message().find("compacted"), std::string::npos);
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch("k", "", rev(4), q.callback()));
  EXPECT_EQ(describe(q.waitFor(2, kWait)), (std::vector<std::string>{"PUT k=3 @4", "PUT k=4 @5"}));
  store_->cancelWatch(w);
}

TEST_P(StoreConformance, RevokeDeletesOnlyTheKeysStillAttached) {
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId lease, store_->grant(60s));
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId other, store_->grant(60s));
  EXPECT_NE(lease, other);
  put("a", "1", lease);
  put("b", "1", lease);
  put("b", "2");         // Detached from the lease.
  put("c", "1", other);  // Another lease.
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store_->watch(kAll, kAll, 0, q.callback()));
  TESSERA_ASSERT_OK_AND_ASSIGN(int64_t revoked, store_->revoke(lease));
  EXPECT_EQ(revoked, rev(5));
  EXPECT_EQ(keysIn(kAll, kAll), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(describe(q.waitFor(1, kWait)), std::vector<std::string>{"DELETE a @5"});
  EXPECT_EQ(store_->revoke(lease).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(store_->keepAlive(lease).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(store_->put("d", "1", lease).status().code(), core::StatusCode::kNotFound);
  // A lease without keys: revoking it changes no key, so the revision stays.
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId empty, store_->grant(60s));
  TESSERA_ASSERT_OK_AND_ASSIGN(revoked, store_->revoke(empty));
  EXPECT_EQ(revoked, rev(5));
  TESSERA_ASSERT_OK(store_->revoke(other).status());
  EXPECT_TRUE(q.waitFor(1, kWait).size() == 1);  // DELETE c.
  store_->cancelWatch(w);
}

TEST_P(StoreConformance, KeepAliveAnswersTheTtl) {
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId lease, store_->grant(30s));
  TESSERA_ASSERT_OK_AND_ASSIGN(core::Duration ttl, store_->keepAlive(lease));
  EXPECT_EQ(ttl, core::Duration(30s));
  TESSERA_ASSERT_OK(store_->revoke(lease).status());
}

TEST_P(StoreConformance, ConcurrentWritersAndReaders) {
  constexpr int kWriters = 8;
  constexpr int kPerWriter = 25;
  std::atomic<bool> stop{false};
  std::atomic<int> bad_reads{0};
  std::thread reader([&] {
    int64_t last = 0;
    while (!stop) {
      auto r = store_->range(kAll, kAll);
      // A snapshot: as many keys as revisions (each put adds one new key), never going back.
      if (!r.isOk() || r->count != r->revision - base_ || r->revision < last) {
        ++bad_reads;
      }
      last = r.isOk() ? r->revision : last;
    }
  });
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      int64_t last = 0;
      for (int i = 0; i < kPerWriter; ++i) {
        auto r = store_->put(numbered("w", t, i), "v");
        if (!r.isOk() || *r <= last) {
          ++failures;
        }
        last = r.isOk() ? *r : last;
      }
    });
  }
  for (std::thread& w : writers) {
    w.join();
  }
  stop = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(bad_reads.load(), 0);
  EXPECT_EQ(revision(), kWriters * kPerWriter);
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult all, store_->range(kAll, kAll));
  EXPECT_EQ(all.count, kWriters * kPerWriter);
}

TEST_P(StoreConformance, CompareAndSwapCounterLosesNoIncrement) {
  constexpr int kThreads = 8;
  constexpr int kIncrements = 10;
  put("counter", "0");
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int done = 0; done < kIncrements;) {
        auto kv = store_->get("counter");
        if (!kv.isOk() || !kv->has_value()) {
          ++errors;
          return;
        }
        const int64_t next = std::stoll((*kv)->value) + 1;
        auto r =
            store_->txn(Txn{{Compare::modRevision("counter", Compare::kEqual, (*kv)->mod_revision)},
                            {Op::put("counter", std::to_string(next))},
                            {}});
        if (!r.isOk()) {
          ++errors;
          return;
        }
        done += r->succeeded ? 1 : 0;
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(errors.load(), 0);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, store_->get("counter"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, std::to_string(kThreads * kIncrements));
  EXPECT_EQ(kv->version, 1 + kThreads * kIncrements);
}

core::Result<std::unique_ptr<Store>> openSqlite(const TempDir& dir, core::Clock& clock,
                                                const std::string& /*prefix*/) {
  return SqliteStore::open(dir.file("store.db"), testOptions(), clock);
}

// Fails (not skips) without an etcd binary: CI installs it with scripts/bootstrap.
core::Result<std::unique_ptr<Store>> openEtcd(const TempDir& /*dir*/, core::Clock& clock,
                                              const std::string& prefix) {
  TESSERA_ASSIGN_OR_RETURN(EtcdTestCluster * etcd, EtcdTestCluster::shared());
  return EtcdStore::open(etcd->options(prefix), clock);
}

INSTANTIATE_TEST_SUITE_P(, StoreConformance,
                         ::testing::Values(Backend{"Sqlite", openSqlite},
                                           Backend{"Etcd", openEtcd,
                                                   /*notes_take_revisions=*/true}),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tessera::store
