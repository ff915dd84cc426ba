#include "server/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "model/node_profiles.h"
#include "server/driver.h"
#include "server/prometheus_test_util.h"

namespace tessera::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::parsePrometheusText;

TEST(MetricsTextTest, CounterAndGaugeWithHelpAndTypeOnce) {
  MetricsText out;
  out.family("t_requests_total", MetricType::kCounter, "Requests.").add({{"code", "200"}}, 3);
  out.family("t_nodes", MetricType::kGauge, "Nodes.").add({}, 2);
  EXPECT_EQ(out.text(),
            "# HELP t_requests_total Requests.\n"
            "# TYPE t_requests_total counter\n"
            "t_requests_total{code=\"200\"} 3\n"
            "# HELP t_nodes Nodes.\n"
            "# TYPE t_nodes gauge\n"
            "t_nodes 2\n");
  EXPECT_THAT(out.problems(), IsEmpty());
}

TEST(MetricsTextTest, SamplesOfOneFamilyStayTogetherWhateverTheOrderAdded) {
  MetricsText out;
  MetricFamily& a = out.family("t_a", MetricType::kGauge, "A.");
  MetricFamily& b = out.family("t_b", MetricType::kGauge, "B.");
  a.add({{"x", "1"}}, 1);
  b.add({{"x", "1"}}, 2);
  a.add({{"x", "2"}}, 3);
  // Asking for a family again gives the same one: its HELP and TYPE are not written twice.
  out.family("t_b", MetricType::kGauge, "B.").add({{"x", "2"}}, 4);
  const std::string text = out.text();
  EXPECT_EQ(text,
            "# HELP t_a A.\n# TYPE t_a gauge\nt_a{x=\"1\"} 1\nt_a{x=\"2\"} 3\n"
            "# HELP t_b B.\n# TYPE t_b gauge\nt_b{x=\"1\"} 2\nt_b{x=\"2\"} 4\n");
  EXPECT_THAT(parsePrometheusText(text).errors, IsEmpty());
}

TEST(MetricsTextTest, EscapesLabelValuesAndHelp) {
  MetricsText out;
  out.family("t_x", MetricType::kGauge, "Back\\slash and\nnewline.").add({{"v", "a\\b\"c\nd"}}, 1);
  const std::string text = out.text();
  EXPECT_THAT(text, HasSubstr("# HELP t_x Back\\\\slash and\\nnewline.\n"));
  EXPECT_THAT(text, HasSubstr("t_x{v=\"a\\\\b\\\"c\\nd\"} 1\n"));
  // Read back, the value is the one written.
  const auto parsed = parsePrometheusText(text);
  ASSERT_THAT(parsed.errors, IsEmpty());
  ASSERT_EQ(parsed.families.at("t_x").samples.size(), 1U);
  EXPECT_EQ(parsed.families.at("t_x").samples[0].labels.at("v"), "a\\b\"c\nd");
  EXPECT_EQ(parsed.families.at("t_x").help, "Back\\slash and\nnewline.");
}

TEST(MetricsTextTest, HistogramHasCumulativeBucketsInfSumAndCount) {
  const double bounds[] = {0.25, 1, 10};
  HistogramData h(bounds);
  for (double v : {0.125, 0.25, 0.5, 2.0, 20.0, 30.0}) {
    h.observe(v);
  }
  MetricsText out;
  out.family("t_seconds", MetricType::kHistogram, "Seconds.").addHistogram({{"route", "r"}}, h);
  EXPECT_EQ(out.text(),
            "# HELP t_seconds Seconds.\n"
            "# TYPE t_seconds histogram\n"
            "t_seconds_bucket{route=\"r\",le=\"0.25\"} 2\n"  // 0.25 itself is in le="0.25".
            "t_seconds_bucket{route=\"r\",le=\"1\"} 3\n"
            "t_seconds_bucket{route=\"r\",le=\"10\"} 4\n"
            "t_seconds_bucket{route=\"r\",le=\"+Inf\"} 6\n"
            "t_seconds_sum{route=\"r\"} 52.875\n"
            "t_seconds_count{route=\"r\"} 6\n");
  EXPECT_THAT(parsePrometheusText(out.text()).errors, IsEmpty());
}

