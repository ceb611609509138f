#pragma once
// A picture of a plan: ops along the x axis; for each mesh axis a band whose colour is the op's
// output SBP on that axis (B grey, P orange, S(d) a blue per dim); below, a bar per op whose
// height is its communication time. Plain SVG, no dependencies.
#include <algorithm>
#include <string>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/report.hpp"

namespace autoddl {

inline std::string plan_svg(const plan_problem& pp, const plan_result& r, const std::vector<plan_row>& rows) {
  const auto& g = pp.model();
  const int n = int(rows.size());
  const int axes = pp.options().mesh.size();
  const double w = 14, band = 22, bars = 120, left = 90, top = 30;
  const double width = left + w * n + 20, height = top + band * axes + bars + 60;
  double max_comm = 1e-30;
  for (const auto& row : rows) max_comm = std::max(max_comm, row.comm_s);
  auto colour = [](sbp v) -> std::string {
    if (v.is_broadcast()) return "#bdbdbd";
    if (v.is_partial()) return "#f28e2b";
    static const char* blues[] = {"#08519c", "#3182bd", "#6baed6", "#9ecae1", "#c6dbef"};
    return blues[std::min(v.dim, std::int8_t(4))];
  };
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(int(width)) + "' height='" +
                  std::to_string(int(height)) + "' font-family='sans-serif' font-size='11'>\n";
  s += "<text x='4' y='16'>" + g.name + " on " + to_string(pp.options().mesh) + " (" + to_string(r.strategy) +
       "): predicted step " + std::to_string(r.time) + " s</text>\n";
  for (int a = 0; a < axes; ++a)
    s += "<text x='4' y='" + std::to_string(int(top + band * a + 15)) + "'>mesh axis " + std::to_string(a) + "</text>\n";
  s += "<text x='4' y='" + std::to_string(int(top + band * axes + 20)) + "'>comm time</text>\n";
  for (int i = 0; i < n; ++i) {
    const signature& sig = at(pp.op_candidates(i), at(r.pick, i));
    const double x = left + w * i;
    for (int a = 0; a < axes; ++a) {
      sbp v = sig.outputs[0][a];
      s += "<rect x='" + std::to_string(x) + "' y='" + std::to_string(top + band * a) + "' width='" +
           std::to_string(w - 1) + "' height='" + std::to_string(band - 2) + "' fill='" + colour(v) + "'><title>" +
           at(rows, i).name + ": " + at(rows, i).signature + "</title></rect>\n";
    }
    const double h = bars * at(rows, i).comm_s / max_comm;
    const double base = top + band * axes + 10 + bars;
    s += "<rect x='" + std::to_string(x) + "' y='" + std::to_string(base - h) + "' width='" + std::to_string(w - 1) +
         "' height='" + std::to_string(h) + "' fill='#e15759'><title>" + at(rows, i).name + ": " +
         std::to_string(at(rows, i).comm_s) + " s</title></rect>\n";
  }
  const double ly = height - 14;
  const char* names[] = {"B", "P", "S(0)", "S(1)", "S(2)"};
  const sbp vals[] = {B, P, S(0), S(1), S(2)};
  for (int k = 0; k < 5; ++k) {
    s += "<rect x='" + std::to_string(left + 60 * k) + "' y='" + std::to_string(ly - 10) +
         "' width='12' height='12' fill='" + colour(vals[k]) + "'/><text x='" + std::to_string(left + 60 * k + 16) +
         "' y='" + std::to_string(ly) + "'>" + names[k] + "</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace autoddl
