#include "audit/file_sink.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "audit/test_util.h"
#include "audit/verify.h"

namespace tessera::audit {
namespace {

using nlohmann::json;
using testing::readFile;
using testing::sampleEvent;
using testing::splitLines;
using testing::TempDir;
using testing::writeFile;

// Lowers this process's file size limit (RLIMIT_FSIZE) for the scope: writes past it fail with
// EFBIG, for root too, which makes a real "disk full" for one file.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // Else the kernel kills the process.
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
  bool ok_ = false;
};

class FileSinkTest : public ::testing::TestWithParam<SyncMode> {
 protected:
  void SetUp() override {
    auto pair = generateKeyPairPem();
    signing_ = std::move(SigningKey::fromPem(pair->private_pem)).value();
    verifying_ = std::move(VerifyingKey::fromPem(pair->public_pem)).value();
    path_ = dir_.file("audit.log");
  }

  FileSinkOptions options(uint64_t checkpoint_every = 1000) const {
    return {{.salt = "pepper", .signing_key = signing_, .checkpoint_every = checkpoint_every},
            GetParam()};
  }

  std::unique_ptr<FileSink> open(uint64_t checkpoint_every = 1000) {
    auto sink = FileSink::open(path_, options(checkpoint_every), clock_);
    EXPECT_TRUE(sink.isOk()) << sink.status().toString();
    return sink.isOk() ? std::move(sink).value() : nullptr;
  }

  VerifyReport verify() { return std::move(verifyAuditFile(path_, verifying_.get())).value(); }

  TempDir dir_;
  std::string path_;
  core::FakeClock clock_;
  std::shared_ptr<const SigningKey> signing_;
  std::unique_ptr<VerifyingKey> verifying_;
};

TEST_P(FileSinkTest, WritesAVerifiableChain) {
  auto sink = open(4);
  ASSERT_NE(sink, nullptr);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(sink->write(sampleEvent(i)).isOk());
  }
  ASSERT_TRUE(sink->close().isOk());
  const VerifyReport r = verify();
  EXPECT_TRUE(r.intact()) << r.summary();
  EXPECT_EQ(r.records, 13u);  // 10 records, checkpoints after 4 and 8, and on close.
  EXPECT_EQ(r.checkpoints, 3u);
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_P(FileSinkTest, ARecordIsInTheFileWhenWriteReturns) {
  auto sink = open();
  ASSERT_TRUE(sink->write(sampleEvent(0)).isOk());
  // Read through another descriptor before any close: nothing is buffered in the process.
  const std::vector<std::string> lines = splitLines(readFile(path_));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["request_id"], "req-0");
}

TEST_P(FileSinkTest, SensitiveValuesNeverAppearInClear) {
  auto sink = open();
  AuditEvent e = sampleEvent(1);
  e.auth.accessor = "acc-7f3a9c";
  e.request.body["password"] = "hunter2-secret";
  e.request.body["data"] = {{"aws_key", "AKIAEXAMPLEKEY99"}};
  e.response.body["auth"] = {{"client_token", "s.TOKENVALUE123"}};
  e.sensitive = {"/request/body/data/aws_key"};
  ASSERT_TRUE(sink->write(e).isOk());
  ASSERT_TRUE(sink->close().isOk());
  const std::string file = readFile(path_);
  for (const char* clear :
       {"acc-7f3a9c", "hunter2-secret", "AKIAEXAMPLEKEY99", "s.TOKENVALUE123"}) {
    EXPECT_EQ(file.find(clear), std::string::npos) << clear << " is in the file in clear";
    EXPECT_NE(file.find(hmacValue("pepper", clear)), std::string::npos) << clear;
  }
  EXPECT_NE(file.find("train-1"), std::string::npos);  // Not everything is hidden.
}

TEST_P(FileSinkTest, ReopeningResumesTheChain) {
  {
    auto sink = open();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(sink->write(sampleEvent(i)).isOk());
    }
    ASSERT_TRUE(sink->close().isOk());  // Checkpoint: seq 4.
  }
  std::string head_hash;
  {
    auto sink = open();
    EXPECT_EQ(sink->head().seq, 4u);
    ASSERT_TRUE(sink->write(sampleEvent(3)).isOk());
    ASSERT_TRUE(sink->write(sampleEvent(4)).isOk());
    head_hash = sink->head().hash;
    // Destroyed without close, as in a crash: no final checkpoint.
  }
  {
    auto sink = open();
    EXPECT_EQ(sink->head().seq, 6u);
    EXPECT_EQ(sink->head().hash, head_hash);
    ASSERT_TRUE(sink->write(sampleEvent(5)).isOk());
    ASSERT_TRUE(sink->close().isOk());
  }
  const std::vector<std::string> lines = splitLines(readFile(path_));
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(json::parse(lines[4])["seq"], 5);
  EXPECT_EQ(json::parse(lines[4])["prev_hash"], json::parse(lines[3])["hash"]);
  EXPECT_EQ(json::parse(lines[7])["type"], "checkpoint");
  const VerifyReport r = verify();
  EXPECT_TRUE(r.intact()) << r.summary();
  EXPECT_EQ(r.checkpoints, 2u);
}

