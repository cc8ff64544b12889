// Small inline SVG charts for the HTML report: no scripts, nothing downloaded.
#pragma once

#include <string>
#include <vector>

namespace allot::sim {

struct PlotLine {
  std::string name;
  std::string colour;
  std::vector<std::pair<double, double>> points;  // (x, y)
  bool filled = false;                            // an area down to y = 0
};

struct PlotAxes {
  std::string title, x_label, y_label;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  bool log_x = false;
  bool percent_y = false;
  std::vector<std::pair<double, std::string>> x_ticks;  // empty: five evenly spaced
  // Hover values (line charts whose lines share their x values): a column per point of the first
  // line, titled "<hover_x_prefix><x>: <line> <y>, ...", at most `hover_columns` of them.
  bool hover = false;
  std::string hover_x_prefix = "day ";
  std::string hover_y_unit;  // after each y value (not with percent_y)
  std::size_t hover_columns = 120;
};

std::string line_chart(const PlotAxes& axes, const std::vector<PlotLine>& lines, int width = 760,
                       int height = 260);

struct ScatterPoint {
  double x = 0, y = 0;
  std::string label;    // drawn next to the point
  std::string tooltip;  // shown on hover
  std::string colour = "#1f77b4";
};
// One labelled point per item (e.g. per sweep point): a trade-off between two measures.
std::string scatter_chart(const PlotAxes& axes, const std::vector<ScatterPoint>& points,
                          int width = 760, int height = 320);

struct BarGroup {
  std::string label;
  std::vector<double> values;  // one per series
};
// Grouped horizontal bars; `reference` draws a dashed vertical line (e.g. 95%) when >= 0.
std::string bar_chart(const std::string& title, const std::vector<std::string>& series,
                      const std::vector<std::string>& colours, const std::vector<BarGroup>& groups,
                      double max_value, bool percent, double reference = -1, int width = 760);

std::string html_escape(const std::string& s);
const std::string& palette(std::size_t i);

}  // namespace allot::sim
