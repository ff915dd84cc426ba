// Issue #36, "a tenant's task can never become its node or another tenant", through the real
// `tessera dev` binary over HTTPS: what a parent token may give a child (its power, judged in
// each policy's own scope, not policy names), a child stopping with its parent, a GPU limit of 0
// meaning zero, and a pool dedicated without a tenant.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "process.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::integration::Client;
using tessera::integration::Process;
using tessera::integration::Response;
using tessera::integration::slurp;

class TenantBoundaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-tb-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"dev", "--data-dir", dir_.string(), "--addr", "127.0.0.1:0"},
        dir_ / "out.txt");
    for (int i = 0; i < 600; ++i) {
      if (fs::exists(dir_ / "dev.json")) {
        dev_ = json::parse(slurp(dir_ / "dev.json"), nullptr, false);
        if (dev_.is_object() && dev_.value("pid", 0) == server_->pid()) {
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(dev_.value("pid", 0), server_->pid()) << server_->output() << server_->errors();
    client_ = std::make_unique<Client>(dev_["address"].get<std::string>(),
                                       slurp(dev_["ca_cert"].get<std::string>()));
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(server_->stop(SIGTERM), 0);
    }
    fs::remove_all(dir_);
  }

  const Client& c() const { return *client_; }
  std::string root() const { return dev_["root_token"]; }
  std::string demo() const { return dev_["tenant_token"]; }

  // A token made by `parent` with `body` (200 expected), its secret.
  std::string mint(const std::string& path, const std::string& parent, const json& body) {
    Response r = c().call("POST", path, parent, body);
    EXPECT_EQ(r.status, 200U) << path << " " << body.dump() << ": " << r.raw;
    return r.body.value("auth", json::object()).value("client_token", "");
  }
  void adminPolicy(const std::string& name, const json& paths) {
    ASSERT_EQ(c().call("POST", "/v1/sys/policies/" + name, root(), {{"path", paths}}).status, 204U);
  }
  static json caps(std::initializer_list<const char*> names) {
    json c = json::array();
    for (const char* n : names) {
      c.push_back(n);
    }
    return {{"capabilities", c}};
  }

  fs::path dir_;
  json dev_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Client> client_;
};