TEST_P(FileSinkTest, OpenRefusesAFileWhoseLastRecordIsIncomplete) {
  {
    auto sink = open();
    ASSERT_TRUE(sink->write(sampleEvent(0)).isOk());
    ASSERT_TRUE(sink->write(sampleEvent(1)).isOk());
  }
  std::string content = readFile(path_);
  writeFile(path_, content.substr(0, content.size() - 20));  // The last line lost its end.
  auto sink = FileSink::open(path_, options(), clock_);
  ASSERT_FALSE(sink.isOk());
  EXPECT_EQ(sink.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(sink.status().message().find("the last record is incomplete"), std::string::npos)
      << sink.status().message();
  EXPECT_NE(sink.status().message().find(path_), std::string::npos);
}

TEST_P(FileSinkTest, OpenRefusesAFileWhoseLastRecordIsCorrupt) {
  {
    auto sink = open();
    ASSERT_TRUE(sink->write(sampleEvent(0)).isOk());
    ASSERT_TRUE(sink->write(sampleEvent(1)).isOk());
  }
  std::string content = readFile(path_);
  content[content.rfind("train-1") + 6] = '9';
  writeFile(path_, content);
  auto sink = FileSink::open(path_, options(), clock_);
  ASSERT_FALSE(sink.isOk());
  EXPECT_NE(sink.status().message().find("the last record is corrupt: hash does not match"),
            std::string::npos)
      << sink.status().message();
}

TEST_P(FileSinkTest, OpenReadsALastRecordLongerThanOneReadChunk) {
  {
    auto sink = open();
    ASSERT_TRUE(sink->write(sampleEvent(0)).isOk());
    AuditEvent big = sampleEvent(1);
    big.request.body["blob"] = std::string(200'000, 'x');
    ASSERT_TRUE(sink->write(big).isOk());
  }
  auto sink = open();
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->head().seq, 2u);
}

TEST_P(FileSinkTest, OpenRefusesWhatIsNotARegularFile) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto sink = FileSink::open(fifo, options(), clock_);
  ASSERT_FALSE(sink.isOk());
  EXPECT_NE(sink.status().message().find("not a regular file"), std::string::npos);
  EXPECT_FALSE(FileSink::open(dir_.file("no/such/dir/audit.log"), options(), clock_).isOk());
}

TEST_P(FileSinkTest, OnlyOneSinkAtATimeHoldsAFile) {
  auto first = open();
  auto second = FileSink::open(path_, options(), clock_);
  ASSERT_FALSE(second.isOk());
  EXPECT_NE(second.status().message().find("already open"), std::string::npos);
  first.reset();
  EXPECT_TRUE(FileSink::open(path_, options(), clock_).isOk());
}

TEST_P(FileSinkTest, AnEmptySaltIsRefused) {
  FileSinkOptions o = options();
  o.sink.salt = "";
  EXPECT_EQ(FileSink::open(path_, o, clock_).status().code(), core::StatusCode::kInvalidArgument);
}

TEST_P(FileSinkTest, AFailedWriteIsReportedAndLeavesNoPartialRecord) {
  auto sink = open();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sink->write(sampleEvent(i)).isOk());
  }
  const std::string before = readFile(path_);
  {
    // Room for a few bytes of the next record only: the write fails part way.
    FileSizeLimit limit(before.size() + 40);
    ASSERT_TRUE(limit.ok());
    const core::Status s = sink->write(sampleEvent(3));
    ASSERT_FALSE(s.isOk());
    EXPECT_EQ(s.code(), core::StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("cannot write the audit record"), std::string::npos) << s.message();
  }
  EXPECT_EQ(readFile(path_), before);               // The partial record was taken back.
  ASSERT_TRUE(sink->write(sampleEvent(4)).isOk());  // Space again: the chain goes on.
  ASSERT_TRUE(sink->close().isOk());
  const std::vector<std::string> lines = splitLines(readFile(path_));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(json::parse(lines[3])["seq"], 4);
  EXPECT_EQ(json::parse(lines[3])["request_id"], "req-2");  // sampleEvent(4).
  EXPECT_TRUE(verify().intact()) << verify().summary();
}

TEST_P(FileSinkTest, ConcurrentWritersProduceOneValidChain) {
  auto sink = open(50);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 150;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        ASSERT_TRUE(sink->write(sampleEvent(i, "team-" + std::to_string(t))).isOk());
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  ASSERT_TRUE(sink->close().isOk());
  const VerifyReport r = verify();
  EXPECT_TRUE(r.intact()) << r.summary();
  EXPECT_EQ(r.records - r.checkpoints, uint64_t{kThreads * kPerThread});
  EXPECT_EQ(r.checkpoints, uint64_t{kThreads * kPerThread / 50});
}

