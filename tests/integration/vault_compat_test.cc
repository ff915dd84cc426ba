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

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
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

}  // namespace