// Item 2: an operator whose only admin policy is *named* tenant-admin and creates tokens minted
// tenant-admin tokens for every tenant. Power decides now, in each policy's own scope.
TEST_F(TenantBoundaryTest, ANarrowOperatorTokenCannotMintAnyTenantsAdmin) {
  const json all = caps({"create", "read", "update", "patch", "delete", "list"});
  ASSERT_EQ(c().call("POST", "/v1/tenants/team-1", root(), json::object()).status, 204U);
  ASSERT_EQ(c().call("PUT", "/v1/tenants/demo/secrets/kv/data/app", demo(),
                     {{"data", {{"password", "demo-s3cret"}}}})
                .status,
            200U);
  adminPolicy("tenant-admin", {{"auth/token/create", caps({"create"})}});
  const std::string narrow =
      mint("/v1/auth/token/create", root(), {{"policies", {"tenant-admin"}}, {"ttl", "1h"}});
  for (const char* tenant : {"demo", "team-1"}) {
    Response r = c().call("POST", "/v1/auth/token/create", narrow,
                          {{"tenant", tenant}, {"policies", {"tenant-admin"}}});
    EXPECT_EQ(r.status, 403U) << tenant << ": " << r.raw;
    EXPECT_NE(r.raw.find("cannot give policy 'tenant-admin' of tenant '" + std::string(tenant)),
              std::string::npos)
        << r.raw;
    // Nor any narrower policy of the tenant's.
    EXPECT_EQ(c().call("POST", "/v1/auth/token/create", narrow,
                       {{"tenant", tenant}, {"policies", {"nonexistent"}}})
                  .status,
              403U);
  }
  // It may still make a token of no policy for a tenant: it reaches nothing there.
  const std::string empty =
      mint("/v1/auth/token/create", narrow, {{"tenant", "demo"}, {"policies", json::array()}});
  EXPECT_EQ(c().call("GET", "/v1/tenants/demo/secrets/kv/data/app", empty).status, 403U);
  EXPECT_EQ(c().call("LIST", "/v1/tenants/demo/workloads", empty).status, 403U);

  // Legitimate flows keep working. Root makes tenant admins...
  const std::string t1_admin =
      mint("/v1/auth/token/create", root(), {{"tenant", "team-1"}, {"policies", {"tenant-admin"}}});
  EXPECT_EQ(c().call("LIST", "/v1/tenants/team-1/workloads", t1_admin).status, 200U);
  // ...so does an operator whose policy holds every tenant (tenants/*)...
  adminPolicy("ops", {{"tenants/*", all}, {"auth/token/create", caps({"create"})}});
  const std::string ops = mint("/v1/auth/token/create", root(), {{"policies", {"ops"}}});
  const std::string demo_admin =
      mint("/v1/auth/token/create", ops, {{"tenant", "demo"}, {"policies", {"tenant-admin"}}});
  Response read = c().call("GET", "/v1/tenants/demo/secrets/kv/data/app", demo_admin);
  EXPECT_EQ(read.status, 200U) << read.raw;
  // ...and one that holds one tenant (tenants/team-1/*), for that tenant only.
  adminPolicy("t1-ops", {{"tenants/team-1/*", all}, {"auth/token/create", caps({"create"})}});
  const std::string t1_ops = mint("/v1/auth/token/create", root(), {{"policies", {"t1-ops"}}});
  mint("/v1/auth/token/create", t1_ops, {{"tenant", "team-1"}, {"policies", {"tenant-admin"}}});
  Response other = c().call("POST", "/v1/auth/token/create", t1_ops,
                            {{"tenant", "demo"}, {"policies", {"tenant-admin"}}});
  EXPECT_EQ(other.status, 403U) << other.raw;
  EXPECT_NE(other.raw.find("tenants/demo/*"), std::string::npos) << other.raw;

  // A tenant admin makes tokens of its own policies, and narrower ones through a role (Vault's
  // rule, kept); they make nothing wider. A role is limited by what its policies allow.
  mint("/v1/tenants/demo/auth/token/create", demo(), {{"policies", {"tenant-admin"}}});
  ASSERT_EQ(c().call("POST", "/v1/tenants/demo/policies/reader", demo(),
                     {{"path", {{"workloads", caps({"list"})}, {"workloads/*", caps({"read"})}}}})
                .status,
            204U);
  Response direct =
      c().call("POST", "/v1/tenants/demo/auth/token/create", demo(), {{"policies", {"reader"}}});
  EXPECT_EQ(direct.status, 403U) << direct.raw;
  EXPECT_NE(direct.raw.find("the parent token does not have it"), std::string::npos) << direct.raw;
  ASSERT_EQ(c().call("POST", "/v1/tenants/demo/auth/token/roles/dev", demo(),
                     {{"allowed_policies", {"reader"}}})
                .status,
            204U);
  const std::string reader = mint("/v1/tenants/demo/auth/token/create/dev", demo(), json::object());
  EXPECT_EQ(c().call("LIST", "/v1/tenants/demo/workloads", reader).status, 200U);
  EXPECT_EQ(c().call("GET", "/v1/tenants/demo/secrets/kv/data/app", reader).status, 403U);
  EXPECT_EQ(c().call("POST", "/v1/tenants/demo/auth/token/create", reader,
                     {{"policies", {"tenant-admin"}}})
                .status,
            403U);
  // The narrow operator cannot write a role in a tenant to get around it either.
  EXPECT_EQ(c().call("POST", "/v1/tenants/demo/auth/token/roles/mine", narrow,
                     {{"allowed_policies", {"tenant-admin"}}})
                .status,
            403U);

  // A grant to a tenant reaches every token of it: an operator holding only that tenant cannot
  // mint one while the grant lasts, even of no policy.
  adminPolicy("demo-ops", {{"tenants/demo/*", all}, {"auth/token/create", caps({"create"})}});
  const std::string demo_ops = mint("/v1/auth/token/create", root(), {{"policies", {"demo-ops"}}});
  mint("/v1/auth/token/create", demo_ops, {{"tenant", "demo"}, {"policies", json::array()}});
  ASSERT_EQ(c().call("PUT", "/v1/tenants/team-1/secrets/kv/data/shared/x", t1_admin,
                     {{"data", {{"k", "team-1-s3cret"}}}})
                .status,
            200U);
  Response grant = c().call(
      "POST", "/v1/tenants/team-1/grants", t1_admin,
      {{"to", "demo"}, {"on", "secrets/kv/data/shared"}, {"policy", "read"}, {"ttl", "1h"}});
  ASSERT_EQ(grant.status, 200U) << grant.raw;
  Response by_proxy = c().call("POST", "/v1/auth/token/create", demo_ops,
                               {{"tenant", "demo"}, {"policies", json::array()}});
  EXPECT_EQ(by_proxy.status, 403U) << by_proxy.raw;
  EXPECT_NE(by_proxy.raw.find("granted"), std::string::npos) << by_proxy.raw;
  // An operator over every tenant reaches the grant's secrets itself, and may.
  mint("/v1/auth/token/create", ops, {{"tenant", "demo"}, {"policies", json::array()}});
}