// Waits up to 10 s for `done`.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_P(FileSinkTest, WhenDurableAnswersOnceWhatWasAppendedIsFlushed) {
  auto sink = open();
  // Nothing waiting to be flushed: answered at once, here.
  std::optional<core::Status> now;
  sink->whenDurable([&](const core::Status& s) { now = s; });
  ASSERT_TRUE(now.has_value());
  EXPECT_TRUE(now->isOk());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sink->write(sampleEvent(i), Durability::kAppended).isOk());
  }
  std::mutex mu;
  std::optional<core::Status> status;
  std::thread::id answered_on;
  sink->whenDurable([&](const core::Status& s) {
    std::lock_guard lock(mu);
    status = s;
    answered_on = std::this_thread::get_id();
  });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return status.has_value();
  }));
  std::lock_guard lock(mu);
  EXPECT_TRUE(status->isOk()) << status->toString();
  EXPECT_EQ(splitLines(readFile(path_)).size(), 3U);
  // Group commit answers from the sink's flusher, so the caller never waits for the disk;
  // kEveryRecord flushes on the caller's thread.
  if (GetParam() == SyncMode::kGroupCommit) {
    EXPECT_NE(answered_on, std::this_thread::get_id());
  } else {
    EXPECT_EQ(answered_on, std::this_thread::get_id());
  }
}

TEST_P(FileSinkTest, EveryWhenDurableIsAnsweredOnceEvenIfTheSinkGoesFirst) {
  auto sink = open(50);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100;
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        ASSERT_TRUE(
            sink->write(sampleEvent(i, "team-" + std::to_string(t)), Durability::kAppended).isOk());
        sink->whenDurable([&](core::Status s) { ++(s.isOk() ? ok : failed); });
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  ASSERT_TRUE(eventually([&] { return ok + failed == kThreads * kPerThread; }));
  EXPECT_EQ(ok, kThreads * kPerThread);
  // Callbacks still waiting when the sink is destroyed (without close) are answered before
  // the destructor returns, after a last flush.
  ASSERT_TRUE(sink->write(sampleEvent(0), Durability::kAppended).isOk());
  bool last = false;
  sink->whenDurable([&](core::Status s) { last = s.isOk(); });
  sink.reset();
  EXPECT_TRUE(last);
  const VerifyReport r = verify();
  EXPECT_TRUE(r.intact()) << r.summary();
  EXPECT_EQ(r.records - r.checkpoints, uint64_t{kThreads * kPerThread + 1});
  // After close, everything is flushed: answered at once.
  auto reopened = open();
  ASSERT_TRUE(reopened->write(sampleEvent(1), Durability::kAppended).isOk());
  ASSERT_TRUE(reopened->close().isOk());
  std::optional<core::Status> after_close;
  reopened->whenDurable([&](core::Status s) { after_close = s; });
  ASSERT_TRUE(after_close.has_value());
  EXPECT_TRUE(after_close->isOk());
}

TEST_P(FileSinkTest, AFailedFlushFailsItsWaitersAndStopsTheSink) {
  std::atomic<bool> fail{false};
  FileSinkOptions o = options();
  o.fdatasync = [&fail](int fd) {
    if (fail) {
      errno = EIO;
      return -1;
    }
    return ::fdatasync(fd);
  };
  auto opened = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(opened.isOk());
  auto sink = std::move(opened).value();
  ASSERT_TRUE(sink->write(sampleEvent(0)).isOk());
  ASSERT_TRUE(sink->write(sampleEvent(1), Durability::kAppended).isOk());
  fail = true;
  // A read's answer waiting for this flush must get the error, never OK.
  std::promise<core::Status> answer;
  sink->whenDurable([&](const core::Status& s) { answer.set_value(s); });
  std::future<core::Status> answered = answer.get_future();
  ASSERT_EQ(answered.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const core::Status s = answered.get();
  EXPECT_EQ(s.code(), core::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("fdatasync failed: Input/output error"), std::string::npos)
      << s.message();
  // The sink is broken until reopened (the kernel may have dropped the data): writes are
  // refused and later waiters get the error at once, even with the disk well again.
  fail = false;
  const core::Status refused = sink->write(sampleEvent(2));
  EXPECT_NE(refused.message().find("stopped taking records"), std::string::npos)
      << refused.message();
  std::optional<core::Status> later;
  sink->whenDurable([&](const core::Status& st) { later = st; });
  ASSERT_TRUE(later.has_value());
  EXPECT_FALSE(later->isOk());
  // A writer that waits for its own flush gets the error too.
  sink.reset();
  opened = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(opened.isOk());
  sink = std::move(opened).value();
  fail = true;
  const core::Status durable = sink->write(sampleEvent(3));
  EXPECT_NE(durable.message().find("fdatasync failed"), std::string::npos) << durable.message();
}

TEST_P(FileSinkTest, AppendedRecordsAreFlushedByTheSinkAfterTheDelayAndShareTheFlush) {
  using std::chrono::steady_clock;
  std::mutex mu;
  std::vector<std::pair<steady_clock::time_point, off_t>> flushes;  // When, and the file's size.
  FileSinkOptions o = options();
  o.appended_flush_delay = std::chrono::milliseconds(300);
  o.fdatasync = [&](int fd) {
    struct stat st {};
    ::fstat(fd, &st);
    std::lock_guard lock(mu);
    flushes.emplace_back(steady_clock::now(), st.st_size);
    return ::fdatasync(fd);
  };
  auto opened = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(opened.isOk());
  auto sink = std::move(opened).value();
  const auto first_append = steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(sink->write(sampleEvent(i), Durability::kAppended).isOk());
  }
  const auto size = static_cast<off_t>(std::filesystem::file_size(path_));
  // No durable write and no waiter: the sink flushes them by itself.
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return !flushes.empty() && flushes.back().second >= size;
  }));
  {
    std::lock_guard lock(mu);
    // Not before the delay (nothing else asked for a flush), and one flush for all twenty.
    EXPECT_GE(flushes.front().first - first_append, o.appended_flush_delay);
    EXPECT_EQ(flushes.size(), 1U);
  }
  // A record appended while the flusher has nothing to do is flushed as well.
  ASSERT_TRUE(sink->write(sampleEvent(20), Durability::kAppended).isOk());
  const auto grown = static_cast<off_t>(std::filesystem::file_size(path_));
  EXPECT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return flushes.back().second >= grown;
  }));
}

