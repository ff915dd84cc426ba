#include "audit/verify.h"

#include <gtest/gtest.h>

#include <sstream>

#include "audit/file_sink.h"
#include "audit/test_util.h"

namespace tessera::audit {
namespace {

using nlohmann::json;
using testing::joinLines;
using testing::readFile;
using testing::splitLines;
using testing::TempDir;
using testing::writeFile;

// A stream of `events` records from three tenants and an operator, signed every
// `checkpoint_every` records, written by a real FileSink.
class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pair = generateKeyPairPem();
    signing_ = std::move(SigningKey::fromPem(pair->private_pem)).value();
    verifying_ = std::move(VerifyingKey::fromPem(pair->public_pem)).value();
    auto other = generateKeyPairPem();
    other_signing_ = std::move(SigningKey::fromPem(other->private_pem)).value();
    other_verifying_ = std::move(VerifyingKey::fromPem(other->public_pem)).value();
  }

  std::string writeStream(int events, uint64_t checkpoint_every,
                          const std::string& name = "audit.log") {
    const std::string path = dir_.file(name);
    auto sink = FileSink::open(
        path, {{.salt = "pepper", .signing_key = signing_, .checkpoint_every = checkpoint_every}},
        clock_);
    for (int i = 0; i < events; ++i) {
      static const char* kTenants[] = {"team-1", "team-2", "team-3", ""};
      EXPECT_TRUE((*sink)->write(testing::sampleEvent(i, kTenants[(i / 2) % 4])).isOk());
      clock_.advance(std::chrono::milliseconds(3));
    }
    EXPECT_TRUE((*sink)->close().isOk());
    return readFile(path);
  }

  VerifyReport verifyText(const std::string& text, const VerifyingKey* key = nullptr) {
    std::istringstream in(text);
    return std::move(verifyAuditStream(in, key)).value();
  }

  // Expects `text` to fail at `line` with a message containing `what`.
  void expectBrokenAt(const std::string& text, uint64_t line, const std::string& what,
                      const VerifyingKey* key = nullptr) {
    const VerifyReport r = verifyText(text, key);
    ASSERT_FALSE(r.intact()) << "expected a failure at line " << line;
    EXPECT_EQ(r.failure->line, line) << r.summary();
    EXPECT_NE(r.failure->message.find(what), std::string::npos) << r.summary();
    EXPECT_EQ(r.records, line - 1);  // Everything before the first broken record verified.
  }

  // Recomputes `record`'s hash after an edit and returns its line.
  static std::string rehash(json record) {
    record.erase("hash");
    record["hash"] = sha256Hex(canonicalJson(record));
    return canonicalJson(record);
  }

  TempDir dir_;
  core::FakeClock clock_;
  std::shared_ptr<const SigningKey> signing_;
  std::unique_ptr<VerifyingKey> verifying_;
  std::shared_ptr<const SigningKey> other_signing_;
  std::unique_ptr<VerifyingKey> other_verifying_;
};

TEST_F(VerifyTest, AnIntactStreamVerifies) {
  const std::string text = writeStream(20, 5);
  const VerifyReport r = verifyText(text, verifying_.get());
  EXPECT_TRUE(r.intact()) << r.summary();
  EXPECT_EQ(r.records, 24u);  // Checkpoints at seq 6, 12, 18, 24.
  EXPECT_EQ(r.checkpoints, 4u);
  EXPECT_TRUE(r.signatures_checked);
  EXPECT_EQ(r.last_seq, 24u);
  EXPECT_EQ(r.summary(),
            "24 records, 4 checkpoints, chain intact; checkpoint signatures valid "
            "(key " +
                signing_->keyId() + ")");
  EXPECT_EQ(verifyText(text).summary(),
            "24 records, 4 checkpoints, chain intact; checkpoint signatures not checked (no "
            "public key)");
}

