#pragma once
// A picture of a plan (autoddl-plan --svg), plain SVG without dependencies, one row per op:
//   - the op's name and kind;
//   - its output layout on every mesh axis, and its first parameter's (the weight's) storage
//     layout on every mesh axis: one cell per axis, coloured by SBP (B grey, P orange, S(d) a
//     blue per dim) and labelled;
//   - its predicted compute (forward + backward) and communication time per step as bars on a
//     labelled time axis;
// consecutive repeated blocks laid out alike draw once, under a line naming them ("h0-h23 x24",
// times per block), so a 96-layer model stays readable. Below: the peak memory per device (the
// step replayed, search/step_memory.hpp) against the limit, with the additive breakdown by
// purpose as bars, and the predicted step of the plan beside the other plans given
// (the experts), with whether gradient synchronisation overlaps backward. A pipeline plan
// (svg_stages) draws each stage under its own heading (its ops, time per micro-batch and peak
// memory; blocks fold within a stage only), a band of the stage's colour beside its rows, and
// the stages, micro-batches and bubble under the title.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/report.hpp"
#include "autoddl/search/step_memory.hpp"

namespace autoddl {

namespace detail {

inline std::string svg_num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}
inline std::string svg_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '<') r += "&lt;";
    else if (c == '>') r += "&gt;";
    else if (c == '&') r += "&amp;";
    else if (c == '\'') r += "&apos;";
    else r += c;
  }
  return r;
}
inline std::string svg_time(double s) {
  char b[32];
  if (s >= 1) std::snprintf(b, sizeof b, "%.3g s", s);
  else if (s >= 1e-3) std::snprintf(b, sizeof b, "%.3g ms", s * 1e3);
  else std::snprintf(b, sizeof b, "%.3g us", s * 1e6);
  return b;
}
inline std::string svg_bytes(double v) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  char b[32];
  std::snprintf(b, sizeof b, "%.3g %s", v, units[u]);
  return b;
}
inline std::string svg_text(double x, double y, const std::string& t, const char* extra = "") {
  return "<text x='" + svg_num(x) + "' y='" + svg_num(y) + "'" + extra + ">" + svg_escape(t) + "</text>\n";
}
inline std::string svg_rect(double x, double y, double w, double h, const std::string& fill, const std::string& title = "") {
  std::string r = "<rect x='" + svg_num(x) + "' y='" + svg_num(y) + "' width='" + svg_num(std::max(0.0, w)) + "' height='" +
                  svg_num(std::max(0.0, h)) + "' fill='" + fill + "'";
  return title.empty() ? r + "/>\n" : r + "><title>" + svg_escape(title) + "</title></rect>\n";
}
inline std::string sbp_colour(sbp v) {
  if (v.is_broadcast()) return "#d0d0d0";
  if (v.is_partial()) return "#f28e2b";
  static const char* blues[] = {"#08519c", "#3182bd", "#6baed6", "#9ecae1", "#c6dbef"};
  return blues[std::min(int(v.dim), 4)];
}
/// A "nice" tick step for an axis spanning `span`: 1, 2 or 5 times a power of ten.
inline double nice_step(double span) {
  const double raw = span / 5, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace detail

/// A pipeline's stages as the picture shows them (search/pipeline.hpp's pipeline_plan): the
/// first op of each stage, per stage its predicted forward + backward per micro-batch and peak
/// memory per device, the micro-batches and the bubble fraction. Empty first_ops: no pipeline.
struct svg_stages {
  std::vector<int> first_ops;
  std::vector<double> slot_s, memory;
  int microbatches = 1;
  double bubble = 0;
  int stage_of(int op) const {
    return int(std::upper_bound(first_ops.begin(), first_ops.end(), op) - first_ops.begin()) - 1;
  }
};

namespace detail {

// A line of the picture's table: a row of op `op`, or (op < 0) a group heading.
struct svg_line {
  int op = -1;
  std::string heading;
};

// The table's lines: consecutive repeated blocks laid out alike (and in one stage) draw once,
// under a heading; a pipeline's stages each under their own.
inline std::vector<svg_line> svg_lines(const plan_problem& problem, const plan_result& r, const std::vector<plan_row>& rows,
                                       const svg_stages& stages) {
  const graph& g = problem.model();
  const bool piped = !stages.first_ops.empty();
  auto key_of = [&](int first, int last) {
    std::string k = piped ? std::to_string(stages.stage_of(first)) + "|" : std::string();
    for (int i = first; i < last; ++i) {
      const signature& s = at(problem.op_candidates(i), at(r.pick, i));
      k += std::string(to_string(at(g.ops, i).kind)) + to_string(s.outputs[0]);
      for (const nd_sbp& p : s.params) k += to_string(p);
      for (int id : at(g.ops, i).param_ids) k += to_string(at(problem.param_candidates(id), at(r.pick, problem.param_node(id))).storage);
    }
    return k;
  };
  std::vector<svg_line> lines;
  int next_stage = 0;  // the stage whose heading comes next
  auto stage_headings = [&](int op) {  // the headings of the stages beginning at or before op
    for (; piped && next_stage < int(stages.first_ops.size()) && at(stages.first_ops, next_stage) <= op; ++next_stage)
      lines.push_back({-1, "stage " + std::to_string(next_stage) + ": " + svg_time(at(stages.slot_s, next_stage)) +
                               " per micro-batch, peak memory " + svg_bytes(at(stages.memory, next_stage)) + " per device"});
  };
  for (const op_run& run : fold_repeated_blocks(g, key_of)) {
    stage_headings(run.first);
    if (run.count > 1)
      lines.push_back({-1, block_prefix(at(rows, run.first).name) + "-" + block_prefix(at(rows, run.last_first).name) + " x" +
                               std::to_string(run.count) + ": laid out alike, times per block"});
    for (int k = run.first; k < run.end; ++k) {
      if (run.count == 1) stage_headings(k);
      lines.push_back({k, {}});
    }
  }
  return lines;
}

// Where the picture's parts go: the table (name, output layout and weight storage columns, time
// bars against a time axis), then the memory bar, the comparison of plans and the legend.
struct svg_geometry {
  int axes = 1;
  bool piped = false;
  double row_h = 16, top = 74, name_w = 170, cell = 30, gap = 28;
  double act_x = 0, w_x = 0, time_x = 0, time_w = 420;
  double tick = 1, axis_max = 1, table_h = 0, mem_y = 0, cmp_y = 0, width = 0, height = 0;
  double tx(double t) const { return time_x + time_w * t / axis_max; }
};

inline svg_geometry svg_geometry_of(int axes, bool piped, const std::vector<plan_row>& rows, std::size_t lines,
                                    std::size_t others) {
  svg_geometry q;
  q.axes = axes;
  q.piped = piped;
  q.top = piped ? 88 : 74;
  q.act_x = q.name_w;
  q.w_x = q.act_x + q.cell * axes + q.gap;
  q.time_x = q.w_x + q.cell * axes + q.gap;
  double max_t = 1e-12;
  for (const plan_row& row : rows) max_t = std::max(max_t, std::max(row.compute_s, row.comm_s));
  q.tick = nice_step(max_t);
  q.axis_max = std::ceil(max_t / q.tick) * q.tick;
  q.table_h = q.row_h * double(lines);
  q.mem_y = q.top + q.table_h + 40;
  q.cmp_y = q.mem_y + 70;
  q.width = q.time_x + q.time_w + 40;
  q.height = q.cmp_y + 24.0 * double(others + 1) + 40;
  return q;
}

// The title lines, the column headings and the time axis.
inline std::string svg_heading(const plan_problem& problem, const plan_result& r, const svg_stages& stages, const svg_geometry& q) {
  const graph& g = problem.model();
  const double top = q.top;
  std::string s = svg_text(8, 16,
                           g.name + " on mesh " + to_string(problem.options().mesh) + ", " + std::string(to_string(problem.options().type)) +
                               ", " + to_string(r.strategy) + " plan: predicted step " + svg_time(r.time),
                           " font-weight='bold' font-size='13'");
  s += svg_text(8, 32,
                "compute " + svg_time(r.totals.compute()) + ", communication " + svg_time(r.totals.comm()) +
                    " (gradient synchronisation " + (problem.overlap() == overlap_rule::none ? "does not overlap" : "overlaps") +
                    " backward); " + std::to_string(problem.options().microbatches) + " micro-batch" +
                    (problem.options().microbatches == 1 ? "" : "es") + ", recompute " + std::string(to_string(problem.options().recompute)));
  if (q.piped)
    s += svg_text(8, 46,
                  "pipeline: " + std::to_string(stages.first_ops.size()) + " stages (1F1B) x " + std::to_string(stages.microbatches) +
                      " micro-batches, bubble " + svg_num(100 * stages.bubble) + "% of the step; each stage's devices form mesh " +
                      to_string(problem.options().mesh) + " and run the rows under its heading",
                  " fill='#8c2d04'");
  s += svg_text(8, top - 20, "op (kind)");
  s += svg_text(q.act_x, top - 32, "output");
  s += svg_text(q.act_x, top - 20, "layout");
  s += svg_text(q.w_x, top - 32, "weight");
  s += svg_text(q.w_x, top - 20, "storage");
  for (int a = 0; a < q.axes; ++a) {
    s += svg_text(q.act_x + q.cell * a + 4, top - 6, "ax" + std::to_string(a), " font-size='9'");
    s += svg_text(q.w_x + q.cell * a + 4, top - 6, "ax" + std::to_string(a), " font-size='9'");
  }
  s += svg_text(q.time_x, top - 32, "time per step: compute (blue, forward + backward),");
  s += svg_text(q.time_x, top - 20, "communication (red, the op's incoming boxings)");
  for (double t = 0; t <= q.axis_max * (1 + 1e-9); t += q.tick) {
    s += "<line x1='" + svg_num(q.tx(t)) + "' y1='" + svg_num(top - 2) + "' x2='" + svg_num(q.tx(t)) + "' y2='" +
         svg_num(top + q.table_h) + "' stroke='#eeeeee'/>\n";
    s += svg_text(q.tx(t) - 8, top + q.table_h + 12, svg_time(t), " font-size='9'");
  }
  return s;
}

// Op i's row at height y: its name, output layout and weight storage per axis, its time bars.
inline std::string svg_op_row(const plan_problem& problem, const plan_result& r, const plan_row& row, int i, double y,
                              const svg_stages& stages, const svg_geometry& q) {
  const graph& g = problem.model();
  const double cell = q.cell, row_h = q.row_h;
  std::string s;
  if (q.piped) s += svg_rect(0, y, 5, row_h, stages.stage_of(i) % 2 == 0 ? "#8c2d04" : "#fdae6b", "stage " + std::to_string(stages.stage_of(i)));
  const signature& sig = at(problem.op_candidates(i), at(r.pick, i));
  s += svg_text(8, y + 12, row.name + " (" + row.op + ")");
  for (int a = 0; a < q.axes; ++a) {
    const sbp v = sig.outputs[0][a];
    s += svg_rect(q.act_x + cell * a, y + 1, cell - 2, row_h - 2, sbp_colour(v), row.name + ": " + row.signature);
    s += svg_text(q.act_x + cell * a + 3, y + 12, to_string(v), v.is_split() && v.dim < 2 ? " font-size='9' fill='#ffffff'" : " font-size='9'");
  }
  if (!at(g.ops, i).param_ids.empty()) {
    const int id = at(g.ops, i).param_ids[0];
    const nd_sbp st = at(problem.param_candidates(id), at(r.pick, problem.param_node(id))).storage;
    for (int a = 0; a < q.axes; ++a) {
      s += svg_rect(q.w_x + cell * a, y + 1, cell - 2, row_h - 2, sbp_colour(st[a]),
                    at(g.params, id).name + " stored " + to_string(st) + ", used as " + to_string(sig.params[0]));
      s += svg_text(q.w_x + cell * a + 3, y + 12, to_string(st[a]),
                    st[a].is_split() && st[a].dim < 2 ? " font-size='9' fill='#ffffff'" : " font-size='9'");
    }
  }
  s += svg_rect(q.time_x, y + 2, q.tx(row.compute_s) - q.time_x, 5, "#4e79a7", row.name + " compute " + svg_time(row.compute_s));
  s += svg_rect(q.time_x, y + 8, q.tx(row.comm_s) - q.time_x, 5, "#e15759",
                row.name + " communication " + svg_time(row.comm_s) + " (" + svg_bytes(row.comm_bytes) + " sent per device)");
  return s;
}

// Memory per device against the limit, by purpose; `peak` the replayed peak.
inline std::string svg_memory(const plan_problem& problem, const plan_result& r, double peak, const svg_geometry& q) {
  const memory_breakdown mem = problem.memory_of(r.pick);
  const double limit = r.memory_limit.value_or(problem.make_objective().memory_limit);
  const double mem_y = q.mem_y;
  const double mem_scale = (q.width - 200) / std::max({limit, peak, double(mem.total())});
  std::string s = svg_text(8, mem_y - 8, "peak memory per device (the step replayed): " + svg_bytes(peak) + " of " + svg_bytes(limit) +
                                             " allowed" + (r.feasible ? "" : " (OVER THE LIMIT)") +
                                             " (red dashes); the bars add every term as if all lived at once", " font-weight='bold'");
  const std::pair<const char*, std::int64_t> parts[] = {{"parameters", mem.params},   {"gradients", mem.grads},
                                                         {"optimizer", mem.optimizer}, {"activations", mem.activations},
                                                         {"transient", mem.transient}};
  const char* fills[] = {"#59a14f", "#edc948", "#b07aa1", "#76b7b2", "#ff9da7"};
  double x = 8;
  for (int k = 0; k < 5; ++k) {
    const double w = double(parts[k].second) * mem_scale;
    s += svg_rect(x, mem_y, w, 16, fills[k], std::string(parts[k].first) + " " + svg_bytes(double(parts[k].second)));
    s += svg_rect(8 + 150 * k, mem_y + 24, 10, 10, fills[k]);
    s += svg_text(8 + 150 * k + 14, mem_y + 33, std::string(parts[k].first) + " " + svg_bytes(double(parts[k].second)));
    x += w;
  }
  s += "<line x1='" + svg_num(8 + limit * mem_scale) + "' y1='" + svg_num(mem_y - 4) + "' x2='" + svg_num(8 + limit * mem_scale) +
       "' y2='" + svg_num(mem_y + 20) + "' stroke='#000000' stroke-width='2'><title>memory limit</title></line>\n";
  s += "<line x1='" + svg_num(8 + peak * mem_scale) + "' y1='" + svg_num(mem_y - 4) + "' x2='" + svg_num(8 + peak * mem_scale) +
       "' y2='" + svg_num(mem_y + 20) + "' stroke='#e15759' stroke-width='2' stroke-dasharray='3,2'><title>peak (the step "
       "replayed) " + svg_bytes(peak) + "</title></line>\n";
  return s;
}

// The predicted step of r beside the other plans', and the legend of layouts.
inline std::string svg_comparison(const plan_result& r, const std::vector<std::pair<std::string, plan_result>>& others,
                                  const svg_geometry& q) {
  std::string s = svg_text(8, q.cmp_y - 8, "predicted step per plan", " font-weight='bold'");
  std::vector<std::pair<std::string, const plan_result*>> all{{to_string(r.strategy), &r}};
  for (const auto& [name, o] : others) all.push_back({name, &o});
  double slowest = 0;
  for (const auto& [name, o] : all) slowest = std::max(slowest, o->time);
  for (std::size_t k = 0; k < all.size(); ++k) {
    const double y = q.cmp_y + 24.0 * double(k);
    const plan_result& o = *all[k].second;
    const double w = (q.width - 320) * o.time / std::max(slowest, 1e-30);
    s += svg_text(8, y + 12, all[k].first);
    s += svg_rect(110, y, w, 16, k == 0 ? "#4e79a7" : "#bab0ac", all[k].first + " " + svg_time(o.time));
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2fx", o.time / r.time);
    s += svg_text(116 + w, y + 12, svg_time(o.time) + (k == 0 ? "" : "  (" + std::string(ratio) + " " +
                                                                    to_string(r.strategy) + "'s)") +
                                       (o.feasible ? "" : "  over the memory limit"));
  }
  const double ly = q.height - 14;
  const char* names[] = {"B", "P", "S(0)", "S(1)", "S(2)"};
  const sbp vals[] = {B, P, S(0), S(1), S(2)};
  for (int k = 0; k < 5; ++k) {
    s += svg_rect(8 + 60 * k, ly - 10, 12, 12, sbp_colour(vals[k]));
    s += svg_text(8 + 60 * k + 16, ly, names[k]);
  }
  return s;
}

}  // namespace detail

/// The picture of result r of problem (rows from plan_rows), with `others` (name, result) drawn
/// beside it in the comparison of predicted steps, and a pipeline's stages where `stages` has any.
/// `peak`: the plan's replayed peak per device where the caller has it (a pipeline's highest
/// stage); below 0, replayed here (replay_step_memory).
inline std::string plan_svg(const plan_problem& problem, const plan_result& r, const std::vector<plan_row>& rows,
                            const std::vector<std::pair<std::string, plan_result>>& others = {},
                            const svg_stages& stages = {}, double peak = -1) {
  using namespace detail;
  const std::vector<svg_line> lines = svg_lines(problem, r, rows, stages);
  const svg_geometry q = svg_geometry_of(problem.options().mesh.size(), !stages.first_ops.empty(), rows, lines.size(), others.size());
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + svg_num(q.width) + "' height='" + svg_num(q.height) +
                  "' font-family='sans-serif' font-size='11'>\n";
  s += svg_rect(0, 0, q.width, q.height, "#ffffff");
  s += svg_heading(problem, r, stages, q);
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const double y = q.top + q.row_h * double(k);
    const svg_line& l = lines[k];
    if (l.op < 0)
      s += svg_text(8, y + 12, l.heading, " font-style='italic' fill='#555555'");
    else
      s += svg_op_row(problem, r, at(rows, l.op), l.op, y, stages, q);
  }
  if (peak < 0) peak = double(replay_step_memory(problem, r.pick).peak());
  s += svg_memory(problem, r, peak, q);
  return s + svg_comparison(r, others, q) + "</svg>\n";
}

}  // namespace autoddl