TEST_P(FileSinkTest, AppendedRecordsAreFlushedWhenTheSinkGoes) {
  std::atomic<off_t> flushed{-1};
  FileSinkOptions o = options();
  o.appended_flush_delay = std::chrono::hours(1);
  o.fdatasync = [&](int fd) {
    struct stat st {};
    ::fstat(fd, &st);
    flushed = st.st_size;
    return ::fdatasync(fd);
  };
  auto opened = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(opened.isOk());
  auto sink = std::move(opened).value();
  ASSERT_TRUE(sink->write(sampleEvent(0), Durability::kAppended).isOk());
  const auto size = static_cast<off_t>(std::filesystem::file_size(path_));
  sink.reset();  // Without close: no checkpoint, but the record is flushed first.
  EXPECT_EQ(flushed, size);
}

TEST_P(FileSinkTest, AFailedFlushWithAppendedRecordsLeftLeavesTheFlusherAsleep) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> calls{0};
  FileSinkOptions o = options();
  o.appended_flush_delay = std::chrono::milliseconds(0);
  o.fdatasync = [&](int) {
    ++calls;
    released.wait();
    errno = EIO;
    return -1;
  };
  auto opened = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(opened.isOk());
  auto sink = std::move(opened).value();
  ASSERT_TRUE(sink->write(sampleEvent(0), Durability::kAppended).isOk());
  ASSERT_TRUE(eventually([&] { return calls == 1; }));
  // Appended while that flush is under way: it waits for the next one, which never comes,
  // since the one under way fails and the sink stops.
  ASSERT_TRUE(sink->write(sampleEvent(1), Durability::kAppended).isOk());
  release.set_value();
  ASSERT_TRUE(eventually([&] {
    return sink->write(sampleEvent(2), Durability::kAppended)
               .message()
               .find("stopped taking records") != std::string::npos;
  }));
  // The flusher sleeps now: it neither retries nor spins on a deadline long past.
  const std::clock_t cpu0 = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_ms, 100) << "the flusher is busy while the sink is broken";
  EXPECT_EQ(calls, 1);
}

// stats() (the server's audit metrics): every line and byte written, each flush timed once,
// and a failed flush counted as a failure, not a flush.
TEST_P(FileSinkTest, StatsCountLinesBytesAndFlushes) {
  std::atomic<bool> fail{false};
  std::atomic<int> flushes{0};
  FileSinkOptions o = options(/*checkpoint_every=*/2);
  o.fdatasync = [&](int fd) {
    if (fail) {
      errno = EIO;
      return -1;
    }
    ++flushes;
    return ::fdatasync(fd);
  };
  auto opened = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(opened.isOk());
  auto sink = std::move(opened).value();
  const int opening_flushes = flushes;  // Creating the file flushes it, outside the stats.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sink->write(sampleEvent(i)).isOk());
  }
  SinkStats st = sink->stats();
  const std::vector<std::string> lines = splitLines(readFile(path_));
  EXPECT_EQ(st.records, lines.size());  // 3 records and a checkpoint after the second.
  EXPECT_EQ(st.records, 4U);
  EXPECT_EQ(st.bytes, readFile(path_).size());
  EXPECT_EQ(st.flushes, static_cast<uint64_t>(flushes - opening_flushes));
  EXPECT_GE(st.flushes, 1U);
  uint64_t in_buckets = 0;
  for (uint64_t n : st.flush_buckets) {
    in_buckets += n;
  }
  EXPECT_EQ(in_buckets, st.flushes);
  EXPECT_EQ(st.flush_buckets.size(), std::size(kFlushSecondsBounds) + 1);
  EXPECT_GE(st.flush_seconds, 0);
  EXPECT_EQ(st.flush_failures, 0U);
  fail = true;
  EXPECT_FALSE(sink->write(sampleEvent(3)).isOk());
  st = sink->stats();
  EXPECT_EQ(st.flush_failures, 1U);
  EXPECT_EQ(st.flushes, static_cast<uint64_t>(flushes - opening_flushes));
}

