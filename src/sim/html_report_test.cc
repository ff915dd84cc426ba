#include "sim/html_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/scenario.h"

namespace tessera::sim {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) {
    ++n;
  }
  return n;
}

// Nothing in the page would fetch anything or needs a script to show the plots.
void expectSelfContained(const std::string& html) {
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0U);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  // The only URL is the SVG namespace, once per chart.
  EXPECT_EQ(count(html, "http"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_EQ(html.find("nan"), std::string::npos);
  EXPECT_EQ(html.find("inf\""), std::string::npos);
}

TEST(HtmlReportTest, EvictionReasonsComeFromTheFirstWordOfTheDetail) {
  EXPECT_EQ(evictionReason("reclaimed by 'b-big' (queue 'b'): elastic task"), "reclaim");
  EXPECT_EQ(evictionReason("reclaimed by queue team-2/default: team-1 held 32 GPUs"), "reclaim");
  EXPECT_EQ(evictionReason("preempted by workload t/x (priority 90)"), "preemption");
  EXPECT_EQ(evictionReason("moved for 'x' (queue 'a'): gang; unsaved 0.00 GPU-h"), "move");
  EXPECT_EQ(evictionReason(""), "other");
}

TEST(HtmlReportTest, QueueSeriesAreExactStepsForShortRuns) {
  std::vector<TenantRow> rows = {
      {0, "a", 4000, 8000, 8000, 3}, {0, "b", 0, 8000, 8000, 0}, {100, "a", 8000, 8000, 8000, 0}};
  auto s = queueSeries(rows, {"a", "b", "c"}, 500, 10);
  ASSERT_EQ(s.size(), 3U);
  EXPECT_EQ(s[0].queue, "a");
  EXPECT_FALSE(s[0].averaged);
  // a: two rows, then its last value held to the end.
  EXPECT_EQ(s[0].time_s, (std::vector<double>{0, 100, 500}));
  EXPECT_EQ(s[0].allocated, (std::vector<double>{4, 8, 8}));
  EXPECT_EQ(s[0].fair_share, (std::vector<double>{8, 8, 8}));
  EXPECT_EQ(s[0].pending, (std::vector<double>{3, 0, 0}));
  EXPECT_EQ(s[1].time_s, (std::vector<double>{0, 500}));
  EXPECT_TRUE(s[2].time_s.empty());  // A queue with no rows: an empty chart, not a missing one.
}

TEST(HtmlReportTest, LongRunsAreTimeWeightedMeansOverBoundedIntervals) {
  // 2 GPUs for 1 s, then 0 for 3 s, repeated over 4000 s: a mean of 0.5 GPUs everywhere.
  std::vector<TenantRow> rows;
  for (int t = 0; t < 4000; t += 4) {
    rows.push_back({static_cast<double>(t), "q", 2000, 1000, 0, 0});
    rows.push_back({static_cast<double>(t + 1), "q", 0, 1000, 0, 0});
  }
  rows.push_back({4000, "q", 2000, 1000, 0, 0});  // From here on to the end: 2.
  auto s = queueSeries(rows, {"q"}, 8000, 100);
  ASSERT_EQ(s.size(), 1U);
  EXPECT_TRUE(s[0].averaged);
  ASSERT_EQ(s[0].time_s.size(), 100U);
  EXPECT_DOUBLE_EQ(s[0].time_s[0], 40);  // Middle of [0, 80).
  for (size_t b = 0; b < 50; ++b) {
    EXPECT_NEAR(s[0].allocated[b], 0.5, 1e-9) << b;
    EXPECT_NEAR(s[0].fair_share[b], 1, 1e-9) << b;
  }
  for (size_t b = 50; b < 100; ++b) {
    EXPECT_NEAR(s[0].allocated[b], 2, 1e-9) << b;
  }
  // Rows starting late: nothing to average before the first one.
  std::vector<TenantRow> late(300, {0, "q", 1000, 0, 0, 0});
  for (size_t i = 0; i < late.size(); ++i) {
    late[i].time_s = 500 + static_cast<double>(i);
  }
  auto l = queueSeries(late, {}, 1000, 10);
  EXPECT_TRUE(std::isnan(l[0].allocated[0]));
  EXPECT_NEAR(l[0].allocated[9], 1, 1e-9);
}

TEST(HtmlReportTest, EvictionsAreCountedPerRoundIntervalByReason) {
  std::vector<SimEvent> events = {
      {10, "evict", "w", 0, "a", "n", "reclaimed by 'x'"},
      {20, "evict", "w", 1, "a", "n", "reclaimed by 'x'"},
      {20, "start", "w", 1, "a", "n", ""},
      {700, "evict", "v", 0, "b", "n", "preempted by workload y (priority 5)"},
      {3600, "evict", "v", 0, "b", "n", "moved for 'z'"},
  };
  EvictionBins b = evictionBins(events, 3600, 60);
  EXPECT_EQ(b.bin_s, 60);  // 3600 s / 60 bins.
  EXPECT_EQ(b.reasons, (std::vector<std::string>{"reclaim", "preemption", "move"}));
  ASSERT_EQ(b.counts.size(), 3U);
  ASSERT_EQ(b.counts[0].size(), 60U);
  EXPECT_EQ(b.counts[0][0], 2);
  EXPECT_EQ(b.counts[1][11], 1);  // 700 s is in [660, 720).
  EXPECT_EQ(b.counts[2][59], 1);  // The end of the run is in the last interval.
  double total = 0;
  for (const auto& c : b.counts) {
    for (double v : c) {
      total += v;
    }
  }
  EXPECT_EQ(total, 4);

  EvictionBins none = evictionBins({}, 0, 60);
  EXPECT_EQ(none.reasons, (std::vector<std::string>{"evictions"}));
  EXPECT_EQ(none.counts[0].size(), 1U);
}

std::string examples() {
  const char* d = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(d != nullptr ? d : ".") + "/examples/scenarios/";
}

TEST(HtmlReportTest, ScenarioReportHasAChartPerQueueEvictionsAndPending) {
  auto sc = readScenario(examples() + "reclaim.json");
  ASSERT_TRUE(sc.isOk()) << sc.status().message();
  auto r = runScenario(*sc);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  const std::string html = scenarioReportHtml(*r, "sim scenario: <reclaim>", {{"file", "x&y"}});
  expectSelfContained(html);
  EXPECT_NE(html.find("<title>sim scenario: &lt;reclaim&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find(">x&amp;y</td>"), std::string::npos);
  // Two leaf queues: a fair-share chart each, plus the evictions and pending charts.
  EXPECT_EQ(count(html, "<svg xmlns"), 4U);
  EXPECT_NE(html.find(">Queue a</text>"), std::string::npos);
  EXPECT_NE(html.find(">Queue b</text>"), std::string::npos);
  EXPECT_EQ(count(html, "data-name=\"fair share\""), 2U);
  // a's 8 tasks are reclaimed at 600 s: one bar, of reason reclaim.
  EXPECT_NE(html.find("data-name=\"reclaim\" data-bars=\"1\""), std::string::npos);
  EXPECT_NE(html.find("<td>80.1</td><td>8</td>"), std::string::npos);  // a's evicted tasks.
  EXPECT_EQ(html.find("data-points=\"0\""), std::string::npos) << "a series with no points";
}

TEST(HtmlReportTest, OpenbReportHasMeanCurvesBandsAndTheAuthorsCurves) {
  OpenbReport rep;
  rep.parameters = {{"policies", "fgd,bestfit"}};
  for (uint64_t seed : {1, 2}) {
    for (const std::string policy : {"fgd", "bestfit"}) {
      OpenbReportRun run{"default", policy, seed, {}};
      for (int k = 0; k <= kMaxArrivedBin; ++k) {
        CurvePoint p;
        p.arrived_pct = k;
        p.present = !(policy == "bestfit" && k == 7);  // A hole: left out of the line.
        p.unalloc_pct = 100 - std::min(k, 95) + static_cast<double>(seed);
        run.curve.push_back(p);
      }
      rep.runs.push_back(std::move(run));
      rep.rows.push_back({"default", policy, seed, 5.0 + static_cast<double>(seed), 4, 0.5});
    }
  }
  ExpectedResults expected = {{{"default", "fgd"}, {6.0, 7.0}}};
  ExpectedCurves curves = {{{"default", "fgd"}, {std::vector<double>(kMaxArrivedBin + 1, 10.0)}}};
  rep.expected = &expected;
  rep.expected_curves = &curves;
  const std::string html = openbReportHtml(rep);
  expectSelfContained(html);
  // Per trace: the full chart and the zoom, each with fgd, its authors' curve and bestfit.
  EXPECT_EQ(count(html, "<svg xmlns"), 2U);
  EXPECT_EQ(count(html, "data-name=\"fgd\" data-points=\"131\""), 1U);
  EXPECT_EQ(count(html, "data-name=\"fgd (authors)\" data-points=\"131\""), 1U);
  EXPECT_EQ(count(html, "data-name=\"bestfit\" data-points=\"130\""), 1U);  // Bin 7 missing.
  EXPECT_EQ(count(html, "data-name=\"fgd\" data-points=\"51\""), 1U);       // Zoom: 80..130.
  EXPECT_EQ(count(html, "class=\"band\""), 3U + 2U);    // bestfit's hole splits its full band.
  EXPECT_EQ(count(html, "stroke-dasharray"), 2U * 2U);  // Authors' line and its legend, twice.
  // The summary table: ours, the authors' and the difference.
  EXPECT_NE(html.find("<td>6.50 ± 0.71</td><td>6.50 ± 0.71</td><td>+0.0%</td>"), std::string::npos)
      << html;
  EXPECT_NE(html.find("<td class=\"l\">bestfit</td><td>2</td><td>6.50 ± 0.71</td><td>-</td>"),
            std::string::npos);
}

TEST(HtmlReportTest, AuthorsCurvesAreReadByArrivedColumn) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera-expected-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "analysis_allo_discrete.csv")
      << "workload,sc_policy,tune,seed,total_gpus,0,99,100,131\n"
      << "openb_pod_list_default,06-FGD,1.3,42,6212,0.5,95.0,95.25,1\n"
      << "openb_pod_list_default,06-FGD,1.3,43,6212,0.25,94.0,94.75,1\n"
      << "openb_pod_list_cpu050,01-Random,1.3,42,6212,0,80,81,1\n";
  auto curves = readExpectedCurves(dir.string());
  ASSERT_TRUE(curves.isOk()) << curves.status().message();
  ASSERT_EQ(curves->size(), 2U);
  const auto& fgd = curves->at({"default", "fgd"});
  ASSERT_EQ(fgd.size(), 2U);
  ASSERT_EQ(fgd[1].size(), static_cast<size_t>(kMaxArrivedBin + 1));  // Column 131 ignored.
  EXPECT_DOUBLE_EQ(fgd[1][0], 99.75);  // Unallocated: 100 - allocated.
  EXPECT_DOUBLE_EQ(fgd[1][99], 6);
  EXPECT_DOUBLE_EQ(fgd[1][100], 5.25);
  EXPECT_TRUE(std::isnan(fgd[1][50]));  // No column for 50 %.
  EXPECT_DOUBLE_EQ(curves->at({"cpu050", "random"})[0][100], 19);

  std::ofstream(dir / "analysis_allo_discrete.csv") << "workload,sc_policy,99,100\n"
                                                    << "openb_pod_list_default,06-FGD,x,95\n";
  auto bad = readExpectedCurves(dir.string());
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("column '99' value 'x' is not a number"), std::string::npos)
      << bad.status().message();
  std::filesystem::remove_all(dir);
}

TEST(HtmlReportTest, EmptyRunsStillGiveAValidPage) {
  const std::string html = openbReportHtml({});
  expectSelfContained(html);
  EXPECT_NE(html.find("No runs."), std::string::npos);
  const std::string scenario = scenarioReportHtml({}, "empty", {});
  expectSelfContained(scenario);
  EXPECT_NE(scenario.find("No queues."), std::string::npos);
  EXPECT_NE(scenario.find(">no data</text>"), std::string::npos);  // Pending: no series.
}

}  // namespace
}  // namespace tessera::sim
