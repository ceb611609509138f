#pragma once
// The rows of the paper comparison and what is read from them: per setting (system, model,
// per-GPU batch, nodes, overlap) the step time of the auto plan and of each expert plan, the
// reduction of auto against each expert and against the best of them, as the AutoDDL abstract
// states its figures ("end-to-end training time cut by up to X%"):
//   reduction(auto, expert) = (t_expert - t_auto) / t_expert * 100 %
// e.g. auto 30 ms against an expert's 40 ms is a 25 % reduction; a negative reduction means auto
// is slower. The best expert is the fastest expert plan that fits the memory limit; a plan over
// the limit or not applicable (the expert's rules do not fit the model or mesh) is shown but
// never the best. A measured row also carries each plan's spread (inter-quartile range of its
// interleaved steps): a reduction whose two medians are no further apart than the sum of their
// spreads is marked as within the spread.
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace autoddl::paper {

struct plan_time {
  std::string plan;  ///< "auto", "dp", "megatron", "zero", "owt"
  double seconds = std::numeric_limits<double>::quiet_NaN();  ///< NaN: not applicable
  bool feasible = true;                                         ///< fits the memory limit
  double spread = std::numeric_limits<double>::quiet_NaN();   ///< measured rows: IQR, seconds
  std::string note{};                                           ///< why not applicable, schedule
  bool applicable() const { return std::isfinite(seconds); }
  bool usable() const { return applicable() && feasible; }
};

struct row {
  std::string system;  ///< hardware preset
  std::string model;   ///< "VGG-16", "GPT-2 medium", ...
  std::string spec;    ///< the model key given to the planner
  std::string mesh;    ///< e.g. "8x8"
  int per_gpu_batch = 0;
  int nodes = 0;
  bool overlap = true;  ///< gradient synchronisation overlaps backward (priced or run)
  std::vector<plan_time> plans;

  const plan_time* find(const std::string& name) const {
    for (const plan_time& p : plans)
      if (p.plan == name) return &p;
    return nullptr;
  }
  const plan_time& automatic() const { return *find("auto"); }
  /// The fastest expert that fits, or nullptr when none does.
  const plan_time* best_expert() const {
    const plan_time* best = nullptr;
    for (const plan_time& p : plans)
      if (p.plan != "auto" && p.usable() && (!best || p.seconds < best->seconds)) best = &p;
    return best;
  }
};

/// (t_expert - t_auto) / t_expert in percent: 25 for 30 ms against 40 ms.
inline double reduction_pct(double t_auto, double t_expert) { return (t_expert - t_auto) / t_expert * 100; }

/// Whether two measured plans are ordered: medians apart by more than the sum of their spreads
/// (benchmarks/interleaved.hpp's rule).
inline bool apart(const plan_time& a, const plan_time& b) {
  return std::abs(a.seconds - b.seconds) > a.spread + b.spread;
}

/// The experts that fit and that auto is predicted slower than (beyond a relative 1e-9).
inline std::vector<std::string> auto_slower_than(const row& r) {
  std::vector<std::string> out;
  const plan_time& a = r.automatic();
  for (const plan_time& p : r.plans)
    if (p.plan != "auto" && p.usable() && (!a.usable() || a.seconds > p.seconds * (1 + 1e-9))) out.push_back(p.plan);
  return out;
}

inline std::string ms(double s, int decimals = 1) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", decimals, s * 1e3);
  return b;
}

inline std::string pct(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%+.1f %%", v);
  return b;
}

/// A step-time cell: "41.2", "41.2 ± 0.8" with a spread, "41.2 (over memory)", "n/a".
inline std::string time_cell(const plan_time* p, int decimals = 1) {
  if (!p || !p->applicable()) return "n/a";
  std::string c = ms(p->seconds, decimals);
  if (std::isfinite(p->spread)) c += " ± " + ms(p->spread, decimals);
  if (!p->feasible) c += " (over memory)";
  return c;
}

/// A reduction cell of auto against p: "+25.0 %", "+1.2 % (within spread)", "n/a".
inline std::string reduction_cell(const row& r, const plan_time* p) {
  const plan_time& a = r.automatic();
  if (!p || !p->usable() || !a.applicable()) return "n/a";
  std::string c = pct(reduction_pct(a.seconds, p->seconds));
  if (std::isfinite(p->spread) && std::isfinite(a.spread) && !apart(a, *p)) c += " (within spread)";
  return c;
}

/// One markdown table: a row per setting, columns: per-GPU batch, nodes, mesh, step time (ms)
/// of auto and each expert, the best expert, and auto's reduction against the best and each.
inline std::string markdown_table(const std::vector<const row*>& rows, const std::vector<std::string>& experts,
                                  int decimals = 1) {
  std::string s = "| batch/GPU | nodes | mesh | auto (ms)";
  for (const auto& e : experts) s += " | " + e + " (ms)";
  s += " | best expert | vs best";
  for (const auto& e : experts) s += " | vs " + e;
  s += " |\n|---:|---:|---|---:";
  for (std::size_t i = 0; i < experts.size(); ++i) s += "|---:";
  s += "|---|---:";
  for (std::size_t i = 0; i < experts.size(); ++i) s += "|---:";
  s += "|\n";
  for (const row* r : rows) {
    s += "| " + std::to_string(r->per_gpu_batch) + " | " + std::to_string(r->nodes) + " | " + r->mesh + " | " +
         time_cell(&r->automatic(), decimals);
    for (const auto& e : experts) s += " | " + time_cell(r->find(e), decimals);
    const plan_time* best = r->best_expert();
    s += " | " + (best ? best->plan : std::string("none fits")) + " | " + reduction_cell(*r, best);
    for (const auto& e : experts) s += " | " + reduction_cell(*r, r->find(e));
    s += " |\n";
  }
  return s;
}

}  // namespace autoddl::paper
