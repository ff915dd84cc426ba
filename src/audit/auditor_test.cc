#include "audit/auditor.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <future>
#include <optional>
#include <sstream>
#include <thread>

#include "audit/file_sink.h"
#include "audit/test_util.h"
#include "audit/verify.h"

namespace tessera::audit {
namespace {

using nlohmann::json;
using testing::sampleEvent;

class AuditorTest : public ::testing::Test {
 protected:
  std::unique_ptr<MemorySink> memory(const std::string& name, const std::string& salt = "s") {
    return std::make_unique<MemorySink>(name, SinkOptions{.salt = salt}, clock_);
  }
  // An auditor over two memory sinks, whose pointers it leaves in a_ptr and b_ptr.
  std::unique_ptr<Auditor> twoSinks(MemorySink** a_ptr, MemorySink** b_ptr) {
    auto a = memory("a");
    auto b = memory("b");
    *a_ptr = a.get();
    *b_ptr = b.get();
    std::vector<std::unique_ptr<AuditSink>> sinks;
    sinks.push_back(std::move(a));
    sinks.push_back(std::move(b));
    return std::move(Auditor::create(std::move(sinks))).value();
  }
  // An auditor over one FileSink at `path` (null, with a test failure, if it cannot open).
  std::unique_ptr<Auditor> overFile(const std::string& path, const FileSinkOptions& options) {
    auto file = FileSink::open(path, options, clock_);
    EXPECT_TRUE(file.isOk()) << file.status().toString();
    if (!file.isOk()) {
      return nullptr;
    }
    std::vector<std::unique_ptr<AuditSink>> sinks;
    sinks.push_back(std::move(file).value());
    return std::move(Auditor::create(std::move(sinks))).value();
  }
  // Options for a FileSink whose every flush fails, as a dying disk's would.
  static FileSinkOptions failingFlushes() {
    FileSinkOptions options{{.salt = "s"}};
    options.fdatasync = [](int) {
      errno = EIO;
      return -1;
    };
    return options;
  }
  // Appends request `i` to a only (b refuses it), then leaves a refusing and b taking writes:
  // the response that follows lands in b only, so no sink holds both.
  static Auditor::Appended splitRequest(Auditor& auditor, MemorySink* a, MemorySink* b, int i) {
    b->setFailWrites(true);
    auto appended = auditor.append(sampleEvent(i));
    EXPECT_TRUE(appended.isOk());
    EXPECT_EQ(appended.isOk() ? appended->sinks : std::vector<bool>{},
              (std::vector<bool>{true, false}));
    b->setFailWrites(false);
    a->setFailWrites(true);
    return appended.isOk() ? *appended : Auditor::Appended{};
  }
  core::FakeClock clock_;
};

TEST_F(AuditorTest, NeedsAtLeastOneSink) {
  EXPECT_EQ(Auditor::create({}).status().code(), core::StatusCode::kInvalidArgument);
}

TEST_F(AuditorTest, WritesEveryEventToEverySinkEachWithItsOwnChainAndSalt) {
  auto a = memory("a", "salt-a");
  auto b = memory("b", "salt-b");
  MemorySink* a_ptr = a.get();
  MemorySink* b_ptr = b.get();
  std::vector<std::unique_ptr<AuditSink>> sinks;
  sinks.push_back(std::move(a));
  sinks.push_back(std::move(b));
  auto auditor = std::move(Auditor::create(std::move(sinks))).value();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(auditor->record(sampleEvent(i)).isOk());
  }
  ASSERT_EQ(a_ptr->lines().size(), 4u);
  ASSERT_EQ(b_ptr->lines().size(), 4u);
  const json first_a = json::parse(a_ptr->lines()[0]);
  const json first_b = json::parse(b_ptr->lines()[0]);
  EXPECT_EQ(first_a["auth"]["accessor"], hmacValue("salt-a", "accessor-team-1"));
  EXPECT_EQ(first_b["auth"]["accessor"], hmacValue("salt-b", "accessor-team-1"));
  for (MemorySink* sink : {a_ptr, b_ptr}) {
    std::istringstream in(testing::joinLines(sink->lines()));
    EXPECT_TRUE(verifyAuditStream(in)->intact());
  }
}

TEST_F(AuditorTest, SucceedsWhileOneSinkWritesAndFailsClosedWhenNoneDoes) {
  MemorySink* a_ptr = nullptr;
  MemorySink* b_ptr = nullptr;
  auto auditor = twoSinks(&a_ptr, &b_ptr);

  a_ptr->setFailWrites(true);
  EXPECT_TRUE(auditor->record(sampleEvent(0)).isOk());
  EXPECT_EQ(b_ptr->lines().size(), 1u);
  std::vector<SinkHealth> health = auditor->health();
  EXPECT_NE(health[0].last_error.find("fault injected"), std::string::npos);
  EXPECT_EQ(health[1].last_error, "");

  b_ptr->setFailWrites(true);
  const core::Status s = auditor->record(sampleEvent(1));
  EXPECT_EQ(s.code(), core::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no audit sink could record"), std::string::npos);
  EXPECT_NE(s.message().find("a: "), std::string::npos);
  EXPECT_NE(s.message().find("b: "), std::string::npos);

  a_ptr->setFailWrites(false);
  EXPECT_TRUE(auditor->record(sampleEvent(2)).isOk());
  EXPECT_EQ(auditor->health()[0].last_error, "");
}

TEST_F(AuditorTest, AnAppendedRecordCountsOnlyWithALaterRecordInTheSameSink) {
  MemorySink* a_ptr = nullptr;
  MemorySink* b_ptr = nullptr;
  auto auditor = twoSinks(&a_ptr, &b_ptr);
  // Both sinks take both records: fine.
  auto appended = auditor->append(sampleEvent(0));
  ASSERT_TRUE(appended.isOk());
  EXPECT_EQ(appended->sinks, (std::vector<bool>{true, true}));
  EXPECT_TRUE(auditor->recordAfter(sampleEvent(1), *appended).isOk());
  // Only a took the request and only b the response: no sink holds both, so it fails.
  const Auditor::Appended split = splitRequest(*auditor, a_ptr, b_ptr, 2);
  EXPECT_EQ(auditor->recordAfter(sampleEvent(3), split).code(), core::StatusCode::kUnavailable);
  // No sink takes the append: it fails at once.
  b_ptr->setFailWrites(true);
  EXPECT_EQ(auditor->append(sampleEvent(4)).status().code(), core::StatusCode::kUnavailable);
}

TEST_F(AuditorTest, RecordAfterAsyncAnswersAsRecordAfterWould) {
  MemorySink* a_ptr = nullptr;
  MemorySink* b_ptr = nullptr;
  auto auditor = twoSinks(&a_ptr, &b_ptr);
  auto answer = [&](const Auditor::Appended& earlier, int i) {
    std::optional<core::Status> got;
    auditor->recordAfterAsync(sampleEvent(i), earlier, [&](const core::Status& s) {
      EXPECT_FALSE(got.has_value()) << "answered twice";
      got = s;
    });
    EXPECT_TRUE(got.has_value());  // Memory sinks answer at once.
    return got.value_or(core::Status::ok());
  };
  auto appended = auditor->append(sampleEvent(0));
  ASSERT_TRUE(appended.isOk());
  EXPECT_TRUE(answer(*appended, 1).isOk());
  EXPECT_EQ(a_ptr->lines().size(), 2U);
  EXPECT_EQ(b_ptr->lines().size(), 2U);
  // One sink missing the response: the other holds both, which is enough.
  b_ptr->setFailWrites(true);
  appended = auditor->append(sampleEvent(2));
  ASSERT_TRUE(appended.isOk());
  EXPECT_TRUE(answer(*appended, 3).isOk());
  // a took only the request, b only the response: no sink holds both.
  const core::Status split = answer(splitRequest(*auditor, a_ptr, b_ptr, 4), 5);
  EXPECT_EQ(split.code(), core::StatusCode::kUnavailable);
  EXPECT_NE(split.message().find("no audit sink stored both"), std::string::npos)
      << split.message();
}

TEST_F(AuditorTest, RecordAfterAsyncWithAFileSinkAnswersOnceFlushed) {
  testing::TempDir dir;
  auto auditor = overFile(dir.file("audit.log"), {{.salt = "s"}});
  ASSERT_NE(auditor, nullptr);
  constexpr int kRequests = 200;
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  for (int i = 0; i < kRequests; ++i) {
    auto appended = auditor->append(sampleEvent(2 * i));
    ASSERT_TRUE(appended.isOk());
    auditor->recordAfterAsync(sampleEvent(2 * i + 1), *appended,
                              [&](const core::Status& s) { ++(s.isOk() ? ok : failed); });
  }
  ASSERT_TRUE(auditor->close().isOk());  // Answers what is still waiting, after its flush.
  EXPECT_EQ(ok, kRequests);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(testing::splitLines(testing::readFile(dir.file("audit.log"))).size(),
            size_t{2 * kRequests});
}

TEST_F(AuditorTest, RecordAfterAsyncFailsWhenTheFlushFails) {
  testing::TempDir dir;
  auto auditor = overFile(dir.file("audit.log"), failingFlushes());
  ASSERT_NE(auditor, nullptr);
  auto appended = auditor->append(sampleEvent(0));
  ASSERT_TRUE(appended.isOk());
  std::promise<core::Status> answer;
  auditor->recordAfterAsync(sampleEvent(1), *appended,
                            [&](const core::Status& s) { answer.set_value(s); });
  std::future<core::Status> answered = answer.get_future();
  ASSERT_EQ(answered.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const core::Status s = answered.get();
  EXPECT_EQ(s.code(), core::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no audit sink stored both"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fdatasync failed"), std::string::npos) << s.message();
  EXPECT_NE(auditor->health()[0].last_error.find("fdatasync failed"), std::string::npos);
}

TEST_F(AuditorTest, AppendReturnsEachSinksRecordAndDurableSeqFollowsTheFlush) {
  testing::TempDir dir;
  FileSinkOptions options{{.salt = "s"}};
  options.appended_flush_delay = std::chrono::hours(1);  // Only a durable write flushes.
  auto auditor = overFile(dir.file("audit.log"), options);
  ASSERT_NE(auditor, nullptr);
  EXPECT_EQ(auditor->sinkNames(), std::vector<std::string>{"file:" + dir.file("audit.log")});
  auto appended = auditor->append(sampleEvent(0));
  ASSERT_TRUE(appended.isOk()) << appended.status().toString();
  ASSERT_EQ(appended->records.size(), 1U);
  EXPECT_EQ(appended->records[0].seq, 1U);
  EXPECT_EQ(appended->records[0].line + "\n", testing::readFile(dir.file("audit.log")));
  EXPECT_EQ(auditor->durableSeq(0), 0U);  // Appended, not flushed.
  ASSERT_TRUE(auditor->record(sampleEvent(1)).isOk());
  EXPECT_EQ(auditor->durableSeq(0), 2U);
  // A sink that refuses the record gives none.
  MemorySink* a_ptr = nullptr;
  MemorySink* b_ptr = nullptr;
  auto two = twoSinks(&a_ptr, &b_ptr);
  b_ptr->setFailWrites(true);
  auto one = two->append(sampleEvent(2));
  ASSERT_TRUE(one.isOk());
  EXPECT_EQ(one->sinks, (std::vector<bool>{true, false}));
  EXPECT_EQ(one->records[0].line, a_ptr->lines().back());
  EXPECT_EQ(one->records[1].seq, 0U);
  EXPECT_TRUE(one->records[1].line.empty());
}

TEST_F(AuditorTest, WriteRecoveredAppendsALostRecordAsANewOneTheChainTakes) {
  testing::TempDir dir;
  const std::string path = dir.file("audit.log");
  std::string lost;
  uint64_t kept_size = 0;
  {
    auto auditor = overFile(path, FileSinkOptions{{.salt = "s"}});
    ASSERT_NE(auditor, nullptr);
    ASSERT_TRUE(auditor->record(sampleEvent(0)).isOk());
    ASSERT_TRUE(auditor->record(sampleEvent(1)).isOk());
    kept_size = std::filesystem::file_size(path);
    auto appended = auditor->append(sampleEvent(2));
    ASSERT_TRUE(appended.isOk());
    lost = appended->records[0].line;
    ASSERT_TRUE(auditor->close().isOk());
  }
  // The machine crashed before the third record's flush: the file ends after the second.
  std::filesystem::resize_file(path, kept_size);
  auto auditor = overFile(path, FileSinkOptions{{.salt = "s"}});
  ASSERT_NE(auditor, nullptr);
  EXPECT_EQ(auditor->durableSeq(0), 2U);
  EXPECT_FALSE(auditor->writeRecovered(0, "not a record").isOk());
  ASSERT_TRUE(auditor->writeRecovered(0, lost).isOk());
  EXPECT_EQ(auditor->durableSeq(0), 3U);
  auto report = verifyAuditFile(path);
  ASSERT_TRUE(report.isOk());
  EXPECT_TRUE(report->intact()) << report->summary();
  EXPECT_EQ(report->records, 3U);
  const std::vector<std::string> lines = testing::splitLines(testing::readFile(path));
  ASSERT_EQ(lines.size(), 3U);
  const json original = json::parse(lost);
  const json recovered = json::parse(lines[2]);
  EXPECT_EQ(recovered["seq"], 3);
  EXPECT_EQ(recovered["recovered"]["seq"], original["seq"]);
  EXPECT_EQ(recovered["recovered"]["hash"], original["hash"]);
  EXPECT_EQ(recovered["recovered"]["time"], original["time"]);
  for (const char* field : {"type", "request_id", "tenant", "auth", "request"}) {
    EXPECT_EQ(recovered.value(field, json()), original.value(field, json())) << field;
  }
}

TEST_F(AuditorTest, RecordAppendedAfterAnswersBeforeTheFlushThatFollowsByItself) {
  testing::TempDir dir;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> flushes{0};
  FileSinkOptions options{{.salt = "s"}};
  options.appended_flush_delay = std::chrono::milliseconds(0);
  options.fdatasync = [&](int fd) {
    released.wait();
    ++flushes;
    return ::fdatasync(fd);
  };
  auto auditor = overFile(dir.file("audit.log"), options);
  ASSERT_NE(auditor, nullptr);
  // Lets the flush go before the auditor goes, whatever the test's outcome.
  struct Release {
    std::promise<void>& p;
    bool done = false;
    ~Release() {
      if (!done) {
        p.set_value();
      }
    }
  } guard{release};
  auto appended = auditor->append(sampleEvent(0));
  ASSERT_TRUE(appended.isOk());
  // The disk flush is held back; the answer must not wait for it.
  auto answered = std::async(
      std::launch::async, [&] { return auditor->recordAppendedAfter(sampleEvent(1), *appended); });
  ASSERT_EQ(answered.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(answered.get().isOk());
  EXPECT_EQ(flushes, 0);
  // Both records are in the file (the kernel's cache) already, in order.
  EXPECT_EQ(testing::splitLines(testing::readFile(dir.file("audit.log"))).size(), 2U);
  // The sink flushes them by itself once the disk lets it, with nobody waiting.
  guard.done = true;
  release.set_value();
  for (int i = 0; i < 1000 && flushes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(flushes, 1);
}

TEST_F(AuditorTest, RecordAppendedAfterFailsWhenNoSinkHoldsBothRecords) {
  MemorySink* a_ptr = nullptr;
  MemorySink* b_ptr = nullptr;
  auto auditor = twoSinks(&a_ptr, &b_ptr);
  auto appended = auditor->append(sampleEvent(0));
  ASSERT_TRUE(appended.isOk());
  EXPECT_TRUE(auditor->recordAppendedAfter(sampleEvent(1), *appended).isOk());
  // a took only the request, b only the response.
  const core::Status split =
      auditor->recordAppendedAfter(sampleEvent(3), splitRequest(*auditor, a_ptr, b_ptr, 2));
  EXPECT_EQ(split.code(), core::StatusCode::kUnavailable);
  EXPECT_NE(split.message().find("no audit sink stored both"), std::string::npos)
      << split.message();
}

// A real file that cannot grow (RLIMIT_FSIZE, which binds root too) next to a working sink.
TEST_F(AuditorTest, AFileSinkThatCannotWriteFailsClosedUnlessAnotherSinkWrites) {
  testing::TempDir dir;
  auto file_only = FileSink::open(dir.file("only.log"), {{.salt = "s"}}, clock_);
  auto file_pair = FileSink::open(dir.file("pair.log"), {{.salt = "s"}}, clock_);
  ASSERT_TRUE(file_only.isOk() && file_pair.isOk());
  std::vector<std::unique_ptr<AuditSink>> only;
  only.push_back(std::move(file_only).value());
  auto lone = std::move(Auditor::create(std::move(only))).value();
  auto mem = memory("mem");
  MemorySink* mem_ptr = mem.get();
  std::vector<std::unique_ptr<AuditSink>> pair;
  pair.push_back(std::move(file_pair).value());
  pair.push_back(std::move(mem));
  auto paired = std::move(Auditor::create(std::move(pair))).value();

  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit limit = old;
  limit.rlim_cur = 100;  // Less than one record.
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  const core::Status lone_status = lone->record(sampleEvent(0));
  const core::Status paired_status = paired->record(sampleEvent(0));
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(lone_status.code(), core::StatusCode::kUnavailable);
  EXPECT_NE(lone_status.message().find("only.log: cannot write"), std::string::npos)
      << lone_status.message();
  EXPECT_TRUE(paired_status.isOk()) << paired_status.toString();
  EXPECT_EQ(mem_ptr->lines().size(), 1u);
  EXPECT_NE(paired->health()[0].last_error.find("cannot write"), std::string::npos);
  EXPECT_EQ(testing::readFile(dir.file("only.log")), "");
}

TEST_F(AuditorTest, ConcurrentRecordsKeepEverySinkChainValid) {
  MemorySink* a_ptr = nullptr;
  MemorySink* b_ptr = nullptr;
  auto auditor = twoSinks(&a_ptr, &b_ptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        ASSERT_TRUE(auditor->record(sampleEvent(i, "team-" + std::to_string(t))).isOk());
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  ASSERT_TRUE(auditor->close().isOk());
  for (MemorySink* sink : {a_ptr, b_ptr}) {
    EXPECT_EQ(sink->lines().size(), 1200u);
    std::istringstream in(testing::joinLines(sink->lines()));
    EXPECT_TRUE(verifyAuditStream(in)->intact());
  }
}

}  // namespace
}  // namespace tessera::audit
