#include "sim/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace allot::sim {
namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string tick_text(double v, bool percent) {
  char b[32];
  if (percent) {
    std::snprintf(b, sizeof b, "%.0f%%", 100 * v);
  } else if (std::fabs(v) >= 100 || v == std::floor(v)) {
    std::snprintf(b, sizeof b, "%.0f", v);
  } else {
    std::snprintf(b, sizeof b, "%.2g", v);
  }
  return b;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

const std::string& palette(std::size_t i) {
  static const std::vector<std::string> colours = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                                   "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
  return colours[i % colours.size()];
}

namespace {

// The plot area of a chart with axes: maps data to pixels and draws title, grid, ticks, labels.
class Frame {
 public:
  Frame(const PlotAxes& a, int width, int height, double right)
      : a_(a),
        width_(width),
        height_(height),
        pw_(width - kLeft - right),
        ph_(height - kTop - kBottom) {}
  double left() const { return kLeft; }
  double top() const { return kTop; }
  double pw() const { return pw_; }
  double ph() const { return ph_; }
  double fx(double x) const {
    double lo = a_.x_min, hi = a_.x_max, v = x;
    if (a_.log_x) {
      lo = std::log10(std::max(lo, 1e-9));
      hi = std::log10(std::max(hi, 1e-9));
      v = std::log10(std::max(x, 1e-9));
    }
    const double t = hi > lo ? (v - lo) / (hi - lo) : 0;
    return kLeft + pw_ * std::clamp(t, 0.0, 1.0);
  }
  double fy(double y) const {
    const double t = a_.y_max > a_.y_min ? (y - a_.y_min) / (a_.y_max - a_.y_min) : 0;
    return kTop + ph_ * (1 - std::clamp(t, 0.0, 1.0));
  }
  // The opening <svg> tag and everything but the data.
  std::string open() const {
    std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width_) +
                    "' height='" + std::to_string(height_) +
                    "' font-family='sans-serif' font-size='11'>";
    s += "<text x='" + num(kLeft) + "' y='16' font-size='13' font-weight='bold'>" +
         html_escape(a_.title) + "</text>";
    for (int i = 0; i <= 4; ++i) {  // grid and y ticks
      const double y = a_.y_min + (a_.y_max - a_.y_min) * i / 4;
      s += "<line x1='" + num(kLeft) + "' x2='" + num(kLeft + pw_) + "' y1='" + num(fy(y)) +
           "' y2='" + num(fy(y)) + "' stroke='#ddd'/>";
      s += "<text x='" + num(kLeft - 4) + "' y='" + num(fy(y) + 4) + "' text-anchor='end'>" +
           tick_text(y, a_.percent_y) + "</text>";
    }
    std::vector<std::pair<double, std::string>> ticks = a_.x_ticks;
    if (ticks.empty()) {
      for (int i = 0; i <= 4; ++i) {
        const double x = a_.x_min + (a_.x_max - a_.x_min) * i / 4;
        ticks.emplace_back(x, tick_text(x, false));
      }
    }
    for (const auto& [x, label] : ticks) {
      s += "<line x1='" + num(fx(x)) + "' x2='" + num(fx(x)) + "' y1='" + num(kTop + ph_) +
           "' y2='" + num(kTop + ph_ + 4) + "' stroke='#888'/>";
      s += "<text x='" + num(fx(x)) + "' y='" + num(kTop + ph_ + 16) + "' text-anchor='middle'>" +
           html_escape(label) + "</text>";
    }
    s += "<text x='" + num(kLeft + pw_ / 2) + "' y='" + num(height_ - 4.0) +
         "' text-anchor='middle' fill='#555'>" + html_escape(a_.x_label) + "</text>";
    s += "<text x='12' y='" + num(kTop + ph_ / 2) + "' transform='rotate(-90 12 " +
         num(kTop + ph_ / 2) + ")' text-anchor='middle' fill='#555'>" + html_escape(a_.y_label) +
         "</text>";
    s += "<rect x='" + num(kLeft) + "' y='" + num(kTop) + "' width='" + num(pw_) + "' height='" +
         num(ph_) + "' fill='none' stroke='#888'/>";
    return s;
  }

 private:
  static constexpr double kLeft = 56, kTop = 28, kBottom = 40;
  const PlotAxes& a_;
  int width_, height_;
  double pw_, ph_;
};

}  // namespace

namespace {

std::string value_text(double v, const PlotAxes& a) {
  char b[32];
  if (a.percent_y) {
    std::snprintf(b, sizeof b, "%.1f%%", 100 * v);
  } else {
    std::snprintf(b, sizeof b, std::fabs(v) >= 100 ? "%.0f" : "%.1f", v);
  }
  return b + (a.percent_y ? std::string() : a.hover_y_unit);
}

// Invisible full-height columns, one per group of points of the first line, whose <title> gives
// every line's value there (the browser shows it on hover; no script).
std::string hover_columns(const PlotAxes& a, const Frame& f, const std::vector<PlotLine>& lines) {
  const auto& xs = lines.front().points;
  const std::size_t n = xs.size();
  const std::size_t cols = std::max<std::size_t>(1, a.hover_columns);
  const std::size_t step = std::max<std::size_t>(1, (n + cols - 1) / cols);
  std::string s = "<g class='hover'>";
  for (std::size_t k = 0; k < n; k += step) {
    const std::size_t last = std::min(n, k + step) - 1;
    const double x0 = k == 0 ? f.left() : (f.fx(xs[k - 1].first) + f.fx(xs[k].first)) / 2;
    const double x1 =
        last + 1 >= n ? f.left() + f.pw() : (f.fx(xs[last].first) + f.fx(xs[last + 1].first)) / 2;
    const std::size_t mid = (k + last) / 2;
    std::string t = a.hover_x_prefix + num(xs[mid].first) + ":";
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (mid >= lines[i].points.size()) continue;
      t += std::string(i ? "," : "") + " " + lines[i].name + " " +
           value_text(lines[i].points[mid].second, a);
    }
    s += "<rect x='" + num(x0) + "' y='" + num(f.top()) + "' width='" +
         num(std::max(0.5, x1 - x0)) + "' height='" + num(f.ph()) +
         "' fill='#000' fill-opacity='0'><title>" + html_escape(t) + "</title></rect>";
  }
  return s + "</g>";
}

}  // namespace