TEST(MetricsTextTest, EmptyHistogramWithoutLabels) {
  MetricsText out;
  out.family("t_h", MetricType::kHistogram, "H.")
      .addHistogram({}, HistogramData(kPassSecondsBounds));
  const std::string text = out.text();
  EXPECT_THAT(text, HasSubstr("t_h_bucket{le=\"+Inf\"} 0\nt_h_sum 0\nt_h_count 0\n"));
  const auto parsed = parsePrometheusText(text);
  EXPECT_THAT(parsed.errors, IsEmpty());
  EXPECT_EQ(parsed.families.at("t_h").samples.size(), std::size(kPassSecondsBounds) + 3);
}

TEST(MetricsTextTest, DuplicateSeriesAndBadNamesAreDroppedAndNoted) {
  MetricsText out;
  MetricFamily& f = out.family("t_g", MetricType::kGauge, "G.");
  f.add({{"a", "1"}}, 1);
  f.add({{"a", "1"}}, 2);               // The same series again.
  f.add({{"bad-name", "x"}}, 3);        // Not a label name.
  f.add({{"__reserved", "x"}}, 4);      // Prometheus' own.
  f.addHistogram({}, HistogramData());  // A histogram in a gauge family.
  out.family("0bad", MetricType::kGauge, "Bad.").add({}, 1);
  out.family("t_g", MetricType::kCounter, "G.");  // Another type for a family.
  MetricFamily& h = out.family("t_h", MetricType::kHistogram, "H.");
  h.add({}, 1);                                    // A plain sample in a histogram.
  h.addHistogram({{"le", "1"}}, HistogramData());  // le is the histogram's own.
  EXPECT_EQ(out.text(),
            "# HELP t_g G.\n# TYPE t_g gauge\nt_g{a=\"1\"} 1\n"
            "# HELP t_h H.\n# TYPE t_h histogram\n");
  EXPECT_EQ(out.problems().size(), 8U);
  EXPECT_THAT(parsePrometheusText(out.text()).errors, IsEmpty());
}