bool endsWithACheckpoint(const std::string& path) {
  const std::vector<std::string> lines = splitLines(readFile(path));
  return !lines.empty() && json::parse(lines.back())["type"] == "checkpoint";
}

// With a checkpoint interval, the records after the last checkpoint are signed within it while
// the sink runs (no close, no count reached), and each such checkpoint states the interval.
TEST_P(FileSinkTest, ATimerSignsTheTailWithinTheInterval) {
  FileSinkOptions o = options();
  o.sink.checkpoint_interval = std::chrono::milliseconds(20);
  auto sink = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(sink.isOk()) << sink.status().toString();
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE((*sink)->write(sampleEvent(2 * round), Durability::kAppended).isOk());
    ASSERT_TRUE((*sink)->write(sampleEvent(2 * round + 1)).isOk());
    ASSERT_TRUE(eventually([&] { return endsWithACheckpoint(path_); })) << readFile(path_);
    const VerifyReport r = verify();
    EXPECT_TRUE(r.intact()) << r.summary();
    EXPECT_EQ(r.unsigned_tail, 0U);
    // The new log's first line, and one per round: none while nothing is unsigned.
    EXPECT_EQ(r.checkpoints, round + 2U);
    EXPECT_EQ(r.checkpoint_interval_ms, 20U);
  }
  // The timer's checkpoint is made durable by the timer too.
  EXPECT_TRUE(eventually([&] { return (*sink)->durableSeq() == 7U; }));
  ASSERT_TRUE((*sink)->close().isOk());
  EXPECT_EQ(verify().records, 7U);  // Nothing unsigned at the close: no extra checkpoint.
}

// A sink opened on a log whose writer was killed before it signed the tail signs it within the
// interval, without waiting for a record of its own.
TEST_P(FileSinkTest, AnUnsignedTailFoundAtOpenIsSignedWithinTheInterval) {
  {
    auto sink = open();
    ASSERT_TRUE(sink->write(sampleEvent(0)).isOk());
  }  // Destroyed without close: no final checkpoint.
  EXPECT_EQ(verify().unsigned_tail, 1U);
  FileSinkOptions o = options();
  o.sink.checkpoint_interval = std::chrono::milliseconds(20);
  auto sink = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(sink.isOk()) << sink.status().toString();
  ASSERT_TRUE(eventually([&] { return endsWithACheckpoint(path_); })) << readFile(path_);
  EXPECT_EQ(verify().unsigned_tail, 0U);
}

