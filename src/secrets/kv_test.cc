#include "secrets/kv.h"

#include <gtest/gtest.h>

#include "secrets/test_util.h"

namespace tessera::secrets {
namespace {

using nlohmann::json;
using testing::filesContaining;
using testing::openStore;
using testing::TempDir;
using testing::ThreadSafeFakeClock;

// One step of a KV v2 scenario on one key, and what it must give.
struct Step {
  enum Op { kPut, kGet, kDelete, kUndelete, kDestroy, kMeta } op;
  int64_t arg = 0;                // kPut: cas (-1: none); kGet: version (0: current).
  std::vector<int64_t> versions;  // kDelete, kUndelete, kDestroy; kMeta: {max_versions}.
  core::StatusCode want = core::StatusCode::kOk;
  int64_t want_version = 0;  // kPut: the new version; kGet: the value read ("v<N>").
};

struct Case {
  const char* name;
  KvConfig config;
  std::vector<Step> steps;
  int64_t want_oldest = -1;  // Checked at the end unless -1.
};

using S = Step;
using C = core::StatusCode;

const std::vector<Case>& cases() {
  static const std::vector<Case> table = {
      {"versions count up",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, -1, {}, C::kOk, 2},
        {S::kGet, 0, {}, C::kOk, 2},
        {S::kGet, 1, {}, C::kOk, 1},
        {S::kGet, 3, {}, C::kNotFound}}},
      {"cas 0 writes only a new key",
       {},
       {{S::kPut, 0, {}, C::kOk, 1}, {S::kPut, 0, {}, C::kInvalidArgument}}},
      {"cas must equal the current version",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, 1, {}, C::kOk, 2},
        {S::kPut, 1, {}, C::kInvalidArgument},
        {S::kPut, 3, {}, C::kInvalidArgument},
        {S::kPut, 2, {}, C::kOk, 3}}},
      {"cas required by the tenant",
       {0, true},
       {{S::kPut, -1, {}, C::kInvalidArgument}, {S::kPut, 0, {}, C::kOk, 1}}},
      {"cas required by the key",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kMeta, 0, {-2}},
        {S::kPut, -1, {}, C::kInvalidArgument},
        {S::kPut, 1, {}, C::kOk, 2}}},
      {"max_versions drops the oldest",
       {3, false},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, -1, {}, C::kOk, 2},
        {S::kPut, -1, {}, C::kOk, 3},
        {S::kPut, -1, {}, C::kOk, 4},
        {S::kPut, -1, {}, C::kOk, 5},
        {S::kGet, 1, {}, C::kNotFound},
        {S::kGet, 2, {}, C::kNotFound},
        {S::kGet, 3, {}, C::kOk, 3}},
       3},
      {"the key's smaller max_versions wins",
       {5, false},
       {{S::kMeta, 0, {2}},
        {S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, -1, {}, C::kOk, 2},
        {S::kPut, -1, {}, C::kOk, 3},
        {S::kGet, 1, {}, C::kNotFound}},
       2},
      {"default keeps 10",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, -1, {}, C::kOk, 2},
        {S::kPut, -1, {}, C::kOk, 3},
        {S::kPut, -1, {}, C::kOk, 4},
        {S::kPut, -1, {}, C::kOk, 5},
        {S::kPut, -1, {}, C::kOk, 6},
        {S::kPut, -1, {}, C::kOk, 7},
        {S::kPut, -1, {}, C::kOk, 8},
        {S::kPut, -1, {}, C::kOk, 9},
        {S::kPut, -1, {}, C::kOk, 10},
        {S::kPut, -1, {}, C::kOk, 11},
        {S::kGet, 1, {}, C::kNotFound},
        {S::kGet, 2, {}, C::kOk, 2}},
       2},
      {"soft delete hides, undelete restores",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, -1, {}, C::kOk, 2},
        {S::kDelete, 0, {}},
        {S::kGet, 0, {}, C::kNotFound},
        {S::kGet, 1, {}, C::kOk, 1},
        {S::kUndelete, 0, {2}},
        {S::kGet, 0, {}, C::kOk, 2}}},
      {"delete chosen versions; unknown ones ignored",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, -1, {}, C::kOk, 2},
        {S::kDelete, 0, {1, 7}},
        {S::kGet, 1, {}, C::kNotFound},
        {S::kGet, 2, {}, C::kOk, 2}}},
      {"a deleted current version still counts for cas",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kDelete, 0, {}},
        {S::kPut, 0, {}, C::kInvalidArgument},
        {S::kPut, 1, {}, C::kOk, 2}}},
      {"destroy is for good",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kPut, -1, {}, C::kOk, 2},
        {S::kDestroy, 0, {1}},
        {S::kGet, 1, {}, C::kNotFound},
        {S::kUndelete, 0, {1}},
        {S::kGet, 1, {}, C::kNotFound},
        {S::kGet, 2, {}, C::kOk, 2}}},
      {"destroying a deleted version",
       {},
       {{S::kPut, -1, {}, C::kOk, 1},
        {S::kDelete, 0, {}},
        {S::kDestroy, 0, {1}},
        {S::kUndelete, 0, {1}},
        {S::kGet, 1, {}, C::kNotFound}}},
  };
  return table;
}