// The copy of the last checkpoint kept outside the log: a log cut back to before it, one that
// holds another record at its seq, and a copy that is not a signed checkpoint all fail.
TEST_F(VerifyTest, TheLastCheckpointsCopyCatchesACutOrReplacedLog) {
  const std::string text = writeStream(20, 5);
  const std::vector<std::string> lines = splitLines(text);
  const std::string copy = lines[17] + "\n";  // The checkpoint seq 18.
  auto verifyWith = [&](const std::string& log, const std::string& the_copy) {
    std::istringstream in(log);
    return std::move(verifyAuditStream(in, VerifyOptions{.public_key = verifying_.get(),
                                                         .checkpoint_copy = &the_copy,
                                                         .checkpoint_copy_name = "COPY"}))
        .value();
  };
  VerifyReport r = verifyWith(text, copy);
  EXPECT_TRUE(r.intact()) << r.summary();
  EXPECT_EQ(r.copy_seq, 18U);
  // Cut back to seq 12 (a checkpoint: the shorter chain verifies on its own).
  std::vector<std::string> cut(lines.begin(), lines.begin() + 12);
  ASSERT_TRUE(verifyText(joinLines(cut), verifying_.get()).intact());
  r = verifyWith(joinLines(cut), copy);
  ASSERT_FALSE(r.intact());
  EXPECT_EQ(r.failure->line, 13U);
  EXPECT_NE(r.failure->message.find("the log ends at seq 12, but COPY holds its checkpoint seq 18"),
            std::string::npos)
      << r.summary();
  // Another log signed with the same key (an older one, say) in its place.
  clock_.advance(std::chrono::seconds(1));
  const std::string other = writeStream(20, 5, "other.log");
  ASSERT_TRUE(verifyText(other, verifying_.get()).intact());
  r = verifyWith(other, copy);
  ASSERT_FALSE(r.intact());
  EXPECT_EQ(r.failure->line, 18U);
  EXPECT_NE(r.failure->message.find("not the checkpoint that COPY holds for seq 18"),
            std::string::npos)
      << r.summary();
  // A copy that is no checkpoint, or one that the key did not sign.
  r = verifyWith(text, lines[3] + "\n");
  ASSERT_FALSE(r.intact());
  EXPECT_NE(r.summary().find("COPY is not an audit checkpoint"), std::string::npos) << r.summary();
  json forged = json::parse(lines[17]);
  forged["time"] = "2030-01-01T00:00:00.000Z";
  r = verifyWith(text, rehash(forged));
  ASSERT_FALSE(r.intact());
  EXPECT_NE(r.summary().find("COPY is not signed by the given public key"), std::string::npos)
      << r.summary();
}

// What the report says of the records after the last checkpoint, for `tessera audit verify` to
// tell a live log's young tail from an old one.
TEST_F(VerifyTest, TheReportDescribesTheUnsignedTail) {
  const std::string path = dir_.file("tail.log");
  auto sink = FileSink::open(path,
                             {{.salt = "pepper",
                               .signing_key = signing_,
                               .checkpoint_every = 3,
                               .checkpoint_interval = std::chrono::milliseconds(60000)}},
                             clock_);
  ASSERT_TRUE(sink.isOk());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*sink)->write(testing::sampleEvent(i)).isOk());
    clock_.advance(std::chrono::milliseconds(1500));
  }
  const VerifyReport r = std::move(verifyAuditFile(path, verifying_.get())).value();
  EXPECT_TRUE(r.intact()) << r.summary();
  EXPECT_EQ(r.last_checkpoint_seq, 5U);  // After the new log's first line and 3 records.
  EXPECT_EQ(r.checkpoint_interval_ms, 60000U);
  EXPECT_EQ(r.unsigned_tail, 2U);
  const std::vector<std::string> lines = splitLines(readFile(path));
  EXPECT_EQ(r.tail_first_time, json::parse(lines[5])["time"]);
  EXPECT_EQ(r.summary().find("2 records after the last checkpoint") != std::string::npos, true)
      << r.summary();
}

TEST_F(VerifyTest, AnEmptyStreamIsIntact) {
  const VerifyReport r = verifyText("");
  EXPECT_TRUE(r.intact());
  EXPECT_EQ(r.records, 0u);
}

TEST_F(VerifyTest, VerifyAuditFileReadsAFileAndReportsAMissingOne) {
  writeStream(3, 1000);
  auto r = verifyAuditFile(dir_.file("audit.log"), verifying_.get());
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->intact());
  EXPECT_EQ(r->unsigned_tail, 0u);  // The close checkpoint covers all three.
  auto missing = verifyAuditFile(dir_.file("missing.log"));
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("missing.log"), std::string::npos);
}

// The strongest property: whichever single byte changes, verification fails, and it fails at the
// line holding that byte.
TEST_F(VerifyTest, EveryOneByteEditIsDetectedAtItsLine) {
  const std::string text = writeStream(6, 3);  // 8 lines, two of them checkpoints.
  ASSERT_EQ(splitLines(text).size(), 8u);
  uint64_t line = 1;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    for (const char replacement : {static_cast<char>(text[pos] ^ 0x01), 'x'}) {
      if (replacement == text[pos]) {
        continue;
      }
      std::string edited = text;
      edited[pos] = replacement;
      const VerifyReport r = verifyText(edited);
      ASSERT_FALSE(r.intact()) << "byte " << pos << " changed to '" << replacement
                               << "' went unnoticed";
      ASSERT_EQ(r.failure->line, line) << "byte " << pos << ": " << r.summary();
    }
    if (text[pos] == '\n') {
      ++line;
    }
  }
}