// The copy of the last checkpoint follows every durable checkpoint (by count, on the timer, on
// close), and a sink refuses to open a log that ends before the checkpoint its copy holds.
TEST_P(FileSinkTest, TheCheckpointCopyFollowsTheLogAndACutLogIsRefused) {
  FileSinkOptions o = options(3);
  o.checkpoint_copy = dir_.file("audit.log.checkpoint");
  auto last_line = [&] { return splitLines(readFile(path_)).back(); };
  {
    auto sink = FileSink::open(path_, o, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE((*sink)->write(sampleEvent(i)).isOk());
    }
    // The count's checkpoint (seq 4) is durable: the flusher copies it.
    ASSERT_TRUE(eventually([&] { return readFile(o.checkpoint_copy) == last_line() + "\n"; }))
        << readFile(o.checkpoint_copy);
    ASSERT_TRUE((*sink)->write(sampleEvent(3)).isOk());
    ASSERT_TRUE((*sink)->close().isOk());
    EXPECT_EQ(readFile(o.checkpoint_copy), last_line() + "\n");  // The close's, seq 6.
  }
  struct stat st {};
  ASSERT_EQ(::stat(o.checkpoint_copy.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  // Reopened as it is, the log goes on; cut back to before seq 6, it is refused.
  const std::string whole = readFile(path_);
  {
    auto sink = FileSink::open(path_, o, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
  }
  std::vector<std::string> lines = splitLines(whole);
  lines.resize(4);  // Up to the count's checkpoint, seq 4.
  writeFile(path_, testing::joinLines(lines));
  auto cut = FileSink::open(path_, o, clock_);
  ASSERT_FALSE(cut.isOk());
  EXPECT_NE(cut.status().message().find("the log ends at seq 4, but its last checkpoint was seq 6"),
            std::string::npos)
      << cut.status().toString();
  EXPECT_EQ(json::parse(readFile(o.checkpoint_copy))["seq"], 6);  // The evidence stays.
}

// The files of a rotated log, oldest first: the rotated ones (by name), then the live one.
std::vector<std::string> logFiles(const std::string& path) {
  const std::filesystem::path log(path);
  std::vector<std::pair<std::string, std::string>> rotated;
  for (const auto& e : std::filesystem::directory_iterator(log.parent_path())) {
    std::string order;
    if (isRotatedName(log.filename().string(), e.path().filename().string(), &order)) {
      rotated.emplace_back(order, e.path().string());
    }
  }
  std::sort(rotated.begin(), rotated.end());
  std::vector<std::string> files;
  for (const auto& [order, file] : rotated) {
    files.push_back(file);
  }
  files.push_back(path);
  return files;
}

// Replaces `from` by `to` (the same length) in the first line of `file` that holds it, without
// recomputing its hash: an edit of a record in place.
void editInPlace(const std::string& file, const std::string& from, const std::string& to) {
  std::string text = readFile(file);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  writeFile(file, text);
}

TEST(RotatedNameTest, OnlyTheSinksOwnNamesCount) {
  std::string a, b, c;
  EXPECT_TRUE(isRotatedName("audit.log", "audit.log.20240501T123456.789Z", &a));
  EXPECT_TRUE(isRotatedName("audit.log", "audit.log.20240501T123456.789Z-2", &b));
  EXPECT_TRUE(isRotatedName("audit.log", "audit.log.20240501T123456.789Z-10", &c));
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);  // -10 after -2.
  for (const char* other : {"audit.log", "audit.log.checkpoint", "audit.log.1", "audit.log.salt",
                            "audit.log.public.pem", "audit.log.20240501T123456.789Z.gz",
                            "other.log.20240501T123456.789Z", "audit.log.20240501T123456.789Z-x"}) {
    EXPECT_FALSE(isRotatedName("audit.log", other)) << other;
  }
}

// Rotation by size: each rotated file ends with an "end" checkpoint, the next starts with a
// "start" checkpoint chained to it, and the set verifies as one chain in any order. A missing
// middle file, or one byte changed in the oldest file, fails and names the file.
TEST_P(FileSinkTest, RotationBySizeKeepsOneChainAcrossFiles) {
  FileSinkOptions o = options();
  o.rotate_bytes = 2000;
  o.checkpoint_copy = path_ + ".checkpoint";
  {
    auto sink = FileSink::open(path_, o, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE((*sink)->write(sampleEvent(i)).isOk());
    }
    ASSERT_TRUE((*sink)->close().isOk());
  }
  const std::vector<std::string> files = logFiles(path_);
  ASSERT_GE(files.size(), 4U);
  uint64_t lines = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::vector<std::string> ls = splitLines(readFile(files[i]));
    ASSERT_FALSE(ls.empty()) << files[i];
    lines += ls.size();
    const json first = json::parse(ls.front());
    const json last = json::parse(ls.back());
    if (i + 1 < files.size()) {
      EXPECT_EQ(last["checkpoint"]["file"], "end") << files[i];
      // A file is rotated once it reaches the size, so it is at most one record and the end
      // checkpoint past it.
      EXPECT_LT(readFile(files[i]).size(), 2000U + 1500U) << files[i];
      const json next = json::parse(splitLines(readFile(files[i + 1])).front());
      EXPECT_EQ(next["checkpoint"]["file"], "start") << files[i + 1];
      EXPECT_EQ(next["prev_hash"], last["hash"]);
      EXPECT_EQ(next["seq"], last["seq"].get<uint64_t>() + 1);
    }
    if (i > 0) {
      EXPECT_EQ(first["checkpoint"]["file"], "start");
    }
  }
  const std::string copy = readFile(o.checkpoint_copy);
  const VerifyOptions vo{.public_key = verifying_.get(), .checkpoint_copy = &copy};
  std::vector<std::string> shuffled(files.rbegin(), files.rend());
  auto r = verifyAuditFiles(shuffled, vo);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(r->intact()) << r->summary();
  EXPECT_EQ(r->records, lines);
  EXPECT_EQ(r->first_seq, 1U);
  EXPECT_EQ(r->files.size(), files.size());
  EXPECT_EQ(r->files.front().path, files.front());  // Put in chain order.
  EXPECT_EQ(r->unsigned_tail, 0U);
  EXPECT_NE(r->summary().find(fmt::format("in {} files", files.size())), std::string::npos)
      << r->summary();

  // The live file alone starts at its "start" checkpoint: it verifies, and says where it starts.
  auto live = verifyAuditFiles(std::vector<std::string>{path_}, vo);
  ASSERT_TRUE(live.isOk());
  EXPECT_TRUE(live->intact()) << live->summary();
  EXPECT_NE(live->summary().find("(earlier files removed)"), std::string::npos) << live->summary();

  // A missing middle file.
  std::vector<std::string> gap = files;
  gap.erase(gap.begin() + 1);
  auto g = verifyAuditFiles(gap, vo);
  ASSERT_TRUE(g.isOk());
  ASSERT_FALSE(g->intact());
  EXPECT_EQ(g->failure->file, files[2]);
  EXPECT_NE(g->failure->message.find("the previous file, " + files[0]), std::string::npos)
      << g->summary();
  EXPECT_NE(g->failure->message.find("are missing"), std::string::npos) << g->summary();

  // The same file twice.
  std::vector<std::string> twice = files;
  twice.push_back(files[1]);
  auto t = verifyAuditFiles(twice, vo);
  ASSERT_TRUE(t.isOk());
  EXPECT_FALSE(t->intact());

  // One edit in the oldest (rotated) file, hashes not recomputed.
  editInPlace(files[0], "\"train-2\"", "\"train-9\"");
  auto e = verifyAuditFiles(files, vo);
  ASSERT_TRUE(e.isOk());
  ASSERT_FALSE(e->intact());
  EXPECT_EQ(e->failure->file, files[0]);
  EXPECT_NE(e->summary().find(files[0] + ": line "), std::string::npos) << e->summary();
}

// Without a signing key the files link by prev_hash alone: the set verifies, and a gap fails.
TEST_P(FileSinkTest, RotationWithoutAKeyLinksTheFilesByPrevHash) {
  FileSinkOptions o = options();
  o.sink.signing_key = nullptr;
  o.rotate_bytes = 1500;
  {
    auto sink = FileSink::open(path_, o, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE((*sink)->write(sampleEvent(i)).isOk());
    }
    ASSERT_TRUE((*sink)->close().isOk());
  }
  const std::vector<std::string> files = logFiles(path_);
  ASSERT_GE(files.size(), 3U);
  auto r = verifyAuditFiles(files, VerifyOptions{});
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->intact()) << r->summary();
  EXPECT_EQ(r->records, 20U);
  std::vector<std::string> gap = files;
  gap.erase(gap.begin() + 1);
  auto g = verifyAuditFiles(gap, VerifyOptions{});
  ASSERT_TRUE(g.isOk());
  EXPECT_FALSE(g->intact());
}

