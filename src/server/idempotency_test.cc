#include "server/idempotency.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "store/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;

// A store whose next txns' answers are lost: each applied (or not), then "outcome unknown", as
// an etcd member whose leader died answers.
class LossyStore final : public store::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  core::Result<store::TxnResult> txn(store::Txn t) override {
    deadlines.push_back(t.deadline);
    if (lose > 0) {
      --lose;
      if (applied_anyway) {
        (void)inner().txn(t);
      }
      return core::unavailable("txn: etcd at http://e1: Deadline Exceeded (" +
                               std::string(store::kOutcomeUnknown) + ")");
    }
    return inner().txn(std::move(t));
  }
  int lose = 0;
  bool applied_anyway = false;
  std::vector<std::chrono::milliseconds> deadlines;
};

class IdempotencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open(dir_.file("t.db"), {}, clock_);
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    raw_ = std::move(s).value();
    store_ = std::make_unique<IdempotentStore>(*raw_);
    idem_ = std::make_unique<Idempotency>(*store_, clock_);
  }
  // A handler that writes `key`=`value` and answers 201 with a body naming it, run once per key
  // as the control plane runs one (Scope around the handler, end() after).
  HttpResponse change(const std::string& idem_key, const std::string& key, const std::string& value,
                      const std::string& body = "{}") {
    Idempotency::Ticket ticket;
    const core::Status ready = idem_->begin(idem_key, "accessor-1", "POST", "/v1/x", body, ticket);
    EXPECT_TRUE(ready.isOk()) << ready.toString();
    HttpResponse resp;
    {
      Idempotency::Scope scope(&ticket);
      auto put = store_->put(key, value);
      resp.status = put.isOk() ? 201 : 409;
      resp.body = json{{"data", {{"key", key}, {"value", value}}}}.dump();
    }
    HttpResponse out = idem_->end(ticket, std::move(resp), false);
    idem_->flush();
    return out;
  }
  int64_t versionOf(const std::string& key) {
    auto kv = raw_->get(key);
    return kv.isOk() && *kv ? (*kv)->version : 0;
  }

  store::TempDir dir_;
  core::FakeClock clock_;
  std::unique_ptr<store::Store> raw_;
  std::unique_ptr<IdempotentStore> store_;
  std::unique_ptr<Idempotency> idem_;
};

TEST_F(IdempotencyTest, AChangeSentTwiceUnderOneKeyIsAppliedOnceAndAnsweredAlike) {
  const HttpResponse first = change("k-1", "/counter", "a");
  EXPECT_EQ(first.status, 201U);
  EXPECT_EQ(versionOf("/counter"), 1);
  const HttpResponse again = change("k-1", "/counter", "a");
  EXPECT_EQ(again.status, 201U);
  EXPECT_EQ(again.body, first.body);
  EXPECT_NE(std::find(again.headers.begin(), again.headers.end(),
                      std::pair<std::string, std::string>("Idempotent-Replayed", "true")),
            again.headers.end());
  EXPECT_EQ(versionOf("/counter"), 1) << "applied once";
  // Another key is another change.
  EXPECT_EQ(change("k-2", "/counter", "a").status, 201U);
  EXPECT_EQ(versionOf("/counter"), 2);
  // The same key for another request is refused, and changes nothing.
  const HttpResponse reused = change("k-1", "/counter", "b", R"({"other": 1})");
  EXPECT_EQ(reused.status, 422U) << reused.body;
  EXPECT_EQ(versionOf("/counter"), 2);
}

