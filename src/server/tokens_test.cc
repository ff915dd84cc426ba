#include "server/tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>

#include "store/sqlite_store.h"
#include "store/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;
using std::chrono::hours;
using std::chrono::minutes;

// Policies by scope ("" = admin) for the power rule, and grants' reach by tenant.
struct PolicyTable {
  std::map<std::string, std::map<std::string, Policy>> policies;
  std::map<std::string, Policy> reach;

  void add(const std::string& scope, const std::string& name, const json& paths) {
    auto p = Policy::fromJson(name, {{"path", paths}});
    ASSERT_TRUE(p.isOk()) << p.status().message();
    policies[scope][name] = *p;
  }
  PowerSource source() const {
    return {.policy = [this](const std::string& scope,
                             const std::string& name) -> std::optional<Policy> {
              auto s = policies.find(scope);
              if (s == policies.end() || !s->second.contains(name)) {
                return std::nullopt;
              }
              return s->second.at(name);
            },
            .tenant_reach =
                [this](const std::string& tenant) {
                  return reach.contains(tenant) ? reach.at(tenant) : Policy{};
                }};
  }
};

json caps(std::initializer_list<const char*> names) {
  json c = json::array();
  for (const char* n : names) {
    c.push_back(n);
  }
  return {{"capabilities", c}};
}

// The policies the tests below hand on. Every tenant has a `tenant-admin`; so does the admin
// scope here, as a narrow operator's policy that only creates tokens. Team-2's `dev` is wider
// than team-1's: one name, two powers.
PolicyTable standardTable() {
  const json all = caps({"create", "read", "update", "patch", "delete", "list"});
  PolicyTable t;
  t.add("", "tenant-admin", {{"auth/token/create", caps({"create", "update"})}});
  t.add("", "ops", {{"tenants/*", all}, {"auth/token/create", caps({"create", "update"})}});
  t.add("", "t1-ops", {{"tenants/team-1/*", all}, {"auth/token/create", caps({"create"})}});
  t.add("", "dev", {{"tenants/+/workloads/*", caps({"read", "list"})}});
  t.add("", "no-team-1-secrets", {{"tenants/team-1/secrets/*", caps({"deny"})}});
  for (const char* tenant : {"team-1", "team-2"}) {
    t.add(tenant, "tenant-admin", {{"*", all}});
    t.add(tenant, "read-only", {{"workloads/*", caps({"read"})}});
    t.add(tenant, "no-secrets", {{"secrets/*", caps({"deny"})}});
  }
  t.add("team-1", "dev", {{"workloads/*", caps({"read", "list"})}});
  t.add("team-2", "dev", {{"*", caps({"read", "list"})}});
  return t;
}

class TokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/tokens-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    reopen();
  }
  void reopen() {
    tokens_.reset();
    store_.reset();
    auto s = store::SqliteStore::open(dir_ + "/t.db", {}, clock_);
    ASSERT_TRUE(s.isOk()) << s.status().message();
    store_ = std::move(s).value();
    auto t = TokenManager::open(*store_, clock_, {}, table_.source());
    ASSERT_TRUE(t.isOk()) << t.status().message();
    tokens_ = std::move(t).value();
  }
  CreatedToken root() {
    auto r = tokens_->bootstrapRoot();
    EXPECT_TRUE(r.isOk()) << r.status().message();
    return std::move(r).value();
  }

  std::string dir_;
  PolicyTable table_ = standardTable();
  core::FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<TokenManager> tokens_;
};

TEST_F(TokensTest, ExpireOnTheirOwnAndOnlyRootHasNoTtl) {
  CreatedToken r = root();
  EXPECT_TRUE(tokens_->rootTokenExists());
  EXPECT_EQ(r.info.ttlSeconds(clock_.wallNow()), -1);
  EXPECT_EQ(r.secret.substr(0, 4), "tsr.");
  EXPECT_EQ(r.secret.size(), 28U);
  EXPECT_FALSE(tokens_->bootstrapRoot().isOk());  // One root token at a time.
  // No TTL asked: the default (1 h) applies.
  auto t = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t->info.ttlSeconds(clock_.wallNow()), 3600);
  EXPECT_TRUE(tokens_->lookup(t->secret).isOk());
  clock_.advance(minutes(59));
  EXPECT_TRUE(tokens_->lookup(t->secret).isOk());
  clock_.advance(minutes(1));
  EXPECT_EQ(tokens_->lookup(t->secret).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(tokens_->expire().value(), 1);
  // Above the system maximum: refused.
  EXPECT_FALSE(tokens_->create(r.info, {.tenant = "team-1", .ttl = hours(24 * 33)}).isOk());
  EXPECT_FALSE(tokens_->lookup("tsr.nonsense").isOk());
}