TEST(MetricsTextTest, FormatsValues) {
  EXPECT_EQ(formatMetricValue(0), "0");
  EXPECT_EQ(formatMetricValue(42), "42");
  EXPECT_EQ(formatMetricValue(-3), "-3");
  EXPECT_EQ(formatMetricValue(0.25), "0.25");
  EXPECT_EQ(formatMetricValue(1e20), "1e+20");
  EXPECT_EQ(formatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(formatMetricValue(-INFINITY), "-Inf");
  EXPECT_EQ(formatMetricValue(NAN), "NaN");
  EXPECT_EQ(formatMetricValue(1.0 / 3), "0.3333333333333333");
}

TEST(MetricsTextTest, NameRules) {
  EXPECT_TRUE(validMetricName("tessera_x:y_total"));
  EXPECT_FALSE(validMetricName("1x"));
  EXPECT_FALSE(validMetricName("a-b"));
  EXPECT_FALSE(validMetricName(""));
  EXPECT_TRUE(validLabelName("route"));
  EXPECT_FALSE(validLabelName("a:b"));
  EXPECT_FALSE(validLabelName("__name__"));
  EXPECT_FALSE(validLabelName("9"));
}

// The parser the integration tests trust must catch what a broken writer would produce.
TEST(PrometheusParserTest, RejectsWhatTheFormatForbids) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"x 1\n", "before (or without) its family's TYPE"},
      {"# TYPE x gauge\nx 1\n", "has no HELP"},
      {"# HELP x X.\n# TYPE x gauge\n# TYPE x gauge\nx 1\n", "second TYPE"},
      {"# HELP x X.\n# TYPE x gauge\nx 1\nx 2\n", "duplicate series"},
      {"# HELP x X.\n# TYPE x gauge\n# HELP y Y.\n# TYPE y gauge\ny 1\nx 1\n", "again after"},
      {"# HELP x X.\n# TYPE x gauge\nx{a=\"\\t\"} 1\n", "bad escape"},
      {"# HELP x X.\n# TYPE x gauge\nx{a=\"1} 1\n", "unterminated"},
      {"# HELP x X.\n# TYPE x gauge\nx one\n", "bad value"},
      {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
       "h_sum 1\nh_count 1\n",
       "not cumulative"},
      {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
       "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
       "le not increasing"},
      {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
       "not le=\"+Inf\""},
      {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n",
       "_count differs"},
      {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", "no _sum"},
      {"# HELP h H.\n# TYPE h histogram\nh 1\n", "without _bucket"},
      {"# HELP c C.\n# TYPE c counter\nc -1\n", "negative"},
      {"# HELP x X.\n# TYPE x gauge\nx 1", "newline"},
  };
  for (const Case& c : cases) {
    const auto parsed = parsePrometheusText(c.text);
    EXPECT_THAT(parsed.errors, ::testing::Contains(HasSubstr(c.error))) << c.text;
  }
  // And accepts what it allows: comments, blank lines, a timestamp, a trailing comma.
  EXPECT_THAT(parsePrometheusText("# a comment\n\n# HELP x X.\n# TYPE x counter\n"
                                  "x{a=\"1\",} 1 1700000000000\n")
                  .errors,
              IsEmpty());
}

