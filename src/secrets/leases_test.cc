#include "secrets/leases.h"

#include <gtest/gtest.h>

#include <set>

#include "secrets/test_util.h"

namespace tessera::secrets {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using testing::openStore;
using testing::TempDir;
using testing::ThreadSafeFakeClock;

// A revoker that records what it revoked, and fails on command.
class FakeRevoker : public Revoker {
 public:
  core::Status revoke(const Lease& lease) override {
    std::lock_guard lock(mu);
    ++calls;
    if (!fail_with.isOk()) {
      return fail_with;
    }
    revoked.insert(lease.id);
    return core::Status::ok();
  }
  std::mutex mu;
  int calls = 0;
  core::Status fail_with;
  std::set<std::string> revoked;
};

class LeasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_.advance(hours(24 * 365 * 50));  // A realistic wall time.
    store_ = openStore(dir_.path(), clock_);
    reopen();
  }
  void reopen() {
    leases_.reset();
    LeaseOptions options;
    options.seed = 42;
    auto m = LeaseManager::open(*store_, clock_, options);
    ASSERT_TRUE(m.isOk()) << m.status().toString();
    leases_ = std::move(m).value();
    leases_->setRevoker("db", &revoker_);
  }
  Lease create(const std::string& tenant, core::Duration ttl, core::Duration max_ttl) {
    auto l = leases_->create(tenant, "db/creds/ro", "db", {{"user", "u1"}}, ttl, max_ttl);
    EXPECT_TRUE(l.isOk()) << l.status().toString();
    return l.isOk() ? *l : Lease{};
  }
  TempDir dir_;
  ThreadSafeFakeClock clock_;
  std::unique_ptr<store::Store> store_;
  FakeRevoker revoker_;
  std::unique_ptr<LeaseManager> leases_;
};

TEST_F(LeasesTest, ExpiresOnTimeAndNotBefore) {
  const Lease l = create("t", minutes(10), hours(1));
  EXPECT_EQ(l.id.rfind("db/creds/ro/", 0), 0U);
  EXPECT_EQ(l.ttlSeconds(clock_.wallNow()), 600);
  clock_.advance(minutes(10) - seconds(1));
  EXPECT_EQ(*leases_->tick(), 0U);
  EXPECT_TRUE(revoker_.revoked.empty());
  clock_.advance(seconds(1));
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(revoker_.revoked, std::set<std::string>{l.id});
  EXPECT_EQ(leases_->lookup("t", l.id).status().code(), core::StatusCode::kNotFound);
  EXPECT_TRUE(store_->range("/leases/", store::prefixEnd("/leases/"))->kvs.empty());
}

TEST_F(LeasesTest, RenewCountsFromNowAndStopsAtTheMaxTtl) {
  const Lease l = create("t", minutes(10), minutes(30));
  clock_.advance(minutes(5));
  auto r = leases_->renew("t", l.id, minutes(10));
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->ttlSeconds(clock_.wallNow()), 600);  // From now, not from the old expiry.
  clock_.advance(minutes(8));                       // 13 min in: 17 left to the max.
  r = leases_->renew("t", l.id, hours(1));
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->ttlSeconds(clock_.wallNow()), 17 * 60);
  clock_.advance(minutes(17) - seconds(1));
  EXPECT_EQ(*leases_->tick(), 0U);
  clock_.advance(seconds(1));
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(leases_->renew("t", l.id, minutes(1)).status().code(), core::StatusCode::kNotFound);
  // Another tenant cannot see or renew a lease.
  const Lease m = create("t", minutes(10), minutes(30));
  EXPECT_EQ(leases_->renew("other", m.id, minutes(1)).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(leases_->revoke("other", m.id).code(), core::StatusCode::kNotFound);
}

TEST_F(LeasesTest, LeasesThatExpiredWhileDownAreRevokedAtStart) {
  const Lease a = create("t", minutes(1), minutes(1));
  const Lease b = create("u", hours(2), hours(2));
  leases_.reset();           // The server stops...
  clock_.advance(hours(1));  // ...and comes back an hour later.
  reopen();
  EXPECT_EQ(leases_->count(), 2U);
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(revoker_.revoked, std::set<std::string>{a.id});
  EXPECT_TRUE(leases_->lookup("u", b.id).isOk());
  clock_.advance(hours(1));
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(leases_->count(), 0U);
}