TEST(KvRulesTest, Table) {
  const core::WallTime now{std::chrono::seconds(1'800'000'000)};
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    KvEntry e;
    for (size_t i = 0; i < c.steps.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      const Step& s = c.steps[i];
      switch (s.op) {
        case S::kPut: {
          const int64_t next = e.current + 1;
          auto v = kvPut(e, json{{"v", next}},
                         s.arg < 0 ? std::nullopt : std::optional<int64_t>(s.arg), c.config, now);
          EXPECT_EQ(v.status().code(), s.want) << v.status().toString();
          if (v.isOk()) {
            EXPECT_EQ(*v, s.want_version);
          }
          break;
        }
        case S::kGet: {
          auto v = kvGet(e, s.arg);
          EXPECT_EQ(v.status().code(), s.want) << v.status().toString();
          if (v.isOk()) {
            EXPECT_EQ((*v)->data, (json{{"v", s.want_version}}));
          }
          break;
        }
        case S::kDelete:
          kvDelete(e, s.versions, now);
          break;
        case S::kUndelete:
          kvUndelete(e, s.versions);
          break;
        case S::kDestroy:
          kvDestroy(e, s.versions);
          break;
        case S::kMeta: {
          const json body = s.versions[0] == -2 ? json{{"cas_required", true}}
                                                : json{{"max_versions", s.versions[0]}};
          EXPECT_TRUE(kvSetMetadata(e, body, now).isOk());
          break;
        }
      }
    }
    if (c.want_oldest >= 0) {
      EXPECT_EQ(e.oldest, c.want_oldest);
    }
  }
}

TEST(KvRulesTest, MetadataAndDataAreChecked) {
  KvEntry e;
  const core::WallTime now{};
  EXPECT_FALSE(kvPut(e, json::array(), std::nullopt, {}, now).isOk());
  EXPECT_FALSE(kvSetMetadata(e, {{"max_versions", -1}}, now).isOk());
  EXPECT_FALSE(kvSetMetadata(e, {{"cas_required", "yes"}}, now).isOk());
  EXPECT_FALSE(kvSetMetadata(e, {{"custom_metadata", {{"k", 1}}}}, now).isOk());
  EXPECT_FALSE(kvSetMetadata(e, {{"delete_version_after", "-1h"}}, now).isOk());
  EXPECT_FALSE(kvSetMetadata(e, {{"delete_version_after", "soon"}}, now).isOk());
  EXPECT_FALSE(kvSetMetadata(e, {{"custom_metadata", {{"k", nullptr}}}}, now).isOk());
  EXPECT_TRUE(kvSetMetadata(e, {{"custom_metadata", {{"owner", "ml"}}}}, now).isOk());
  EXPECT_EQ(e.custom_metadata["owner"], "ml");
  for (const char* bad : {"", "/a", "a/", "a//b", "a/../b", ".", "a\nb"}) {
    EXPECT_FALSE(KvEngine::checkPath(bad).isOk()) << bad;
  }
  EXPECT_TRUE(KvEngine::checkPath("app/db/password").isOk());
}

TEST(KvRulesTest, PatchMergesIntoTheCurrentVersion) {
  KvEntry e;
  const core::WallTime now{};
  using core::StatusCode;
  EXPECT_EQ(kvPatch(e, {{"a", 1}}, std::nullopt, {}, now).status().code(),
            StatusCode::kNotFound);  // Nothing to patch.
  ASSERT_EQ(*kvPut(e, {{"a", 1}, {"b", 2}, {"o", {{"x", 1}, {"y", 2}}}}, std::nullopt, {}, now), 1);
  // RFC 7386: fields merge, objects merge recursively, null removes.
  auto v = kvPatch(e, {{"b", nullptr}, {"c", 3}, {"o", {{"y", nullptr}, {"z", 3}}}}, std::nullopt,
                   {}, now);
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, 2);
  EXPECT_EQ((*kvGet(e, 2))->data, json({{"a", 1}, {"c", 3}, {"o", {{"x", 1}, {"z", 3}}}}));
  EXPECT_EQ((*kvGet(e, 1))->data, json({{"a", 1}, {"b", 2}, {"o", {{"x", 1}, {"y", 2}}}}));
  // Check-and-set, and the tenant's cas_required, as for a put.
  EXPECT_EQ(kvPatch(e, {{"a", 2}}, 1, {}, now).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kvPatch(e, {{"a", 2}}, std::nullopt, {0, true}, now).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(*kvPatch(e, {{"a", 2}}, 2, {0, true}, now), 3);
  EXPECT_EQ(kvPatch(e, json::array(), std::nullopt, {}, now).status().code(),
            StatusCode::kInvalidArgument);
  // A deleted or destroyed current version cannot be patched.
  kvDelete(e, {}, now);
  EXPECT_EQ(kvPatch(e, {{"a", 3}}, std::nullopt, {}, now).status().code(), StatusCode::kNotFound);
  kvUndelete(e, {3});
  kvDestroy(e, {3});
  EXPECT_EQ(kvPatch(e, {{"a", 3}}, std::nullopt, {}, now).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(e.current, 3);
}

TEST(KvRulesTest, DurationsInVaultsFormat) {
  struct Case {
    json in;
    int64_t seconds;  // -1: an error.
    const char* formatted;
  };
  const Case cases[] = {
      {0, 0, "0s"},
      {"0s", 0, "0s"},
      {90, 90, "1m30s"},
      {"90", 90, "1m30s"},
      {"1h", 3600, "1h0m0s"},
      {"3h25m19s", 12319, "3h25m19s"},
      {"2d", 172800, "48h0m0s"},
      {"-1s", -1, ""},
      {-5, -1, ""},
      {"1h30", -1, ""},
      {"soon", -1, ""},
      {"", -1, ""},
      {json::array(), -1, ""},
  };
  for (const Case& c : cases) {
    auto got = parseKvDuration(c.in, "delete_version_after");
    if (c.seconds < 0) {
      EXPECT_FALSE(got.isOk()) << c.in.dump();
      continue;
    }
    ASSERT_TRUE(got.isOk()) << c.in.dump() << ": " << got.status().message();
    EXPECT_EQ(*got, c.seconds) << c.in.dump();
    EXPECT_EQ(formatGoDuration(*got), c.formatted) << c.in.dump();
  }
}

// Vault: each new version gets a deletion time delete_version_after ahead; past it, the version
// reads as deleted; the key's setting, capped by the tenant's.
TEST(KvRulesTest, DeleteVersionAfter) {
  struct Case {
    const char* name;
    int64_t tenant;  // The tenant's delete_version_after, seconds.
    int64_t key;     // The key's.
    int64_t read_after;
    bool readable;
  };
  const Case cases[] = {
      {"none: forever", 0, 0, 1000000, true},
      {"tenant's, before it passes", 60, 0, 59, true},
      {"tenant's, once it passes", 60, 0, 60, false},
      {"key's alone", 0, 30, 31, false},
      {"key's, capped by the tenant's", 60, 600, 61, false},
      {"the smaller of both", 600, 60, 61, false},
      {"the smaller of both, before", 600, 60, 59, true},
  };
  for (const Case& c : cases) {
    KvEntry e;
    const core::WallTime t0 = core::fromUnixMillis(1'700'000'000'000);
    if (c.key > 0) {
      ASSERT_TRUE(
          kvSetMetadata(e, {{"delete_version_after", std::to_string(c.key) + "s"}}, t0).isOk());
    }
    const KvConfig cfg{0, false, c.tenant};
    ASSERT_TRUE(kvPut(e, {{"x", 1}}, std::nullopt, cfg, t0).isOk());
    const core::WallTime at = t0 + std::chrono::seconds(c.read_after);
    EXPECT_EQ(kvGet(e, 0, at).isOk(), c.readable) << c.name;
    EXPECT_EQ(e.versions.at(1).deleted.has_value(), c.tenant > 0 || c.key > 0) << c.name;
  }
  // Undelete clears the scheduled time, as in Vault; a delete before it sets it to now.
  KvEntry e;
  const core::WallTime t0 = core::fromUnixMillis(1'700'000'000'000);
  ASSERT_TRUE(kvPut(e, {{"x", 1}}, std::nullopt, {0, false, 60}, t0).isOk());
  kvDelete(e, {}, t0 + std::chrono::seconds(10));
  EXPECT_EQ(*e.versions.at(1).deleted, t0 + std::chrono::seconds(10));
  kvUndelete(e, {1});
  EXPECT_TRUE(kvGet(e, 0, t0 + std::chrono::hours(24)).isOk());
  // The metadata shows it in Go's format.
  ASSERT_TRUE(kvSetMetadata(e, {{"delete_version_after", "3h25m19s"}}, t0).isOk());
  EXPECT_EQ(e.metadataJson()["delete_version_after"], "3h25m19s");
}

TEST(KvRulesTest, MetadataPatchMergesCustomMetadata) {
  KvEntry e;
  const core::WallTime now{};
  ASSERT_TRUE(
      kvSetMetadata(e, {{"max_versions", 5}, {"custom_metadata", {{"a", "1"}, {"b", "2"}}}}, now)
          .isOk());
  ASSERT_TRUE(
      kvSetMetadata(e, {{"custom_metadata", {{"a", nullptr}, {"c", "3"}}}}, now, /*merge=*/true)
          .isOk());
  EXPECT_EQ(e.custom_metadata, json({{"b", "2"}, {"c", "3"}}));
  EXPECT_EQ(e.max_versions, 5);  // Untouched by a patch that does not name it.
  // A put replaces it whole.
  ASSERT_TRUE(kvSetMetadata(e, {{"custom_metadata", {{"d", "4"}}}}, now).isOk());
  EXPECT_EQ(e.custom_metadata, json({{"d", "4"}}));
  // A patch still keeps to 64 keys.
  json many = json::object();
  for (int i = 0; i < 64; ++i) {
    many["k" + std::to_string(i)] = "v";
  }
  EXPECT_FALSE(kvSetMetadata(e, {{"custom_metadata", many}}, now, true).isOk());
}

TEST(KvRulesTest, SubkeysAsVault) {
  const json data = json::parse(R"({"foo": "abc", "bar": {"baz": {"q": 1}, "n": 2}, "l": [1]})");
  struct Case {
    int64_t depth;
    const char* want;
  };
  const Case cases[] = {
      {0, R"({"foo": null, "bar": {"baz": {"q": null}, "n": null}, "l": null})"},
      {1, R"({"foo": null, "bar": null, "l": null})"},
      {2, R"({"foo": null, "bar": {"baz": null, "n": null}, "l": null})"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(kvSubkeys(data, c.depth), json::parse(c.want)) << c.depth;
  }
}

class KvEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = openStore(dir_.path(), clock_);
    auto k = KeyManager::open(*store_, {SealOptions::Mode::kKeyFile, keys_dir_.file("key")});
    ASSERT_TRUE(k.isOk()) << k.status().toString();
    keys_ = std::move(k).value();
    ASSERT_TRUE(keys_->addTenant("team-1").isOk());
    ASSERT_TRUE(keys_->addTenant("team-2").isOk());
    kv_ = std::make_unique<KvEngine>(*store_, *keys_, clock_);
  }
  TempDir dir_;
  TempDir keys_dir_;
  ThreadSafeFakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<KeyManager> keys_;
  std::unique_ptr<KvEngine> kv_;
};

TEST_F(KvEngineTest, WritesReadsAndNeverStoresPlaintext) {
  auto v = kv_->write("team-1", "app/db", {{"password", "zebra-unicorn-42"}}, std::nullopt);
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, 1);
  ASSERT_TRUE(kv_->write("team-1", "app/db", {{"password", "zebra-unicorn-43"}}, 1).isOk());
  auto r = kv_->read("team-1", "app/db", 0);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->version, 2);
  EXPECT_EQ(r->data["password"], "zebra-unicorn-43");
  EXPECT_EQ(kv_->read("team-1", "app/db", 1)->data["password"], "zebra-unicorn-42");
  // A read parses only the version it returns; each version is still there to be read.
  ASSERT_TRUE(kv_->write("team-1", "app/db", {{"password", "zebra-unicorn-44"}}, 2).isOk());
  for (int64_t n : {1, 2, 3}) {
    auto rn = kv_->read("team-1", "app/db", n);
    ASSERT_TRUE(rn.isOk()) << n;
    EXPECT_EQ(rn->version, n);
    EXPECT_EQ(rn->data["password"], "zebra-unicorn-4" + std::to_string(n + 1));
  }
  EXPECT_EQ(kv_->read("team-1", "app/db", 0)->version, 3);
  EXPECT_EQ(kv_->read("team-1", "app/db", 4).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(kv_->metadata("team-1", "app/db")->versions.size(), 3U);
  // Another tenant's path of the same name is another secret.
  EXPECT_EQ(kv_->read("team-2", "app/db", 0).status().code(), core::StatusCode::kNotFound);
  // A sealed record copied into another tenant's place does not open there.
  auto raw = store_->range("/secrets/team-1/kv/app/db");
  ASSERT_TRUE(raw.isOk());
  ASSERT_TRUE(store_->put("/secrets/team-2/kv/app/db", raw->kvs[0].value).isOk());
  EXPECT_EQ(kv_->read("team-2", "app/db", 0).status().code(), core::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->put("/secrets/team-1/kv/app/other", raw->kvs[0].value).isOk());
  EXPECT_FALSE(kv_->read("team-1", "app/other", 0).isOk());
  EXPECT_EQ(filesContaining(dir_.path(), "zebra-unicorn"), std::vector<std::string>{});
}

