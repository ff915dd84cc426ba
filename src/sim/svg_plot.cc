#include "sim/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>

namespace tessera::sim {
namespace {

constexpr double kLeft = 66;
constexpr double kRight = 18;
constexpr double kBottom = 46;
constexpr double kLegendItemPx = 180;
constexpr double kLegendRowPx = 18;
constexpr double kLegendGapPx = 10;  // Between the x axis label and the legend.
constexpr int kTargetTicks = 5;

double niceStep(double lo, double hi, int target) {
  // Halves first, so that hi - lo cannot overflow when the ends are near the limits of double.
  const double half = hi * 0.5 - lo * 0.5;
  const double raw = half / (target * 0.5);
  if (!(raw > 0) || !std::isfinite(raw)) {
    return 1;
  }
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  if (!(p > 0) || !std::isfinite(p)) {
    return raw;
  }
  const double f = raw / p;
  const double nice = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  const double step = nice * p;
  return std::isfinite(step) && step > 0 ? step : raw;
}

std::vector<double> ticksFor(double lo, double hi, double step, int target) {
  const double k0 = std::ceil(lo / step - 1e-9);
  const double k1 = std::floor(hi / step + 1e-9);
  if (!std::isfinite(k0) || !std::isfinite(k1) || k1 < k0 || k1 - k0 > 2.0 * target) {
    return {lo, hi};
  }
  std::vector<double> ticks;
  for (double k = k0; k <= k1; ++k) {
    double v = k * step;
    if (std::fabs(v) < step * 1e-9) {
      v = 0;  // -0 and rounding noise around zero read as "0".
    }
    if (std::isfinite(v) && (ticks.empty() || v > ticks.back())) {
      ticks.push_back(v);
    }
  }
  return ticks;
}

// An axis: the range drawn, its ticks, and the map from values to [0, 1].
struct Scale {
  double lo = 0;
  double hi = 1;
  double step = 1;
  std::vector<double> ticks;

