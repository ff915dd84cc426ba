// Small SVG charts for the simulator's HTML reports, drawn here so that a report shows its plots
// with no script, no network and no chart library: line charts (with an optional band around each
// line, and step lines for states over time) and stacked bar charts over uniform bins.
//
//   LineChart c;
//   c.title = "Unallocated GPUs";
//   c.x.label = "arrived workload (% of GPU capacity)";
//   c.y.label = "unallocated GPU %";
//   c.series.push_back({.name = "fgd", .x = {0, 50, 100}, .y = {100, 50, 5}});
//   std::string svg = renderLineChart(c);
//
// Whatever the data (empty series, one point, NaN or infinite values, ranges near the limits of
// double), the SVG holds only finite numbers: non-finite points are left out (a line breaks there)
// and an empty chart says "no data". Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::sim {

struct PlotSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;  // Same length as x (extra values on either side are ignored).
  // Optional band (same length as x), drawn as a shaded area behind the line: the spread over
  // seeds, for instance. Empty: no band.
  std::vector<double> low;
  std::vector<double> high;
  std::string colour;  // CSS colour; empty: the palette's colour for the series' index.
  bool dashed = false;
  bool step = false;  // Each value holds until the next x (a state over time).
};

struct PlotAxis {
  std::string label;
  // Fixed bounds; unset: from the data, widened to round tick values.
  std::optional<double> min;
  std::optional<double> max;
};

struct LineChart {
  std::string title;
  PlotAxis x;
  PlotAxis y;
  int width_px = 640;
  int height_px = 300;
  std::vector<PlotSeries> series;
};

// One <svg> element. Each series is a <g class="series" data-name=... data-points=N> where N is
// the number of finite points drawn, holding one <polyline> per unbroken run of points (a <circle>
// for a run of one point).
std::string renderLineChart(const LineChart& chart);

struct BarChart {
  std::string title;
  PlotAxis x;  // Only the label is used: the bins give the range.
  PlotAxis y;  // The minimum is always 0.
  int width_px = 640;
  int height_px = 260;
  double x0 = 0;         // Bin i covers [x0 + i * bin_width, x0 + (i + 1) * bin_width).
  double bin_width = 1;  // Must be > 0 and finite.
  std::vector<std::string> stack_names;     // One per stacked layer, bottom first.
  std::vector<std::vector<double>> values;  // values[layer][bin]; negative or NaN count as 0.
};

// One <svg> element; each layer is a <g class="series" data-name=... data-bars=N> holding one
// <rect> per bin where the layer's value is above 0.
std::string renderBarChart(const BarChart& chart);

// Escapes & < > " ' for text and attribute values.
std::string escapeXml(std::string_view text);

// The i-th colour of the palette (Tableau 10, distinguishable and readable on white).
std::string_view paletteColour(size_t i);

// Round tick values covering [lo, hi] (about `target` of them, at most 2 * target + 1); lo <= hi,
// both finite. Exposed for tests.
std::vector<double> niceTicks(double lo, double hi, int target);

// A tick's label, with as many decimals as the step between ticks needs; huge or tiny values in
// exponent form.
std::string formatTick(double value, double step);

}  // namespace tessera::sim
