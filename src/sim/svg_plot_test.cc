#include "sim/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <string>
#include <vector>

namespace tessera::sim {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) {
    ++n;
  }
  return n;
}

PlotSeries line(std::string name, std::vector<double> x, std::vector<double> y) {
  PlotSeries s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

// The coordinate pairs of every <polyline> in `svg`, one vector per polyline.
std::vector<size_t> polylinePairs(const std::string& svg) {
  std::vector<size_t> out;
  static const std::regex kPoints("<polyline points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kPoints);
       it != std::sregex_iterator(); ++it) {
    out.push_back(count((*it)[1].str(), ","));
  }
  return out;
}

// Every number in every attribute value parses as a finite double.
void expectOnlyFiniteNumbers(const std::string& svg) {
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
  static const std::regex kAttr("=\"([-0-9.e+, ]+)\"");
  size_t numbers = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kAttr); it != std::sregex_iterator();
       ++it) {
    std::string value = (*it)[1].str();
    for (char& c : value) {
      c = c == ',' ? ' ' : c;
    }
    size_t pos = 0;
    while (pos < value.size()) {
      size_t used = 0;
      const std::string rest = value.substr(pos);
      if (rest.find_first_not_of(' ') == std::string::npos) {
        break;
      }
      const double v = std::stod(rest, &used);
      EXPECT_TRUE(std::isfinite(v)) << rest;
      EXPECT_LT(std::fabs(v), 1e5) << "a coordinate far outside the chart: " << rest;
      pos += used;
      ++numbers;
    }
  }
  EXPECT_GT(numbers, 10U);
}

TEST(SvgPlotTest, LineChartDrawsEachFinitePointWhereItsValueIs) {
  LineChart c;
  c.title = "t";
  c.x = {"x", 0.0, 10.0};
  c.y = {"y", 0.0, 100.0};
  c.width_px = 640;
  c.height_px = 300;
  c.series.push_back(line("a", {0, 5, 10}, {0, 50, 100}));
  c.series.push_back(line("b", {0, 1, 2, 3, 4}, {1, 2, 3, 4, 5}));
  const std::string svg = renderLineChart(c);
  EXPECT_EQ(polylinePairs(svg), (std::vector<size_t>{3, 5}));
  EXPECT_NE(svg.find("data-name=\"a\" data-points=\"3\""), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"b\" data-points=\"5\""), std::string::npos);
  // Plot area: x from 66 to 640 - 18, y from 30 (under the title) to 300 - 46.
  EXPECT_NE(svg.find("66.0,254.0 344.0,142.0 622.0,30.0"), std::string::npos) << svg;
  EXPECT_NE(svg.find("#4e79a7"), std::string::npos);  // Palette colours by index.
  EXPECT_NE(svg.find("#f28e2b"), std::string::npos);
  // Axis labels and a legend entry per series.
  EXPECT_NE(svg.find(">x</text>"), std::string::npos);
  EXPECT_NE(svg.find(">y</text>"), std::string::npos);
  EXPECT_EQ(count(svg.substr(svg.find("class=\"legend\"")), "<line"), 2U);
  expectOnlyFiniteNumbers(svg);
}

TEST(SvgPlotTest, NonFinitePointsBreakTheLineAndAreLeftOut) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  LineChart c;
  c.series.push_back(line("gappy", {0, 1, 2, 3, 4, 5, 6}, {1, 2, nan, 3, 4, inf, 5}));
  const std::string svg = renderLineChart(c);
  // Runs: {0, 1}, {3, 4} and {6} (a lone point is a circle).
  EXPECT_EQ(polylinePairs(svg), (std::vector<size_t>{2, 2}));
  EXPECT_EQ(count(svg, "<circle"), 1U);
  EXPECT_NE(svg.find("data-points=\"5\""), std::string::npos);
  expectOnlyFiniteNumbers(svg);
}

TEST(SvgPlotTest, StepSeriesHoldEachValueUntilTheNextPoint) {
  LineChart c;
  c.x = {"x", 0.0, 4.0};
  c.y = {"y", 0.0, 4.0};
  c.series.push_back(line("s", {0, 1, 4}, {1, 3, 2}));
  c.series.back().step = true;
  const std::string svg = renderLineChart(c);
  EXPECT_EQ(polylinePairs(svg), (std::vector<size_t>{5}));  // 3 points and 2 corners.
  EXPECT_NE(svg.find("data-points=\"3\""), std::string::npos);
}