std::string line_chart(const PlotAxes& a, const std::vector<PlotLine>& lines, int width,
                       int height) {
  const Frame f(a, width, height, 150);
  const double left = f.left(), top = f.top(), pw = f.pw();
  auto fx = [&](double x) { return f.fx(x); };
  auto fy = [&](double y) { return f.fy(y); };
  std::string s = f.open();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const PlotLine& l = lines[i];
    if (l.points.empty()) continue;
    std::string d;
    for (std::size_t k = 0; k < l.points.size(); ++k) {
      d += (k ? " L" : "M") + num(fx(l.points[k].first)) + " " + num(fy(l.points[k].second));
    }
    if (l.filled) {
      const std::string closed = d + " L" + num(fx(l.points.back().first)) + " " +
                                 num(fy(a.y_min)) + " L" + num(fx(l.points.front().first)) + " " +
                                 num(fy(a.y_min)) + " Z";
      s += "<path d='" + closed + "' fill='" + l.colour + "' fill-opacity='0.35' stroke='none'/>";
    }
    s += "<path d='" + d + "' fill='none' stroke='" + l.colour + "' stroke-width='1.5'/>";
    const double ly = top + 12 + 16 * static_cast<double>(i);
    s += "<rect x='" + num(left + pw + 10) + "' y='" + num(ly - 8) +
         "' width='10' height='10' fill='" + l.colour + "'/>";
    s += "<text x='" + num(left + pw + 24) + "' y='" + num(ly + 1) + "'>" + html_escape(l.name) +
         "</text>";
  }
  if (a.hover && !lines.empty() && !lines.front().points.empty()) s += hover_columns(a, f, lines);
  return s + "</svg>";
}

std::string scatter_chart(const PlotAxes& a, const std::vector<ScatterPoint>& points, int width,
                          int height) {
  const Frame f(a, width, height, 20);
  std::string s = f.open();
  for (const ScatterPoint& p : points) {
    const double x = f.fx(p.x), y = f.fy(p.y);
    s += "<circle cx='" + num(x) + "' cy='" + num(y) + "' r='4' fill='" + p.colour +
         "' fill-opacity='0.8'><title>" + html_escape(p.tooltip) + "</title></circle>";
    s += "<text x='" + num(x + 6) + "' y='" + num(y - 5) + "' font-size='10'>" +
         html_escape(p.label) + "</text>";
  }
  return s + "</svg>";
}

std::string bar_chart(const std::string& title, const std::vector<std::string>& series,
                      const std::vector<std::string>& colours, const std::vector<BarGroup>& groups,
                      double max_value, bool percent, double reference, int width) {
  const double left = 150, right = 70, top = 28, bar = 9, gap = 8;
  const double group_h = bar * static_cast<double>(series.size()) + gap;
  const double height = top + group_h * static_cast<double>(groups.size()) + 20 +
                        14 * static_cast<double>(series.size());
  const double pw = width - left - right;
  auto fx = [&](double v) {
    return left + pw * std::clamp(max_value > 0 ? v / max_value : 0, 0.0, 1.0);
  };
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width) +
                  "' height='" + num(height) + "' font-family='sans-serif' font-size='11'>";
  s += "<text x='4' y='16' font-size='13' font-weight='bold'>" + html_escape(title) + "</text>";
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double y0 = top + group_h * static_cast<double>(g);
    s += "<text x='" + num(left - 6) + "' y='" + num(y0 + group_h / 2) + "' text-anchor='end'>" +
         html_escape(groups[g].label) + "</text>";
    for (std::size_t k = 0; k < groups[g].values.size() && k < series.size(); ++k) {
      const double v = groups[g].values[k];
      const double y = y0 + bar * static_cast<double>(k);
      s += "<rect x='" + num(left) + "' y='" + num(y) + "' width='" + num(fx(v) - left) +
           "' height='" + num(bar - 1) + "' fill='" + colours[k % colours.size()] + "'><title>" +
           html_escape(groups[g].label + ", " + series[k] + ": " + tick_text(v, percent)) +
           "</title></rect>";
      s += "<text x='" + num(fx(v) + 3) + "' y='" + num(y + bar - 1) + "' font-size='9'>" +
           tick_text(v, percent) + "</text>";
    }
  }
  const double bottom = top + group_h * static_cast<double>(groups.size());
  if (reference >= 0) {
    s += "<line x1='" + num(fx(reference)) + "' x2='" + num(fx(reference)) + "' y1='" + num(top) +
         "' y2='" + num(bottom) + "' stroke='#444' stroke-dasharray='4 3'/>";
  }
  for (std::size_t k = 0; k < series.size(); ++k) {
    const double y = bottom + 14 + 14 * static_cast<double>(k);
    s += "<rect x='" + num(left) + "' y='" + num(y - 9) + "' width='10' height='10' fill='" +
         colours[k % colours.size()] + "'/><text x='" + num(left + 14) + "' y='" + num(y) + "'>" +
         html_escape(series[k]) + "</text>";
  }
  return s + "</svg>";
}

}  // namespace allot::sim