TEST_F(TokensTest, RenewalStopsAtTheExplicitMaxTtl) {
  CreatedToken r = root();
  auto t = tokens_->create(
      r.info,
      {.tenant = "team-1", .policies = {"dev"}, .ttl = hours(1), .explicit_max_ttl = hours(2)});
  ASSERT_TRUE(t.isOk());
  clock_.advance(minutes(50));
  auto renewed = tokens_->renew(t->info.accessor, core::Duration::zero());
  ASSERT_TRUE(renewed.isOk());
  EXPECT_EQ(renewed->ttlSeconds(clock_.wallNow()), 3600);
  clock_.advance(minutes(50));
  renewed = tokens_->renew(t->info.accessor, hours(10));
  ASSERT_TRUE(renewed.isOk());
  EXPECT_EQ(renewed->ttlSeconds(clock_.wallNow()), 20 * 60);  // Capped at issue + 2 h.
  clock_.advance(minutes(20));
  EXPECT_FALSE(tokens_->lookup(t->secret).isOk());
  EXPECT_FALSE(tokens_->renew(t->info.accessor, hours(1)).isOk());
}

TEST_F(TokensTest, APeriodicTokenLivesWhileRenewedWithinItsPeriod) {
  CreatedToken r = root();
  auto t = tokens_->create(r.info, {.tenant = "team-1",
                                    .policies = {"dev"},
                                    .ttl = hours(5),  // A periodic token's TTL is its period.
                                    .period = hours(24),
                                    .meta = {{"purpose", "scrape"}}});
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t->info.ttlSeconds(clock_.wallNow()), 24 * 3600);
  EXPECT_EQ(t->info.max_expiry, core::WallTime::max());  // No system maximum.
  // Renewed every 20 h for 40 days: past the 32-day system maximum; the increment is ignored.
  for (int i = 0; i < 48; ++i) {
    clock_.advance(hours(20));
    auto renewed = tokens_->renew(t->info.accessor, minutes(1));
    ASSERT_TRUE(renewed.isOk()) << i << ": " << renewed.status().message();
    EXPECT_EQ(renewed->ttlSeconds(clock_.wallNow()), 24 * 3600);
  }
  reopen();  // Period and metadata are stored.
  auto after = tokens_->lookup(t->secret);
  ASSERT_TRUE(after.isOk()) << after.status().message();
  EXPECT_EQ(after->period, hours(24));
  EXPECT_EQ(after->meta.at("purpose"), "scrape");
  clock_.advance(hours(24));  // Not renewed within its period: gone.
  EXPECT_FALSE(tokens_->lookup(t->secret).isOk());
  EXPECT_FALSE(tokens_->renew(t->info.accessor, core::Duration::zero()).isOk());
  // A period is renewable by definition, and no longer than the system maximum.
  EXPECT_FALSE(
      tokens_->create(r.info, {.tenant = "team-1", .renewable = false, .period = hours(1)}).isOk());
  EXPECT_FALSE(tokens_->create(r.info, {.tenant = "team-1", .period = hours(24 * 33)}).isOk());
}

TEST_F(TokensTest, APeriodicChildNeverOutlivesItsParentsCap) {
  CreatedToken r = root();
  auto parent = tokens_->create(r.info, {.tenant = "team-1",
                                         .policies = {"tenant-admin"},
                                         .ttl = hours(1),
                                         .explicit_max_ttl = hours(2)});
  ASSERT_TRUE(parent.isOk());
  auto child = tokens_->create(
      parent->info, {.tenant = "team-1", .policies = {"tenant-admin"}, .period = hours(24)});
  ASSERT_TRUE(child.isOk()) << child.status().message();
  EXPECT_EQ(child->info.ttlSeconds(clock_.wallNow()), 2 * 3600);  // The parent's cap.
  clock_.advance(minutes(50));
  ASSERT_TRUE(tokens_->renew(parent->info.accessor, core::Duration::zero()).isOk());
  clock_.advance(minutes(50));
  ASSERT_TRUE(tokens_->renew(child->info.accessor, core::Duration::zero()).isOk());
  clock_.advance(minutes(21));
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
}