TEST(SvgPlotTest, EmptySinglePointAndHugeRangesGiveFiniteCharts) {
  const double big = std::numeric_limits<double>::max();
  std::vector<LineChart> charts(6);
  charts[0].title = "empty";
  charts[1].series.push_back(line("none", {}, {}));
  charts[2].series.push_back(line("one", {3}, {7}));
  charts[3].series.push_back(line("huge", {-big, 0, big}, {big, -big, big}));
  charts[4].series.push_back(line("tiny", {0, 1e-320}, {5e-324, 0}));
  charts[5].series.push_back(line("flat", {1e15, 1e15 + 1}, {42, 42}));
  for (const LineChart& c : charts) {
    const std::string svg = renderLineChart(c);
    SCOPED_TRACE(svg);
    expectOnlyFiniteNumbers(svg);
  }
  EXPECT_NE(renderLineChart(charts[0]).find(">no data</text>"), std::string::npos);
  EXPECT_NE(renderLineChart(charts[1]).find(">no data</text>"), std::string::npos);
  const std::string one = renderLineChart(charts[2]);
  EXPECT_EQ(count(one, "<circle"), 1U);
  EXPECT_EQ(one.find(">no data</text>"), std::string::npos);
  EXPECT_EQ(polylinePairs(renderLineChart(charts[3])), (std::vector<size_t>{3}));
}

TEST(SvgPlotTest, TextIsEscaped) {
  LineChart c;
  c.title = "<script>alert('x')</script> & \"more\"";
  c.x.label = "a<b";
  c.series.push_back(line("q&<", {0, 1}, {0, 1}));
  const std::string svg = renderLineChart(c);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("q&<"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;more&quot;"),
            std::string::npos);
  EXPECT_NE(svg.find(">a&lt;b</text>"), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"q&amp;&lt;\""), std::string::npos);
  EXPECT_EQ(escapeXml("plain"), "plain");
}

TEST(SvgPlotTest, BandsAreClosedAreasBehindTheLine) {
  LineChart c;
  c.series.push_back(line("m", {0, 1, 2, 3}, {2, 3, 4, 5}));
  c.series.back().low = {1, 2, 3, 4};
  c.series.back().high = {3, 4, 5, 6};
  const std::string svg = renderLineChart(c);
  EXPECT_EQ(count(svg, "class=\"band\""), 1U);
  EXPECT_LT(svg.find("class=\"band\""), svg.find("<polyline"));
  // The band is in the y range: 6 is the top of the data, so a tick at 6 exists.
  EXPECT_NE(svg.find(">6</text>"), std::string::npos) << svg;
}

TEST(SvgPlotTest, BarsStackPerBinUpToTheTallestTotal) {
  BarChart b;
  b.title = "evictions";
  b.width_px = 640;
  b.height_px = 260;
  b.x0 = 0;
  b.bin_width = 10;
  b.stack_names = {"reclaim", "preemption"};
  b.values = {{1, 0, 2}, {0, 3, std::nan("")}};
  const std::string svg = renderBarChart(b);
  EXPECT_NE(svg.find("data-name=\"reclaim\" data-bars=\"2\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("data-name=\"preemption\" data-bars=\"1\""), std::string::npos);
  // The tallest stack (3, bin 1) spans the whole plot height: 260 - 30 - 46.
  EXPECT_NE(svg.find("height=\"184.0\" fill=\"#f28e2b\""), std::string::npos) << svg;
  expectOnlyFiniteNumbers(svg);

  BarChart zero = b;
  zero.values = {{0, 0, 0}};
  EXPECT_NE(renderBarChart(zero).find(">none</text>"), std::string::npos);
  BarChart bad = b;
  bad.bin_width = 0;
  const std::string svg_bad = renderBarChart(bad);
  EXPECT_NE(svg_bad.find(">no data</text>"), std::string::npos);
  EXPECT_EQ(count(svg_bad, "data-bars=\"0\""), 2U);
}

TEST(SvgPlotTest, TicksAreRoundAndLabelledWithTheDecimalsTheyNeed) {
  EXPECT_EQ(niceTicks(0, 100, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(niceTicks(0, 130, 5), (std::vector<double>{0, 20, 40, 60, 80, 100, 120}));
  EXPECT_EQ(niceTicks(-1, 1, 4), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(niceTicks(3, 3, 5), (std::vector<double>{3}));
  EXPECT_TRUE(niceTicks(std::nan(""), 1, 5).empty());
  EXPECT_LE(niceTicks(-1e308, 1e308, 5).size(), 11U);
  EXPECT_EQ(formatTick(0.2, 0.2), "0.2");
  EXPECT_EQ(formatTick(40, 20), "40");
  EXPECT_EQ(formatTick(0.05, 0.05), "0.05");
  EXPECT_EQ(formatTick(2e9, 1e9), "2e+09");
  EXPECT_EQ(formatTick(std::nan(""), 1), "");
}

}  // namespace
}  // namespace tessera::sim