TEST_F(LeasesTest, FailingRevocationsBackOffThenBecomeIrrevocable) {
  const Lease l = create("t", minutes(1), minutes(1));
  revoker_.fail_with = core::unavailable("postgres: connection refused");
  clock_.advance(minutes(1));
  EXPECT_EQ(*leases_->tick(), 0U);
  EXPECT_EQ(revoker_.calls, 1);
  auto got = leases_->lookup("t", l.id);
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->state, LeaseState::kRevoking);
  EXPECT_EQ(got->attempts, 1);
  EXPECT_EQ(got->last_error, "postgres: connection refused");
  // Attempt n waits 10 s * 2^(n-1), +-50%.
  for (int attempt = 2; attempt <= 6; ++attempt) {
    const auto wait = leases_->lookup("t", l.id)->next_attempt - clock_.wallNow();
    const double base = 10.0 * (1 << (attempt - 2));
    const double s = std::chrono::duration<double>(wait).count();
    EXPECT_GE(s, base * 0.5 - 1e-6) << attempt;
    EXPECT_LE(s, base * 1.5 + 1e-6) << attempt;
    clock_.advance(std::chrono::duration_cast<core::Duration>(wait) - seconds(0) -
                   std::chrono::milliseconds(1));
    EXPECT_EQ(*leases_->tick(), 0U);  // Not yet.
    EXPECT_EQ(revoker_.calls, attempt - 1);
    clock_.advance(std::chrono::milliseconds(1));
    const size_t finished = *leases_->tick();
    EXPECT_EQ(revoker_.calls, attempt);
    EXPECT_EQ(finished, attempt == 6 ? 1U : 0U);
  }
  got = leases_->lookup("t", l.id);
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->state, LeaseState::kIrrevocable);
  EXPECT_EQ(leases_->count(LeaseState::kIrrevocable), 1U);
  EXPECT_EQ(leases_->list("t", "", LeaseState::kIrrevocable).size(), 1U);
  // Irrevocable leases are tried once a day (as Vault does), and survive a restart as they are.
  clock_.advance(hours(24) - std::chrono::milliseconds(1));
  EXPECT_EQ(*leases_->tick(), 0U);
  EXPECT_EQ(revoker_.calls, 6);
  clock_.advance(std::chrono::milliseconds(1));
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(revoker_.calls, 7);
  EXPECT_EQ(leases_->lookup("t", l.id)->state, LeaseState::kIrrevocable);
  reopen();
  EXPECT_EQ(leases_->lookup("t", l.id)->state, LeaseState::kIrrevocable);
  EXPECT_EQ(*leases_->tick(), 0U);  // Not due again for a day.
  // Whatever failed is mended: the next daily try revokes it.
  revoker_.fail_with = core::Status::ok();
  clock_.advance(hours(24));
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(revoker_.revoked, std::set<std::string>{l.id});
  EXPECT_EQ(leases_->count(), 0U);
}

TEST_F(LeasesTest, APermanentErrorIsIrrevocableAtOnce) {
  const Lease l = create("t", minutes(1), minutes(1));
  revoker_.fail_with = core::invalidArgument("the connection config was deleted");
  auto st = leases_->revoke("t", l.id);
  EXPECT_EQ(st.code(), core::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("irrevocable"), std::string::npos);
  EXPECT_EQ(leases_->lookup("t", l.id)->state, LeaseState::kIrrevocable);
  // A lease whose kind has no revoker: likewise.
  auto odd = leases_->create("t", "x/y", "nobody", {}, minutes(1), minutes(1));
  ASSERT_TRUE(odd.isOk());
  clock_.advance(minutes(1));
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(leases_->lookup("t", odd->id)->state, LeaseState::kIrrevocable);
  // An operator removes them by hand.
  ASSERT_TRUE(leases_->forceRevoke("t", l.id).isOk());
  ASSERT_TRUE(leases_->forceRevoke("t", odd->id).isOk());
  EXPECT_EQ(leases_->count(), 0U);
}

TEST_F(LeasesTest, ARevocationInterruptedByACrashIsRetriedAndCounted) {
  const Lease l = create("t", minutes(1), minutes(1));
  // The intent was written and the server died before the outside call finished: the record
  // says "revoking", attempt 1.
  Lease intent = l;
  intent.state = LeaseState::kRevoking;
  intent.attempts = 1;
  intent.next_attempt = intent.expires;
  ASSERT_TRUE(store_->put("/leases/t/" + l.id, intent.toJson().dump()).isOk());
  reopen();
  clock_.advance(minutes(1));
  EXPECT_EQ(*leases_->tick(), 1U);
  EXPECT_EQ(revoker_.revoked, std::set<std::string>{l.id});
}

TEST_F(LeasesTest, RevokeAndRevokePrefix) {
  const Lease a = create("t", hours(1), hours(1));
  const Lease b = create("t", hours(1), hours(1));
  auto other = leases_->create("t", "db/creds/rw", "db", {}, hours(1), hours(1));
  const Lease c = create("u", hours(1), hours(1));
  ASSERT_TRUE(leases_->revoke("t", a.id).isOk());
  EXPECT_TRUE(revoker_.revoked.contains(a.id));
  auto n = leases_->revokePrefix("t", "db/creds/ro/");
  ASSERT_TRUE(n.isOk());
  EXPECT_EQ(*n, 1U);
  EXPECT_TRUE(revoker_.revoked.contains(b.id));
  EXPECT_FALSE(revoker_.revoked.contains(c.id));  // Another tenant's, same path.
  EXPECT_TRUE(leases_->lookup("t", other->id).isOk());
  EXPECT_EQ(leases_->count(), 2U);
}

TEST_F(LeasesTest, ManyLeasesDueAtOnceAreProcessedInBatches) {
  for (int i = 0; i < 300; ++i) {  // Three batches.
    create("t", minutes(1), minutes(1));
  }
  clock_.advance(minutes(1));
  EXPECT_EQ(*leases_->tick(), 300U);
  EXPECT_EQ(revoker_.revoked.size(), 300U);
  EXPECT_EQ(leases_->count(), 0U);
}

TEST_F(LeasesTest, TtlsAreCheckedAndCapped) {
  EXPECT_FALSE(leases_->create("t", "p", "db", {}, seconds(0), hours(1)).isOk());
  EXPECT_FALSE(leases_->create("t", "", "db", {}, seconds(1), hours(1)).isOk());
  auto l = leases_->create("t", "p", "db", {}, hours(24 * 100), hours(24 * 100));
  ASSERT_TRUE(l.isOk());
  EXPECT_EQ(l->ttlSeconds(clock_.wallNow()), 32 * 24 * 3600);
  auto m = leases_->create("t", "p", "db", {}, hours(2), hours(1));  // max raised to the TTL
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m->max_expires, m->expires);
}

}  // namespace
}  // namespace tessera::secrets