TEST_F(TokensTest, AnOrphanOutlivesItsCreatorsRevocation) {
  CreatedToken r = root();
  auto creator = tokens_->create(r.info, {.tenant = "team-1", .policies = {"tenant-admin"}});
  ASSERT_TRUE(creator.isOk());
  auto child = tokens_->create(creator->info, {.tenant = "team-1", .policies = {"tenant-admin"}});
  auto orphan = tokens_->create(creator->info,
                                {.tenant = "team-1", .policies = {"tenant-admin"}, .orphan = true});
  ASSERT_TRUE(child.isOk() && orphan.isOk());
  EXPECT_TRUE(orphan->info.parent.empty());
  EXPECT_EQ(tokens_->revoke(creator->info.accessor).value(), 2);  // It and its child.
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(orphan->secret).isOk());
  reopen();
  EXPECT_TRUE(tokens_->lookup(orphan->secret).isOk());
}

TEST_F(TokensTest, AccessForFourHoursThenGone) {
  CreatedToken r = root();
  auto t = tokens_->create(r.info, {.tenant = "team-1",
                                    .policies = {"read-only"},
                                    .ttl = hours(4),
                                    .explicit_max_ttl = hours(4),
                                    .renewable = false});
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(tokens_->renew(t->info.accessor, hours(1)).status().code(),
            core::StatusCode::kFailedPrecondition);
  clock_.advance(hours(4));
  EXPECT_FALSE(tokens_->lookup(t->secret).isOk());
}

