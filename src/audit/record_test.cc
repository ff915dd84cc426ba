#include "audit/record.h"

#include <gtest/gtest.h>

#include "audit/crypto.h"
#include "audit/test_util.h"
#include "core/rfc3339.h"

namespace tessera::audit {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

const RedactionOptions kSalted{"pepper", true};

TEST(RecordTest, TimeIsRfc3339UtcWithMilliseconds) {
  EXPECT_EQ(core::formatRfc3339Millis(core::WallTime{}), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(
      core::formatRfc3339Millis(core::WallTime{seconds(1'700'000'000) + nanoseconds(123'999'999)}),
      "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(core::formatRfc3339Millis(core::WallTime{seconds(951'782'400) + milliseconds(7)}),
            "2000-02-29T00:00:00.007Z");
}

TEST(RecordTest, CanonicalJsonSortsKeysWithoutWhitespace) {
  EXPECT_EQ(canonicalJson(json::parse(R"({ "b": 1, "a": [true, null], "c": {"z": "é", "y": 2} })")),
            R"({"a":[true,null],"b":1,"c":{"y":2,"z":"é"}})");
}

// A token that failed to authenticate is written only as its HMAC, even with hmac_accessor off;
// a record without one has no such field.
TEST(RecordTest, APresentedTokenIsAlwaysHmacd) {
  AuditEvent e = testing::sampleEvent(1);
  e.auth = {};
  e.auth.token = "tsr.guessedguessedguessed01";
  for (const RedactionOptions& o : {RedactionOptions{"pepper", false}, kSalted}) {
    auto j = redactedEventJson(e, o);
    ASSERT_TRUE(j.isOk()) << j.status().toString();
    EXPECT_EQ((*j)["auth"]["token"], hmacValue("pepper", "tsr.guessedguessedguessed01"));
    EXPECT_EQ(j->dump().find("guessed"), std::string::npos);
  }
  auto plain = redactedEventJson(testing::sampleEvent(1), kSalted);
  ASSERT_TRUE(plain.isOk());
  EXPECT_FALSE((*plain)["auth"].contains("token"));
}

TEST(RecordTest, EventFieldsAreWrittenAsDocumented) {
  AuditEvent e = testing::sampleEvent(1);
  e.error = "quota exceeded";
  auto j = redactedEventJson(e, {"pepper", false});
  ASSERT_TRUE(j.isOk()) << j.status().toString();
  EXPECT_EQ((*j)["type"], "response");
  EXPECT_EQ((*j)["request_id"], "req-0");
  EXPECT_EQ((*j)["tenant"], "team-1");
  EXPECT_EQ((*j)["auth"]["accessor"], "accessor-team-1");  // hmac_accessor off.
  EXPECT_EQ((*j)["auth"]["policies"], json({"default", "team-1-dev"}));
  EXPECT_EQ((*j)["request"]["method"], "POST");
  EXPECT_EQ((*j)["request"]["path"], "/v1/tenants/team-1/workloads");
  EXPECT_EQ((*j)["request"]["remote_address"], "10.0.0.7");
  EXPECT_EQ((*j)["request"]["body"]["gpus"], 1);
  EXPECT_EQ((*j)["response"]["status"], 200);
  EXPECT_EQ((*j)["response"]["body"]["id"], "wl-1");
  EXPECT_EQ((*j)["error"], "quota exceeded");

  auto request = redactedEventJson(testing::sampleEvent(0), kSalted);
  ASSERT_TRUE(request.isOk());
  EXPECT_FALSE(request->contains("response"));
}

TEST(RecordTest, AccessorIsHmacdByDefault) {
  auto j = redactedEventJson(testing::sampleEvent(0), kSalted);
  ASSERT_TRUE(j.isOk());
  EXPECT_EQ((*j)["auth"]["accessor"], hmacValue("pepper", "accessor-team-1"));
}

// Who acted is readable without the salt: the accessor is HMAC'd, the display name is not.
TEST(RecordTest, DisplayNameIsWrittenInClearBesideTheHmacdAccessor) {
  AuditEvent e = testing::sampleEvent(0);
  e.auth.display_name = "ci-bot";
  auto j = redactedEventJson(e, kSalted);
  ASSERT_TRUE(j.isOk());
  EXPECT_EQ((*j)["auth"]["display_name"], "ci-bot");
  EXPECT_EQ((*j)["auth"]["accessor"], hmacValue("pepper", "accessor-team-1"));
  // Every record has the field, empty when the caller had no token.
  auto none = redactedEventJson(testing::sampleEvent(0), kSalted);
  ASSERT_TRUE(none.isOk());
  EXPECT_EQ((*none)["auth"]["display_name"], "");
}

TEST(RecordTest, AResponseIsSensitiveIfItsRecordHidesAnyOfIt) {
  AuditEvent e = testing::sampleEvent(1);
  e.response.body = {{"data", {{"phase", "Running"}, {"tasks", {{{"node", "n0"}}}}}}};
  EXPECT_FALSE(responseIsSensitive(e));
  // Sensitive pointers into the request only: the answer still reveals nothing.
  e.sensitive = {"/request/body/data"};
  EXPECT_FALSE(responseIsSensitive(e));
  // A pointer into the response, present or not (a secret's path says what it holds).
  e.sensitive = {"/request/body/data", "/response/body/data"};
  EXPECT_TRUE(responseIsSensitive(e));
  // An always-sensitive key at any depth, in any case, in objects inside arrays too.
  e.sensitive.clear();
  e.response.body["data"]["tasks"][0]["Credentials"] = {{"identity-token", "eyJ..."}};
  EXPECT_TRUE(responseIsSensitive(e));
  // Only the response counts: a token in the request body is not revealed by the answer.
  AuditEvent q = testing::sampleEvent(2);
  q.request.body = {{"token", "tsr.x"}};
  q.response.body = {{"data", json::array({1, 2})}};
  EXPECT_FALSE(responseIsSensitive(q));
}

TEST(RecordTest, SensitivePointersAreHmacdWithTheSalt) {
  AuditEvent e = testing::sampleEvent(1);
  e.request.body["data"] = {{"api-key", "AKIA123"}, {"limits", {{"gpus", 4}}}};
  e.response.body["items"] = {"one", "two"};
  e.sensitive = {"/request/body/data/api-key", "/request/body/data/limits",
                 "/response/body/items/1", "/request/body/absent"};
  auto j = redactedEventJson(e, kSalted);
  ASSERT_TRUE(j.isOk()) << j.status().toString();
  // A string: HMAC of its bytes. Anything else: HMAC of its canonical JSON.
  EXPECT_EQ((*j)["request"]["body"]["data"]["api-key"], hmacValue("pepper", "AKIA123"));
  EXPECT_EQ((*j)["request"]["body"]["data"]["limits"], hmacValue("pepper", R"({"gpus":4})"));
  EXPECT_EQ((*j)["response"]["body"]["items"], json({"one", hmacValue("pepper", "two")}));
  EXPECT_FALSE((*j)["request"]["body"].contains("absent"));
  EXPECT_EQ((*j)["request"]["body"]["name"], "train-1");  // Untouched.
}

TEST(RecordTest, AlwaysSensitiveKeysAreHmacdAtAnyDepthOnce) {
  AuditEvent e = testing::sampleEvent(1);
  e.request.body["password"] = "hunter2";
  e.request.body["nested"] = json::array({{{"Token", "s.abc"}}});
  e.response.body["auth"] = {{"client_token", "s.root"}};
  e.sensitive = {"/request/body/password"};  // Also named: must not be HMAC'd twice.
  auto j = redactedEventJson(e, kSalted);
  ASSERT_TRUE(j.isOk());
  EXPECT_EQ((*j)["request"]["body"]["password"], hmacValue("pepper", "hunter2"));
  EXPECT_EQ((*j)["request"]["body"]["nested"][0]["Token"], hmacValue("pepper", "s.abc"));
  EXPECT_EQ((*j)["response"]["body"]["auth"]["client_token"], hmacValue("pepper", "s.root"));
}

TEST(RecordTest, StringsUnderSecretLookingNamesAreHmacd) {
  for (const char* name : {"DB_PASSWORD", "GITHUB_TOKEN", "apiKey", "AWS_SECRET_ACCESS_KEY",
                           "ssh_key", "MyCredentialFile", "refresh_token"}) {
    EXPECT_TRUE(looksSecret(name)) << name;
  }
  for (const char* name : {"keys", "PATH", "HOME", "name", "monkeys", "max_workloads"}) {
    EXPECT_FALSE(looksSecret(name)) << name;
  }
  AuditEvent e = testing::sampleEvent(1);
  e.request.body = {{"env", {{"DB_PASSWORD", "hunter2"}, {"HOME", "/root"}}},
                    {"max_tokens", 5},
                    {"access_tokens", json::array({"t1", 7})},
                    {"secrets", {{"kv", json::array({"app/config"})}}}};
  e.response.body = {{"data", {{"env", {{"GITHUB_TOKEN", "ghp_x"}}}}}};
  auto j = redactedEventJson(e, kSalted);
  ASSERT_TRUE(j.isOk());
  const json& body = (*j)["request"]["body"];
  EXPECT_EQ(body["env"]["DB_PASSWORD"], hmacValue("pepper", "hunter2"));
  EXPECT_EQ(body["env"]["HOME"], "/root");
  EXPECT_EQ(body["max_tokens"], 5);  // A number under such a name is no secret.
  EXPECT_EQ(body["access_tokens"][0], hmacValue("pepper", "t1"));
  EXPECT_EQ(body["access_tokens"][1], 7);
  EXPECT_EQ(body["secrets"]["kv"][0], "app/config");  // Names of secrets, not their values.
  EXPECT_EQ((*j)["response"]["body"]["data"]["env"]["GITHUB_TOKEN"], hmacValue("pepper", "ghp_x"));
  EXPECT_TRUE(responseIsSensitive(e));
  e.response.body = {{"data", {{"max_tokens", 5}}}};
  EXPECT_FALSE(responseIsSensitive(e));
}

TEST(RecordTest, BadSensitivePointersAreErrors) {
  AuditEvent e = testing::sampleEvent(0);
  for (const char* p : {"/seq", "/hash", "/prev_hash", "no-leading-slash", ""}) {
    e.sensitive = {p};
    EXPECT_EQ(redactedEventJson(e, kSalted).status().code(), core::StatusCode::kInvalidArgument)
        << p;
  }
  EXPECT_FALSE(redactedEventJson(testing::sampleEvent(0), {"", true}).isOk());  // No salt.
}

std::string sealedLine(json record) {
  record["hash"] = sha256Hex(canonicalJson(record));
  return canonicalJson(record);
}

json validRecord() {
  return {{"seq", 3},
          {"time", "2024-01-02T03:04:05.678Z"},
          {"type", "request"},
          {"tenant", "team-1"},
          {"prev_hash", std::string(64, 'a')}};
}

TEST(RecordTest, ParseAcceptsAValidLine) {
  auto rec = parseRecordLine(sealedLine(validRecord()));
  ASSERT_TRUE(rec.isOk()) << rec.status().toString();
  EXPECT_EQ(rec->seq, 3u);
  EXPECT_EQ(rec->type, "request");
  EXPECT_EQ(rec->tenant, "team-1");
  EXPECT_EQ(rec->prev_hash, std::string(64, 'a'));
}

TEST(RecordTest, ParseSaysWhatIsWrong) {
  struct Case {
    std::string line;
    std::string message;
  };
  json no_seq = validRecord();
  no_seq.erase("seq");
  json zero_seq = validRecord();
  zero_seq["seq"] = 0;
  json bad_type = validRecord();
  bad_type["type"] = "debug";
  json upper_hash = validRecord();
  upper_hash["prev_hash"] = std::string(64, 'A');
  json bare_checkpoint = validRecord();
  bare_checkpoint["type"] = "checkpoint";
  const std::string good = sealedLine(validRecord());
  std::string edited = good;
  edited.replace(edited.find("team-1"), 6, "team-2");
  const std::vector<Case> cases = {
      {"{\"seq\":", "not valid JSON"},
      {"[1,2]", "not a JSON object"},
      {sealedLine(no_seq), "'seq' is missing"},
      {sealedLine(zero_seq), "'seq' is missing or not a positive integer"},
      {sealedLine(bad_type), "unknown record type 'debug'"},
      {sealedLine(upper_hash), "64 lowercase hex digits"},
      {sealedLine(bare_checkpoint), "checkpoint record without"},
      {" " + good, "not in canonical form"},
      {edited, "hash does not match the record's contents"},
  };
  for (const Case& c : cases) {
    auto rec = parseRecordLine(c.line);
    ASSERT_FALSE(rec.isOk()) << c.line;
    EXPECT_NE(rec.status().message().find(c.message), std::string::npos)
        << c.line << " -> " << rec.status().message();
  }
}

}  // namespace
}  // namespace tessera::audit
