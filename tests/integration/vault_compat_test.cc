// Vault compatibility through the real server (issue #26): policy files in Vault's own syntax
// (the old `policy = "write"` form, trailing-slash patterns, a leading '/', `name`, `_` in
// names, `recover`, `patch`, parameter constraints, wrapping TTLs), KV answers in Vault's
// shapes (write, read, deleted and destroyed versions, check-and-set), the KV features Vault
// has (delete_version_after, subkeys, PATCH on metadata, exclude_deleted, created_by) and
// `tessera secrets kv get -format=json` in `vault kv get -format=json`'s shape.
//
// One `tessera dev --simulated` serves every test of the suite (each test uses its own keys and
// policies), so the suite takes seconds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "process.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::integration::Client;
using tessera::integration::Outcome;
using tessera::integration::Process;
using tessera::integration::Response;
using tessera::integration::runArgv;
using tessera::integration::slurp;

class VaultCompatTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::temp_directory_path() / ("tessera-vault-" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    dev_ =
        new Process({"dev", "--simulated", "--data-dir", dir_->string(), "--addr", "127.0.0.1:0"},
                    *dir_ / "out.txt");
    json info;
    for (int i = 0; i < 600 && !(info.is_object() && info.value("pid", 0) == dev_->pid()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (fs::exists(*dir_ / "dev.json")) {
        info = json::parse(slurp(*dir_ / "dev.json"), nullptr, false);
      }
    }
    info_ = new json(info);
  }
  static void TearDownTestSuite() {
    delete dev_;
    fs::remove_all(*dir_);
    delete dir_;
    delete info_;
  }
  void SetUp() override {
    ASSERT_EQ(info_->value("pid", 0), dev_->pid()) << dev_->errors();
    client_ = std::make_unique<Client>((*info_)["address"],
                                       slurp((*info_)["ca_cert"].get<std::string>()));
    demo_ = (*info_)["tenant_token"];
    root_ = (*info_)["root_token"];
  }

  const Client& c() const { return *client_; }

  // `tessera ARGS...` as a user runs it, with the server's address, CA and `token`.
  static Outcome cli(const std::vector<std::string>& args, const std::string& token) {
    std::vector<std::string> argv = {tessera::integration::binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runArgv(argv,
                   {{"TESSERA_ADDR", (*info_)["address"]},
                    {"TESSERA_CACERT", (*info_)["ca_cert"]},
                    {"TESSERA_TOKEN", token}},
                   *dir_);
  }

  // Writes `hcl` to a file and loads it as the demo tenant's policy `name` with the CLI, the way
  // an operator brings an existing Vault policy file.
  static void writePolicyFile(const std::string& name, const std::string& hcl,
                              const std::string& token) {
    const fs::path file = *dir_ / (name + ".hcl");
    std::ofstream(file) << hcl;
    const Outcome o = cli({"policy", "write", name, file.string()}, token);
    ASSERT_EQ(o.rc, 0) << o;
  }

  // A token of the demo tenant with `policies` (from the root token: a tenant token hands on
  // only policies it holds).
  std::string tokenWith(const std::vector<std::string>& policies) const {
    Response r = c().call("POST", "/v1/auth/token/create", root_,
                          {{"tenant", "demo"}, {"policies", policies}});
    EXPECT_EQ(r.status, 200U) << r.raw;
    return r.body["auth"].value("client_token", "");
  }

  static inline fs::path* dir_ = nullptr;
  static inline Process* dev_ = nullptr;
  static inline json* info_ = nullptr;
  std::unique_ptr<Client> client_;
  std::string demo_;
  std::string root_;
};

constexpr const char* kKv = "/v1/tenants/demo/secrets/kv/";

struct Call {
  const char* method;
  std::string path;  // After secrets/kv/.
  json body;
  unsigned want;
};

void runCalls(const Client& c, const std::string& token, const std::vector<Call>& calls,
              const char* what) {
  for (const Call& k : calls) {
    Response r = c.call(k.method, kKv + k.path, token, k.body);
    EXPECT_EQ(r.status, k.want) << what << ": " << k.method << " " << k.path << " " << k.body.dump()
                                << " -> " << r.raw;
  }
}

// Must show 1: policies in Vault's own syntax, loaded unchanged from files, decide requests
// through the server as Vault would.
TEST_F(VaultCompatTest, VaultPolicyFilesLoadUnchangedAndDecideAsVault) {
  // Seed keys as the tenant admin.
  for (const char* k : {"dev/a", "dev/b", "ops/x", "app/cfg", "legacy/k", "ro/k", "team/s"}) {
    ASSERT_EQ(
        c().call("PUT", std::string(kKv) + "data/" + k, demo_, {{"data", {{"v", "1"}}}}).status,
        200U);
  }
  writePolicyFile("dev_team", R"(
# An operator's Vault policy, as it was.
name = "dev_team"

path "secrets/kv/metadata/dev/*" {
  capabilities = ["list"]
}
path "/secrets/kv/data/dev/*" {
  capabilities = ["read", "create", "patch", "recover"]
  comment = "leading slash, patch without update"
}
path "secrets/kv/metadata/ops/" {
  capabilities = ["list"]
}
path "secrets/kv/data/legacy/*" {
  policy = "write"
}
path "secrets/kv/data/ro/*" {
  policy = "read"
}
path "secrets/kv/data/team/*" {
  policy = "sudo"
}
path "secrets/kv/data/team/s" {
  policy = "deny"
}
)",
                  demo_);
  const std::string dev = tokenWith({"dev_team"});
  ASSERT_FALSE(dev.empty());
  runCalls(c(), dev,
           {
               // Trailing '/': `metadata/dev/*` lists metadata/dev/ (with or without the '/').
               {"LIST", "metadata/dev/", nullptr, 200},
               {"LIST", "metadata/dev", nullptr, 200},
               // A pattern ending in '/' matches the LIST of that folder.
               {"LIST", "metadata/ops/", nullptr, 200},
               {"LIST", "metadata/", nullptr, 403},
               {"LIST", "metadata/app/", nullptr, 403},
               // The leading '/' was dropped: the rule applies.
               {"GET", "data/dev/a", nullptr, 200},
               // `patch` allows PATCH; without `update`, a PUT of an existing key is refused.
               {"PATCH", "data/dev/a", {{"data", {{"w", "2"}}}}, 200},
               {"PUT", "data/dev/a", {{"data", {{"w", "2"}}}}, 403},
               {"PUT",
                "data/dev/new",
                {{"data", {{"w", "2"}}}},
                200},  // `create`.
                       // The old form: write = create, read, update, delete, list.
               {"GET", "data/legacy/k", nullptr, 200},
               {"PUT", "data/legacy/k", {{"data", {{"w", "2"}}}}, 200},
               {"DELETE", "data/legacy/k", nullptr, 204},
               {"PATCH", "data/legacy/k", {{"data", {{"w", "3"}}}}, 403},  // No `patch` in it.
                                                                           // read = read, list.
               {"GET", "data/ro/k", nullptr, 200},
               {"PUT", "data/ro/k", {{"data", {{"w", "2"}}}}, 403},
               // sudo = write and sudo; deny on the exact path wins.
               {"PUT", "data/team/other", {{"data", {{"w", "2"}}}}, 200},
               {"GET", "data/team/s", nullptr, 403},
               // Nothing else.
               {"GET", "data/app/cfg", nullptr, 403},
           },
           "dev_team");
  // The policy reads back with its translated capabilities.
  Response p = c().call("GET", "/v1/tenants/demo/policies/dev_team", demo_);
  ASSERT_EQ(p.status, 200U) << p.raw;
  EXPECT_EQ(p.body["data"]["policy"]["path"]["secrets/kv/data/legacy/*"]["capabilities"],
            json({"create", "read", "update", "delete", "list"}))
      << p.raw;
  EXPECT_TRUE(p.body["data"]["policy"]["path"].contains("secrets/kv/data/dev/*")) << p.raw;
  // Vault's API form: the policy as text in {"policy": "..."}.
  ASSERT_EQ(c().call("POST", "/v1/tenants/demo/policies/api_form", demo_,
                     {{"policy", "path \"secrets/kv/data/app/*\" { policy = \"read\" }"}})
                .status,
            204U);
  const std::string api_form = tokenWith({"api_form"});
  runCalls(c(), api_form,
           {{"GET", "data/app/cfg", nullptr, 200}, {"PUT", "data/app/cfg", {{"data", {}}}, 403}},
           "api_form");
  // What Vault refuses, Tessera refuses, saying what and where.
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"path \"a\" { policy = \"admin\" }", "invalid policy"},
           {"path \"a\" { capabilities = [\"reed\"] }", "unknown capability 'reed'"},
           {"path \"a/+*\" { capabilities = [\"read\"] }", "'+*' is forbidden"},
           {"path \"a\" { capabilities = [\"read\"]\n mfa_methods = [\"m\"] }", "Enterprise"},
       }) {
    Response bad = c().call("POST", "/v1/tenants/demo/policies/bad", demo_, {{"policy", text}});
    EXPECT_EQ(bad.status, 400U) << text << " -> " << bad.raw;
    EXPECT_NE(bad.raw.find(message), std::string::npos) << text << " -> " << bad.raw;
  }
  EXPECT_EQ(c().call("POST", "/v1/tenants/demo/policies/Bad-Name", demo_,
                     {{"policy", "path \"a\" { policy = \"read\" }"}})
                .status,
            400U);
}