// retain_files keeps the newest rotated files; what is left starts at a signed "start"
// checkpoint and verifies, saying where it starts; an edit in it still fails.
TEST_P(FileSinkTest, RetentionRemovesTheOldestRotatedFiles) {
  FileSinkOptions o = options();
  o.rotate_bytes = 1500;
  o.retain_files = 2;
  writeFile(dir_.file("audit.log.1"), "not ours\n");  // Another's name: never removed.
  {
    auto sink = FileSink::open(path_, o, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE((*sink)->write(sampleEvent(i)).isOk());
    }
    ASSERT_TRUE((*sink)->close().isOk());
  }
  const std::vector<std::string> files = logFiles(path_);
  ASSERT_EQ(files.size(), 3U);  // Two rotated, and the live one.
  EXPECT_TRUE(std::filesystem::exists(dir_.file("audit.log.1")));
  const VerifyOptions vo{.public_key = verifying_.get()};
  auto r = verifyAuditFiles(files, vo);
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->intact()) << r->summary();
  EXPECT_GT(r->first_seq, 1U);
  EXPECT_NE(
      r->summary().find(fmt::format("starts at seq {} (earlier files removed)", r->first_seq)),
      std::string::npos)
      << r->summary();
  // A file that starts mid-chain without a "start" checkpoint is not a retention's leftover.
  std::vector<std::string> ls = splitLines(readFile(files[0]));
  ls.erase(ls.begin());
  writeFile(files[0], testing::joinLines(ls));
  auto cut = verifyAuditFiles(files, vo);
  ASSERT_TRUE(cut.isOk());
  ASSERT_FALSE(cut->intact());
  EXPECT_NE(cut->failure->message.find("records before it are missing"), std::string::npos)
      << cut->summary();
}

// Rotation by age follows the sink's clock: a record that comes once the live file's first
// record is older than the interval goes into a new file.
TEST_P(FileSinkTest, RotationByAgeFollowsTheClock) {
  FileSinkOptions o = options();
  o.rotate_interval = std::chrono::hours(24);
  auto sink = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(sink.isOk()) << sink.status().toString();
  ASSERT_TRUE((*sink)->write(sampleEvent(0)).isOk());
  clock_.advance(std::chrono::hours(23));
  ASSERT_TRUE((*sink)->write(sampleEvent(1)).isOk());
  EXPECT_EQ(logFiles(path_).size(), 1U);
  clock_.advance(std::chrono::hours(2));
  ASSERT_TRUE((*sink)->write(sampleEvent(2)).isOk());
  const std::vector<std::string> files = logFiles(path_);
  ASSERT_EQ(files.size(), 2U);
  // Named by the rotation's time (the fake clock's wall time: 1970-01-02T01:00).
  EXPECT_NE(files[0].find("audit.log.19700102T010000.000Z"), std::string::npos) << files[0];
  ASSERT_TRUE((*sink)->close().isOk());
  auto r = verifyAuditFiles(files, VerifyOptions{.public_key = verifying_.get()});
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->intact()) << r->summary();
}