TEST_F(VerifyTest, AnEditInsideAValueIsFoundAtItsRecord) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  const size_t at = lines[6].find("train-");
  ASSERT_NE(at, std::string::npos);
  lines[6][at] = 'b';  // "brain-..."
  expectBrokenAt(joinLines(lines), 7, "hash does not match the record's contents");
}

TEST_F(VerifyTest, AnEditInsidePrevHashIsFoundAtItsRecord) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  const size_t at = lines[8].find("\"prev_hash\":\"") + 20;
  lines[8][at] = lines[8][at] == 'a' ? 'b' : 'a';
  expectBrokenAt(joinLines(lines), 9, "hash does not match");
}

TEST_F(VerifyTest, ADeletedLineIsFoundWhereItWas) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  lines.erase(lines.begin() + 11);  // seq 12.
  expectBrokenAt(joinLines(lines), 12, "seq 13 follows seq 11 (expected 12)");
}

TEST_F(VerifyTest, TwoSwappedLinesAreFoundAtTheFirst) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  std::swap(lines[2], lines[3]);
  expectBrokenAt(joinLines(lines), 3, "seq 4 follows seq 2 (expected 3)");
}

TEST_F(VerifyTest, ADuplicatedLineIsFound) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  lines.insert(lines.begin() + 5, lines[4]);
  expectBrokenAt(joinLines(lines), 6, "seq 5 follows seq 5");
}

TEST_F(VerifyTest, ATruncatedLastLineIsFound) {
  const std::string text = writeStream(20, 5);
  expectBrokenAt(text.substr(0, text.size() - 30), 24, "the last line is incomplete");
  expectBrokenAt(text.substr(0, text.size() - 1), 24, "the last line is incomplete");
}

TEST_F(VerifyTest, ARecordEditedAndRehashedBreaksTheNextLink) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  json record = json::parse(lines[7]);
  record["request"]["path"] = "/v1/tenants/team-1/innocent";
  lines[7] = rehash(record);
  const std::string text = joinLines(lines);
  const VerifyReport r = verifyText(text);
  ASSERT_FALSE(r.intact());
  EXPECT_EQ(r.failure->toString(),
            "line 9 (seq 9): prev_hash does not match the previous record's hash");
}

TEST_F(VerifyTest, ARewrittenTailPassesTheChainButNotTheSignatures) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  // Edit seq 8, then recompute every later prev_hash and hash, as a forger with the file would.
  std::string prev;
  for (size_t i = 7; i < lines.size(); ++i) {
    json record = json::parse(lines[i]);
    if (i == 7) {
      record["error"] = "nothing happened";
    } else {
      record["prev_hash"] = prev;
    }
    lines[i] = rehash(record);
    prev = json::parse(lines[i])["hash"];
  }
  const std::string text = joinLines(lines);
  EXPECT_TRUE(verifyText(text).intact());  // The documented limit of a chain without keys.
  expectBrokenAt(text, 12, "checkpoint signature is not valid", verifying_.get());
}

TEST_F(VerifyTest, CheckpointsSignedByAnotherKeyAreRejected) {
  const std::string text = writeStream(20, 5);
  expectBrokenAt(text, 6,
                 "checkpoint signed by key " + signing_->keyId() +
                     ", not by the given public key " + other_verifying_->keyId(),
                 other_verifying_.get());
}

TEST_F(VerifyTest, AForgedCheckpointClaimingTheRightKeyIsRejected) {
  std::vector<std::string> lines = splitLines(writeStream(20, 5));
  json cp = json::parse(lines[5]);
  cp["checkpoint"]["signature"] = *other_signing_->signHex(checkpointSigningMessage(cp));
  lines[5] = rehash(cp);
  // Keep the chain linked so only the signature is wrong.
  json next = json::parse(lines[6]);
  next["prev_hash"] = json::parse(lines[5])["hash"];
  lines[6] = rehash(next);
  for (size_t i = 7; i < lines.size(); ++i) {
    json r = json::parse(lines[i]);
    r["prev_hash"] = json::parse(lines[i - 1])["hash"];
    lines[i] = rehash(r);
  }
  expectBrokenAt(joinLines(lines), 6, "checkpoint signature is not valid", verifying_.get());
}

TEST_F(VerifyTest, TheFirstRecordMustStartTheChain) {
  std::vector<std::string> lines = splitLines(writeStream(4, 1000));
  lines.erase(lines.begin());
  expectBrokenAt(joinLines(lines), 1, "the first record has seq 2, not 1");
}

// --- Tenant views ---