// Vault's allowed_parameters / denied_parameters / required_parameters, and wrapping TTLs
// (which refuse everything: Tessera has no response wrapping).
TEST_F(VaultCompatTest, ParameterConstraintsAndWrappingTtlsAreEnforced) {
  writePolicyFile("params", R"(
path "secrets/kv/data/p/allowed" {
  capabilities = ["create", "update", "read"]
  allowed_parameters = {
    "data" = []
  }
}
path "secrets/kv/data/p/denied" {
  capabilities = ["create", "update", "read"]
  denied_parameters = {
    "options" = []
  }
}
path "secrets/kv/data/p/required" {
  capabilities = ["create", "update", "read"]
  required_parameters = ["options"]
}
path "secrets/kv/data/p/versioned" {
  capabilities = ["read"]
  allowed_parameters = {
    "version" = ["1", "2"]
  }
}
path "secrets/kv/data/p/wrapped" {
  capabilities = ["create", "update", "read"]
  min_wrapping_ttl = "1m"
  max_wrapping_ttl = "1h"
}
)",
                  demo_);
  for (const char* k : {"p/versioned", "p/wrapped"}) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(
          c().call("PUT", std::string(kKv) + "data/" + k, demo_, {{"data", {{"v", i}}}}).status,
          200U);
    }
  }
  // `tessera policy read` prints the constraints too, as HCL that loads back to the same policy.
  const Outcome read = cli({"policy", "read", "params"}, demo_);
  ASSERT_EQ(read.rc, 0) << read;
  EXPECT_NE(read.out.find("allowed_parameters"), std::string::npos) << read.out;
  writePolicyFile("params_copy", read.out, demo_);
  EXPECT_EQ(c().call("GET", "/v1/tenants/demo/policies/params_copy", demo_).body["data"]["policy"],
            c().call("GET", "/v1/tenants/demo/policies/params", demo_).body["data"]["policy"]);
  const std::string t = tokenWith({"params"});
  runCalls(c(), t,
           {
               {"PUT", "data/p/allowed", {{"data", {{"a", "1"}}}}, 200},
               {"PUT", "data/p/allowed", {{"data", {{"a", "1"}}}, {"options", {{"cas", 1}}}}, 403},
               {"PUT", "data/p/denied", {{"data", {{"a", "1"}}}}, 200},
               {"PUT", "data/p/denied", {{"data", {{"a", "1"}}}, {"options", {{"cas", 1}}}}, 403},
               {"PUT", "data/p/required", {{"data", {{"a", "1"}}}}, 403},
               {"PUT", "data/p/required", {{"data", {{"a", "1"}}}, {"options", {{"cas", 0}}}}, 200},
               // A read's parameters are its query's.
               {"GET", "data/p/versioned?version=2", nullptr, 200},
               {"GET", "data/p/versioned?version=3", nullptr, 403},
               {"GET", "data/p/versioned", nullptr, 200},
               // A wrapping TTL needs a wrapped request; Tessera never has one.
               {"GET", "data/p/wrapped", nullptr, 403},
               {"PUT", "data/p/wrapped", {{"data", {{"a", "1"}}}}, 403},
           },
           "params");
}

