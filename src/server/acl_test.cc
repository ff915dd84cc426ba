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
      {R"({"path": {"a/+*": {"capabilities": ["read"]}}})", "'+*' is forbidden"},
      {R"({"path": {"a/{{identity.entity.id}}/*": {"capabilities": ["read"]}}})",
       "identity templating"},
      {R"({"path": {"a": {"policy": "admin"}}})", "invalid policy \"admin\""},
      {R"({"path": {"a": {"policy": 3}}})", "invalid policy 3"},
      {R"({"path": {"a": {"capabilities": ["read"], "mfa_methods": ["x"]}}})",
       "'mfa_methods' is a Vault Enterprise feature"},
      {R"({"path": {"a": {"capabilities": ["read"], "min_wrapping_ttl": "1h",
                          "max_wrapping_ttl": "1m"}}})",
       "max_wrapping_ttl cannot be less than min_wrapping_ttl"},
      {R"({"path": {"a": {"capabilities": ["read"], "min_wrapping_ttl": "soon"}}})",
       "min_wrapping_ttl: expected a duration"},
      {R"({"path": {"a": {"capabilities": ["read"], "allowed_parameters": ["x"]}}})",
       "allowed_parameters: expected an object"},
      {R"({"path": {"a": {"capabilities": ["read"], "denied_parameters": {"x": [{"a": 1}]}}}})",
       "denied_parameters.x: values must be"},
      {R"({"path": {"a": {"capabilities": ["read"], "required_parameters": "x"}}})",
       "required_parameters must be a list"},
      {R"({"name": 3, "path": {}})", "name must be a string"},
      {R"({"path": 3})", "expected an object"},
  };
  for (const Case& c : cases) {
    auto p = Policy::fromJson("p", json::parse(c.json));
    ASSERT_FALSE(p.isOk()) << c.json;
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << c.json << " -> " << p.status().message();
  }
}

// Vault's parsePaths (vault/policy.go): the old `policy = "..."` form, translated exactly.
TEST(PolicyTest, OldPolicyFormBecomesVaultsCapabilities) {
  struct Case {
    const char* policy;
    std::vector<std::string> capabilities;  // In Capabilities::names() order.
  };
  const Case cases[] = {
      {"deny", {"deny"}},
      {"read", {"read", "list"}},
      {"write", {"create", "read", "update", "delete", "list"}},
      {"sudo", {"create", "read", "update", "delete", "list", "sudo"}},
  };
  for (const Case& c : cases) {
    const Policy p =
        policy("p", std::string(R"({"path": {"a/*": {"policy": ")") + c.policy + R"("}}})");
    ASSERT_EQ(p.rules.size(), 1U);
    EXPECT_EQ(p.rules[0].capabilities.names(), c.capabilities) << c.policy;
  }
  // Both forms add up, as in Vault; a deny among them leaves only the deny.
  Policy both = policy("p", R"({"path": {"a": {"policy": "read", "capabilities": ["patch"]}}})");
  EXPECT_EQ(both.rules[0].capabilities.names(),
            (std::vector<std::string>{"read", "patch", "list"}));
  both = policy("p", R"({"path": {"a": {"policy": "deny", "capabilities": ["read"]}}})");
  EXPECT_EQ(both.rules[0].capabilities.names(), (std::vector<std::string>{"deny"}));
}

TEST(PolicyTest, AcceptsWhatVaultAccepts) {
  // A top-level name, a leading '/', a comment, `recover` and `patch`.
  const Policy p = policy("mine", R"({"name": "theirs", "path": {
      "/secrets/kv/data/app/*": {"capabilities": ["read", "patch", "recover"],
                                 "comment": "apps"}}})");
  EXPECT_EQ(p.name, "mine");  // The name it is written under wins, as in Vault.
  ASSERT_EQ(p.rules.size(), 1U);
  EXPECT_EQ(p.rules[0].pattern, "secrets/kv/data/app/*");
  EXPECT_TRUE(resolve({&p}, "secrets/kv/data/app/x").allows(Capability::kPatch));
  EXPECT_TRUE(resolve({&p}, "secrets/kv/data/app/x").allows(Capability::kRecover));
  EXPECT_FALSE(resolve({&p}, "secrets/kv/data/app/x").allows(Capability::kUpdate));
  // Vault's API form: the policy as HCL text.
  auto t = Policy::fromText("t", R"(
      name = "t"
      path "secrets/kv/metadata/dev/*" { capabilities = ["list"] }
      path "/secrets/kv/data/dev/*" {
        policy = "write"
        allowed_parameters = { "data" = [] }
        required_parameters = ["data"]
        min_wrapping_ttl = "1m"
        max_wrapping_ttl = 3600
      })");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  ASSERT_EQ(t->rules.size(), 2U);
  const Permissions w = resolvePermissions({&*t}, "secrets/kv/data/dev/x");
  EXPECT_TRUE(w.capabilities.allows(Capability::kCreate));
  EXPECT_EQ(w.constraints.min_wrapping_ttl, 60);
  EXPECT_EQ(w.constraints.max_wrapping_ttl, 3600);
  EXPECT_EQ(w.constraints.required_parameters, std::vector<std::string>{"data"});
  // Round trip through the stored form keeps the constraints.
  auto again = Policy::fromJson("t", t->toJson());
  ASSERT_TRUE(again.isOk()) << again.status().message();
  EXPECT_EQ(resolvePermissions({&*again}, "secrets/kv/data/dev/x").constraints, w.constraints);
  EXPECT_FALSE(Policy::fromText("t", "path \"a\" { capabilities = [").isOk());
}

TEST(ResolveTest, TrailingSlashIsKeptAndListSeesBothForms) {
  const Policy p = policy("p", R"({"path": {
      "secrets/kv/metadata/dev/*": {"capabilities": ["list"]},
      "secrets/kv/metadata/ops": {"capabilities": ["list"]},
      "secrets/kv/metadata/team/": {"capabilities": ["list"]},
      "secrets/kv/metadata/team/secret*": {"capabilities": ["deny"]},
      "secrets/kv/metadata/x/*": {"capabilities": ["list"]},
      "secrets/kv/metadata/x/": {"capabilities": ["deny"]}}})");
  struct Case {
    const char* path;
    bool list;
  };
  const Case cases[] = {
      {"secrets/kv/metadata/dev/", true},   // Vault: `dev/*` lists `dev/`.
      {"secrets/kv/metadata/dev", false},   // Without the slash, `dev/*` does not match.
      {"secrets/kv/metadata/ops/", true},   // The form without the slash counts for a LIST.
      {"secrets/kv/metadata/team/", true},  // A pattern ending in '/' matches.
      {"secrets/kv/metadata/team", false},
      {"secrets/kv/metadata/team/secrets/", false},  // A more specific deny wins.
      {"secrets/kv/metadata/x/", false},             // The exact deny outranks `x/*`.
      {"secrets/kv/metadata/other/", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(resolve({&p}, c.path).allows(Capability::kList), c.list) << c.path;
  }
}

TEST(AllowsRequestTest, VaultsParameterConstraints) {
  struct Case {
    const char* rule;  // The fields of a rule on "p", capabilities given below.
    Capability needed;
    const char* data;
    bool allowed;
  };
  const Case cases[] = {
      // No constraints: anything.
      {R"({})", Capability::kUpdate, R"({"a": 1})", true},
      // allowed_parameters: only the names listed; an empty list allows any value.
      {R"({"allowed_parameters": {"a": []}})", Capability::kUpdate, R"({"a": 7})", true},
      {R"({"allowed_parameters": {"a": []}})", Capability::kUpdate, R"({"b": 7})", false},
      {R"({"allowed_parameters": {"a": []}})", Capability::kUpdate, R"({})", true},
      // Names are compared lowercased, as in Vault.
      {R"({"allowed_parameters": {"A": []}})", Capability::kUpdate, R"({"a": 1})", true},
      {R"({"allowed_parameters": {"a": []}})", Capability::kUpdate, R"({"A": 1})", true},
      // Values, with globs at either end.
      {R"({"allowed_parameters": {"a": ["x", "pre-*"]}})", Capability::kUpdate, R"({"a": "x"})",
       true},
      {R"({"allowed_parameters": {"a": ["x", "pre-*"]}})", Capability::kUpdate, R"({"a": "pre-1"})",
       true},
      {R"({"allowed_parameters": {"a": ["x", "pre-*"]}})", Capability::kUpdate, R"({"a": "y"})",
       false},
      {R"({"allowed_parameters": {"a": ["*-suf"]}})", Capability::kUpdate, R"({"a": "z-suf"})",
       true},
      {R"({"allowed_parameters": {"a": ["*mid*"]}})", Capability::kUpdate, R"({"a": "amidb"})",
       true},
      {R"({"allowed_parameters": {"a": [1, 2]}})", Capability::kUpdate, R"({"a": 2})", true},
      {R"({"allowed_parameters": {"a": [1, 2]}})", Capability::kUpdate, R"({"a": 3})", false},
      // A list value: every element must be allowed; a comma string likewise.
      {R"({"allowed_parameters": {"a": ["x", "y"]}})", Capability::kUpdate, R"({"a": ["x", "y"]})",
       true},
      {R"({"allowed_parameters": {"a": ["x", "y"]}})", Capability::kUpdate, R"({"a": ["x", "z"]})",
       false},
      {R"({"allowed_parameters": {"a": ["x", "y"]}})", Capability::kUpdate, R"({"a": "x,y"})",
       true},
      // `*` as a name: any other name, with any value.
      {R"({"allowed_parameters": {"*": []}})", Capability::kUpdate, R"({"q": 1})", true},
      {R"({"allowed_parameters": {"*": [], "a": ["x"]}})", Capability::kUpdate, R"({"q": 1})",
       true},
      {R"({"allowed_parameters": {"*": [], "a": ["x"]}})", Capability::kUpdate, R"({"a": "y"})",
       false},
      // denied_parameters: a listed value, or any value for an empty list, refuses.
      {R"({"denied_parameters": {"a": []}})", Capability::kUpdate, R"({"a": 1})", false},
      {R"({"denied_parameters": {"a": []}})", Capability::kUpdate, R"({"b": 1})", true},
      {R"({"denied_parameters": {"a": ["bad*"]}})", Capability::kUpdate, R"({"a": "badly"})",
       false},
      {R"({"denied_parameters": {"a": ["bad*"]}})", Capability::kUpdate, R"({"a": "good"})", true},
      {R"({"denied_parameters": {"a": ["x"]}})", Capability::kUpdate, R"({"a": ["y", "x"]})",
       false},
      {R"({"denied_parameters": {"*": []}})", Capability::kUpdate, R"({"b": 1})", false},
      {R"({"denied_parameters": {"*": []}})", Capability::kUpdate, R"({})", true},
      // Denied beats allowed.
      {R"({"allowed_parameters": {"a": []}, "denied_parameters": {"a": ["x"]}})",
       Capability::kUpdate, R"({"a": "x"})", false},
      // required_parameters.
      {R"({"required_parameters": ["a"]})", Capability::kCreate, R"({"a": 1})", true},
      {R"({"required_parameters": ["a"]})", Capability::kCreate, R"({"b": 1})", false},
      {R"({"required_parameters": ["a"]})", Capability::kRead, R"({})", false},
      // Only read, create, update and patch (and recover) carry parameters.
      {R"({"required_parameters": ["a"]})", Capability::kDelete, R"({})", true},
      {R"({"required_parameters": ["a"]})", Capability::kList, R"({})", true},
      {R"({"allowed_parameters": {"a": []}})", Capability::kPatch, R"({"b": 1})", false},
      // A wrapping TTL needs a wrapped request: Tessera has none, so nothing passes.
      {R"({"min_wrapping_ttl": "1m"})", Capability::kRead, R"({})", false},
      {R"({"max_wrapping_ttl": 60})", Capability::kDelete, R"({})", false},
  };
  for (const Case& c : cases) {
    json rule = json::parse(c.rule);
    rule["capabilities"] = {"create", "read", "update", "patch", "delete", "list"};
    auto p = Policy::fromJson("p", {{"path", {{"p", rule}}}});
    ASSERT_TRUE(p.isOk()) << c.rule << ": " << p.status().message();
    EXPECT_EQ(allowsRequest(resolvePermissions({&*p}, "p"), c.needed, json::parse(c.data)),
              c.allowed)
        << c.rule << " " << c.data;
  }
  // Without the capability, no parameter helps.
  auto p = Policy::fromJson("p", json::parse(R"({"path": {"p": {"capabilities": ["read"]}}})"));
  EXPECT_FALSE(allowsRequest(resolvePermissions({&*p}, "p"), Capability::kUpdate, json::object()));
}

TEST(AllowsRequestTest, SamePatternInTwoPoliciesMergesConstraintsAsVaultDoes) {
  const Policy a = policy("a", R"({"path": {"p": {"capabilities": ["update"],
      "allowed_parameters": {"x": ["1"], "y": ["1"]}, "required_parameters": ["x"],
      "min_wrapping_ttl": 120, "max_wrapping_ttl": 300}}})");
  const Policy b = policy("b", R"({"path": {"p": {"capabilities": ["update"],
      "allowed_parameters": {"x": ["2"], "y": []}, "required_parameters": ["y"],
      "min_wrapping_ttl": 60, "max_wrapping_ttl": 600}}})");
  const Permissions m = resolvePermissions({&a, &b}, "p");
  EXPECT_EQ(m.constraints.allowed_parameters, json::parse(R"({"x": ["1", "2"], "y": []})"))
      << m.constraints.allowed_parameters.dump();
  EXPECT_EQ(m.constraints.required_parameters, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(m.constraints.min_wrapping_ttl, 60);   // The lowest minimum.
  EXPECT_EQ(m.constraints.max_wrapping_ttl, 600);  // The highest maximum.
}

TEST(AllowsRequestTest, RequestParametersFollowTheOperation) {
  const json body = {{"data", {{"a", 1}}}};
  const std::map<std::string, std::string> query = {{"version", "2"}};
  EXPECT_EQ(requestParameters(Capability::kRead, body, query), json({{"version", "2"}}));
  EXPECT_EQ(requestParameters(Capability::kUpdate, body, query), body);
  EXPECT_EQ(requestParameters(Capability::kPatch, body, query), body);
  EXPECT_EQ(requestParameters(Capability::kDelete, body, query), json::object());
}

TEST(PolicyTest, PolicyNamesAsVaultWritesThem) {
  struct Case {
    const char* name;
    bool valid;
  };
  const Case cases[] = {{"dev", true},   {"dev_team", true},     {"_x", true},
                        {"a.b-c", true}, {"tenant-admin", true}, {"Dev", false},
                        {"-a", false},   {".a", false},          {"", false},
                        {"a/b", false},  {"a b", false}};
  for (const Case& c : cases) {
    EXPECT_EQ(validPolicyName(c.name), c.valid) << c.name;
  }
  EXPECT_FALSE(validPolicyName(std::string(129, 'a')));
}

TEST(PowerTest, ConstraintsOnTheHoldersSideBindWhatItHandsOn) {
  const Policy holder = policy("h", R"({"path": {"secrets/*": {"capabilities": ["read"],
      "allowed_parameters": {"version": ["1"]}}}})");
  const Policy same = policy("c", R"({"path": {"secrets/x": {"capabilities": ["read"],
      "allowed_parameters": {"version": ["1"]}}}})");
  const Policy freer = policy("c", R"({"path": {"secrets/x": {"capabilities": ["read"]}}})");
  EXPECT_TRUE(checkWithinPower({&holder}, same).isOk());
  EXPECT_FALSE(checkWithinPower({&holder}, freer).isOk());
}

}  // namespace
}  // namespace tessera::server
