// Runs the real `tessera audit ...` like an operator would, on logs written by the audit library.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "audit/crypto.h"
#include "audit/file_sink.h"
#include "audit/record.h"
#include "process.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using tessera::audit::AuditEvent;
using tessera::audit::AuditType;

using tessera::integration::CmdResult;
using tessera::integration::slurp;

void spit(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}

class CliAuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-cli-audit-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    spit(dir_ / "salt", "pepper\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `tessera ARGS` (standard input from `stdin_text` when given).
  CmdResult tessera(const std::string& args, const std::string* stdin_text = nullptr) {
    std::string redirected = args;
    if (stdin_text != nullptr) {
      spit(dir_ / "stdin.txt", *stdin_text);
      redirected += " <" + (dir_ / "stdin.txt").string();
    }
    return tessera::integration::runTessera(redirected, dir_ / "stderr.txt");
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Creates a signing key with `tessera audit keygen` and writes `events` records with it.
  std::string writeLog(int events, uint64_t checkpoint_every) {
    CmdResult k = tessera("audit keygen --private-key " + path("key.pem") + " --public-key " +
                          path("key.pub.pem"));
    EXPECT_EQ(k.rc, 0) << k.err;
    auto key = tessera::audit::SigningKey::fromPemFile(path("key.pem"));
    EXPECT_TRUE(key.isOk()) << key.status().toString();
    key_id_ = (*key)->keyId();
    tessera::core::FakeClock clock;
    auto sink = tessera::audit::FileSink::open(path("audit.log"),
                                               {{.salt = "pepper",
                                                 .signing_key = std::move(key).value(),
                                                 .checkpoint_every = checkpoint_every}},
                                               clock);
    EXPECT_TRUE(sink.isOk()) << sink.status().toString();
    for (int i = 0; i < events; ++i) {
      AuditEvent e;
      e.type = i % 2 == 0 ? AuditType::kRequest : AuditType::kResponse;
      e.request_id = "req-" + std::to_string(i / 2);
      e.tenant = i % 3 == 0 ? "team-2" : "team-1";
      e.request = {"PUT",
                   "/v1/tenants/" + e.tenant + "/secrets/db",
                   "127.0.0.1",
                   {{"password", "hunter2"}, {"n", i}}};
      EXPECT_TRUE((*sink)->write(e).isOk());
    }
    EXPECT_TRUE((*sink)->close().isOk());
    return path("audit.log");
  }

  fs::path dir_;
  std::string key_id_;
};

// A default `tessera dev` is tamper-evident: its server signs the log's checkpoints with a key it
// made beside the log, `tessera audit verify` finds the public key there, and a log whose
// record is edited and every later hash recomputed (as a forger with the file would) fails.
TEST_F(CliAuditTest, ADefaultDevLogIsTamperEvident) {
  const fs::path data = dir_ / "dev";
  {
    tessera::integration::Process dev(
        {"dev", "--data-dir", data.string(), "--addr", "127.0.0.1:0", "--simulated"},
        dir_ / "dev.out");
    for (int i = 0; i < 300 && slurp(data / "dev.json").empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_FALSE(slurp(data / "dev.json").empty()) << dev.errors();
    // A few requests, as a user would make them.
    const nlohmann::json info = nlohmann::json::parse(slurp(data / "dev.json"));
    const std::string env = "TESSERA_ADDR=" + info["address"].get<std::string>() +
                            " TESSERA_CACERT=" + info["ca_cert"].get<std::string>() +
                            " TESSERA_TENANT= HOME=" + dir_.string() +
                            " TESSERA_TOKEN=" + info["tenant_token"].get<std::string>();
    for (int i = 0; i < 3; ++i) {
      CmdResult ps = tessera::integration::runTessera("ps", dir_ / "ps.err", env);
      ASSERT_EQ(ps.rc, 0) << ps.err;
    }
    EXPECT_EQ(dev.stop(SIGTERM), 0) << dev.errors();  // The log closes with a checkpoint.
  }
  const std::string log = (data / "audit.log").string();
  EXPECT_EQ(fs::status(log + ".signing-key.pem").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  CmdResult pub = tessera("audit pubkey " + log);
  ASSERT_EQ(pub.rc, 0) << pub.err;
  EXPECT_EQ(pub.out, slurp(log + ".public.pem"));
  CmdResult r = tessera("audit verify " + log);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpoint signatures valid"), std::string::npos) << r.out;
  // The forgery: the first record's path changed, every hash and prev_hash after recomputed.
  std::vector<nlohmann::json> records;
  std::istringstream in(slurp(log));
  for (std::string line; std::getline(in, line);) {
    records.push_back(nlohmann::json::parse(line));
  }
  ASSERT_GE(records.size(), 3U);
  EXPECT_EQ(records[0]["type"], "checkpoint");  // A new log's first line states its interval.
  const auto first_request = std::find_if(records.begin(), records.end(),
                                          [](const auto& rec) { return rec["type"] == "request"; });
  ASSERT_NE(first_request, records.end());
  (*first_request)["request"]["path"] = "/v1/sys/nothing-happened";
  std::string forged;
  std::string prev;
  for (nlohmann::json& rec : records) {
    if (!prev.empty()) {
      rec["prev_hash"] = prev;
    }
    rec.erase("hash");
    rec["hash"] = tessera::audit::sha256Hex(tessera::audit::canonicalJson(rec));
    prev = rec["hash"];
    forged += tessera::audit::canonicalJson(rec) + "\n";
  }
  spit(log, forged);
  r = tessera("audit verify " + log);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("signature"), std::string::npos) << r.err;
}

TEST_F(CliAuditTest, VerifyPrintsAOneLineSummaryForAnIntactLog) {
  const std::string log = writeLog(25, 10);  // 25 records, checkpoints after 10, 20, and close.
  CmdResult r = tessera("audit verify " + log + " --public-key " + path("key.pub.pem"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "28 records, 3 checkpoints, chain intact; checkpoint signatures valid (key " +
                       key_id_ + ")\n");
  EXPECT_EQ(r.err, "");
  r = tessera("audit verify " + log);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("signatures not checked"), std::string::npos) << r.out;
}

TEST_F(CliAuditTest, VerifyExitsOneAtTheFirstBrokenRecord) {
  const std::string log = writeLog(25, 10);
  std::string text = slurp(log);
  size_t line_start = 0;
  for (int i = 0; i < 6; ++i) {  // Start of line 7.
    line_start = text.find('\n', line_start) + 1;
  }
  const size_t at = text.find("secrets/db", line_start);
  text[at] = 'S';
  spit(log, text);
  CmdResult r = tessera("audit verify " + log + " --public-key " + path("key.pub.pem"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: " + log +
                       ": line 7 (seq 7): hash does not match the record's contents (6 records "
                       "before it verified)\n");
}

// Records after the last checkpoint are not signed: verify says so with an exit status of its
// own, 3 while they are younger than the writer's checkpoint interval (a live server's tail), 4
// once they are older or the writer promised none (it was killed, or they were changed since).
TEST_F(CliAuditTest, VerifyTellsAnUnsignedTailFromAnIntactOneAndABrokenOne) {
  ASSERT_EQ(tessera("audit keygen --private-key " + path("tail-key.pem") + " --public-key " +
                    path("tail.public.pem"))
                .rc,
            0);
  auto key = tessera::audit::SigningKey::fromPemFile(path("tail-key.pem"));
  ASSERT_TRUE(key.isOk());
  std::shared_ptr<const tessera::audit::SigningKey> signer = std::move(key).value();
  // Writes `n` records to DIR/NAME with wall time `now` and no close (no final checkpoint).
  auto write = [&](const std::string& name, tessera::core::WallTime now,
                   std::chrono::milliseconds interval, int n) {
    tessera::core::FakeClock clock(tessera::core::TimePoint{}, now);
    tessera::audit::FileSinkOptions o{{.salt = "pepper",
                                       .signing_key = signer,
                                       .checkpoint_every = 1000,
                                       .checkpoint_interval = interval}};
    auto sink = tessera::audit::FileSink::open(path(name), o, clock);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    for (int i = 0; i < n; ++i) {
      AuditEvent e;
      e.request_id = "r" + std::to_string(i);
      ASSERT_TRUE((*sink)->write(e).isOk());
    }
  };
  const auto now =
      std::chrono::time_point_cast<tessera::core::Duration>(std::chrono::system_clock::now());
  write("young.log", now, std::chrono::minutes(1), 2);
  CmdResult r =
      tessera("audit verify " + path("young.log") + " --public-key " + path("tail.public.pem"));
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("2 records after the last checkpoint (seq 1) are not signed yet"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("within its checkpoint interval (60000 ms)"), std::string::npos) << r.err;
  write("old.log", now - std::chrono::minutes(5), std::chrono::minutes(1), 2);
  r = tessera("audit verify " + path("old.log") + " --public-key " + path("tail.public.pem"));
  EXPECT_EQ(r.rc, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("longer ago than the writer's checkpoint interval"), std::string::npos)
      << r.err;
  write("no-interval.log", now, std::chrono::milliseconds(0), 1);
  r = tessera("audit verify " + path("no-interval.log") + " --public-key " +
              path("tail.public.pem"));
  EXPECT_EQ(r.rc, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("promised no checkpoint interval"), std::string::npos) << r.err;
  // --checkpoint: a copy of a checkpoint the log no longer holds is a broken log (1).
  const std::string log = writeLog(12, 5);  // Checkpoints at seq 6, 12 and 15 (close).
  std::istringstream lines(slurp(log));
  std::vector<std::string> all;
  for (std::string line; std::getline(lines, line);) {
    all.push_back(line);
  }
  spit(dir_ / "copy", all.back() + "\n");
  all.resize(6);
  std::string cut;
  for (const std::string& line : all) {
    cut += line + "\n";
  }
  spit(log, cut);
  r = tessera("audit verify " + log + " --public-key " + path("key.pub.pem"));
  EXPECT_EQ(r.rc, 0) << r.out << r.err;  // Cut at a checkpoint: valid on its own.
  r = tessera("audit verify " + log + " --public-key " + path("key.pub.pem") + " --checkpoint " +
              path("copy"));
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(
      r.err.find("the log ends at seq 6, but " + path("copy") + " holds its checkpoint seq 15"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(tessera("audit verify " + log + " --checkpoint " + path("missing")).rc, 2);
}

TEST_F(CliAuditTest, VerifyWithAnotherKeyExitsOne) {
  const std::string log = writeLog(12, 5);
  ASSERT_EQ(tessera("audit keygen --private-key " + path("other.pem") + " --public-key " +
                    path("other.pub.pem"))
                .rc,
            0);
  CmdResult r = tessera("audit verify " + log + " --public-key " + path("other.pub.pem"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("line 6 (seq 6): checkpoint signed by key " + key_id_), std::string::npos)
      << r.err;
}

TEST_F(CliAuditTest, VerifyExitsTwoOnUnreadableInput) {
  CmdResult r = tessera("audit verify " + path("missing.log"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("missing.log: cannot open"), std::string::npos) << r.err;
  const std::string log = writeLog(2, 10);
  spit(dir_ / "bad.pem", "not a key\n");
  r = tessera("audit verify " + log + " --public-key " + path("bad.pem"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("PUBLIC KEY"), std::string::npos) << r.err;
  EXPECT_EQ(tessera("audit verify").rc, 2);  // No file: a usage error.
}

TEST_F(CliAuditTest, HashFindsASecretInTheLogWithoutItBeingThere) {
  const std::string log = writeLog(3, 10);
  const std::string text = slurp(log);
  EXPECT_EQ(text.find("hunter2"), std::string::npos);
  CmdResult r = tessera("audit hash --salt-file " + path("salt") + " hunter2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, tessera::audit::hmacValue("pepper", "hunter2") + "\n");
  const std::string hmac = r.out.substr(0, r.out.size() - 1);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_NE(text.find("\"password\":\"" + hmac + "\""), std::string::npos);

  const std::string from_stdin = "hunter2\n";
  r = tessera("audit hash --salt-file " + path("salt") + " -", &from_stdin);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, hmac + "\n");
  EXPECT_NE(tessera("audit hash --salt-file " + path("salt") + " hunter3").out, hmac + "\n");
}

TEST_F(CliAuditTest, HashOfJsonUsesTheCanonicalForm) {
  CmdResult r =
      tessera("audit hash --json --salt-file " + path("salt") + " '{\"b\": 1, \"a\": 2}'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, tessera::audit::hmacValue("pepper", R"({"a":2,"b":1})") + "\n");
  r = tessera("audit hash --json --salt-file " + path("salt") + " '\"plain\"'");
  EXPECT_EQ(r.out, tessera::audit::hmacValue("pepper", "plain") + "\n");
  EXPECT_EQ(tessera("audit hash --json --salt-file " + path("salt") + " '{'").rc, 2);
  EXPECT_EQ(tessera("audit hash --salt-file " + path("missing") + " x").rc, 2);
}

TEST_F(CliAuditTest, KeygenNeverOverwritesAKey) {
  ASSERT_EQ(
      tessera("audit keygen --private-key " + path("k.pem") + " --public-key " + path("k.pub")).rc,
      0);
  EXPECT_EQ(fs::status(path("k.pem")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  const std::string before = slurp(path("k.pem"));
  CmdResult r =
      tessera("audit keygen --private-key " + path("k.pem") + " --public-key " + path("k2.pub"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("already exists"), std::string::npos);
  EXPECT_EQ(slurp(path("k.pem")), before);
}

TEST_F(CliAuditTest, ViewPrintsOneTenantsRecordsByteForByte) {
  const std::string log = writeLog(9, 100);
  CmdResult r = tessera("audit view " + log + " --tenant team-2");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int n = 0;
  const std::string text = slurp(log);
  while (std::getline(lines, line)) {
    ++n;
    EXPECT_NE(line.find("\"tenant\":\"team-2\""), std::string::npos);
    EXPECT_NE(text.find(line + "\n"), std::string::npos);
  }
  EXPECT_EQ(n, 3);  // Events 0, 3, 6.
}

TEST_F(CliAuditTest, HelpExplainsTheCommands) {
  CmdResult r = tessera("audit --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* word : {"verify", "hash", "keygen", "view", "prev_hash", "hmac-sha256"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
  r = tessera("audit verify --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* word : {"--public-key", "Exit status", "first broken record"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
  r = tessera("audit hash --help");
  EXPECT_NE(r.out.find("HMAC-SHA256(key = salt"), std::string::npos) << r.out;
  EXPECT_EQ(tessera("audit").rc, 2);  // A subcommand is required.
}

}  // namespace