// KV answers in Vault's shapes.
TEST_F(VaultCompatTest, KvAnswersHaveVaultsShapes) {
  const std::string path = std::string(kKv) + "data/shapes/k";
  ASSERT_EQ(c().call("POST", std::string(kKv) + "metadata/shapes/k", demo_,
                     {{"custom_metadata", {{"owner", "ml"}}}})
                .status,
            204U);
  Response w = c().call("PUT", path, demo_, {{"data", {{"password", "p1"}}}});
  ASSERT_EQ(w.status, 200U) << w.raw;
  // A write answers Vault's version metadata.
  for (const char* field :
       {"created_time", "custom_metadata", "deletion_time", "destroyed", "version"}) {
    EXPECT_TRUE(w.body["data"].contains(field)) << field << ": " << w.raw;
  }
  EXPECT_EQ(w.body["data"]["version"], 1);
  EXPECT_EQ(w.body["data"]["deletion_time"], "");
  EXPECT_EQ(w.body["data"]["destroyed"], false);
  EXPECT_EQ(w.body["data"]["custom_metadata"], json({{"owner", "ml"}}));
  Response p = c().call("PATCH", path, demo_, {{"data", {{"user", "u"}}}});
  ASSERT_EQ(p.status, 200U) << p.raw;
  EXPECT_EQ(p.body["data"]["version"], 2);
  EXPECT_TRUE(p.body["data"].contains("created_time")) << p.raw;
  ASSERT_EQ(c().call("PUT", path, demo_, {{"data", {{"password", "p3"}}}}).status, 200U);
  // A read's metadata.
  Response r = c().call("GET", path, demo_);
  ASSERT_EQ(r.status, 200U) << r.raw;
  EXPECT_EQ(r.body["data"]["data"], json({{"password", "p3"}})) << r.raw;
  const json m = r.body["data"]["metadata"];
  EXPECT_EQ(m["version"], 3);
  EXPECT_EQ(m["deletion_time"], "");
  EXPECT_EQ(m["destroyed"], false);
  EXPECT_EQ(m["custom_metadata"], json({{"owner", "ml"}}));
  EXPECT_TRUE(m["created_time"].is_string());
  // Deleted, destroyed and absent versions are all 404s; the first two say which.
  ASSERT_EQ(
      c().call("POST", std::string(kKv) + "delete/shapes/k", demo_, {{"versions", {1}}}).status,
      204U);
  ASSERT_EQ(
      c().call("POST", std::string(kKv) + "destroy/shapes/k", demo_, {{"versions", {2}}}).status,
      204U);
  struct Gone {
    int version;
    bool has_metadata;
    bool deleted;
    bool destroyed;
  };
  for (const Gone& g :
       {Gone{1, true, true, false}, Gone{2, true, false, true}, Gone{9, false, false, false}}) {
    Response got = c().call("GET", path + "?version=" + std::to_string(g.version), demo_);
    EXPECT_EQ(got.status, 404U) << got.raw;
    if (!g.has_metadata) {
      EXPECT_FALSE(got.body.contains("data") && got.body["data"].is_object() &&
                   got.body["data"].contains("metadata"))
          << got.raw;
      continue;
    }
    ASSERT_TRUE(got.body["data"].is_object()) << got.raw;
    EXPECT_TRUE(got.body["data"]["data"].is_null()) << got.raw;
    EXPECT_EQ(got.body["data"]["metadata"]["version"], g.version) << got.raw;
    EXPECT_EQ(got.body["data"]["metadata"]["deletion_time"] != "", g.deleted) << got.raw;
    EXPECT_EQ(got.body["data"]["metadata"]["destroyed"], g.destroyed) << got.raw;
    EXPECT_EQ(got.body["errors"][0], std::string("kv: version ") + std::to_string(g.version) +
                                         (g.destroyed ? " is destroyed" : " is deleted"))
        << got.raw;
  }
  // Check-and-set: a mismatch is 400, as Vault answers, for a write and a patch.
  EXPECT_EQ(c().call("PUT", path, demo_, {{"data", {{"x", 1}}}, {"options", {{"cas", 1}}}}).status,
            400U);
  EXPECT_EQ(
      c().call("PATCH", path, demo_, {{"data", {{"x", 1}}}, {"options", {{"cas", 1}}}}).status,
      400U);
  EXPECT_EQ(c().call("PUT", path, demo_, {{"data", {{"x", 1}}}, {"options", {{"cas", 3}}}}).status,
            200U);
}