// Item 8: a child worked for up to a second after its parent expired (until housekeeping swept
// it). Once the parent is refused, so is every later request of its child.
TEST_F(TenantBoundaryTest, AChildTokenStopsTheMomentItsParentExpires) {
  int served_after_parent = 0;
  int minted_after_parent = 0;
  int tries = 0;
  for (int trial = 0; trial < 3; ++trial) {
    // A short-lived operator (root's policy: it may give the child anything, whatever rule
    // judges the child's policies).
    const std::string parent =
        mint("/v1/auth/token/create", root(), {{"policies", {"root"}}, {"ttl", "2s"}});
    const std::string child =
        mint("/v1/auth/token/create", parent,
             {{"tenant", "demo"}, {"policies", {"tenant-admin"}}, {"ttl", "1h"}});
    ASSERT_EQ(c().call("LIST", "/v1/tenants/demo/workloads", child).status, 200U);
    bool parent_gone = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!parent_gone && std::chrono::steady_clock::now() < until) {
      parent_gone = c().call("GET", "/v1/auth/token/lookup-self", parent).status == 403;
    }
    ASSERT_TRUE(parent_gone) << "the 2 s parent was never refused";
    // The parent is refused: nothing of its line may work from here on (before, it did until
    // the next sweep, up to a second later).
    for (int i = 0; i < 25; ++i, ++tries) {
      if (c().call("LIST", "/v1/tenants/demo/workloads", child).status != 403) {
        ++served_after_parent;
      }
      if (c().call("POST", "/v1/tenants/demo/auth/token/create", child,
                   {{"policies", {"tenant-admin"}}})
              .status == 200) {
        ++minted_after_parent;
      }
    }
  }
  EXPECT_EQ(served_after_parent, 0) << "reads of " << tries << " served after the parent expired";
  EXPECT_EQ(minted_after_parent, 0)
      << "grandchildren of " << tries << " minted after the parent expired";
}

