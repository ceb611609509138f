#pragma once
// A small self-contained SVG writer for the paper comparison's figures: panels of line plots
// in a grid (`columns` per row) in one picture, each panel with its own axes, ticks, grid, title and legend.
//   figure f{"VGG-16 on dgx1-v100"};
//   panel& p = f.add("4 images per GPU", "nodes", "step time (ms)");
//   p.log_x = p.log_y = true;
//   p.lines.push_back({"auto", "#1f77b4", false, {{2, 41.0}, {4, 42.5}}});
//   std::string svg = f.svg();
// x axis: log2 ticks at the data's x values when log_x (node counts 2, 4, ... 128); y axis: log10
// with 1-2-5 ticks when log_y, else linear with about six round ticks. A point whose y is NaN
// (a plan over memory or not applicable) breaks its line there.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace autoddl::paper {

struct line {
  std::string label;
  std::string colour;  ///< any SVG colour, e.g. "#1f77b4"
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  ///< (x, y), x ascending
};

struct panel {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<line> lines;
  std::vector<double> y_marks;  ///< horizontal reference lines (e.g. 0 % reduction)
};

namespace detail {

inline std::string num(double v, int decimals = 1) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

inline std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else r += c;
  }
  return r;
}

// A tick label without trailing zeros: 0.5, 2, 1000, 200000; 2e+06 from a million up.
inline std::string tick_text(double v) {
  char b[48];
  if (std::abs(v) >= 1e6) std::snprintf(b, sizeof b, "%.0e", v);
  else std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// About six round ticks (1, 2 or 5 times a power of ten apart) covering [lo, hi].
inline std::vector<double> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 6;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) t.push_back(std::abs(v) < 1e-12 ? 0 : v);
  return t;
}

// 1-2-5 ticks per decade covering [lo, hi] (lo > 0); only powers of ten over more than three
// decades; 1, 1.5, 2, 3, 4, 5, 6, 8 within about a decade, or round linear steps where those
// give fewer than three ticks.
inline std::vector<double> log_ticks(double lo, double hi) {
  auto ticks = [&](std::initializer_list<double> mantissas) {
    std::vector<double> t;
    for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e)
      for (double m : mantissas) {
        const double v = m * std::pow(10, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
      }
    return t;
  };
  const double decades = std::log10(hi / lo);
  if (decades > 3) return ticks({1.0});
  if (decades >= 1.2) return ticks({1.0, 2.0, 5.0});
  std::vector<double> t = ticks({1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0});  // about a decade: denser
  return t.size() >= 3 ? t : linear_ticks(lo, hi);
}

}  // namespace detail

struct figure {
  std::string title;
  std::vector<panel> panels;
  double panel_w = 420, panel_h = 300;
  std::size_t columns = 2;  ///< panels per row; further panels wrap to the next row

  panel& add(std::string t, std::string xl, std::string yl) {
    panel p;
    p.title = std::move(t), p.x_label = std::move(xl), p.y_label = std::move(yl);
    panels.push_back(std::move(p));
    return panels.back();
  }