// delete_version_after, subkeys, PATCH on metadata, exclude_deleted, created_by.
TEST_F(VaultCompatTest, KvFeaturesVaultHas) {
  const std::string base = kKv;
  // delete_version_after on the key: the version reads as deleted once it has passed.
  ASSERT_EQ(
      c().call("POST", base + "metadata/dva/k", demo_, {{"delete_version_after", "1s"}}).status,
      204U);
  Response w = c().call("PUT", base + "data/dva/k", demo_, {{"data", {{"x", 1}}}});
  ASSERT_EQ(w.status, 200U) << w.raw;
  EXPECT_NE(w.body["data"]["deletion_time"], "") << w.raw;  // Scheduled, as in Vault.
  EXPECT_EQ(c().call("GET", base + "data/dva/k", demo_).status, 200U);
  Response meta = c().call("GET", base + "metadata/dva/k", demo_);
  EXPECT_EQ(meta.body["data"]["delete_version_after"], "1s") << meta.raw;
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  Response late = c().call("GET", base + "data/dva/k", demo_);
  EXPECT_EQ(late.status, 404U) << late.raw;
  EXPECT_EQ(late.body["data"]["metadata"]["version"], 1) << late.raw;
  // In the tenant's config, shown in Go's format.
  ASSERT_EQ(c().call("POST", base + "config", demo_, {{"delete_version_after", "3h25m19s"}}).status,
            204U);
  Response cfg = c().call("GET", base + "config", demo_);
  EXPECT_EQ(cfg.body["data"]["delete_version_after"], "3h25m19s") << cfg.raw;
  ASSERT_EQ(c().call("POST", base + "config", demo_, {{"delete_version_after", 0}}).status, 204U);
  EXPECT_EQ(c().call("POST", base + "config", demo_, {{"delete_version_after", "-1s"}}).status,
            400U);

  // subkeys: the structure without the values.
  ASSERT_EQ(c().call("PUT", base + "data/sub/k", demo_,
                     {{"data", {{"foo", "abc"}, {"bar", {{"baz", "def"}}}}}})
                .status,
            200U);
  Response sk = c().call("GET", base + "subkeys/sub/k", demo_);
  ASSERT_EQ(sk.status, 200U) << sk.raw;
  EXPECT_EQ(sk.body["data"]["subkeys"], json::parse(R"({"foo": null, "bar": {"baz": null}})"))
      << sk.raw;
  EXPECT_EQ(sk.body["data"]["metadata"]["version"], 1);
  sk = c().call("GET", base + "subkeys/sub/k?depth=1", demo_);
  EXPECT_EQ(sk.body["data"]["subkeys"], json::parse(R"({"foo": null, "bar": null})")) << sk.raw;
  EXPECT_EQ(c().call("GET", base + "subkeys/sub/k?depth=x", demo_).status, 400U);
  EXPECT_EQ(sk.raw.find("abc"), std::string::npos) << sk.raw;

  // PATCH on metadata merges custom_metadata and leaves other settings.
  ASSERT_EQ(c().call("POST", base + "metadata/sub/k", demo_,
                     {{"max_versions", 4}, {"custom_metadata", {{"a", "1"}, {"b", "2"}}}})
                .status,
            204U);
  ASSERT_EQ(c().call("PATCH", base + "metadata/sub/k", demo_,
                     {{"custom_metadata", {{"a", nullptr}, {"c", "3"}}}})
                .status,
            204U);
  Response pm = c().call("GET", base + "metadata/sub/k", demo_);
  EXPECT_EQ(pm.body["data"]["custom_metadata"], json({{"b", "2"}, {"c", "3"}})) << pm.raw;
  EXPECT_EQ(pm.body["data"]["max_versions"], 4) << pm.raw;
  EXPECT_EQ(c().call("PATCH", base + "metadata/sub/none", demo_, {{"max_versions", 1}}).status,
            404U);

  // exclude_deleted on LIST (Vault 1.21).
  for (const char* k : {"ex/live", "ex/gone"}) {
    ASSERT_EQ(c().call("PUT", base + "data/" + k, demo_, {{"data", {{"x", 1}}}}).status, 200U);
  }
  ASSERT_EQ(c().call("DELETE", base + "data/ex/gone", demo_).status, 204U);
  Response all = c().call("LIST", base + "metadata/ex/", demo_);
  EXPECT_EQ(all.body["data"]["keys"], json({"gone", "live"})) << all.raw;
  Response live = c().call("LIST", base + "metadata/ex/?exclude_deleted=true", demo_);
  EXPECT_EQ(live.body["data"]["keys"], json({"live"})) << live.raw;
  EXPECT_EQ(c().call("LIST", base + "metadata/ex/?exclude_deleted=maybe", demo_).status, 400U);

  // created_by: who wrote each version (its token's accessor and name, never its secret).
  writePolicyFile("writer", "path \"secrets/kv/data/who/*\" { policy = \"write\" }", demo_);
  Response made =
      c().call("POST", "/v1/auth/token/create", root_,
               {{"tenant", "demo"}, {"policies", {"writer"}}, {"display_name", "ci-bot"}});
  ASSERT_EQ(made.status, 200U) << made.raw;
  const std::string writer = made.body["auth"]["client_token"];
  const std::string accessor = made.body["auth"]["accessor"];
  Response ww = c().call("PUT", base + "data/who/k", writer, {{"data", {{"x", 1}}}});
  ASSERT_EQ(ww.status, 200U) << ww.raw;
  EXPECT_EQ(ww.body["data"]["created_by"]["accessor"], accessor) << ww.raw;
  Response wm = c().call("GET", base + "metadata/who/k", demo_);
  EXPECT_EQ(wm.body["data"]["versions"]["1"]["created_by"]["accessor"], accessor) << wm.raw;
  EXPECT_NE(wm.body["data"]["versions"]["1"]["created_by"]["display_name"].get<std::string>().find(
                "ci-bot"),
            std::string::npos)
      << wm.raw;
  EXPECT_EQ(wm.raw.find(writer), std::string::npos);
}

