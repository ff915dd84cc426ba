#include "server/acl.h"

#include <gtest/gtest.h>

namespace tessera::server {
namespace {

using nlohmann::json;

TEST(GlobMatchTest, Table) {
  struct Case {
    const char* pattern;
    const char* path;
    bool match;
  };
  const Case cases[] = {
      {"workloads/train", "workloads/train", true},
      {"workloads/train", "workloads/train2", false},
      {"workloads/train", "workloads", false},
      // Vault's example: a trailing * is a prefix glob across segments.
      {"secret/zip-*", "secret/zip-zap", true},
      {"secret/zip-*", "secret/zip-zap/zong", true},
      {"secret/zip-*", "secret/zip", false},
      {"workloads/*", "workloads/", true},
      {"workloads/*", "workloads", false},
      {"*", "anything/at/all", true},
      // + is exactly one non-empty segment.
      {"secret/+/teamb", "secret/foo/teamb", true},
      {"secret/+/teamb", "secret/foo/bar/teamb", false},
      {"secret/+/teamb", "secret//teamb", false},
      {"secret/+", "secret/a", true},
      {"secret/+", "secret/a/b", false},
      {"+/+/*", "a/b/c/d", true},
      {"+/+/*", "a/b", false},
      {"secret/+/*", "secret/a/", true},
      // + inside a segment is a literal.
      {"a+b/c", "a+b/c", true},
      {"a+b/c", "axb/c", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(globMatch(c.pattern, c.path), c.match) << c.pattern << " vs " << c.path;
  }
}

TEST(PrecedenceTest, VaultsFiveRules) {
  // 1. A later first wildcard wins.
  EXPECT_TRUE(morePrecise("secret/a/+", "secret/+/b"));
  // 2. Without a trailing * beats with one (same first wildcard position).
  EXPECT_TRUE(morePrecise("secret/+", "secret/*"));
  // 3. Fewer + segments.
  EXPECT_TRUE(morePrecise("a/+/c/d", "a/+/+/d"));
  // 4. Longer.
  EXPECT_TRUE(morePrecise("secret/abc*", "secret/ab*"));
  // 5. Lexicographically larger.
  EXPECT_TRUE(morePrecise("secret/b*", "secret/a*"));
  // An exact path beats every glob that matches it.
  EXPECT_TRUE(morePrecise("secret/foo", "secret/*"));
  EXPECT_FALSE(morePrecise("secret/*", "secret/foo"));
}

Policy policy(const std::string& name, const std::string& text) {
  auto p = Policy::fromJson(name, json::parse(text));
  EXPECT_TRUE(p.isOk()) << p.status().message();
  return std::move(p).value();
}

TEST(ResolveTest, MostSpecificPatternAloneApplies) {
  const Policy p = policy("p", R"({"path": {
      "workloads/*": {"capabilities": ["read", "list", "create"]},
      "workloads/prod-*": {"capabilities": ["read"]}}})");
  Capabilities c = resolve({&p}, "workloads/dev-1");
  EXPECT_TRUE(c.allows(Capability::kCreate));
  c = resolve({&p}, "workloads/prod-1");
  EXPECT_TRUE(c.allows(Capability::kRead));
  EXPECT_FALSE(c.allows(Capability::kCreate));  // Not merged with the broader pattern.
  EXPECT_FALSE(c.allows(Capability::kList));
}

TEST(ResolveTest, SamePatternInSeveralPoliciesIsTheUnion) {
  const Policy a = policy("a", R"({"path": {"workloads/*": {"capabilities": ["read"]}}})");
  const Policy b = policy("b", R"({"path": {"workloads/*": {"capabilities": ["create"]}}})");
  const Capabilities c = resolve({&a, &b}, "workloads/x");
  EXPECT_TRUE(c.allows(Capability::kRead));
  EXPECT_TRUE(c.allows(Capability::kCreate));
  EXPECT_FALSE(c.allows(Capability::kDelete));
}

TEST(ResolveTest, DenyWinsEvenOverSudo) {
  const Policy a =
      policy("a", R"({"path": {"workloads/*": {"capabilities": ["read", "sudo", "delete"]}}})");
  const Policy b = policy("b", R"({"path": {"workloads/*": {"capabilities": ["deny"]}}})");
  const Capabilities c = resolve({&a, &b}, "workloads/x");
  EXPECT_FALSE(c.allows(Capability::kRead));
  EXPECT_FALSE(c.allows(Capability::kSudo));
  EXPECT_EQ(c.names(), std::vector<std::string>{"deny"});
  // A deny on a less specific pattern does not reach a path a more specific one covers.
  const Policy d = policy("d", R"({"path": {"workloads/*": {"capabilities": ["deny"]},
                                            "workloads/ok": {"capabilities": ["read"]}}})");
  EXPECT_TRUE(resolve({&d}, "workloads/ok").allows(Capability::kRead));
}

TEST(ResolveTest, DenyByDefault) {
  const Policy p = policy("p", R"({"path": {"workloads/*": {"capabilities": ["read"]}}})");
  EXPECT_EQ(resolve({&p}, "secrets/x").bits, 0);
  EXPECT_EQ(resolve({}, "workloads/x").bits, 0);
  EXPECT_EQ(resolve({nullptr}, "workloads/x").bits, 0);
}

TEST(PolicyTest, AcceptsTheArrayShapeOfRepeatedBlocks) {
  const Policy p = policy("p", R"({"path": [{"a/*": [{"capabilities": ["read"]}]},
                                             {"b": {"capabilities": ["list"]}}]})");
  ASSERT_EQ(p.rules.size(), 2U);
  EXPECT_TRUE(resolve({&p}, "a/x").allows(Capability::kRead));
  EXPECT_TRUE(resolve({&p}, "b").allows(Capability::kList));
  // Round trip.
  auto again = Policy::fromJson("p", p.toJson());
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->rules.size(), 2U);
}

TEST(PolicyTest, ErrorsNameWhatIsWrong) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({})", "policy 'p': expected {\"path\""},
      {R"({"path": {}, "other": 1})", "unknown field 'other'"},
      {R"({"path": {"a/*": {"capabilities": ["reed"]}}})",
       "path \"a/*\": unknown capability 'reed'"},
      {R"({"path": {"a/*": {"capabilities": "read"}}})", "capabilities must be a list"},
      {R"({"path": {"a/*": {"caps": ["read"]}}})", "unknown field 'caps'"},
      {R"({"path": {"a/*/b": {"capabilities": ["read"]}}})",
       "'*' is allowed only as the last character"},
      {R"({"path": {"a+/b": {"capabilities": ["read"]}}})", "'+' must be a whole path segment"},
      {R"({"path": {"/a": {"capabilities": ["read"]}}})", "must not start with '/'"},
      {R"({"path": 3})", "expected an object"},
  };
  for (const Case& c : cases) {
    auto p = Policy::fromJson("p", json::parse(c.json));
    ASSERT_FALSE(p.isOk()) << c.json;
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << c.json << " -> " << p.status().message();
  }
}

}  // namespace
}  // namespace tessera::server
