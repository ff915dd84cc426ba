#include "audit/sink.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <thread>

#include "audit/test_util.h"
#include "audit/verify.h"

namespace tessera::audit {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

struct Keys {
  std::shared_ptr<const SigningKey> signing;
  std::unique_ptr<VerifyingKey> verifying;
};

Keys makeKeys() {
  auto pair = generateKeyPairPem();
  return {std::move(SigningKey::fromPem(pair->private_pem)).value(),
          std::move(VerifyingKey::fromPem(pair->public_pem)).value()};
}

VerifyReport verifyLines(const std::vector<std::string>& lines, const VerifyingKey* key) {
  std::istringstream in(testing::joinLines(lines));
  return std::move(verifyAuditStream(in, key)).value();
}

class MemorySinkTest : public ::testing::Test {
 protected:
  core::FakeClock clock_{core::TimePoint{}, core::WallTime{seconds(1'700'000'000)}};
};

TEST_F(MemorySinkTest, ChainFollowsTheDocumentedFormula) {
  MemorySink sink("mem", {.salt = "pepper"}, clock_);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(sink.write(testing::sampleEvent(i)).isOk());
    clock_.advance(milliseconds(1500));
  }
  const std::vector<std::string> lines = sink.lines();
  ASSERT_EQ(lines.size(), 5u);
  std::string prev(64, '0');
  for (size_t i = 0; i < lines.size(); ++i) {
    json j = json::parse(lines[i]);
    EXPECT_EQ(j["seq"], i + 1);
    EXPECT_EQ(j["prev_hash"], prev);
    // hash = SHA-256 of the sorted-key compact JSON without "hash"; the line is that JSON with it.
    const std::string hash = j["hash"];
    EXPECT_EQ(j.dump(), lines[i]);
    j.erase("hash");
    EXPECT_EQ(sha256Hex(j.dump()), hash);
    prev = hash;
  }
  EXPECT_EQ(json::parse(lines[0])["time"], "2023-11-14T22:13:20.000Z");
  EXPECT_EQ(json::parse(lines[3])["time"], "2023-11-14T22:13:24.500Z");
}

TEST_F(MemorySinkTest, LinesAreCanonicalWhateverTheyHold) {
  // The line is joined from fields serialized one by one; it must be byte for byte what
  // serializing the whole record gives, escapes and non-ASCII included.
  MemorySink sink("mem", {.salt = "pepper"}, clock_);
  AuditEvent e = testing::sampleEvent(1);
  e.error = "bad \"quote\"\n\ttab \\ \u00e9\u4e2d \x01";
  e.request.body = {{"z", {{"\u00e9", 1}, {"a\"b", nullptr}}}, {"", "empty key"}, {"k", 1.5}};
  e.response.body = {{"list", {3, "x", false}}};
  ASSERT_TRUE(sink.write(e).isOk());
  ASSERT_TRUE(sink.write(e, Durability::kAppended).isOk());
  for (const std::string& line : sink.lines()) {
    json j = json::parse(line);
    EXPECT_EQ(j.dump(), line);
    const std::string hash = j["hash"];
    j.erase("hash");
    EXPECT_EQ(sha256Hex(j.dump()), hash);
  }
}

TEST_F(MemorySinkTest, ChecksPointsAreSignedEveryNRecordsAndOnClose) {
  Keys keys = makeKeys();
  MemorySink sink("mem", {.salt = "pepper", .signing_key = keys.signing, .checkpoint_every = 3},
                  clock_);
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(sink.write(testing::sampleEvent(i)).isOk());
  }
  ASSERT_TRUE(sink.close().isOk());
  const std::vector<std::string> lines = sink.lines();
  // Records 1-3, checkpoint 4, records 5-7, checkpoint 8, record 9, final checkpoint 10.
  ASSERT_EQ(lines.size(), 10u);
  std::vector<size_t> checkpoints;
  for (size_t i = 0; i < lines.size(); ++i) {
    const json j = json::parse(lines[i]);
    if (j["type"] == "checkpoint") {
      checkpoints.push_back(i + 1);
      EXPECT_EQ(j["checkpoint"]["key_id"], keys.signing->keyId());
      EXPECT_FALSE(j.contains("tenant"));
    }
  }
  EXPECT_EQ(checkpoints, (std::vector<size_t>{4, 8, 10}));
  const VerifyReport report = verifyLines(lines, keys.verifying.get());
  EXPECT_TRUE(report.intact()) << report.summary();
  EXPECT_TRUE(report.signatures_checked);
  EXPECT_EQ(report.checkpoints, 3u);
  EXPECT_EQ(report.unsigned_tail, 0u);
  EXPECT_FALSE(sink.write(testing::sampleEvent(0)).isOk());  // Closed.
}

TEST_F(MemorySinkTest, CloseRightAfterACheckpointAddsNone) {
  Keys keys = makeKeys();
  MemorySink sink("mem", {.salt = "s", .signing_key = keys.signing, .checkpoint_every = 2}, clock_);
  ASSERT_TRUE(sink.write(testing::sampleEvent(0)).isOk());
  ASSERT_TRUE(sink.write(testing::sampleEvent(1)).isOk());
  ASSERT_TRUE(sink.close().isOk());
  EXPECT_EQ(sink.lines().size(), 3u);
}

TEST_F(MemorySinkTest, NoSigningKeyMeansNoCheckpoints) {
  MemorySink sink("mem", {.salt = "s", .checkpoint_every = 1}, clock_);
  ASSERT_TRUE(sink.write(testing::sampleEvent(0)).isOk());
  ASSERT_TRUE(sink.close().isOk());
  ASSERT_EQ(sink.lines().size(), 1u);
  EXPECT_EQ(json::parse(sink.lines()[0])["type"], "request");
}

TEST_F(MemorySinkTest, AFailedWriteStoresNothingAndTheChainContinues) {
  MemorySink sink("mem", {.salt = "s"}, clock_);
  ASSERT_TRUE(sink.write(testing::sampleEvent(0)).isOk());
  sink.setFailWrites(true);
  const core::Status s = sink.write(testing::sampleEvent(1));
  EXPECT_EQ(s.code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(sink.lines().size(), 1u);
  sink.setFailWrites(false);
  ASSERT_TRUE(sink.write(testing::sampleEvent(2)).isOk());
  ASSERT_EQ(sink.lines().size(), 2u);
  EXPECT_EQ(json::parse(sink.lines()[1])["seq"], 2);
  EXPECT_TRUE(verifyLines(sink.lines(), nullptr).intact());
}

TEST_F(MemorySinkTest, ABadSensitivePointerFailsTheWrite) {
  MemorySink sink("mem", {.salt = "s"}, clock_);
  AuditEvent e = testing::sampleEvent(0);
  e.sensitive = {"/hash"};
  EXPECT_EQ(sink.write(e).code(), core::StatusCode::kInvalidArgument);
  EXPECT_TRUE(sink.lines().empty());
}

TEST_F(MemorySinkTest, ConcurrentWritersProduceOneValidChain) {
  Keys keys = makeKeys();
  MemorySink sink("mem", {.salt = "s", .signing_key = keys.signing, .checkpoint_every = 37},
                  clock_);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        AuditEvent e = testing::sampleEvent(0, "team-" + std::to_string(t));
        e.request_id = std::to_string(t) + "/" + std::to_string(i);
        ASSERT_TRUE(sink.write(e).isOk());
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  ASSERT_TRUE(sink.close().isOk());
  const VerifyReport report = verifyLines(sink.lines(), keys.verifying.get());
  EXPECT_TRUE(report.intact()) << report.summary();
  EXPECT_EQ(report.records - report.checkpoints, uint64_t{kThreads * kPerThread});
  std::set<std::string> ids;
  for (const std::string& line : sink.lines()) {
    const json j = json::parse(line);
    if (j["type"] != "checkpoint") {
      ids.insert(j["request_id"].get<std::string>());
    }
  }
  EXPECT_EQ(ids.size(), size_t{kThreads * kPerThread});
}

}  // namespace
}  // namespace tessera::audit