// SIGHUP after logrotate renamed the log: the renamed file gets an "end" checkpoint and a new
// file goes on at the path, chained to it. Not renamed: nothing happens. A non-empty file of
// someone else's at the path: refused, and the records go on into the renamed file.
TEST_P(FileSinkTest, ReopenAfterARenameStartsANewFileChainedToTheOld) {
  FileSinkOptions o = options();
  o.checkpoint_copy = path_ + ".checkpoint";
  auto sink = FileSink::open(path_, o, clock_);
  ASSERT_TRUE(sink.isOk()) << sink.status().toString();
  ASSERT_TRUE((*sink)->write(sampleEvent(0)).isOk());
  const size_t before = readFile(path_).size();
  ASSERT_TRUE((*sink)->reopen().isOk());
  EXPECT_EQ(readFile(path_).size(), before);  // Not moved: nothing written.

  const std::string moved = dir_.file("audit.log.1");
  std::filesystem::rename(path_, moved);
  writeFile(path_, "someone else's\n");
  EXPECT_FALSE((*sink)->reopen().isOk());
  ASSERT_TRUE((*sink)->write(sampleEvent(1)).isOk());
  EXPECT_EQ(readFile(path_), "someone else's\n");
  std::filesystem::remove(path_);

  ASSERT_TRUE((*sink)->reopen().isOk());  // logrotate without `create`: no file at the path.
  ASSERT_TRUE((*sink)->write(sampleEvent(2)).isOk());
  const std::vector<std::string> old_lines = splitLines(readFile(moved));
  EXPECT_EQ(json::parse(old_lines.back())["checkpoint"]["file"], "end");
  const std::vector<std::string> new_lines = splitLines(readFile(path_));
  ASSERT_EQ(new_lines.size(), 2U);
  EXPECT_EQ(json::parse(new_lines[0])["checkpoint"]["file"], "start");
  EXPECT_EQ(json::parse(new_lines[0])["prev_hash"], json::parse(old_lines.back())["hash"]);

  // logrotate's `create`: an empty file at the path is taken.
  const std::string moved2 = dir_.file("audit.log.2");
  std::filesystem::rename(path_, moved2);
  writeFile(path_, "");
  ASSERT_TRUE((*sink)->reopen().isOk());
  ASSERT_TRUE((*sink)->write(sampleEvent(3)).isOk());
  ASSERT_TRUE((*sink)->close().isOk());
  const std::string copy = readFile(o.checkpoint_copy);
  auto r = verifyAuditFiles(std::vector<std::string>{path_, moved2, moved},
                            {.public_key = verifying_.get(), .checkpoint_copy = &copy});
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->intact()) << r->summary();
  EXPECT_EQ(r->first_seq, 1U);
  EXPECT_EQ(r->files.size(), 3U);
}

// A process that died after the old file's "end" checkpoint, before the new file took the path:
// the next open finishes the rotation, so that nothing follows an "end" in its file.
TEST_P(FileSinkTest, AnInterruptedRotationIsFinishedAtOpen) {
  FileSinkOptions o = options();
  {
    auto sink = FileSink::open(path_, o, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    ASSERT_TRUE((*sink)->write(sampleEvent(0)).isOk());
    ASSERT_TRUE((*sink)->rotate().isOk());
  }
  // Undo the last steps: the rotated file back at the path, with one name only.
  std::vector<std::string> files = logFiles(path_);
  ASSERT_EQ(files.size(), 2U);
  std::filesystem::rename(files[0], path_);
  ASSERT_EQ(logFiles(path_).size(), 1U);
  ASSERT_EQ(json::parse(splitLines(readFile(path_)).back())["checkpoint"]["file"], "end");
  {
    auto sink = FileSink::open(path_, o, clock_);
    ASSERT_TRUE(sink.isOk()) << sink.status().toString();
    ASSERT_TRUE((*sink)->write(sampleEvent(1)).isOk());
    ASSERT_TRUE((*sink)->close().isOk());
  }
  files = logFiles(path_);
  ASSERT_EQ(files.size(), 2U);
  EXPECT_EQ(json::parse(splitLines(readFile(files[0])).back())["checkpoint"]["file"], "end");
  EXPECT_EQ(json::parse(splitLines(readFile(path_)).front())["checkpoint"]["file"], "start");
  auto r = verifyAuditFiles(files, VerifyOptions{.public_key = verifying_.get()});
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->intact()) << r->summary();
}

// Bad input: an unreadable file is an error naming it; a file that is no audit log is a failure
// naming it and its line.
TEST_P(FileSinkTest, VerifyingASetNamesTheBadFile) {
  {
    auto sink = open();
    ASSERT_TRUE(sink->write(sampleEvent(0)).isOk());
    ASSERT_TRUE(sink->close().isOk());
  }
  auto missing = verifyAuditFiles(std::vector<std::string>{path_, dir_.file("nope.log")}, {});
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("nope.log"), std::string::npos);
  writeFile(dir_.file("garbage.log"), "hello\n");
  auto garbage = verifyAuditFiles(std::vector<std::string>{path_, dir_.file("garbage.log")}, {});
  ASSERT_TRUE(garbage.isOk());
  ASSERT_FALSE(garbage->intact());
  EXPECT_EQ(garbage->failure->file, dir_.file("garbage.log"));
  EXPECT_NE(garbage->summary().find("garbage.log: line 1: not an audit record"), std::string::npos)
      << garbage->summary();
}

INSTANTIATE_TEST_SUITE_P(SyncModes, FileSinkTest,
                         ::testing::Values(SyncMode::kEveryRecord, SyncMode::kGroupCommit),
                         [](const auto& info) {
                           return info.param == SyncMode::kEveryRecord ? "EveryRecord"
                                                                       : "GroupCommit";
                         });

}  // namespace
}  // namespace tessera::audit
