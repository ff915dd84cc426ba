#include "server/console.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera::server {
namespace {

const model::GpuCatalogue& catalogue() {
  static const model::GpuCatalogue c = model::GpuCatalogue::builtin();
  return c;
}

std::optional<HttpResponse> get(const std::string& target, const std::string& method = "GET") {
  HttpRequest r;
  r.method = method;
  r.target = target;
  return consoleResponse(r, catalogue());
}

std::string header(const HttpResponse& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) {
      return v;
    }
  }
  return "";
}

TEST(ConsoleTest, RedirectsTheRootAndServesTheIndexWithAStrictPolicy) {
  for (const char* target : {"/", "/ui", "/?x=1"}) {
    auto r = get(target);
    ASSERT_TRUE(r) << target;
    EXPECT_EQ(r->status, 302U) << target;
    EXPECT_EQ(header(*r, "Location"), "/ui/") << target;
  }
  auto index = get("/ui/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200U);
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_NE(index->body.find("<div id=\"app\">"), std::string::npos);
  EXPECT_EQ(header(*index, "Content-Security-Policy"), kConsoleCsp);
  EXPECT_EQ(kConsoleCsp.find("unsafe"), std::string_view::npos);
  EXPECT_EQ(header(*index, "X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(header(*index, "Cache-Control"), "no-cache");
  // Revalidated: the same bytes answer 304 without a body.
  HttpRequest again;
  again.method = "GET";
  again.target = "/ui/";
  again.headers.emplace_back("if-none-match", header(*index, "ETag"));
  auto cached = consoleResponse(again, catalogue());
  ASSERT_TRUE(cached);
  EXPECT_EQ(cached->status, 304U);
  EXPECT_TRUE(cached->body.empty());
}

TEST(ConsoleTest, ServesEveryEmbeddedFileWithItsTypeAndHashedBundlesForGood) {
  int bundles = 0;
  for (const EmbeddedFile& f : embeddedConsoleFiles()) {
    auto r = get("/ui/" + std::string(f.name));
    ASSERT_TRUE(r) << f.name;
    EXPECT_EQ(r->status, 200U) << f.name;
    EXPECT_EQ(r->body, f.bytes) << f.name;
    if (f.name.ends_with(".js")) {
      ++bundles;
      EXPECT_EQ(r->content_type, "text/javascript; charset=utf-8");
      EXPECT_EQ(header(*r, "Cache-Control"), "public, max-age=31536000, immutable");
    }
    if (f.name.ends_with(".css")) {
      EXPECT_EQ(r->content_type, "text/css; charset=utf-8");
    }
  }
  EXPECT_EQ(bundles, 1);
}

TEST(ConsoleTest, UnknownFilesAreNotFoundAndNothingClimbsOut) {
  for (const char* target :
       {"/ui/nope.js", "/ui/..", "/ui/%2e%2e", "/ui/%2e%2e%2fdev.json", "/ui/index.html%00"}) {
    auto r = get(target);
    ASSERT_TRUE(r) << target;
    EXPECT_EQ(r->status, 404U) << target;
    EXPECT_EQ(header(*r, "Cache-Control"), "no-store") << target;
  }
  // Deeper paths are not the console's: the API's pipeline answers them (404 there too).
  EXPECT_FALSE(get("/ui/../v1/sys/health"));
  EXPECT_FALSE(get("/ui/a/b"));
  EXPECT_FALSE(get("/v1/sys/health"));
  EXPECT_FALSE(get("/.well-known/jwks.json"));
}

TEST(ConsoleTest, OnlyGetAndHead) {
  auto post = get("/ui/", "POST");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405U);
  EXPECT_EQ(header(*post, "Allow"), "GET, HEAD");
  auto head = get("/ui/", "HEAD");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200U);
}

TEST(ConsoleTest, GpuModelsGiveEachMigProfileItsSlices) {
  auto r = get("/ui/gpu-models.json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200U);
  const auto j = nlohmann::json::parse(r->body);
  const auto& h100 = j["models"]["H100-80GB"]["mig_profiles"];
  EXPECT_EQ(h100["1g.10gb"]["memory_slices"], 1);
  EXPECT_EQ(h100["3g.40gb"]["memory_slices"], 4);
  EXPECT_EQ(h100["3g.40gb"]["compute_slices"], 3);
  EXPECT_EQ(h100["7g.80gb"]["memory_slices"], 8);
  EXPECT_EQ(j["models"]["A100-40GB"]["mig_profiles"]["1g.10gb"]["memory_slices"], 2);
  EXPECT_TRUE(j["models"]["T4"]["mig_profiles"].empty());
}

}  // namespace
}  // namespace tessera::server