// Item 10: a GPU limit of 0 is zero (a frozen tenant), refused at admission with the
// arithmetic; no limit is written by leaving it out (or -1).
TEST_F(TenantBoundaryTest, AGpuLimitOfZeroIsZeroAndNoLimitIsLeftOut) {
  Response r = c().call("POST", "/v1/tenants/frozen", root(),
                        {{"quota", {{"gpu", 0}}}, {"limit", {{"gpu", 0}}}});
  ASSERT_EQ(r.status, 204U) << r.raw;
  r = c().call("GET", "/v1/tenants/frozen", root());
  EXPECT_EQ(r.body["data"]["limit_milli_gpu"], 0) << r.raw;
  const json gpu_work = {{"gpu", {{"count", 1}}}, {"cpuMilli", 100}, {"duration", 30}};
  r = c().call("POST", "/v1/tenants/frozen/workloads/train", root(), gpu_work);
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("tenant 'frozen' may hold no GPU at all"), std::string::npos) << r.raw;
  EXPECT_NE(r.raw.find("1 x 1 GPU = 1 GPU at once"), std::string::npos) << r.raw;
  r = c().call("POST", "/v1/tenants/frozen/workloads/half", root(),
               {{"gpu", {{"count", 1}, {"milli", 500}}}, {"cpuMilli", 100}, {"duration", 30}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("1 x 0.5 GPU = 0.5 GPU"), std::string::npos) << r.raw;
  // Work without a GPU still runs.
  r = c().call("POST", "/v1/tenants/frozen/workloads/cpu", root(),
               {{"cpuMilli", 100}, {"duration", 30}});
  EXPECT_EQ(r.status, 202U) << r.raw;
  // A limit below the quota is refused, and says how to freeze.
  r = c().call("POST", "/v1/tenants/quota", root(),
               {{"quota", {{"gpu", 2}}}, {"limit", {{"gpu", 0}}}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("quota of 0 too"), std::string::npos) << r.raw;

  // Issue #37: a gang over a limit that is not 0, refused with the arithmetic in GPUs.
  ASSERT_EQ(c().call("POST", "/v1/tenants/capped", root(),
                     {{"quota", {{"gpu", 8}}}, {"limit", {{"gpu", 16}}}})
                .status,
            204U);
  r = c().call("POST", "/v1/tenants/capped/workloads/big", root(),
               {{"tasks", 3}, {"minAvailable", 3}, {"gpu", {{"count", 8}}}, {"duration", 30}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("needs 3 x 8 GPUs = 24 GPUs at once (minAvailable x each task's GPU), "
                       "and tenant 'capped' may hold at most 16 GPUs at once (its limit.gpu)"),
            std::string::npos)
      << r.raw;

  // Left out: no limit, shown as -1; a GPU workload runs.
  ASSERT_EQ(c().call("POST", "/v1/tenants/open", root(), {{"quota", {{"gpu", 1}}}}).status, 204U);
  r = c().call("GET", "/v1/tenants/open", root());
  EXPECT_EQ(r.body["data"]["limit_milli_gpu"], -1) << r.raw;
  ASSERT_EQ(c().call("POST", "/v1/tenants/open/workloads/train", root(), gpu_work).status, 202U);
  std::string phase;
  for (int i = 0; i < 400 && phase != "running"; ++i) {
    r = c().call("GET", "/v1/tenants/open/workloads/train", root());
    phase = r.body["data"]["status"].value("phase", "");
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(phase, "running") << r.raw;

  // Unfrozen with -1: GPU work is admitted again. A limit above 0 refuses a gang beyond it.
  ASSERT_EQ(c().call("POST", "/v1/tenants/frozen", root(), {{"limit", {{"gpu", -1}}}}).status,
            204U);
  EXPECT_EQ(c().call("GET", "/v1/tenants/frozen", root()).body["data"]["limit_milli_gpu"], -1);
  EXPECT_EQ(c().call("POST", "/v1/tenants/frozen/workloads/train", root(), gpu_work).status, 202U);
  ASSERT_EQ(c().call("POST", "/v1/tenants/frozen", root(), {{"limit", {{"gpu", 2}}}}).status, 204U);
  r = c().call("POST", "/v1/tenants/frozen/workloads/gang", root(),
               {{"tasks", 3}, {"minAvailable", 3}, {"gpu", {{"count", 1}}}, {"duration", 30}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("3 x 1 GPU = 3 GPUs"), std::string::npos) << r.raw;
  // "limit": {} is none too; a bad limit names the field.
  ASSERT_EQ(c().call("POST", "/v1/tenants/frozen", root(), {{"limit", json::object()}}).status,
            204U);
  EXPECT_EQ(c().call("GET", "/v1/tenants/frozen", root()).body["data"]["limit_milli_gpu"], -1);
  r = c().call("POST", "/v1/tenants/frozen", root(), {{"limit", {{"gpu", -2}}}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("limit.gpu"), std::string::npos) << r.raw;

  // A team's queue frozen inside an open tenant.
  const std::string open_admin =
      mint("/v1/auth/token/create", root(), {{"tenant", "open"}, {"policies", {"tenant-admin"}}});
  ASSERT_EQ(
      c().call("POST", "/v1/tenants/open/queues/interns", open_admin, {{"limit", {{"gpu", 0}}}})
          .status,
      204U);
  EXPECT_EQ(c().call("GET", "/v1/tenants/open/queues/interns", open_admin)
                .body["data"]["limit_milli_gpu"],
            0);
  json team_work = gpu_work;
  team_work["queue"] = "interns";
  r = c().call("POST", "/v1/tenants/open/workloads/intern", open_admin, team_work);
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("queue 'interns' of tenant 'open' may hold no GPU at all"),
            std::string::npos)
      << r.raw;
}

// Item 7: dedicating a pool without naming its tenant was a 500.
TEST_F(TenantBoundaryTest, DedicatingAPoolWithoutATenantIsABadRequest) {
  Response r = c().call("POST", "/v1/sys/pools/gpu-pool", root(), json::object());
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("tenant: required"), std::string::npos) << r.raw;
  r = c().call("POST", "/v1/sys/pools/gpu-pool", root(), {{"tenant", 7}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  r = c().call("POST", "/v1/sys/pools/gpu-pool", root(), {{"tenant", "demo"}});
  EXPECT_EQ(r.status, 200U) << r.raw;
}

}  // namespace
