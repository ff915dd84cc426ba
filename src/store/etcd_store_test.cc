// What is particular to the etcd backend: its options, where it keeps keys and notes, leases on
// etcd's own clock, and failover when a member dies. The Store behaviour it shares with SQLite is
// in store_conformance_test.cc. These tests fail (not skip) without an etcd binary.
#include "store/etcd_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "store/etcd_test_cluster.h"
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

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = EtcdTestCluster::shared();
    ASSERT_TRUE(etcd.isOk()) << etcd.status().toString();
    etcd_ = *etcd;
    static int tests = 0;
    prefix_ = "/etcd-store-test/" + std::to_string(++tests) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  void TearDown() override {
    // Leave the shared cluster whole for the tests after this one.
    for (size_t i = 0; etcd_ != nullptr && i < etcd_->clientUrls().size(); ++i) {
      etcd_->resume(i);
      if (!etcd_->running(i)) {
        TESSERA_ASSERT_OK(etcd_->restart(i));
      }
    }
  }

  core::Result<std::unique_ptr<Store>> open(size_t first = 0) {
    return EtcdStore::open(etcd_->options(prefix_, first), clock_);
  }

  EtcdTestCluster* etcd_ = nullptr;
  std::string prefix_;
  ThreadSafeFakeClock clock_;
};

TEST(EtcdStoreOptionsTest, OpenRejectsBadOptionsNamingThem) {
  ThreadSafeFakeClock clock;
  auto with = [](auto change) {
    EtcdStoreOptions o;
    o.endpoints = {"http://127.0.0.1:1"};
    change(o);
    return o;
  };
  struct Case {
    std::string what;
    EtcdStoreOptions options;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"no endpoints", with([](EtcdStoreOptions& o) { o.endpoints.clear(); }), "no endpoints"},
      {"plain http off loopback",
       with([](EtcdStoreOptions& o) { o.endpoints = {"http://10.0.0.1:2379"}; }), "loopback"},
      {"no scheme", with([](EtcdStoreOptions& o) { o.endpoints = {"127.0.0.1:2379"}; }),
       "'127.0.0.1:2379'"},
      {"no port", with([](EtcdStoreOptions& o) { o.endpoints = {"https://etcd-1"}; }), "port"},
      {"bad port", with([](EtcdStoreOptions& o) { o.endpoints = {"https://etcd-1:99999"}; }),
       "65535"},
      {"a path", with([](EtcdStoreOptions& o) { o.endpoints = {"https://etcd-1:2379/v3"}; }),
       "host:port"},
      {"https without ca_file",
       with([](EtcdStoreOptions& o) { o.endpoints = {"https://etcd-1:2379"}; }), "ca_file"},
      {"unreadable ca_file", with([](EtcdStoreOptions& o) {
         o.endpoints = {"https://etcd-1:2379"};
         o.ca_file = "/nonexistent/ca.pem";
       }),
       "/nonexistent/ca.pem"},
      {"cert without key", with([](EtcdStoreOptions& o) { o.cert_file = "client.pem"; }),
       "key_file"},
      {"zero timeout", with([](EtcdStoreOptions& o) { o.request_timeout = 0ms; }),
       "request_timeout"},
  };
  for (const Case& c : cases) {
    auto store = EtcdStore::open(c.options, clock);
    ASSERT_FALSE(store.isOk()) << c.what;
    EXPECT_EQ(store.status().code(), core::StatusCode::kInvalidArgument) << c.what;
    EXPECT_TRUE(contains(store.status().message(), c.message_part))
        << c.what << ": " << store.status().message();
  }
}