TEST_F(IdempotencyTest, TheRecordIsWrittenWithTheChangeOrNotAtAll) {
  // The change's txn fails (its compare does not hold): no record, so a retry is judged again.
  Idempotency::Ticket ticket;
  ASSERT_TRUE(idem_->begin("k-3", "accessor-1", "POST", "/v1/x", "{}", ticket).isOk());
  {
    Idempotency::Scope scope(&ticket);
    store::Txn txn;
    txn.compares = {store::Compare::version("/absent", store::Compare::kGreater, 0)};
    txn.success = {store::Op::put("/absent", "v")};
    auto r = store_->txn(std::move(txn));
    ASSERT_TRUE(r.isOk());
    EXPECT_FALSE(r->succeeded);
  }
  EXPECT_FALSE(ticket.attached);
  (void)idem_->end(ticket, HttpResponse{.status = 409, .body = "{}"}, false);
  auto records = raw_->range(std::string(kIdempotencyPrefix), store::prefixEnd(kIdempotencyPrefix));
  ASSERT_TRUE(records.isOk());
  EXPECT_TRUE(records->kvs.empty());
  // A change's txn carries its record, at the same revision, and the caller sees only its ops.
  Idempotency::Ticket t2;
  ASSERT_TRUE(idem_->begin("k-4", "accessor-1", "POST", "/v1/x", "{}", t2).isOk());
  {
    Idempotency::Scope scope(&t2);
    store::Txn txn;
    txn.success = {store::Op::put("/a", "1"), store::Op::get("/a")};
    auto r = store_->txn(std::move(txn));
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    EXPECT_EQ(r->results.size(), 2U);
    records = raw_->range(std::string(kIdempotencyPrefix), store::prefixEnd(kIdempotencyPrefix));
    ASSERT_TRUE(records.isOk());
    ASSERT_EQ(records->kvs.size(), 1U);
    EXPECT_EQ(records->kvs[0].mod_revision, r->revision);
    EXPECT_NE(records->kvs[0].lease.value(), 0) << "records expire";
  }
  // The answer of a change whose server died before it answered: the retry learns it was
  // applied, and nothing is applied twice.
  const HttpResponse lost = change("k-4", "/a", "1");
  EXPECT_EQ(lost.status, 200U);
  EXPECT_NE(lost.body.find("applied once already"), std::string::npos) << lost.body;
  EXPECT_NE(lost.body.find("was lost"), std::string::npos) << lost.body;
  EXPECT_EQ(versionOf("/a"), 1);
}

// A change that an earlier try applied may be refused before it writes anything (a name that
// exists, say): the refusal is not the answer, the earlier try's is.
TEST_F(IdempotencyTest, ARefusalOfARetryGivesTheFirstAnswer) {
  ASSERT_EQ(change("k-7", "/made", "1").status, 201U);
  Idempotency::Ticket retry;
  ASSERT_TRUE(idem_->begin("k-7", "accessor-1", "POST", "/v1/x", "{}", retry).isOk());
  const HttpResponse out =
      idem_->end(retry, HttpResponse{.status = 409, .body = R"({"errors": ["exists"]})"}, false);
  EXPECT_EQ(out.status, 201U) << out.body;
  // A refusal of a key never applied stays a refusal.
  Idempotency::Ticket fresh;
  ASSERT_TRUE(idem_->begin("k-8", "accessor-1", "POST", "/v1/x", "{}", fresh).isOk());
  EXPECT_EQ(idem_->end(fresh, HttpResponse{.status = 409, .body = "{}"}, false).status, 409U);
}

TEST_F(IdempotencyTest, OfTwoTriesRacingOnOneKeyOnlyOneWrites) {
  Idempotency::Ticket a;
  Idempotency::Ticket b;
  ASSERT_TRUE(idem_->begin("k-5", "accessor-1", "POST", "/v1/x", "{}", a).isOk());
  ASSERT_TRUE(idem_->begin("k-5", "accessor-1", "POST", "/v1/x", "{}", b).isOk());
  {
    Idempotency::Scope scope(&a);
    ASSERT_TRUE(store_->put("/once", "a").isOk());
  }
  (void)idem_->end(a, HttpResponse{.status = 201, .body = R"({"by": "a"})"}, false);
  idem_->flush();
  HttpResponse second;
  {
    Idempotency::Scope scope(&b);
    auto put = store_->put("/once", "b");
    ASSERT_FALSE(put.isOk());
    EXPECT_EQ(put.status().code(), core::StatusCode::kAlreadyExists);
    second.status = 409;
  }
  second = idem_->end(b, std::move(second), false);
  EXPECT_EQ(second.status, 201U);
  EXPECT_EQ(second.body, R"({"by": "a"})");
  EXPECT_EQ(versionOf("/once"), 1);
}