TEST_F(KvEngineTest, PatchWritesANewVersionOnlyOfAnExistingKey) {
  EXPECT_EQ(kv_->patch("team-1", "app/db", {{"user", "x"}}, std::nullopt).status().code(),
            core::StatusCode::kNotFound);
  EXPECT_FALSE(*kv_->exists("team-1", "app/db"));
  ASSERT_TRUE(
      kv_->write("team-1", "app/db", {{"user", "app"}, {"password", "p1"}}, std::nullopt).isOk());
  EXPECT_TRUE(*kv_->exists("team-1", "app/db"));
  EXPECT_FALSE(*kv_->exists("team-2", "app/db"));
  auto v = kv_->patch("team-1", "app/db", {{"password", "p2"}}, std::nullopt);
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, 2);
  EXPECT_EQ(kv_->read("team-1", "app/db", 0)->data, json({{"user", "app"}, {"password", "p2"}}));
  EXPECT_EQ(kv_->patch("team-2", "app/db", {{"user", "x"}}, std::nullopt).status().code(),
            core::StatusCode::kNotFound);  // Another tenant's key of that name does not exist.
}

TEST_F(KvEngineTest, ConcurrentCasWritersNeverBothWin) {
  ASSERT_TRUE(kv_->write("team-1", "counter", {{"n", 0}}, std::nullopt).isOk());
  std::atomic<int> wins{0};
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      if (kv_->write("team-1", "counter", {{"n", i}}, 1).isOk()) {
        ++wins;
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(kv_->metadata("team-1", "counter")->current, 2);
}

TEST_F(KvEngineTest, ListMetadataAndDeleteKey) {
  for (const char* p : {"app/a", "app/b", "app/sub/c", "top"}) {
    ASSERT_TRUE(kv_->write("team-1", p, {{"x", 1}}, std::nullopt).isOk());
  }
  EXPECT_EQ(*kv_->list("team-1", ""), (std::vector<std::string>{"app/", "top"}));
  EXPECT_EQ(*kv_->list("team-1", "app/"), (std::vector<std::string>{"a", "b", "sub/"}));
  EXPECT_EQ(kv_->list("team-2", "").status().code(), core::StatusCode::kNotFound);
  ASSERT_TRUE(kv_->putMetadata("team-1", "app/a", {{"max_versions", 2}}).isOk());
  auto m = kv_->metadata("team-1", "app/a");
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m->metadataJson()["max_versions"], 2);
  EXPECT_EQ(m->metadataJson()["current_version"], 1);
  ASSERT_TRUE(kv_->remove("team-1", "app/a", {}).isOk());
  EXPECT_FALSE(kv_->read("team-1", "app/a", 0).isOk());
  ASSERT_TRUE(kv_->undelete("team-1", "app/a", {1}).isOk());
  EXPECT_TRUE(kv_->read("team-1", "app/a", 0).isOk());
  ASSERT_TRUE(kv_->destroy("team-1", "app/a", {1}).isOk());
  EXPECT_TRUE(kv_->metadata("team-1", "app/a")->versions.at(1).destroyed);
  ASSERT_TRUE(kv_->deleteKey("team-1", "app/a").isOk());
  EXPECT_EQ(kv_->metadata("team-1", "app/a").status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(kv_->deleteKey("team-1", "app/a").code(), core::StatusCode::kNotFound);
  // The tenant's config.
  ASSERT_TRUE(kv_->setConfig("team-1", {{"cas_required", true}}).isOk());
  EXPECT_EQ(kv_->write("team-1", "top", {{"x", 2}}, std::nullopt).status().code(),
            core::StatusCode::kInvalidArgument);
  EXPECT_TRUE(kv_->write("team-1", "top", {{"x", 2}}, 1).isOk());
  EXPECT_FALSE(kv_->setConfig("team-1", {{"bogus", 1}}).isOk());
}

TEST_F(KvEngineTest, LookupTellsDeletedFromDestroyedFromAbsentAndWritesRecordTheWriter) {
  const json who = {{"accessor", "acc-1"}, {"display_name", "ci"}};
  KvRead w;
  ASSERT_TRUE(kv_->putMetadata("team-1", "k", {{"custom_metadata", {{"owner", "ml"}}}}).isOk());
  ASSERT_TRUE(kv_->write("team-1", "k", {{"x", 1}}, std::nullopt, who, &w).isOk());
  EXPECT_EQ(w.version, 1);
  EXPECT_TRUE(w.data.is_null());
  // Answering the write with its metadata leaves the stored value whole.
  EXPECT_EQ(kv_->read("team-1", "k", 1)->data, json({{"x", 1}}));
  EXPECT_EQ(w.metadataJson()["custom_metadata"], json({{"owner", "ml"}}));
  EXPECT_EQ(w.metadataJson()["deletion_time"], "");
  EXPECT_EQ(w.metadataJson()["destroyed"], false);
  EXPECT_EQ(w.metadataJson()["created_by"], who);
  ASSERT_TRUE(kv_->patch("team-1", "k", {{"y", 2}}, std::nullopt, who, &w).isOk());
  EXPECT_EQ(w.version, 2);
  EXPECT_EQ(kv_->read("team-1", "k", 2)->data, json({{"x", 1}, {"y", 2}}));
  ASSERT_TRUE(kv_->write("team-1", "k", {{"x", 3}}, std::nullopt).isOk());
  ASSERT_TRUE(kv_->remove("team-1", "k", {1}).isOk());
  ASSERT_TRUE(kv_->destroy("team-1", "k", {2}).isOk());
  auto deleted = kv_->lookup("team-1", "k", 1);
  ASSERT_TRUE(deleted.isOk());
  EXPECT_TRUE(deleted->gone);
  EXPECT_TRUE(deleted->data.is_null());
  EXPECT_NE(deleted->metadataJson()["deletion_time"], "");
  EXPECT_EQ(deleted->metadataJson()["destroyed"], false);
  EXPECT_EQ(deleted->created_by, who);
  auto destroyed = kv_->lookup("team-1", "k", 2);
  ASSERT_TRUE(destroyed.isOk());
  EXPECT_TRUE(destroyed->gone);
  EXPECT_EQ(destroyed->metadataJson()["destroyed"], true);
  EXPECT_EQ(kv_->lookup("team-1", "k", 9).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(kv_->read("team-1", "k", 1).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(kv_->read("team-1", "k", 3)->data, json({{"x", 3}}));
  EXPECT_TRUE(kv_->read("team-1", "k", 3)->created_by.is_null());
  // The tenant's delete_version_after, decided at read time.
  ASSERT_TRUE(kv_->setConfig("team-1", {{"delete_version_after", "1m"}}).isOk());
  EXPECT_EQ(kv_->config("team-1")->delete_version_after, 60);
  ASSERT_TRUE(kv_->write("team-1", "k", {{"x", 4}}, std::nullopt).isOk());
  EXPECT_TRUE(kv_->read("team-1", "k", 0).isOk());
  clock_.advance(std::chrono::seconds(61));
  auto expired = kv_->lookup("team-1", "k", 0);
  ASSERT_TRUE(expired.isOk());
  EXPECT_TRUE(expired->gone);
  EXPECT_EQ(kv_->read("team-1", "k", 0).status().code(), core::StatusCode::kNotFound);
  // PATCH on metadata needs the key.
  EXPECT_EQ(kv_->putMetadata("team-1", "nope", {{"max_versions", 1}}, true).code(),
            core::StatusCode::kNotFound);
}

TEST_F(KvEngineTest, ListCanExcludeDeletedKeys) {
  for (const char* p : {"app/live", "app/gone", "old/gone", "top"}) {
    ASSERT_TRUE(kv_->write("team-1", p, {{"x", 1}}, std::nullopt).isOk());
  }
  ASSERT_TRUE(kv_->remove("team-1", "app/gone", {}).isOk());
  ASSERT_TRUE(kv_->destroy("team-1", "old/gone", {1}).isOk());
  EXPECT_EQ(*kv_->list("team-1", ""), (std::vector<std::string>{"app/", "old/", "top"}));
  EXPECT_EQ(*kv_->list("team-1", "", true), (std::vector<std::string>{"app/", "top"}));
  EXPECT_EQ(*kv_->list("team-1", "app/", true), (std::vector<std::string>{"live"}));
  EXPECT_EQ(kv_->list("team-1", "old/", true).status().code(), core::StatusCode::kNotFound);
}

TEST_F(KvEngineTest, SealedMeansUnavailable) {
  ASSERT_TRUE(kv_->write("team-1", "k", {{"x", 1}}, std::nullopt).isOk());
  keys_->seal();
  EXPECT_EQ(kv_->read("team-1", "k", 0).status().code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(kv_->write("team-1", "k", {{"x", 2}}, std::nullopt).status().code(),
            core::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::secrets