TEST(EtcdStoreOptionsTest, OpenFailsNamingEveryEndpointWhenNoneAnswers) {
  ThreadSafeFakeClock clock;
  EtcdStoreOptions o;
  o.endpoints = {"http://127.0.0.1:1", "http://[::1]:1"};
  o.dial_timeout = 300ms;
  const auto started = std::chrono::steady_clock::now();
  auto store = EtcdStore::open(o, clock);
  ASSERT_FALSE(store.isOk());
  EXPECT_EQ(store.status().code(), core::StatusCode::kUnavailable);
  EXPECT_TRUE(contains(store.status().message(), "http://127.0.0.1:1")) << store.status().message();
  EXPECT_TRUE(contains(store.status().message(), "http://[::1]:1")) << store.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST_F(EtcdStoreTest, KeysAndNotesLiveUnderThePrefixApart) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  Txn txn{{}, {Op::put("/nodes/n1", "v")}, {}};
  txn.notes = {{"audit/file:/var/log/a", 7, "record"}};
  TESSERA_ASSERT_OK_AND_ASSIGN(TxnResult r, store->txn(std::move(txn)));
  TESSERA_ASSERT_OK_AND_ASSIGN(auto raw, etcd_->rawRange(prefix_ + "/"));
  using Raw = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(raw, (Raw{{prefix_ + "/kv/nodes/n1", "v"},
                      {prefix_ + "/notes/audit/file:/var/log/a" + std::string(1, '\0') +
                           "00000000000000000007",
                       "record"}}));
  // Another store with a prefix of its own sees none of it.
  EtcdStoreOptions other = etcd_->options(prefix_ + "-other");
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> neighbour, EtcdStore::open(other, clock_));
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult all, neighbour->range(kAll, kAll));
  EXPECT_TRUE(all.kvs.empty());
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<Note> notes, neighbour->notes("audit/file:/var/log/a"));
  EXPECT_TRUE(notes.empty());
  // Notes drop one at a time, by id.
  TESSERA_ASSERT_OK(store->dropNotes("audit/file:/var/log/a", 6));
  TESSERA_ASSERT_OK_AND_ASSIGN(notes, store->notes("audit/file:/var/log/a"));
  EXPECT_EQ(notes.size(), 1u);
  TESSERA_ASSERT_OK(store->dropNotes("audit/file:/var/log/a", 7));
  TESSERA_ASSERT_OK_AND_ASSIGN(notes, store->notes("audit/file:/var/log/a"));
  EXPECT_TRUE(notes.empty());
  // A topic with a zero byte cannot be told apart from its id: refused.
  Txn zero{{}, {}, {}};
  zero.notes = {{std::string("a\0b", 3), 1, "x"}};
  EXPECT_EQ(store->txn(std::move(zero)).status().code(), core::StatusCode::kInvalidArgument);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, store->get("/nodes/n1"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->mod_revision, r.revision);
}

TEST_F(EtcdStoreTest, ErrorsNameTheRequestAndTheEndpoint) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  core::Status s = store->put("/k", "v", LeaseId{424242}).status();
  EXPECT_EQ(s.code(), core::StatusCode::kNotFound);
  EXPECT_TRUE(contains(s.message(), "put '/k'")) << s.message();
  EXPECT_TRUE(contains(s.message(), "lease 424242")) << s.message();
  EXPECT_TRUE(contains(s.message(), "etcd at " + etcd_->clientUrls()[0])) << s.message();
}

// etcd expires leases itself, on its own clock: the keys go with DELETE events at one revision
// without anyone calling expireLeases(), which has nothing to do.
TEST_F(EtcdStoreTest, LeasesExpireOnEtcdsClock) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open());
  TESSERA_ASSERT_OK_AND_ASSIGN(LeaseId lease, store->grant(1s));  // etcd raises it to its minimum.
  TESSERA_ASSERT_OK_AND_ASSIGN(int64_t first, store->put("/l/a", "1", lease));
  ASSERT_TRUE(store->put("/l/b", "1", lease).isOk());
  ASSERT_TRUE(store->put("/l/c", "1").isOk());
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch("/l/", prefixEnd("/l/"), 0, q.callback()));
  TESSERA_ASSERT_OK_AND_ASSIGN(std::vector<LeaseId> expired, store->expireLeases());
  EXPECT_TRUE(expired.empty());
  std::vector<Event> events = q.waitFor(2, kWait);
  store->cancelWatch(w);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, EventType::kDelete);
  EXPECT_EQ(events[0].kv.key, "/l/a");
  EXPECT_EQ(events[1].type, EventType::kDelete);
  EXPECT_EQ(events[1].kv.key, "/l/b");
  EXPECT_EQ(events[0].kv.mod_revision, events[1].kv.mod_revision);
  // After the three puts. (Not exactly first + 3: the cluster is shared, and on a loaded
  // machine another test's expiring lease may take a revision in between, as seen once in CI.)
  EXPECT_GE(events[0].kv.mod_revision, first + 3);
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult left, store->range("/l/", prefixEnd("/l/")));
  ASSERT_EQ(left.kvs.size(), 1u);
  EXPECT_EQ(left.kvs[0].key, "/l/c");
  EXPECT_EQ(store->keepAlive(lease).status().code(), core::StatusCode::kNotFound);
}