  std::string svg() const {
    const double margin_l = 70, margin_r = 20, margin_t = 56, legend_h = 18, gap = 30;
    std::size_t legend_rows = 0;
    for (const panel& p : panels) legend_rows = std::max(legend_rows, (p.lines.size() + 1) / 2);
    const double cell_w = margin_l + panel_w + margin_r, cell_h = margin_t + panel_h + 44 + legend_h * double(legend_rows);
    const std::size_t cols = std::max<std::size_t>(1, std::min(columns, panels.size()));
    const std::size_t rows = (panels.size() + cols - 1) / cols;
    const double w = cell_w * double(cols) + gap, h = cell_h * double(rows) + 40;
    std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + detail::num(w, 0) + "\" height=\"" +
                    detail::num(h, 0) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    s += "<text x=\"" + detail::num(w / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">" +
         detail::escape(title) + "</text>\n";
    for (std::size_t i = 0; i < panels.size(); ++i)
      s += panel_svg(panels[i], gap / 2 + cell_w * double(i % cols) + margin_l, 40 + margin_t + cell_h * double(i / cols));
    return s + "</svg>\n";
  }

 private:
  std::string panel_svg(const panel& p, double x0, double y0) const {
    using detail::num;
    // data range
    double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
    std::set<double> xs;
    for (const line& l : p.lines)
      for (auto [x, y] : l.points) {
        xs.insert(x);
        xmin = std::min(xmin, x), xmax = std::max(xmax, x);
        if (std::isfinite(y) && (!p.log_y || y > 0)) ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
    for (double m : p.y_marks) ymin = std::min(ymin, m), ymax = std::max(ymax, m);
    if (!std::isfinite(ymin)) ymin = 0, ymax = 1;
    if (xmin == xmax) xmin -= 1, xmax += 1;
    if (p.log_y) {
      ymin = std::pow(10, std::floor(std::log10(ymin) * 4) / 4), ymax = std::pow(10, std::ceil(std::log10(ymax) * 4) / 4);
    } else {
      const double pad = ymax > ymin ? 0.08 * (ymax - ymin) : 1;
      ymin -= pad, ymax += pad;
    }
    auto fx = [&](double x) {
      const double a = p.log_x ? std::log2(x / xmin) / std::log2(xmax / xmin) : (x - xmin) / (xmax - xmin);
      return x0 + a * panel_w;
    };
    auto fy = [&](double y) {
      const double a = p.log_y ? std::log10(y / ymin) / std::log10(ymax / ymin) : (y - ymin) / (ymax - ymin);
      return y0 + panel_h - a * panel_h;
    };
    std::string s;
    s += "<text x=\"" + num(x0 + panel_w / 2) + "\" y=\"" + num(y0 - 10) + "\" text-anchor=\"middle\" font-size=\"14\">" +
         detail::escape(p.title) + "</text>\n";
    s += "<rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(panel_w) + "\" height=\"" + num(panel_h) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
    // ticks and grid
    const std::vector<double> xt = p.log_x ? std::vector<double>(xs.begin(), xs.end()) : detail::linear_ticks(xmin, xmax);
    for (double x : xt) {
      s += "<line x1=\"" + num(fx(x)) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(fx(x)) + "\" y2=\"" + num(y0 + panel_h) +
           "\" stroke=\"#e4e4e4\"/>\n";
      s += "<text x=\"" + num(fx(x)) + "\" y=\"" + num(y0 + panel_h + 16) + "\" text-anchor=\"middle\">" +
           detail::tick_text(x) + "</text>\n";
    }
    const std::vector<double> yt = p.log_y ? detail::log_ticks(ymin, ymax) : detail::linear_ticks(ymin, ymax);
    for (double y : yt) {
      s += "<line x1=\"" + num(x0) + "\" y1=\"" + num(fy(y)) + "\" x2=\"" + num(x0 + panel_w) + "\" y2=\"" + num(fy(y)) +
           "\" stroke=\"#e4e4e4\"/>\n";
      s += "<text x=\"" + num(x0 - 6) + "\" y=\"" + num(fy(y) + 4) + "\" text-anchor=\"end\">" + detail::tick_text(y) +
           "</text>\n";
    }
    for (double m : p.y_marks)
      s += "<line x1=\"" + num(x0) + "\" y1=\"" + num(fy(m)) + "\" x2=\"" + num(x0 + panel_w) + "\" y2=\"" + num(fy(m)) +
           "\" stroke=\"#000\" stroke-width=\"1\"/>\n";
    s += "<text x=\"" + num(x0 + panel_w / 2) + "\" y=\"" + num(y0 + panel_h + 34) + "\" text-anchor=\"middle\">" +
         detail::escape(p.x_label) + "</text>\n";
    s += "<text transform=\"translate(" + num(x0 - 52) + "," + num(y0 + panel_h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + detail::escape(p.y_label) + "</text>\n";
    // lines, the first drawn last (on top): a NaN point breaks the line
    for (auto it = p.lines.rbegin(); it != p.lines.rend(); ++it) {
      const line& l = *it;
      const std::string style = "fill=\"none\" stroke=\"" + l.colour + "\" stroke-width=\"2\"" +
                                (l.dashed ? " stroke-dasharray=\"6,4\"" : "");
      std::string pts;
      auto flush = [&] {
        if (!pts.empty()) s += "<polyline points=\"" + pts + "\" " + style + "/>\n";
        pts.clear();
      };
      for (auto [x, y] : l.points) {
        if (!std::isfinite(y) || (p.log_y && y <= 0)) {
          flush();
          continue;
        }
        pts += num(fx(x)) + "," + num(fy(y)) + " ";
        s += "<circle cx=\"" + num(fx(x)) + "\" cy=\"" + num(fy(y)) + "\" r=\"3\" fill=\"" + l.colour + "\"/>\n";
      }
      flush();
    }
    // legend: two columns under the x label
    for (std::size_t i = 0; i < p.lines.size(); ++i) {
      const line& l = p.lines[i];
      const double lx = x0 + double(i % 2) * panel_w / 2, ly = y0 + panel_h + 54 + 18 * double(i / 2);
      s += "<line x1=\"" + num(lx) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" + num(lx + 28) + "\" y2=\"" + num(ly - 4) +
           "\" stroke=\"" + l.colour + "\" stroke-width=\"2\"" + (l.dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
      s += "<text x=\"" + num(lx + 34) + "\" y=\"" + num(ly) + "\">" + detail::escape(l.label) + "</text>\n";
    }
    return s;
  }
};

}  // namespace autoddl::paper