TEST(HistogramTest, ConcurrentObservationsAllCount) {
  Histogram h(kPassSecondsBounds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h] {
      for (int i = 0; i < 1000; ++i) {
        h.observe(0.003);
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  const HistogramData d = h.snapshot();
  EXPECT_EQ(d.count, 4000U);
  EXPECT_NEAR(d.sum, 12.0, 1e-9);
  // All in the first bucket at or above 0.003 (0.005).
  const size_t i =
      static_cast<size_t>(std::find(d.bounds.begin(), d.bounds.end(), 0.005) - d.bounds.begin());
  EXPECT_EQ(d.buckets[i], 4000U);
}

TEST(EvictionReasonTest, DriverTextsMapToFixedReasons) {
  EXPECT_EQ(evictionReason("preempted by workload big (priority 10) (task 0 on node n1)"),
            "preempted");
  EXPECT_EQ(evictionReason("reclaimed by queue b/default: a held 8 GPUs, fair share 4 (task 1 "
                           "on node n1)"),
            "reclaimed");
  EXPECT_EQ(evictionReason("moved to make room for other work; it restarts on another node"),
            "moved");
  EXPECT_EQ(evictionReason("drained: node n1 is being drained (task 0 on node n1); ..."),
            "drained");
  EXPECT_EQ(evictionReason("something new"), "other");
}

// The driver's own event texts map to their reasons (a change of wording there that the
// classifier missed would count them as "other"), and every pass is in the duration histogram.
TEST(DriverMetricsTest, RealEvictionEventsHaveTheirReasonsAndPassesAreTimed) {
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  core::FakeClock clock;
  std::vector<model::Node> nodes;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(*model::makeProfileNode("dgx-h100", i == 0 ? "n0" : "n1", cat, i));
  }
  std::map<std::string, std::vector<std::string>> events;
  auto d = SchedulerDriver::create(cat, std::move(nodes), clock, {},
                                   [&](const std::map<std::string, WorkloadStatus>& c) {
                                     for (const auto& [k, v] : c) {
                                       for (const std::string& e : v.events) {
                                         events[k].push_back(e);
                                       }
                                     }
                                     return core::Status::ok();
                                   });
  ASSERT_TRUE(d.isOk());
  SchedulerDriver& driver = **d;
  ASSERT_TRUE(driver.addTenantQueue("team-1", 8000, sched::kNoGpuLimit, 1, 100).isOk());
  ASSERT_TRUE(driver.addTenantQueue("team-2", 8000, sched::kNoGpuLimit, 1, 100).isOk());
  auto cmd = [](const std::string& tenant, const std::string& name, int tasks, int gpus) {
    SubmitCommand c;
    c.tenant = tenant;
    c.name = name;
    c.spec.tasks = tasks;
    c.spec.min_available = 1;
    c.spec.request.cpu = core::MilliCpu{4000};
    c.spec.request.memory = core::MiB{1024};
    c.spec.request.gpu_count = gpus;
    c.spec.request.gpu_milli = core::kWholeGpu;
    return c;
  };
  // team-1 takes all 16 GPUs; team-2 reclaims its share; a higher priority preempts in team-2;
  // then a node is drained.
  ASSERT_TRUE(driver.submit(cmd("team-1", "wide", 16, 1)).isOk());
  driver.runOnce();
  ASSERT_TRUE(driver.submit(cmd("team-2", "low", 1, 8)).isOk());
  driver.runOnce();
  driver.runOnce();
  SubmitCommand urgent = cmd("team-2", "urgent", 1, 8);
  urgent.spec.priority = 10;
  ASSERT_TRUE(driver.submit(urgent).isOk());
  driver.runOnce();
  driver.runOnce();
  ASSERT_TRUE(driver.drain("n0").isOk());
  driver.runOnce();
  std::map<std::string, int> reasons;
  for (const auto& [w, list] : events) {
    for (const std::string& e : list) {
      ++reasons[std::string(evictionReason(e))];
    }
  }
  EXPECT_GT(reasons["reclaimed"], 0);
  EXPECT_GT(reasons["preempted"], 0);
  EXPECT_GT(reasons["drained"], 0);
  EXPECT_EQ(reasons["other"], 0);
  const HistogramData passes = driver.passSeconds();
  EXPECT_EQ(passes.count, static_cast<uint64_t>(driver.passes()));
  EXPECT_EQ(passes.count, 6U);
}

TEST(RequestMetricsTest, PerRouteAndPerTenant) {
  RequestMetrics m;
  m.observe("tenant/workloads/{name}", "a", 200, 0.002);
  m.observe("tenant/workloads/{name}", "b", 200, 0.004);
  m.observe("tenant/workloads/{name}", "b", 404, 0.001);
  m.countEviction("a", "preempted");
  m.countEviction("b", "drained");
  m.countEviction("b", "drained");
  const auto all = m.latency();
  ASSERT_EQ(all.size(), 2U);
  EXPECT_EQ(all.at({"tenant/workloads/{name}", 200}).count, 2U);
  const std::string a = "a";
  const auto only_a = m.latency(&a);
  ASSERT_EQ(only_a.size(), 1U);
  EXPECT_EQ(only_a.at({"tenant/workloads/{name}", 200}).count, 1U);
  EXPECT_EQ(m.tenantTotals().at("b").requests, 2U);
  EXPECT_EQ(m.evictions().at("drained"), 2U);
  EXPECT_EQ(m.evictions(&a).at("drained"), 0U);
  EXPECT_EQ(m.evictions(&a).at("preempted"), 1U);
  EXPECT_EQ(m.evictions(&a).size(), std::size(kEvictionReasons));
  // A deleted tenant: its own view starts again at 0; the fleet's counters do not go down.
  m.forgetTenant("b");
  const std::string b = "b";
  EXPECT_THAT(m.latency(&b), IsEmpty());
  EXPECT_EQ(m.evictions(&b).at("drained"), 0U);
  EXPECT_EQ(m.evictions().at("drained"), 2U);
  EXPECT_EQ(m.latency().at({"tenant/workloads/{name}", 404}).count, 1U);
}

}  // namespace
}  // namespace tessera::server