// A store whose first endpoint is unreachable opens on the next one and works there.
TEST_F(EtcdStoreTest, AnUnreachableFirstEndpointIsPassedOver) {
  EtcdStoreOptions o = etcd_->options(prefix_);
  o.endpoints.insert(o.endpoints.begin(), "http://127.0.0.1:1");
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, EtcdStore::open(o, clock_));
  TESSERA_ASSERT_OK_AND_ASSIGN(int64_t r, store->put("k", "v"));
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, store->get("k"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->mod_revision, r);
}

// The member the store talks to dies between two writes: the writes, reads and a txn go on on
// another member without an error, and a watch started before resumes there with every revision
// once, in order.
TEST_F(EtcdStoreTest, KillingTheMemberInUseLosesNothing) {
  TESSERA_ASSERT_OK_AND_ASSIGN(size_t leader, etcd_->leader());
  // A follower, so that its death costs no election (a write in flight to a dying leader has an
  // unknown outcome, and etcd_store.h says it fails).
  const size_t victim = (leader + 1) % etcd_->clientUrls().size();
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open(victim));
  EventQueue q;
  TESSERA_ASSERT_OK_AND_ASSIGN(WatchId w, store->watch("/f/", prefixEnd("/f/"), 0, q.callback()));
  constexpr int kPerHalf = 10;
  std::vector<int64_t> revisions;
  for (int i = 0; i < kPerHalf; ++i) {
    TESSERA_ASSERT_OK_AND_ASSIGN(int64_t r, store->put(numbered("/f/", i), "v"));
    revisions.push_back(r);
  }
  ASSERT_EQ(q.waitFor(kPerHalf, kWait).size(), static_cast<size_t>(kPerHalf));

  etcd_->kill(victim);
  // A read first: it may find the connection reset, which it retries on the next member. A
  // write that met the reset could not tell whether the dead member had passed it on to the
  // leader before dying, so it would fail rather than risk applying twice (etcd_store.h); a
  // write meeting a refused connection is retried (AnUnreachableFirstEndpointIsPassedOver).
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult half, store->range("/f/", prefixEnd("/f/")));
  EXPECT_EQ(half.count, kPerHalf);
  for (int i = kPerHalf; i < 2 * kPerHalf; ++i) {
    TESSERA_ASSERT_OK_AND_ASSIGN(int64_t r, store->put(numbered("/f/", i), "v"));
    revisions.push_back(r);
  }
  TESSERA_ASSERT_OK_AND_ASSIGN(RangeResult all, store->range("/f/", prefixEnd("/f/")));
  EXPECT_EQ(all.count, 2 * kPerHalf);
  TESSERA_ASSERT_OK_AND_ASSIGN(
      TxnResult cas,
      store->txn(Txn{{Compare::modRevision(numbered("/f/", 0), Compare::kEqual, revisions[0])},
                     {Op::put(numbered("/f/", 0), "swapped")},
                     {}}));
  EXPECT_TRUE(cas.succeeded);
  revisions.push_back(cas.revision);

  // Each write applied once: nothing else writes to the cluster meanwhile.
  for (size_t i = 1; i < revisions.size(); ++i) {
    EXPECT_EQ(revisions[i], revisions[i - 1] + 1) << "write " << i;
  }

  std::vector<Event> events = q.waitFor(kPerHalf + 1, kWait);
  store->cancelWatch(w);
  ASSERT_EQ(events.size(), static_cast<size_t>(kPerHalf + 1));
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].kv.mod_revision, revisions[kPerHalf + i]) << "event " << i;
  }
  EXPECT_EQ(events.back().kv.value, "swapped");
  EXPECT_TRUE(q.poll().empty());
}