  // Clamped so that points far outside a fixed range still give finite coordinates (the plot area
  // clips them).
  double unit(double v) const {
    const double t = (v * 0.5 - lo * 0.5) / (hi * 0.5 - lo * 0.5);
    return std::clamp(t, -1.0, 2.0);
  }
};

struct Extent {
  double lo = INFINITY;
  double hi = -INFINITY;
  void add(double v) {
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  bool empty() const { return lo > hi; }
};

Scale makeScale(const Extent& data, const PlotAxis& axis) {
  const bool fix_lo = axis.min.has_value() && std::isfinite(*axis.min);
  const bool fix_hi = axis.max.has_value() && std::isfinite(*axis.max);
  Scale s;
  s.lo = fix_lo ? *axis.min : data.empty() ? 0 : data.lo;
  s.hi = fix_hi ? *axis.max : data.empty() ? (fix_lo ? s.lo + 1 : 1) : data.hi;
  if (s.lo > s.hi) {
    std::swap(s.lo, s.hi);
  }
  const double magnitude = std::max(std::fabs(s.lo), std::fabs(s.hi));
  if (s.hi * 0.5 - s.lo * 0.5 <= magnitude * 1e-12) {
    // One value (or a range too narrow to draw): widen around it.
    double pad = magnitude * 0.05;
    if (!(pad >= 1e-300)) {
      pad = 1;
    }
    s.lo = std::max(s.lo - pad, -DBL_MAX);
    s.hi = std::min(s.hi + pad, DBL_MAX);
  }
  s.step = niceStep(s.lo, s.hi, kTargetTicks);
  if (!fix_lo) {
    const double lo = std::floor(s.lo / s.step) * s.step;
    s.lo = std::isfinite(lo) ? lo : s.lo;
  }
  if (!fix_hi) {
    const double hi = std::ceil(s.hi / s.step) * s.step;
    s.hi = std::isfinite(hi) ? hi : s.hi;
  }
  s.ticks = ticksFor(s.lo, s.hi, s.step, kTargetTicks);
  return s;
}

std::string num(double px) { return fmt::format("{:.1f}", std::isfinite(px) ? px : 0.0); }

struct Frame {
  double width = 0;
  double height = 0;  // Of the plot and its axes, without the legend.
  double top = 0;
  double plot_w = 0;
  double plot_h = 0;
  double px(const Scale& x, double v) const { return kLeft + x.unit(v) * plot_w; }
  double py(const Scale& y, double v) const { return top + (1 - y.unit(v)) * plot_h; }
};

Frame makeFrame(int width_px, int height_px, bool titled) {
  Frame f;
  f.width = std::clamp(width_px, 200, 4000);
  f.height = std::clamp(height_px, 120, 4000);
  f.top = titled ? 30 : 12;
  f.plot_w = f.width - kLeft - kRight;
  f.plot_h = f.height - f.top - kBottom;
  return f;
}

size_t legendRows(const Frame& f, size_t items) {
  const auto per_row =
      static_cast<size_t>(std::max(1.0, std::floor((f.width - kLeft) / kLegendItemPx)));
  return (items + per_row - 1) / per_row;
}

// The <svg> opening, title, grid, ticks and axis labels.
std::string openChart(const Frame& f, size_t legend_items, const std::string& title,
                      const Scale& xs, const Scale& ys, const std::string& x_label,
                      const std::string& y_label, std::string_view kind) {
  const size_t rows = legendRows(f, legend_items);
  const double total_h =
      f.height + (rows > 0 ? kLegendGapPx : 0) + static_cast<double>(rows) * kLegendRowPx;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart {}\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" "
      "aria-label=\"{}\">\n",
      kind, num(f.width), num(total_h), num(f.width), num(total_h), escapeXml(title));
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  if (!title.empty()) {
    out += fmt::format(
        "<text class=\"title\" x=\"{}\" y=\"19\" font-size=\"14\" font-weight=\"bold\" "
        "fill=\"#222\">{}</text>\n",
        num(kLeft), escapeXml(title));
  }
  out += "<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n";
  for (double v : ys.ticks) {
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>\n", num(kLeft),
                       num(kLeft + f.plot_w), num(f.py(ys, v)), num(f.py(ys, v)));
  }
  for (double v : xs.ticks) {
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>\n", num(f.px(xs, v)),
                       num(f.px(xs, v)), num(f.top), num(f.top + f.plot_h));
  }
  out += "</g>\n<g class=\"axis\" fill=\"#444\">\n";
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n",
      num(kLeft), num(f.top), num(f.plot_w), num(f.plot_h));
  for (double v : ys.ticks) {
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
                       num(kLeft - 6), num(f.py(ys, v) + 4), escapeXml(formatTick(v, ys.step)));
  }
  for (double v : xs.ticks) {
    out += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       num(f.px(xs, v)), num(f.top + f.plot_h + 16),
                       escapeXml(formatTick(v, xs.step)));
  }
  out += fmt::format("<text class=\"xlabel\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     num(kLeft + f.plot_w / 2), num(f.top + f.plot_h + 36), escapeXml(x_label));
  out += fmt::format(
      "<text class=\"ylabel\" x=\"14\" y=\"{}\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 14 {})\">{}</text>\n",
      num(f.top + f.plot_h / 2), num(f.top + f.plot_h / 2), escapeXml(y_label));
  out += "</g>\n";
  return out;
}

std::string noData(const Frame& f, std::string_view text) {
  return fmt::format(
      "<text class=\"nodata\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888\" "
      "font-size=\"14\">{}</text>\n",
      num(kLeft + f.plot_w / 2), num(f.top + f.plot_h / 2), escapeXml(text));
}

struct LegendItem {
  std::string name;
  std::string colour;
  bool dashed = false;
  bool box = false;  // A filled square (bars) rather than a line.
};

std::string legend(const Frame& f, const std::vector<LegendItem>& items) {
  if (items.empty()) {
    return "";
  }
  const auto per_row =
      static_cast<size_t>(std::max(1.0, std::floor((f.width - kLeft) / kLegendItemPx)));
  std::string out = "<g class=\"legend\">\n";
  for (size_t i = 0; i < items.size(); ++i) {
    const double x = kLeft + static_cast<double>(i % per_row) * kLegendItemPx;
    const double y = f.height + kLegendGapPx + static_cast<double>(i / per_row) * kLegendRowPx + 4;
    const LegendItem& it = items[i];
    if (it.box) {
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"10\" fill=\"{}\"/>", num(x),
                         num(y - 9), escapeXml(it.colour));
    } else {
      out += fmt::format(
          "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2.5\"{}/>",
          num(x), num(x + 22), num(y - 4), num(y - 4), escapeXml(it.colour),
          it.dashed ? " stroke-dasharray=\"6 3\"" : "");
    }
    // Long names are cut so that items do not overlap.
    std::string name = it.name.size() > 24 ? it.name.substr(0, 23) + "…" : it.name;
    out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#222\">{}</text>\n", num(x + 28), num(y),
                       escapeXml(name));
  }
  return out + "</g>\n";
}