TEST_F(VerifyTest, ATenantViewHoldsExactlyTheTenantsRecordsByteForByte) {
  const std::string text = writeStream(20, 5);
  std::istringstream in(text);
  auto view = tenantView(in, "team-2");
  ASSERT_TRUE(view.isOk());
  std::vector<std::string> expected;
  for (const std::string& line : splitLines(text)) {
    const json j = json::parse(line);
    if (j.value("tenant", "") == "team-2") {
      expected.push_back(line);
    }
  }
  EXPECT_EQ(*view, expected);
  EXPECT_EQ(view->size(), 6u);  // Events 2, 3, 10, 11, 18, 19.
  const VerifyReport r = verifyTenantView(*view, "team-2");
  EXPECT_TRUE(r.intact()) << r.summary();
  std::istringstream again(text);
  EXPECT_TRUE(checkTenantViewAgainstStream(*view, again, "team-2", verifying_.get())->intact());
  std::istringstream none(text);
  EXPECT_FALSE(tenantView(none, "").isOk());
}

TEST_F(VerifyTest, ATenantChecksItsViewAlone) {
  const std::string text = writeStream(20, 5);
  std::istringstream in(text);
  std::vector<std::string> view = std::move(tenantView(in, "team-1")).value();
  ASSERT_GE(view.size(), 4u);
  // Seq 1 and 2 are adjacent in the stream: their link is checkable from the view.
  EXPECT_EQ(json::parse(view[0])["seq"], 1);
  EXPECT_EQ(json::parse(view[1])["seq"], 2);

  std::vector<std::string> edited = view;
  edited[2][edited[2].find("train-") + 1] = 'x';
  EXPECT_EQ(verifyTenantView(edited, "team-1").failure->line, 3u);

  std::vector<std::string> relinked = view;
  json second = json::parse(relinked[1]);
  second["prev_hash"] = std::string(64, 'f');
  relinked[1] = rehash(second);
  const VerifyReport r = verifyTenantView(relinked, "team-1");
  ASSERT_FALSE(r.intact());
  EXPECT_EQ(r.failure->toString(),
            "line 2 (seq 2): prev_hash does not match the previous record's hash");

  std::vector<std::string> swapped = view;
  std::swap(swapped[1], swapped[2]);
  EXPECT_NE(verifyTenantView(swapped, "team-1").failure->message.find("does not increase"),
            std::string::npos);

  EXPECT_NE(verifyTenantView(view, "team-2").failure->message.find("not a record of tenant"),
            std::string::npos);
}

TEST_F(VerifyTest, TheOperatorChecksAViewAgainstTheWholeStream) {
  const std::string text = writeStream(20, 5);
  std::istringstream in(text);
  const std::vector<std::string> view = std::move(tenantView(in, "team-3")).value();
  ASSERT_EQ(view.size(), 4u);
  auto check = [&](const std::vector<std::string>& v) {
    std::istringstream stream(text);
    return std::move(checkTenantViewAgainstStream(v, stream, "team-3", verifying_.get())).value();
  };

  std::vector<std::string> missing = view;
  missing.erase(missing.begin() + 1);
  VerifyReport r = check(missing);
  ASSERT_FALSE(r.intact());
  EXPECT_EQ(r.failure->line, 2u);
  EXPECT_NE(r.failure->message.find("is missing before this line"), std::string::npos)
      << r.summary();

  // Seq 7 is edited and re-hashed; the tenant's next record (seq 15) is not adjacent to it.
  std::vector<std::string> altered = view;
  json rec = json::parse(altered[1]);
  ASSERT_EQ(rec["seq"], 7);
  ASSERT_EQ(json::parse(altered[2])["seq"], 15);
  rec["error"] = "forged";
  altered[1] = rehash(rec);
  EXPECT_TRUE(verifyTenantView(altered, "team-3").intact());  // A tenant alone cannot tell...
  r = check(altered);                                         // ...the whole stream can.
  ASSERT_FALSE(r.intact());
  EXPECT_EQ(r.failure->line, 2u);
  EXPECT_NE(r.failure->message.find("differs from the operator stream"), std::string::npos);

  std::vector<std::string> truncated(view.begin(), view.end() - 1);
  r = check(truncated);
  ASSERT_FALSE(r.intact());
  EXPECT_NE(r.failure->message.find("lacks the tenant's record"), std::string::npos);

  std::vector<std::string> foreign = view;
  std::istringstream in1(text);
  foreign.push_back(std::move(tenantView(in1, "team-1")).value().back());
  r = check(foreign);
  ASSERT_FALSE(r.intact());
  EXPECT_EQ(r.failure->line, 5u);

  std::string broken_stream = text;
  broken_stream[broken_stream.find("train-")] = 'b';
  std::istringstream bad(broken_stream);
  r = std::move(checkTenantViewAgainstStream(view, bad, "team-3")).value();
  EXPECT_FALSE(r.intact());
  EXPECT_EQ(r.failure->message.find("view"), std::string::npos);  // The stream's own failure.
}

}  // namespace
}  // namespace tessera::audit