TEST_F(IdempotencyTest, AnAnswerHoldingASecretIsNotKept) {
  Idempotency::Ticket t;
  ASSERT_TRUE(idem_->begin("k-6", "accessor-1", "POST", "/v1/auth/token/create", "{}", t).isOk());
  {
    Idempotency::Scope scope(&t);
    ASSERT_TRUE(store_->put("/tokens/x", "v").isOk());
  }
  (void)idem_->end(t, HttpResponse{.status = 200, .body = R"({"auth": {"client_token": "s"}})"},
                   true);
  idem_->flush();
  auto records = raw_->range(std::string(kIdempotencyPrefix), store::prefixEnd(kIdempotencyPrefix));
  ASSERT_TRUE(records.isOk());
  ASSERT_EQ(records->kvs.size(), 1U);
  EXPECT_EQ(records->kvs[0].value.find("client_token"), std::string::npos);
  // Sent again: the token is not made twice, and its secret is not given again.
  Idempotency::Ticket again;
  ASSERT_TRUE(
      idem_->begin("k-6", "accessor-1", "POST", "/v1/auth/token/create", "{}", again).isOk());
  {
    Idempotency::Scope scope(&again);
    EXPECT_FALSE(store_->put("/tokens/y", "v").isOk());
  }
  const HttpResponse r = idem_->end(again, HttpResponse{.status = 409, .body = "{}"}, true);
  EXPECT_EQ(r.status, 200U);
  EXPECT_EQ(r.body.find("client_token"), std::string::npos);
  EXPECT_NE(r.body.find("held a secret"), std::string::npos) << r.body;
  EXPECT_EQ(versionOf("/tokens/y"), 0);
  // Another token's key is another key.
  Idempotency::Ticket other;
  ASSERT_TRUE(
      idem_->begin("k-6", "accessor-2", "POST", "/v1/auth/token/create", "{}", other).isOk());
  {
    Idempotency::Scope scope(&other);
    EXPECT_TRUE(store_->put("/tokens/y", "v").isOk());
  }
  EXPECT_TRUE(other.attached);
}

// A keyed write's try is bounded, and one whose outcome is unknown is sent again by the server:
// applied once whether the lost try applied it or not.
TEST_F(IdempotencyTest, AKeyedWriteWhoseAnswerIsLostIsSentAgainAndAppliedOnce) {
  idem_.reset();
  auto lossy = std::make_unique<LossyStore>(*raw_);
  store_ = std::make_unique<IdempotentStore>(*lossy);
  idem_ = std::make_unique<Idempotency>(*store_, clock_);
  // Lost before it was applied: the second send applies it, and its answer is the handler's.
  lossy->lose = 2;
  const HttpResponse first = change("k-5", "/a", "1");
  EXPECT_EQ(first.status, 201U) << first.body;
  EXPECT_EQ(versionOf("/a"), 1);
  ASSERT_GE(lossy->deadlines.size(), 3U);
  EXPECT_EQ(lossy->deadlines[0], std::chrono::milliseconds(1000)) << "a try is bounded";
  // Applied, then lost: the next send fails its guard, and the answer says it was applied once.
  lossy->lose = 1;
  lossy->applied_anyway = true;
  const HttpResponse second = change("k-6", "/b", "1");
  EXPECT_EQ(second.status, 200U) << second.body;
  EXPECT_NE(second.body.find("applied once already"), std::string::npos) << second.body;
  EXPECT_EQ(versionOf("/b"), 1) << "applied once";
  idem_.reset();
  store_.reset();
}

TEST(IdempotencyKeyTest, KeysAreShortAndPlain) {
  EXPECT_TRUE(Idempotency::checkKey("0b6e2c1f-8a3d-4c2e-9f00-123456789abc").isOk());
  EXPECT_FALSE(Idempotency::checkKey("").isOk());
  EXPECT_FALSE(Idempotency::checkKey(std::string(129, 'a')).isOk());
  EXPECT_FALSE(Idempotency::checkKey("a b").isOk());
  EXPECT_FALSE(Idempotency::checkKey("a/../b").isOk());
}

}  // namespace
}  // namespace tessera::server