// A nested viewport over the plot area with the outer coordinates: it clips what it holds to the
// plot area without a clip-path, whose id would have to be unique in the page.
std::string openPlotArea(const Frame& f) {
  return fmt::format(
      "<svg class=\"plot\" x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" "
      "viewBox=\"{0} {1} {2} {3}\">\n",
      num(kLeft), num(f.top - 1), num(f.plot_w), num(f.plot_h + 2));
}

}  // namespace

std::string escapeXml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string_view paletteColour(size_t i) {
  static constexpr std::array<std::string_view, 10> kPalette = {
      "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kPalette[i % kPalette.size()];
}

std::vector<double> niceTicks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi || target < 1) {
    return {};
  }
  if (lo == hi) {
    return {lo};
  }
  return ticksFor(lo, hi, niceStep(lo, hi, target), target);
}

std::string formatTick(double value, double step) {
  if (!std::isfinite(value)) {
    return "";
  }
  if (value == 0) {
    return "0";
  }
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e6 || !(step >= 1e-4) || !std::isfinite(step)) {
    return fmt::format("{:.3g}", value);
  }
  const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 6);
  return fmt::format("{:.{}f}", value, decimals);
}

std::string renderLineChart(const LineChart& chart) {
  const Frame f = makeFrame(chart.width_px, chart.height_px, !chart.title.empty());
  Extent xe;
  Extent ye;
  size_t finite_points = 0;
  for (const PlotSeries& s : chart.series) {
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        xe.add(s.x[i]);
        ye.add(s.y[i]);
        ++finite_points;
      }
      if (i < s.low.size() && i < s.high.size() && std::isfinite(s.x[i])) {
        ye.add(s.low[i]);
        ye.add(s.high[i]);
      }
    }
  }
  const Scale xs = makeScale(xe, chart.x);
  const Scale ys = makeScale(ye, chart.y);
  std::string out =
      openChart(f, chart.series.size(), chart.title, xs, ys, chart.x.label, chart.y.label, "line");
  if (finite_points == 0) {
    out += noData(f, "no data");
  }
  std::vector<LegendItem> items;
  out += openPlotArea(f);
  for (size_t si = 0; si < chart.series.size(); ++si) {
    const PlotSeries& s = chart.series[si];
    const std::string colour = s.colour.empty() ? std::string(paletteColour(si)) : s.colour;
    items.push_back({s.name, colour, s.dashed, false});
    const size_t n = std::min(s.x.size(), s.y.size());
    std::string body;
    // The band: one closed area per run of points where x, low and high are all finite.
    if (s.low.size() >= n && s.high.size() >= n) {
      for (size_t i = 0; i < n;) {
        auto ok = [&](size_t k) {
          return std::isfinite(s.x[k]) && std::isfinite(s.low[k]) && std::isfinite(s.high[k]);
        };
        if (!ok(i)) {
          ++i;
          continue;
        }
        size_t j = i;
        while (j < n && ok(j)) {
          ++j;
        }
        if (j - i >= 2) {
          std::string d;
          for (size_t k = i; k < j; ++k) {
            d += fmt::format("{}{} {} ", k == i ? "M" : "L", num(f.px(xs, s.x[k])),
                             num(f.py(ys, s.low[k])));
          }
          for (size_t k = j; k-- > i;) {
            d += fmt::format("L{} {} ", num(f.px(xs, s.x[k])), num(f.py(ys, s.high[k])));
          }
          body += fmt::format(
              "<path class=\"band\" d=\"{}Z\" fill=\"{}\" fill-opacity=\"0.18\" "
              "stroke=\"none\"/>\n",
              d, escapeXml(colour));
        }
        i = j;
      }
    }
    size_t drawn = 0;
    for (size_t i = 0; i < n;) {
      auto ok = [&](size_t k) { return std::isfinite(s.x[k]) && std::isfinite(s.y[k]); };
      if (!ok(i)) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < n && ok(j)) {
        ++j;
      }
      drawn += j - i;
      if (j - i == 1) {
        body += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>\n",
                            num(f.px(xs, s.x[i])), num(f.py(ys, s.y[i])), escapeXml(colour));
      } else {
        std::string points;
        for (size_t k = i; k < j; ++k) {
          if (s.step && k > i) {
            points += num(f.px(xs, s.x[k])) + "," + num(f.py(ys, s.y[k - 1])) + " ";
          }
          points += num(f.px(xs, s.x[k])) + "," + num(f.py(ys, s.y[k])) + " ";
        }
        points.pop_back();
        body += fmt::format(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
            "stroke-linejoin=\"round\"{}/>\n",
            points, escapeXml(colour), s.dashed ? " stroke-dasharray=\"6 3\"" : "");
      }
      i = j;
    }
    out += fmt::format(
        "<g class=\"series\" data-name=\"{}\" data-points=\"{}\"><title>{}</title>\n{}</g>\n",
        escapeXml(s.name), drawn, escapeXml(s.name), body);
  }
  out += "</svg>\n" + legend(f, items);
  return out + "</svg>\n";
}