// Must show 3: `tessera secrets kv get -format=json` prints `vault kv get -format=json`'s shape.
// A Vault client sends its token in X-Vault-Token; the server takes it as its own header.
TEST_F(VaultCompatTest, TheVaultTokenHeaderIsAccepted) {
  tessera::integration::Client vault((*info_)["address"],
                                     slurp((*info_)["ca_cert"].get<std::string>()));
  vault.setTokenHeader("X-Vault-Token");
  Response w =
      vault.call("POST", std::string(kKv) + "data/vault-header", demo_, {{"data", {{"v", "1"}}}});
  EXPECT_EQ(w.status, 200U) << w.raw;
  Response r = vault.call("GET", std::string(kKv) + "data/vault-header", demo_);
  EXPECT_EQ(r.status, 200U) << r.raw;
  EXPECT_EQ(r.body["data"]["data"]["v"], "1") << r.raw;
  // And a wrong token in it is refused like any other.
  EXPECT_EQ(vault.call("GET", std::string(kKv) + "data/vault-header", "not-a-token").status, 403U);
}

TEST_F(VaultCompatTest, KvGetFormatJsonHasVaultsShape) {
  ASSERT_EQ(c().call("PUT", std::string(kKv) + "data/cli/db", demo_,
                     {{"data", {{"password", "hunter2"}}}})
                .status,
            200U);
  for (const std::vector<std::string>& flag :
       std::vector<std::vector<std::string>>{{"-format=json"}, {"--format", "json"}}) {
    std::vector<std::string> args = {"secrets", "kv", "get"};
    args.insert(args.end(), flag.begin(), flag.end());
    args.push_back("cli/db");
    const Outcome o = cli(args, demo_);
    ASSERT_EQ(o.rc, 0) << o;
    const json j = json::parse(o.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << o;
    for (const char* field :
         {"request_id", "lease_id", "lease_duration", "renewable", "data", "warnings"}) {
      EXPECT_TRUE(j.contains(field)) << field << ": " << o.out;
    }
    EXPECT_EQ(j["lease_id"], "");
    EXPECT_EQ(j["lease_duration"], 0);
    EXPECT_EQ(j["renewable"], false);
    EXPECT_EQ(j["data"]["data"]["password"], "hunter2") << o.out;
    EXPECT_EQ(j["data"]["metadata"]["version"], 1) << o.out;
    EXPECT_EQ(j["data"]["metadata"]["destroyed"], false) << o.out;
  }
  // `kv put -format=json` answers as `vault kv put -format=json`: the version metadata in data.
  const Outcome put = cli({"secrets", "kv", "put", "-format=json", "cli/db", "password=x"}, demo_);
  ASSERT_EQ(put.rc, 0) << put;
  const json pj = json::parse(put.out, nullptr, false);
  EXPECT_EQ(pj["data"]["version"], 2) << put.out;
  EXPECT_TRUE(pj["data"].contains("created_time")) << put.out;
}

// A fake AWS STS on loopback (plain http): answers every POST with `answer` (HTTP `status`) and
// keeps each request's form, decoded.
class FakeSts {
 public:
  FakeSts() : acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeSts() {
    stop_ = true;
    boost::system::error_code ec;
    boost::asio::ip::tcp::socket s(io_);
    s.connect({boost::asio::ip::make_address("127.0.0.1"), port()}, ec);  // Wakes accept().
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  void answer(unsigned status, std::string body) {
    std::lock_guard<std::mutex> l(mu_);
    status_ = status;
    body_ = std::move(body);
  }
  std::vector<std::map<std::string, std::string>> requests() const {
    std::lock_guard<std::mutex> l(mu_);
    return requests_;
  }

 private:
  static std::string urlDecode(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size()) {
        out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += s[i] == '+' ? ' ' : s[i];
      }
    }
    return out;
  }
  void serve() {
    namespace http = boost::beast::http;
    while (!stop_) {
      boost::system::error_code ec;
      boost::asio::ip::tcp::socket sock(io_);
      acceptor_.accept(sock, ec);
      if (ec || stop_) {
        continue;
      }
      boost::beast::flat_buffer buf;
      http::request<http::string_body> req;
      http::read(sock, buf, req, ec);
      if (ec) {
        continue;
      }
      std::map<std::string, std::string> form;
      std::stringstream in(req.body());
      for (std::string pair; std::getline(in, pair, '&');) {
        const size_t eq = pair.find('=');
        form[urlDecode(pair.substr(0, eq))] =
            eq == std::string::npos ? "" : urlDecode(pair.substr(eq + 1));
      }
      form[":method"] = std::string(req.method_string());
      form[":content-type"] = std::string(req[http::field::content_type]);
      http::response<http::string_body> resp;
      {
        std::lock_guard<std::mutex> l(mu_);
        requests_.push_back(std::move(form));
        resp.result(status_);
        resp.body() = body_;
      }
      resp.version(11);
      resp.set(http::field::content_type, "text/xml");
      resp.prepare_payload();
      http::write(sock, resp, ec);
      sock.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    }
  }

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  unsigned status_ = 200;
  std::string body_;
  std::vector<std::map<std::string, std::string>> requests_;
};