// Issue 42: a call with a deadline of its own (the scheduler's status write, shorter than a
// pass) gives up on a member that does not answer within it, instead of waiting out its try,
// and the store's next call goes to another member.
TEST_F(EtcdStoreTest, ACallsDeadlineBoundsItAndTheNextCallGoesElsewhere) {
  TESSERA_ASSERT_OK_AND_ASSIGN(size_t leader, etcd_->leader());
  const size_t stalled = (leader + 1) % etcd_->clientUrls().size();
  EtcdStoreOptions o = etcd_->options(prefix_, stalled);
  o.attempt_timeout = 3s;  // Longer than the deadline below, so that bounds the call.
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, EtcdStore::open(o, clock_));
  TESSERA_ASSERT_OK(store->put("/status/w", "pending").status());
  etcd_->pause(stalled);
  Txn txn{.success = {Op::put("/status/w", "running")}};
  txn.idempotent = true;
  txn.deadline = 300ms;
  auto start = std::chrono::steady_clock::now();
  auto r = store->txn(txn);
  const auto bounded = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), core::StatusCode::kUnavailable);
  EXPECT_TRUE(contains(r.status().message(), "the call's deadline of 300 ms"))
      << r.status().message();
  EXPECT_GE(bounded, 250ms);
  EXPECT_LT(bounded, 2s);  // Not the 3 s try, nor the 10 s request timeout.
  // The same txn again, as the next pass would send it: answered by another member at once.
  start = std::chrono::steady_clock::now();
  TESSERA_ASSERT_OK(store->txn(txn).status());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, store->get("/status/w"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, "running");
  etcd_->resume(stalled);
}

// Issue 42: without quorum (two members of three down), once the member left says it has no
// leader, a call fails within about no_quorum_timeout saying why, and writes nothing; opening a
// store fails as soon, not after its dial timeout.
TEST_F(EtcdStoreTest, WithoutQuorumCallsAndOpeningFailSoonSayingWhy) {
  TESSERA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, open(0));
  TESSERA_ASSERT_OK(store->put("/q", "before").status());
  etcd_->kill(1);
  etcd_->kill(2);
  // The member left believes in its leader for an election timeout (a write sent meanwhile
  // would wait for etcd's own timeout, its outcome unknown); reads, tried 1 s at a time, find
  // out when it says it has none.
  auto read = store->get("/q");
  for (int i = 0;
       i < 10 && (read.isOk() || !contains(read.status().message(), std::string(kNoEtcdQuorum)));
       ++i) {
    read = store->get("/q");
  }
  ASSERT_FALSE(read.isOk());
  ASSERT_TRUE(contains(read.status().message(), std::string(kNoEtcdQuorum)))
      << read.status().message();
  auto start = std::chrono::steady_clock::now();
  auto put = store->put("/q", "refused");
  ASSERT_FALSE(put.isOk());
  EXPECT_TRUE(contains(put.status().message(), "nothing was written")) << put.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EtcdStoreOptions o = etcd_->options(prefix_);
  o.dial_timeout = 20s;
  start = std::chrono::steady_clock::now();
  auto opened = EtcdStore::open(o, clock_);
  ASSERT_FALSE(opened.isOk());
  EXPECT_EQ(opened.status().code(), core::StatusCode::kUnavailable);
  EXPECT_TRUE(contains(opened.status().message(), std::string(kNoEtcdQuorum)))
      << opened.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "not the 20 s dial timeout";
  TESSERA_ASSERT_OK(etcd_->restart(1));
  TESSERA_ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, store->get("/q"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_NE(kv->value, "refused") << "a write refused for want of quorum was applied";
}

}  // namespace
}  // namespace tessera::store