std::string renderBarChart(const BarChart& chart) {
  const Frame f = makeFrame(chart.width_px, chart.height_px, !chart.title.empty());
  size_t bins = 0;
  for (const std::vector<double>& layer : chart.values) {
    bins = std::max(bins, layer.size());
  }
  const bool valid_bins = std::isfinite(chart.x0) && std::isfinite(chart.bin_width) &&
                          chart.bin_width > 0 &&
                          std::isfinite(chart.x0 + chart.bin_width * static_cast<double>(bins));
  if (!valid_bins) {
    bins = 0;
  }
  auto value = [&](size_t layer, size_t bin) {
    const std::vector<double>& v = chart.values[layer];
    return bin < v.size() && std::isfinite(v[bin]) && v[bin] > 0 ? v[bin] : 0.0;
  };
  Extent xe;
  Extent ye;
  ye.add(0);
  double grand_total = 0;
  if (bins > 0) {
    xe.add(chart.x0);
    xe.add(chart.x0 + chart.bin_width * static_cast<double>(bins));
    for (size_t b = 0; b < bins; ++b) {
      double total = 0;
      for (size_t l = 0; l < chart.values.size(); ++l) {
        total += value(l, b);
      }
      ye.add(total);
      grand_total += total;
    }
  }
  PlotAxis xaxis = chart.x;
  if (bins > 0) {  // The bins give the range: no widening past them.
    xaxis.min = chart.x0;
    xaxis.max = chart.x0 + chart.bin_width * static_cast<double>(bins);
  }
  PlotAxis yaxis = chart.y;
  yaxis.min = 0;
  const Scale xs = makeScale(xe, xaxis);
  const Scale ys = makeScale(ye, yaxis);
  std::string out =
      openChart(f, chart.values.size(), chart.title, xs, ys, chart.x.label, chart.y.label, "bars");
  if (bins == 0) {
    out += noData(f, "no data");
  } else if (!(grand_total > 0)) {
    out += noData(f, "none");
  }
  std::vector<double> base(bins, 0);
  std::vector<LegendItem> items;
  out += openPlotArea(f);
  for (size_t l = 0; l < chart.values.size(); ++l) {
    const std::string colour(paletteColour(l));
    items.push_back(
        {l < chart.stack_names.size() ? chart.stack_names[l] : "", colour, false, true});
    std::string body;
    size_t bars = 0;
    for (size_t b = 0; b < bins; ++b) {
      const double v = value(l, b);
      if (v <= 0) {
        continue;
      }
      const double x0 = f.px(xs, chart.x0 + chart.bin_width * static_cast<double>(b));
      const double x1 = f.px(xs, chart.x0 + chart.bin_width * static_cast<double>(b + 1));
      const double y_top = f.py(ys, base[b] + v);
      const double y_bottom = f.py(ys, base[b]);
      base[b] += v;
      ++bars;
      body += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title>"
          "</rect>\n",
          num(x0 + 0.5), num(y_top), num(std::max(0.5, x1 - x0 - 1)),
          num(std::max(0.0, y_bottom - y_top)), colour,
          escapeXml(fmt::format("{}: {}", l < chart.stack_names.size() ? chart.stack_names[l] : "",
                                formatTick(v, 1))));
    }
    out += fmt::format("<g class=\"series\" data-name=\"{}\" data-bars=\"{}\">\n{}</g>\n",
                       escapeXml(items.back().name), bars, body);
  }
  out += "</svg>\n" + legend(f, items);
  return out + "</svg>\n";
}

}  // namespace tessera::sim