TEST_F(TokensTest, RevokingAParentRevokesItsChildren) {
  CreatedToken r = root();
  auto admin = tokens_->create(r.info, {.policies = {"ops", "dev"}, .ttl = hours(8)});
  ASSERT_TRUE(admin.isOk());
  auto child = tokens_->create(admin->info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(child.isOk()) << child.status().message();
  auto grandchild = tokens_->create(child->info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(grandchild.isOk()) << grandchild.status().message();
  auto other = tokens_->create(r.info, {.tenant = "team-2", .policies = {"dev"}});
  EXPECT_EQ(tokens_->revoke(admin->info.accessor).value(), 3);
  EXPECT_FALSE(tokens_->lookup(admin->secret).isOk());
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
  EXPECT_FALSE(tokens_->lookup(grandchild->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
  // And it stays revoked after a restart.
  reopen();
  EXPECT_FALSE(tokens_->lookup(grandchild->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
}

TEST_F(TokensTest, ParentsExpiryTakesItsChildren) {
  CreatedToken r = root();
  auto parent =
      tokens_->create(r.info, {.policies = {"dev"}, .ttl = hours(1), .explicit_max_ttl = hours(1)});
  auto child =
      tokens_->create(parent->info, {.tenant = "team-1", .policies = {"dev"}, .ttl = hours(8)});
  ASSERT_TRUE(child.isOk());
  // The child's cap is its parent's.
  EXPECT_EQ(child->info.ttlSeconds(clock_.wallNow()), 3600);
  clock_.advance(hours(1));
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
}

TEST_F(TokensTest, TenantTokensStayInTheirTenantAndPolicies) {
  CreatedToken r = root();
  auto t1 = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(t1.isOk());
  auto cross = tokens_->create(t1->info, {.tenant = "team-2", .policies = {"dev"}});
  EXPECT_EQ(cross.status().code(), core::StatusCode::kPermissionDenied);
  auto admin = tokens_->create(t1->info, {.tenant = "", .policies = {"dev"}});
  EXPECT_EQ(admin.status().code(), core::StatusCode::kPermissionDenied);
  auto more = tokens_->create(t1->info, {.tenant = "team-1", .policies = {"dev", "ops"}});
  EXPECT_EQ(more.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(more.status().message().find("'ops'"), std::string::npos);
  auto as_root = tokens_->create(t1->info, {.tenant = "team-1", .policies = {"root"}});
  EXPECT_FALSE(as_root.isOk());
  EXPECT_EQ(tokens_->list("team-1").size(), 1U);
  EXPECT_EQ(tokens_->list("team-2").size(), 0U);
}

TEST_F(TokensTest, ATenantHoldsAtMostItsCapOfTokensUntilSomeGo) {
  CreatedToken r = root();
  const TokenRequest team1{.tenant = "team-1", .policies = {"dev"}, .ttl = hours(1)};
  auto a = tokens_->create(r.info, team1, 2);
  auto b = tokens_->create(r.info, team1, 2);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(tokens_->held("team-1"), 2U);
  auto refused = tokens_->create(r.info, team1, 2);
  EXPECT_EQ(refused.status().code(), core::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("limit of 2 tokens"), std::string::npos)
      << refused.status().message();
  // Other tenants and the admin scope are not held to team-1's count.
  EXPECT_TRUE(tokens_->create(r.info, {.tenant = "team-2", .ttl = hours(1)}, 2).isOk());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(tokens_->create(r.info, {.policies = {"root"}, .ttl = hours(1)}, 1).isOk());
  }
  // A revoked token frees its place, with its children.
  ASSERT_TRUE(tokens_->revoke(a->info.accessor).isOk());
  EXPECT_EQ(tokens_->held("team-1"), 1U);
  auto child = tokens_->create(b->info, {.tenant = "team-1", .policies = {"dev"}}, 2);
  ASSERT_TRUE(child.isOk()) << child.status().message();
  EXPECT_FALSE(tokens_->create(r.info, team1, 2).isOk());
  ASSERT_EQ(tokens_->revoke(b->info.accessor).value(), 2);
  EXPECT_EQ(tokens_->held("team-1"), 0U);
  // So does an expired one, once swept; and the count survives a restart.
  ASSERT_TRUE(tokens_->create(r.info, team1, 2).isOk());
  ASSERT_TRUE(tokens_->create(r.info, {.tenant = "team-1", .ttl = hours(3)}, 2).isOk());
  reopen();
  EXPECT_EQ(tokens_->held("team-1"), 2U);
  EXPECT_EQ(tokens_->held("team-2"), 1U);
  clock_.advance(hours(2));
  ASSERT_TRUE(tokens_->expire().isOk());
  EXPECT_EQ(tokens_->held("team-1"), 1U);
  EXPECT_EQ(tokens_->held("team-2"), 0U);
  EXPECT_TRUE(tokens_->create(r.info, team1, 2).isOk());
}

TEST_F(TokensTest, LookupsNeverWaitForAChangesStoreWrite) {
  // Every request looks its token up: a change (each one a disk flush) must not hold them.
  store::HeldStore held(*store_);
  auto opened = TokenManager::open(held, clock_, {});
  ASSERT_TRUE(opened.isOk());
  TokenManager& tokens = **opened;
  auto r = tokens.bootstrapRoot();
  ASSERT_TRUE(r.isOk());
  auto a = tokens.create(r->info, {.tenant = "team-1", .ttl = hours(1), .renewable = true});
  auto b = tokens.create(r->info, {.tenant = "team-1", .ttl = hours(1)});
  ASSERT_TRUE(a.isOk() && b.isOk());
  held.hold("/tokens/");
  auto created = std::async(std::launch::async, [&] {
    return tokens.create(r->info, {.tenant = "team-2", .ttl = hours(1)});
  });
  ASSERT_TRUE(held.waitHeld(1));
  // Changes take turns: these wait behind the create.
  auto renewed =
      std::async(std::launch::async, [&] { return tokens.renew(a->info.accessor, hours(2)); });
  auto revoked = std::async(std::launch::async, [&] { return tokens.revoke(b->info.accessor); });
  auto reads = std::async(std::launch::async, [&] {
    return tokens.lookup(a->secret).isOk() && tokens.lookup(b->secret).isOk() &&
           tokens.lookupAccessor(a->info.accessor).isOk() && tokens.list("team-1").size() == 2 &&
           tokens.held("team-1") == 2 && tokens.rootTokenExists();
  });
  ASSERT_EQ(reads.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "a lookup waited for a change's store write";
  EXPECT_TRUE(reads.get());
  EXPECT_EQ(renewed.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  held.release();
  auto c = created.get();
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_TRUE(tokens.lookup(c->secret).isOk());
  ASSERT_TRUE(renewed.get().isOk());
  EXPECT_EQ(tokens.lookup(a->secret)->expires, clock_.wallNow() + hours(2));
  auto gone = revoked.get();
  ASSERT_TRUE(gone.isOk());
  EXPECT_EQ(*gone, 1);
  EXPECT_FALSE(tokens.lookup(b->secret).isOk());
  EXPECT_EQ(tokens.held("team-1"), 1U);
}

TEST_F(TokensTest, RevokingATenantsTokensLeavesNoneOfItsOwnAndTouchesNoOther) {
  CreatedToken r = root();
  auto a = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  auto b = tokens_->create(r.info, {.tenant = "team-1"});
  auto other = tokens_->create(r.info, {.tenant = "team-2"});
  ASSERT_TRUE(a.isOk() && b.isOk() && other.isOk());
  auto child = tokens_->create(a->info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(child.isOk());
  EXPECT_EQ(tokens_->revokeTenant("team-1").value(), 3);
  for (const std::string& secret : {a->secret, b->secret, child->secret}) {
    EXPECT_FALSE(tokens_->lookup(secret).isOk());
  }
  EXPECT_EQ(tokens_->held("team-1"), 0U);
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(r.secret).isOk());
  // Gone from the store as well.
  reopen();
  EXPECT_FALSE(tokens_->lookup(a->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
  EXPECT_EQ(tokens_->revokeTenant("team-1").value(), 0);
}

TEST_F(TokensTest, OnlyTheHashOfASecretIsStored) {
  CreatedToken r = root();
  auto t = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(t.isOk());
  auto all = store_->range("/", store::prefixEnd("/"));
  ASSERT_TRUE(all.isOk());
  for (const store::KeyValue& kv : all->kvs) {
    EXPECT_EQ(kv.key.find(t->secret), std::string::npos);
    EXPECT_EQ(kv.value.find(t->secret), std::string::npos);
    EXPECT_EQ(kv.value.find(r.secret), std::string::npos);
  }
  // Survives a restart by hash.
  reopen();
  EXPECT_TRUE(tokens_->lookup(t->secret).isOk());
  EXPECT_TRUE(tokens_->rootTokenExists());
}

// The power rule (issue #36): a child's policies are judged by what they allow in the child's
// scope against what the parent's allow in the parent's, never by name.
TEST(ChildPowerTest, IsJudgedByWhatPoliciesAllowInTheirOwnScope) {
  PolicyTable table = standardTable();
  auto token = [](const std::string& tenant, std::vector<std::string> policies) {
    TokenInfo t;
    t.tenant = tenant;
    t.policies = std::move(policies);
    t.accessor = "parent";
    return t;
  };
  struct Case {
    const char* what;
    TokenInfo parent;
    std::string scope;
    std::vector<std::string> policies;
    bool allowed;
    const char* says = "";  // Part of the refusal.
    bool via_role = false;  // Through a token role: no name rule, power alone.
  };
  const std::vector<Case> cases = {
      // Root gives anything, anywhere, even names not written yet.
      {"root -> admin", token("", {"root"}), "", {"ops"}, true},
      {"root -> tenant-admin of a tenant", token("", {"root"}), "team-1", {"tenant-admin"}, true},
      {"root -> root", token("", {"root"}), "", {"root"}, true},
      {"root -> a policy not written yet", token("", {"root"}), "team-1", {"later"}, true},
      // The repro: an admin policy *named* tenant-admin that only creates tokens.
      {"narrow operator -> team-1's tenant-admin",
       token("", {"tenant-admin"}),
       "team-1",
       {"tenant-admin"},
       false,
       "cannot give policy 'tenant-admin' of tenant 'team-1'"},
      {"narrow operator -> team-2's tenant-admin",
       token("", {"tenant-admin"}),
       "team-2",
       {"tenant-admin"},
       false,
       "tenants/team-2/*"},
      {"narrow operator -> team-1's read-only",
       token("", {"tenant-admin"}),
       "team-1",
       {"read-only"},
       false,
       "more than the calling token has"},
      {"narrow operator -> its own policy, admin scope",
       token("", {"tenant-admin"}),
       "",
       {"tenant-admin"},
       true},
      {"narrow operator -> a token of no policy", token("", {"tenant-admin"}), "team-1", {}, true},
      // An admin policy over tenants/* holds every tenant's power; over tenants/team-1/*,
      // team-1's only.
      {"tenants/* -> team-1's tenant-admin", token("", {"ops"}), "team-1", {"tenant-admin"}, true},
      {"tenants/* -> team-2's tenant-admin", token("", {"ops"}), "team-2", {"tenant-admin"}, true},
      {"tenants/team-1/* -> team-1's tenant-admin",
       token("", {"t1-ops"}),
       "team-1",
       {"tenant-admin"},
       true},
      {"tenants/team-1/* -> team-2's tenant-admin",
       token("", {"t1-ops"}),
       "team-2",
       {"tenant-admin"},
       false,
       "tenants/team-2/*"},
      {"tenants/team-1/* -> team-2's read-only",
       token("", {"t1-ops"}),
       "team-2",
       {"read-only"},
       false,
       "tenants/team-2/workloads/*"},
      // Same name, different power: admin `dev` reads every tenant's workloads; team-1's `dev`
      // is that, team-2's reads everything in team-2.
      {"admin dev -> team-1's dev", token("", {"dev"}), "team-1", {"dev"}, true},
      {"admin dev -> team-2's dev",
       token("", {"dev"}),
       "team-2",
       {"dev"},
       false,
       "cannot give policy 'dev' of tenant 'team-2'"},
      {"admin dev -> team-1's tenant-admin", token("", {"dev"}), "team-1", {"tenant-admin"}, false},
      // Admin parent -> admin child: one namespace. Its own policies by name (Vault's rule),
      // others through a role, judged by power either way.
      {"tenants/* -> its own", token("", {"ops", "dev"}), "", {"dev"}, true},
      {"tenants/* -> admin tenants/team-1/*",
       token("", {"ops"}),
       "",
       {"t1-ops"},
       false,
       "the parent token does not have it"},
      {"tenants/* -> admin tenants/team-1/*, role",
       token("", {"ops"}),
       "",
       {"t1-ops"},
       true,
       "",
       true},
      {"tenants/team-1/* -> admin tenants/*, role",
       token("", {"t1-ops"}),
       "",
       {"ops"},
       false,
       "cannot give policy 'ops' of the admin scope",
       true},
      {"admin dev -> admin ops, role",
       token("", {"dev"}),
       "",
       {"ops"},
       false,
       "more than the calling token has",
       true},
      {"admin -> root", token("", {"ops"}), "", {"root"}, false, "only a root token"},
      {"admin -> root, role", token("", {"ops"}), "", {"root"}, false, "only a root token", true},
      // An admin deny binds what the parent may hand on into a tenant.
      {"tenants/* minus team-1 secrets -> team-1's tenant-admin",
       token("", {"ops", "no-team-1-secrets"}),
       "team-1",
       {"tenant-admin"},
       false,
       "tenants/team-1/secrets/*"},
      {"tenants/* minus team-1 secrets -> team-1's dev and read-only",
       token("", {"ops", "no-team-1-secrets"}),
       "team-1",
       {"dev", "read-only"},
       true},
      // Tenant parent -> its own tenant: its own policies, or narrower ones through a role.
      {"tenant-admin -> same tenant's tenant-admin",
       token("team-1", {"tenant-admin"}),
       "team-1",
       {"tenant-admin"},
       true},
      {"tenant-admin -> same tenant's dev",
       token("team-1", {"tenant-admin"}),
       "team-1",
       {"dev"},
       false,
       "the parent token does not have it"},
      {"tenant-admin -> same tenant's dev, role",
       token("team-1", {"tenant-admin"}),
       "team-1",
       {"dev"},
       true,
       "",
       true},
      {"dev -> same tenant's read-only (narrower), role",
       token("team-1", {"dev"}),
       "team-1",
       {"read-only"},
       true,
       "",
       true},
      {"read-only -> same tenant's dev (wider), role",
       token("team-1", {"read-only"}),
       "team-1",
       {"dev"},
       false,
       "list",
       true},
      {"dev -> same tenant's tenant-admin, role",
       token("team-1", {"dev"}),
       "team-1",
       {"tenant-admin"},
       false,
       "more than the calling token has",
       true},
      // A deny in another of the parent's policies: by name alone the child would have more.
      {"tenant-admin minus secrets -> tenant-admin",
       token("team-1", {"tenant-admin", "no-secrets"}),
       "team-1",
       {"tenant-admin"},
       false,
       "secrets/*"},
      // A tenant parent never reaches another tenant or the admin scope.
      {"team-1 -> team-2",
       token("team-1", {"tenant-admin"}),
       "team-2",
       {"dev"},
       false,
       "own tenant"},
      {"team-1 -> team-2, no policy",
       token("team-1", {"tenant-admin"}),
       "team-2",
       {},
       false,
       "own tenant"},
      {"team-1 -> team-2, role",
       token("team-1", {"tenant-admin"}),
       "team-2",
       {"dev"},
       false,
       "own tenant",
       true},
      {"team-1 -> admin", token("team-1", {"tenant-admin"}), "", {}, false, "own tenant"},
      {"team-1 root -> team-2", token("team-1", {"root"}), "team-2", {}, false, "own tenant"},
      // A name the child's scope does not have is refused from anyone but root (its power
      // cannot be judged, and it would grow once written), unless it is the parent's own.
      {"a policy that does not exist, role",
       token("team-1", {"tenant-admin"}),
       "team-1",
       {"later"},
       false,
       "has no such policy",
       true},
      {"the parent's own name, not written yet",
       token("team-1", {"later"}),
       "team-1",
       {"later"},
       true},
      {"a policy that exists only in the admin scope",
       token("", {"ops"}),
       "team-1",
       {"ops"},
       false,
       "tenant 'team-1' has no such policy"},
  };
  for (const Case& c : cases) {
    core::Status st = checkChildPower(c.parent, c.scope, c.policies, table.source(), c.via_role);
    EXPECT_EQ(st.isOk(), c.allowed) << c.what << ": " << st.message();
    if (!c.allowed) {
      EXPECT_EQ(st.code(), core::StatusCode::kPermissionDenied) << c.what;
      EXPECT_NE(st.message().find(c.says), std::string::npos) << c.what << ": " << st.message();
    }
  }
}

TEST(ChildPowerTest, AnAdminParentMustReachWhatATenantsTokensReachThroughGrants) {
  // team-2 granted team-1 read on one of its secrets: every team-1 token reads it, whatever
  // its policies, so an operator who holds only team-1 must not mint one.
  PolicyTable table = standardTable();
  auto reach = Policy::fromJson(
      "grants to team-1", {{"path",
                            {{"tenants/team-2/secrets/kv/data/x", caps({"read", "list"})},
                             {"tenants/team-2/secrets/kv/data/x/*", caps({"read", "list"})}}}});
  ASSERT_TRUE(reach.isOk());
  table.reach["team-1"] = *reach;
  TokenInfo t1_ops;
  t1_ops.policies = {"t1-ops"};
  core::Status st = checkChildPower(t1_ops, "team-1", {}, table.source());
  EXPECT_EQ(st.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("granted"), std::string::npos) << st.message();
  EXPECT_FALSE(checkChildPower(t1_ops, "team-1", {"read-only"}, table.source()).isOk());
  // Team-2 has no grants: the same operator's power there is judged by policies alone.
  TokenInfo ops;
  ops.policies = {"ops"};
  EXPECT_TRUE(checkChildPower(ops, "team-1", {"tenant-admin"}, table.source()).isOk());
  // A tenant-1 parent reaches its grants already.
  TokenInfo team1;
  team1.tenant = "team-1";
  team1.policies = {"tenant-admin"};
  EXPECT_TRUE(checkChildPower(team1, "team-1", {"dev"}, table.source(), true).isOk());
}

TEST_F(TokensTest, CreateChecksPowerForEveryTokenRoleOrNot) {
  CreatedToken r = root();
  auto narrow = tokens_->create(r.info, {.policies = {"tenant-admin"}, .ttl = hours(1)});
  ASSERT_TRUE(narrow.isOk()) << narrow.status().message();
  for (const std::string tenant : {"team-1", "team-2"}) {
    auto minted = tokens_->create(narrow->info, {.tenant = tenant, .policies = {"tenant-admin"}});
    EXPECT_EQ(minted.status().code(), core::StatusCode::kPermissionDenied) << tenant;
    // Through a role as well: the manager checks, whatever its caller did.
    auto by_role = tokens_->create(
        narrow->info, {.tenant = tenant, .policies = {"tenant-admin"}, .role = "anything"});
    EXPECT_EQ(by_role.status().code(), core::StatusCode::kPermissionDenied) << tenant;
  }
  EXPECT_EQ(tokens_->list("team-1").size(), 0U);
  // A real operator's token still makes tenant admins, and they make narrower tokens.
  auto ops = tokens_->create(r.info, {.policies = {"ops"}, .ttl = hours(1)});
  ASSERT_TRUE(ops.isOk());
  auto admin1 = tokens_->create(ops->info, {.tenant = "team-1", .policies = {"tenant-admin"}});
  ASSERT_TRUE(admin1.isOk()) << admin1.status().message();
  const TokenRequest dev_req{.tenant = "team-1", .policies = {"dev"}, .role = "dev"};
  EXPECT_TRUE(tokens_->create(admin1->info, dev_req).isOk());
  // A policy that grows after a token was made changes that token (as in Vault), but the
  // next creation is judged on the policy as it is then.
  auto dev = tokens_->create(admin1->info, dev_req);
  ASSERT_TRUE(dev.isOk());
  EXPECT_TRUE(tokens_->create(dev->info, {.tenant = "team-1", .policies = {"dev"}}).isOk());
  table_.add("team-1", "dev",
             {{"workloads/*", caps({"read", "list"})}, {"secrets/*", caps({"read"})}});
  EXPECT_TRUE(tokens_->create(dev->info, {.tenant = "team-1", .policies = {"dev"}}).isOk());
  table_.add("team-1", "read-only", {{"*", caps({"read"})}});
  EXPECT_FALSE(
      tokens_->create(dev->info, {.tenant = "team-1", .policies = {"read-only"}, .role = "r"})
          .isOk());
}

// Issue #36: a child worked for up to a second after its parent expired, until housekeeping
// swept it. The chain's expiry is read at every lookup.
TEST_F(TokensTest, AChildStopsTheMomentAnAncestorExpires) {
  CreatedToken r = root();
  auto parent = tokens_->create(r.info, {.policies = {"ops"}, .ttl = hours(1)});
  ASSERT_TRUE(parent.isOk());
  // Its children ask for longer than their parent has left (renewable parents do not cap them).
  auto child = tokens_->create(parent->info,
                               {.tenant = "team-1", .policies = {"tenant-admin"}, .ttl = hours(8)});
  ASSERT_TRUE(child.isOk()) << child.status().message();
  auto grandchild = tokens_->create(
      child->info, {.tenant = "team-1", .policies = {"tenant-admin"}, .ttl = hours(8)});
  ASSERT_TRUE(grandchild.isOk());
  EXPECT_EQ(child->info.ttlSeconds(clock_.wallNow()), 8 * 3600);
  clock_.advance(minutes(59));
  EXPECT_TRUE(tokens_->lookup(grandchild->secret).isOk());
  clock_.advance(minutes(1));
  // No sweep has run: every lookup of the line fails at once.
  for (const CreatedToken* t : {&*parent, &*child, &*grandchild}) {
    EXPECT_EQ(tokens_->lookup(t->secret).status().code(), core::StatusCode::kNotFound);
    EXPECT_FALSE(tokens_->lookupAccessor(t->info.accessor).isOk());
    EXPECT_FALSE(tokens_->renew(t->info.accessor, hours(1)).isOk());
  }
  EXPECT_TRUE(tokens_->list("team-1").empty());
  EXPECT_TRUE(tokens_->expiries().size() == 1U);  // The root token's.
  auto more = tokens_->create(child->info, {.tenant = "team-1", .policies = {"tenant-admin"}});
  EXPECT_EQ(more.status().code(), core::StatusCode::kNotFound) << more.status().message();
  EXPECT_EQ(tokens_->expire().value(), 3);
}

TEST_F(TokensTest, RenewingAParentKeepsItsChildrenAndTheChainSurvivesARestart) {
  CreatedToken r = root();
  auto parent = tokens_->create(r.info, {.policies = {"ops"}, .ttl = hours(1)});
  auto child = tokens_->create(parent->info,
                               {.tenant = "team-1", .policies = {"tenant-admin"}, .ttl = hours(8)});
  auto grandchild = tokens_->create(
      child->info, {.tenant = "team-1", .policies = {"tenant-admin"}, .ttl = hours(3)});
  ASSERT_TRUE(parent.isOk() && child.isOk() && grandchild.isOk());
  clock_.advance(minutes(50));
  ASSERT_TRUE(tokens_->renew(parent->info.accessor, hours(2)).isOk());
  clock_.advance(minutes(20));
  EXPECT_TRUE(tokens_->lookup(grandchild->secret).isOk());
  // The chain is rebuilt from the store whatever order its tokens come back in.
  for (int i = 0; i < 3; ++i) {
    reopen();
  }
  EXPECT_TRUE(tokens_->lookup(child->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(grandchild->secret).isOk());
  clock_.advance(minutes(100));  // 2 h 50 min: the renewed parent has 0 left.
  EXPECT_FALSE(tokens_->lookup(parent->secret).isOk());
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
  EXPECT_FALSE(tokens_->lookup(grandchild->secret).isOk());
  // A child's own expiry still counts: renewing the parent does not stretch it.
  CreatedToken r2 = r;
  auto p2 = tokens_->create(r2.info, {.policies = {"ops"}, .ttl = hours(1)});
  auto c2 =
      tokens_->create(p2->info, {.tenant = "team-2", .policies = {"dev"}, .ttl = minutes(30)});
  ASSERT_TRUE(p2.isOk() && c2.isOk());
  ASSERT_TRUE(tokens_->renew(p2->info.accessor, hours(5)).isOk());
  clock_.advance(minutes(30));
  EXPECT_FALSE(tokens_->lookup(c2->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(p2->secret).isOk());
}

TEST_F(TokensTest, ATokenWhoseParentIsGoneFromTheStoreIsGoneToo) {
  // A store that lost a parent's record (written by hand, or an older server) must not leave
  // its children working: they go at the next start.
  CreatedToken r = root();
  auto parent = tokens_->create(r.info, {.policies = {"ops"}, .ttl = hours(1)});
  auto child = tokens_->create(parent->info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(parent.isOk() && child.isOk());
  ASSERT_TRUE(store_->deleteRange("/tokens/" + TokenManager::hashSecret(parent->secret)).isOk());
  reopen();
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
  EXPECT_EQ(tokens_->held("team-1"), 0U);
  EXPECT_TRUE(tokens_->lookup(r.secret).isOk());
}

}  // namespace
}  // namespace tessera::server