std::string stsAnswer(const std::string& key_id, const std::string& secret,
                      const std::string& session) {
  return "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
         "<AssumeRoleWithWebIdentityResult><Credentials><SessionToken>" +
         session + "</SessionToken><SecretAccessKey>" + secret +
         "</SecretAccessKey><Expiration>2030-01-01T00:00:00Z</Expiration><AccessKeyId>" + key_id +
         "</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
         "</AssumeRoleWithWebIdentityResponse>";
}

// A JWT's claims (its middle part, base64url), unverified.
json jwtClaims(const std::string& jwt) {
  const size_t a = jwt.find('.');
  const size_t b = jwt.find('.', a + 1);
  if (a == std::string::npos || b == std::string::npos) {
    return nullptr;
  }
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char ch : jwt.substr(a + 1, b - a - 1)) {
    const size_t v = kAlphabet.find(ch);
    if (v == std::string::npos) {
      return nullptr;
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return json::parse(out, nullptr, false);
}

// The AWS engine calls STS itself (AssumeRoleWithWebIdentity with a JWT the server signs), so a
// session never outlives the grant it was asked through; a fake STS on loopback stands in.
TEST_F(VaultCompatTest, AwsStsSessionsAreClampedToTheGrantsWindow) {
  FakeSts sts;
  sts.answer(200, stsAnswer("ASIAFAKEKEYID0000001", "fake/secret+KEY-kept-out-of-audit",
                            "FAKE-SESSION-token-kept-out-of-audit"));
  const std::string aws = "/v1/tenants/demo/secrets/aws/";
  // Plain http only to loopback; the role's ttl within STS's bounds.
  Response bad = c().call("POST", aws + "config", demo_, {{"sts_endpoint", "http://10.0.0.1:80"}});
  EXPECT_EQ(bad.status, 400U) << bad.raw;
  EXPECT_NE(bad.raw.find("only to a loopback address"), std::string::npos) << bad.raw;
  EXPECT_EQ(c().call("GET", aws + "creds/s3", demo_).status, 404U);  // No role yet.
  ASSERT_EQ(c().call("POST", aws + "config", demo_,
                     {{"sts_endpoint", "http://127.0.0.1:" + std::to_string(sts.port())},
                      {"region", "eu-west-1"}})
                .status,
            204U);
  EXPECT_EQ(c().call("POST", aws + "roles/s3", demo_,
                     {{"role_arn", "arn:aws:iam::123456789012:role/s3"}, {"ttl", "5m"}})
                .status,
            400U);
  const std::string arn = "arn:aws:iam::123456789012:role/team-s3";
  ASSERT_EQ(c().call("POST", aws + "roles/s3", demo_, {{"role_arn", arn}, {"ttl", "30m"}}).status,
            204U);
  ASSERT_EQ(c().call("POST", aws + "roles/short", demo_, {{"role_arn", arn}}).status, 204U);
  Response role = c().call("GET", aws + "roles/short", demo_);
  ASSERT_EQ(role.status, 200U) << role.raw;
  EXPECT_EQ(role.body["data"]["ttl"], 3600);  // The default.

  // In the tenant: the role's ttl, the JWT names the tenant for STS.
  Response r = c().call("GET", aws + "creds/s3", demo_);
  ASSERT_EQ(r.status, 200U) << r.raw;
  EXPECT_EQ(r.body["data"]["access_key"], "ASIAFAKEKEYID0000001");
  EXPECT_EQ(r.body["data"]["secret_key"], "fake/secret+KEY-kept-out-of-audit");
  EXPECT_EQ(r.body["data"]["session_token"], "FAKE-SESSION-token-kept-out-of-audit");
  EXPECT_EQ(r.body["renewable"], false);
  EXPECT_EQ(r.body["revocable"], false);
  EXPECT_EQ(r.body["lease_duration"], 1800);
  ASSERT_EQ(sts.requests().size(), 1U);
  auto q = sts.requests().back();
  EXPECT_EQ(q[":method"], "POST");
  EXPECT_EQ(q[":content-type"].rfind("application/x-www-form-urlencoded", 0), 0U);
  EXPECT_EQ(q["Action"], "AssumeRoleWithWebIdentity");
  EXPECT_EQ(q["Version"], "2011-06-15");
  EXPECT_EQ(q["RoleArn"], arn);
  EXPECT_EQ(q["DurationSeconds"], "1800");
  EXPECT_EQ(q["RoleSessionName"], "tessera.demo");
  const json claims = jwtClaims(q["WebIdentityToken"]);
  ASSERT_TRUE(claims.is_object()) << q["WebIdentityToken"];
  EXPECT_EQ(claims["aud"], "sts.amazonaws.com");
  EXPECT_EQ(claims["sub"], "tenant:demo:workload:secrets.aws.s3:task:0");

  // A token with less left than the role's ttl: the session ends with the token; under 15
  // minutes left: refused, never lengthened.
  Response t20 = c().call("POST", "/v1/auth/token/create", root_,
                          {{"tenant", "demo"}, {"policies", {"tenant-admin"}}, {"ttl", "1000s"}});
  ASSERT_EQ(t20.status, 200U) << t20.raw;
  r = c().call("POST", aws + "creds/s3", t20.body["auth"]["client_token"]);
  ASSERT_EQ(r.status, 200U) << r.raw;
  const int token_clamped = std::stoi(sts.requests().back()["DurationSeconds"]);
  EXPECT_LE(token_clamped, 1000);
  EXPECT_GE(token_clamped, 990);
  Response t10 = c().call("POST", "/v1/auth/token/create", root_,
                          {{"tenant", "demo"}, {"policies", {"tenant-admin"}}, {"ttl", "600s"}});
  ASSERT_EQ(t10.status, 200U) << t10.raw;
  r = c().call("GET", aws + "creds/s3", t10.body["auth"]["client_token"]);
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("15-minute minimum"), std::string::npos) << r.raw;
  EXPECT_EQ(sts.requests().size(), 2U);

  // Another tenant: the role does not exist for it, and STS is not called.
  ASSERT_EQ(c().call("POST", "/v1/tenants/aws-peer", root_, json::object()).status, 204U);
  Response pt = c().call("POST", "/v1/auth/token/create", root_,
                         {{"tenant", "aws-peer"}, {"policies", {"tenant-admin"}}});
  ASSERT_EQ(pt.status, 200U) << pt.raw;
  const std::string peer = pt.body["auth"]["client_token"];
  EXPECT_EQ(c().call("GET", aws + "creds/s3", peer).status, 404U);
  EXPECT_EQ(c().call("POST", aws + "config", peer, {{"sts_endpoint", "http://127.0.0.1:1"}}).status,
            404U);
  EXPECT_EQ(sts.requests().size(), 2U);

  // Through a grant of 1000 s: the session is cut to what is left of the grant.
  Response g = c().call(
      "POST", "/v1/tenants/demo/grants", demo_,
      {{"to", "aws-peer"}, {"on", "secrets/aws/creds/s3"}, {"policy", "read"}, {"ttl", "1000s"}});
  ASSERT_LT(g.status, 300U) << g.raw;
  r = c().call("GET", aws + "creds/s3", peer);
  ASSERT_EQ(r.status, 200U) << r.raw;
  ASSERT_EQ(sts.requests().size(), 3U);
  q = sts.requests().back();
  EXPECT_LE(std::stoi(q["DurationSeconds"]), 1000);
  EXPECT_GE(std::stoi(q["DurationSeconds"]), 995);
  EXPECT_EQ(r.body["lease_duration"], std::stoi(q["DurationSeconds"]));
  EXPECT_EQ(q["RoleSessionName"], "tessera.aws-peer");
  EXPECT_EQ(jwtClaims(q["WebIdentityToken"])["sub"], "tenant:demo:workload:secrets.aws.s3:task:0");
  // The grant reaches that role's creds only: not its config, not another role.
  EXPECT_EQ(c().call("GET", aws + "config", peer).status, 404U);
  EXPECT_EQ(c().call("GET", aws + "creds/short", peer).status, 404U);
  EXPECT_EQ(c().call("POST", aws + "roles/s3", peer, {{"role_arn", arn}, {"ttl", "12h"}}).status,
            404U);

  // Not even a write grant lets another tenant point the engine elsewhere.
  g = c().call(
      "POST", "/v1/tenants/demo/grants", demo_,
      {{"to", "aws-peer"}, {"on", "secrets/aws/config"}, {"policy", "write"}, {"ttl", "1h"}});
  ASSERT_LT(g.status, 300U) << g.raw;
  EXPECT_EQ(c().call("GET", aws + "config", peer).status, 200U);
  r = c().call("POST", aws + "config", peer, {{"sts_endpoint", "http://127.0.0.1:1"}});
  EXPECT_EQ(r.status, 403U) << r.raw;
  EXPECT_NE(r.raw.find("cannot be changed through a grant"), std::string::npos) << r.raw;

  // A grant shorter than STS's 15-minute minimum: refused, STS not called.
  g = c().call(
      "POST", "/v1/tenants/demo/grants", demo_,
      {{"to", "aws-peer"}, {"on", "secrets/aws/creds/short"}, {"policy", "read"}, {"ttl", "600s"}});
  ASSERT_LT(g.status, 300U) << g.raw;
  r = c().call("GET", aws + "creds/short", peer);
  EXPECT_EQ(r.status, 400U) << r.raw;
  EXPECT_NE(r.raw.find("the grant's remaining window"), std::string::npos) << r.raw;
  EXPECT_NE(r.raw.find("15-minute minimum"), std::string::npos) << r.raw;
  EXPECT_EQ(sts.requests().size(), 3U);

  // STS refuses: a 502 that carries STS's reason.
  sts.answer(403,
             "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>Not "
             "authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>"
             "</ErrorResponse>");
  r = c().call("GET", aws + "creds/s3", demo_);
  EXPECT_EQ(r.status, 502U) << r.raw;
  EXPECT_NE(r.raw.find("AccessDenied: Not authorized to perform sts:AssumeRoleWithWebIdentity"),
            std::string::npos)
      << r.raw;
  EXPECT_NE(r.raw.find("127.0.0.1:" + std::to_string(sts.port())), std::string::npos) << r.raw;
  // Truncated answer: a clear 502 too.
  sts.answer(200, stsAnswer("A", "S", "T").substr(0, 150));
  r = c().call("GET", aws + "creds/s3", demo_);
  EXPECT_EQ(r.status, 502U) << r.raw;
  EXPECT_NE(r.raw.find("no <Credentials>"), std::string::npos) << r.raw;

  // The audit streams have the reads, with the secret key and session token HMAC'd.
  bool seen = false;
  for (int i = 0; i < 50 && !seen; ++i) {
    Response a = c().call("GET", "/v1/tenants/demo/audit?limit=1000", demo_);
    seen = a.raw.find("tenants/demo/secrets/aws/creds/s3") != std::string::npos;
    if (!seen) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_TRUE(seen);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string audit = slurp(*dir_ / "audit.log");
  EXPECT_NE(audit.find("tenants/demo/secrets/aws/creds/s3"), std::string::npos);
  bool hmacd = false;  // A 200 answer's record for the creds, its data HMAC'd.
  std::stringstream lines(audit);
  for (std::string line; std::getline(lines, line);) {
    hmacd = hmacd || (line.find("tenants/demo/secrets/aws/creds/s3") != std::string::npos &&
                      line.find("\"status\":200") != std::string::npos &&
                      line.find("\"data\":\"hmac-sha256:") != std::string::npos);
  }
  EXPECT_TRUE(hmacd);
  for (const fs::path& f : fs::recursive_directory_iterator(*dir_)) {
    if (!fs::is_regular_file(f)) {
      continue;
    }
    const std::string text = slurp(f);
    EXPECT_EQ(text.find("kept-out-of-audit"), std::string::npos) << f;
  }
}

}  // namespace
