// The budget of refused requests' audit records: per source, for unauthenticated sources
// together, and the summaries of what it dropped.
#include "server/refusal_log.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "audit/sink.h"

namespace tessera::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class RefusalLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sink =
        std::make_unique<audit::MemorySink>("mem", audit::SinkOptions{.salt = "pepper"}, clock_);
    sink_ = sink.get();
    std::vector<std::unique_ptr<audit::AuditSink>> sinks;
    sinks.push_back(std::move(sink));
    auditor_ = std::move(audit::Auditor::create(std::move(sinks))).value();
  }

  static audit::AuditEvent refusal(const std::string& tenant, int status) {
    audit::AuditEvent ev;
    ev.type = audit::AuditType::kResponse;
    ev.request_id = "r";
    ev.tenant = tenant;
    ev.request.method = "GET";
    ev.request.path = "tenants/demo/workloads";
    ev.response.status = status;
    return ev;
  }
  std::vector<json> records() const {
    std::vector<json> out;
    for (const std::string& line : sink_->lines()) {
      out.push_back(json::parse(line));
    }
    return out;
  }
  std::vector<json> summaries() const {
    std::vector<json> out;
    for (json& rec : records()) {
      if (rec["request"]["method"] == "DROPPED") {
        out.push_back(std::move(rec));
      }
    }
    return out;
  }

  core::FakeClock clock_;
  audit::MemorySink* sink_ = nullptr;
  std::unique_ptr<audit::Auditor> auditor_;
};

TEST_F(RefusalLogTest, SourcesAreTheTenantOrTheAddressWithoutItsPort) {
  const std::string team = "team-1";
  const std::string admin;
  EXPECT_EQ(RefusalLog::sourceOf("10.0.0.7:5555", &team), "tenant:team-1");
  EXPECT_EQ(RefusalLog::sourceOf("10.0.0.7:5555", &admin), "/admin");
  EXPECT_EQ(RefusalLog::sourceOf("10.0.0.7:5555", nullptr), "ip:10.0.0.7");
  EXPECT_EQ(RefusalLog::sourceOf("::1:5555", nullptr), "ip:::1");
  EXPECT_EQ(RefusalLog::sourceOf("", nullptr), "ip:unknown");
}

// A source gets its burst, then its rate; what it sends beyond is counted, and the next summary
// says how many, of which status, from where, in the stream the refusals belong to.
TEST_F(RefusalLogTest, ASourceOverItsBudgetIsCountedInASummary) {
  RefusalLog log(*auditor_, clock_, {.per_source_rate = 2, .per_source_burst = 5});
  int written = 0;
  for (int i = 0; i < 12; ++i) {
    written += log.record("ip:10.0.0.7", refusal("", i % 2 == 0 ? 403 : 400)) ? 1 : 0;
  }
  EXPECT_EQ(written, 5);
  clock_.advance(1s);  // Two more tokens.
  for (int i = 0; i < 3; ++i) {
    written += log.record("ip:10.0.0.7", refusal("", 403)) ? 1 : 0;
  }
  EXPECT_EQ(written, 7);
  // Another source has its own budget; a tenant's refusals go to its own stream.
  EXPECT_TRUE(log.record("ip:10.0.0.8", refusal("", 403)));
  for (int i = 0; i < 7; ++i) {
    log.record("tenant:team-1", refusal("team-1", 429));
  }
  EXPECT_EQ(log.counts().recorded, 8U + 5U);
  EXPECT_EQ(log.counts().dropped, 8U + 2U);
  EXPECT_TRUE(summaries().empty());  // Only once a second, from housekeeping.
  log.flushSummaries();
  const std::vector<json> s = summaries();
  ASSERT_EQ(s.size(), 2U);
  for (const json& rec : s) {
    const json& body = rec["request"]["body"];
    if (rec["tenant"] == "") {
      EXPECT_EQ(body["dropped"], 8);
      EXPECT_EQ(body["by_status"], json({{"400", 4}, {"403", 4}}));
      EXPECT_EQ(body["sources"], json({{"ip:10.0.0.7", 8}}));
      EXPECT_NE(rec["error"].get<std::string>().find("8 more refused requests not recorded"),
                std::string::npos);
    } else {
      EXPECT_EQ(rec["tenant"], "team-1");
      EXPECT_EQ(body["dropped"], 2);
      EXPECT_EQ(body["by_status"], json({{"429", 2}}));
    }
  }
  log.flushSummaries();
  EXPECT_EQ(summaries().size(), 2U);  // Nothing dropped since: no new summary.
}

// Many addresses do not multiply the budget: unauthenticated sources share one bucket too, and
// the number of sources tracked is bounded.
TEST_F(RefusalLogTest, UnauthenticatedSourcesShareABudgetAndABoundedTable) {
  RefusalLog log(*auditor_, clock_,
                 {.per_source_rate = 1,
                  .per_source_burst = 2,
                  .unauthenticated_rate = 1,
                  .unauthenticated_burst = 10,
                  .max_sources = 20});
  int written = 0;
  for (int i = 0; i < 100; ++i) {
    written += log.record("ip:10.0.1." + std::to_string(i), refusal("", 403)) ? 1 : 0;
  }
  EXPECT_EQ(written, 10);
  // A tenant's budget is its own: the flood above does not silence it.
  EXPECT_TRUE(log.record("tenant:team-1", refusal("team-1", 413)));
  log.flushSummaries();
  const std::vector<json> s = summaries();
  ASSERT_EQ(s.size(), 1U);
  EXPECT_EQ(s[0]["request"]["body"]["dropped"], 90);
  // Beyond 20 sources, new addresses share the bucket "ip:other".
  EXPECT_EQ(s[0]["request"]["body"]["sources"]["ip:other"], 80);
  EXPECT_EQ(s[0]["request"]["body"]["source_count"], 11);
  // Quiet sources' buckets are forgotten once full again: a new address has its own.
  clock_.advance(10s);
  log.flushSummaries();
  for (int i = 0; i < 12; ++i) {
    log.record("ip:10.0.1.200", refusal("", 403));
  }
  log.flushSummaries();
  ASSERT_EQ(summaries().size(), 2U);
  EXPECT_EQ(summaries()[1]["request"]["body"]["sources"], json({{"ip:10.0.1.200", 10}}));
}

}  // namespace
}  // namespace tessera::server
