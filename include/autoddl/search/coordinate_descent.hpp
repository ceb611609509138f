#pragma once
// AutoDDL's customised coordinate descent over a choice_problem: sweep the groups; for one
// group, try every candidate with all other picks fixed (the boxing on its edges priced against
// its neighbours' current picks) and keep the best by the objective, including the memory limit;
// repeat until a sweep changes nothing. Several starts (data parallel, expert plans, random
// seeds) are descended and the best result kept. Totals are updated incrementally, so trying a
// candidate costs the group's own nodes and edges, not the whole plan (detail/descent_state.hpp).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/detail/descent_state.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl {

struct descent_result {
  std::vector<int> pick;        ///< candidate per group
  cost_terms totals;
  double time = 0;              ///< objective.time(totals)
  bool feasible = true;
  int sweeps = 0;
  int start = 0;                ///< which start won (index into the starts given, then random)
  std::vector<double> runner_up;  ///< per group: the best objective with another candidate there
};

namespace detail {

/// Group g's best pick with the others fixed: the current one unless another ranks lower by
/// more than a relative 1e-12 (the first such in index order on ties).
inline int best_single(const descent_state& s, const objective& obj, int g) {
  int best = at(s.pick(), g);
  double best_rank = obj.rank(s.totals());
  const cost_terms base = s.without(g);
  s.begin_move(g);
  for (int c = 0; c < s.problem().group_candidates(g); ++c) {
    if (c == at(s.pick(), g)) continue;
    const double rk = s.rank_of(base, g, c, obj, best_rank * (1 - 1e-12));
    if (rk < best_rank * (1 - 1e-12)) {
      best_rank = rk;
      best = c;
    }
  }
  return best;
}

}  // namespace detail

/// A descent's result with the state it ended in: runner-ups are read from that state (its
/// incrementally kept totals), so a caller that descends from many starts can rank them by
/// `result` and price the runner-ups of the winner only (add_runner_ups), as descend would have.
struct kept_descent {
  descent_result result;  ///< runner_up empty
  detail::descent_state state;
};

/// descend without the runner-ups (see descend): every sweep, the pick and the totals.
inline kept_descent descend_keeping_state(const choice_problem& p, const objective& obj, std::vector<int> start,
                                          bool joint = false, int max_sweeps = 100) {
  if (int(start.size()) != p.groups()) detail::fail("a start must pick one candidate per group");
  detail::descent_state s(p, std::move(start));
  descent_result r;
  bool changed = true;
  while (changed && r.sweeps < max_sweeps) {
    changed = false;
    ++r.sweeps;
    for (int g = 0; g < p.groups(); ++g) {
      const int best = detail::best_single(s, obj, g);
      if (best != at(s.pick(), g)) {
        s.set(g, best);
        changed = true;
      }
    }
  }
  // Joint moves: where a change pays only if a neighbour changes with it, single coordinates
  // stall. For every edge between two groups, try every pair of picks; take the best if it
  // improves, then descend single coordinates again. Repeat until neither helps.
  std::vector<std::pair<int, int>> pairs;
  if (joint) {
    for (const auto& ed : p.edges()) {
      int gu = p.group_of(ed.u), gv = p.group_of(ed.v);
      if (gu != gv) pairs.push_back({std::min(gu, gv), std::max(gu, gv)});
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  }
  bool joint_changed = joint;
  while (joint_changed && r.sweeps < max_sweeps) {
    joint_changed = false;
    ++r.sweeps;
    for (auto [gu, gv] : pairs) {
      const int cu0 = at(s.pick(), gu), cv0 = at(s.pick(), gv);
      const auto [bu, bv, rk] = s.best_pair(gu, gv, obj, obj.rank(s.totals()));
      (void)rk;
      s.set(gu, bu);
      s.set(gv, bv);
      if (bu != cu0 || bv != cv0) joint_changed = true;
    }
    if (!joint_changed) break;
    bool single = true;
    while (single && r.sweeps < max_sweeps) {
      single = false;
      ++r.sweeps;
      for (int g = 0; g < p.groups(); ++g) {
        const int best = detail::best_single(s, obj, g);
        if (best != at(s.pick(), g)) { s.set(g, best); single = true; }
      }
    }
  }
  r.pick = s.pick();
  r.totals = p.evaluate(r.pick);
  r.time = obj.time(r.totals);
  r.feasible = obj.feasible(r.totals);
  return {std::move(r), std::move(s)};
}

/// Fills r.runner_up from the state its descent ended in (descend_keeping_state): per group,
/// the best objective with another candidate there, all else as picked. It prices every
/// candidate of every group (bounds aside), often more than the descent itself on a 4-D mesh.
inline void add_runner_ups(descent_result& r, const detail::descent_state& s, const objective& obj) {
  const choice_problem& p = s.problem();
  r.runner_up.assign(std::size_t(p.groups()), 0.0);
  for (int g = 0; g < p.groups(); ++g) {
    double second = std::numeric_limits<double>::infinity();
    const cost_terms base = s.without(g);
    s.begin_move(g);
    for (int c = 0; c < p.group_candidates(g); ++c)
      if (c != at(r.pick, g)) second = std::min(second, s.rank_of(base, g, c, obj, second));
    at(r.runner_up, g) = second;
  }
}

/// Descends from one start. Deterministic: groups in index order, ties keep the current pick.
/// joint: also try both ends of every distinct pair of adjacent groups together (k^2 picks per
/// pair); worth it on tied problems, whose few groups stand for many repeated ops.
/// runner_ups: fill descent_result::runner_up (add_runner_ups); off where nobody reads them.
inline descent_result descend(const choice_problem& p, const objective& obj, std::vector<int> start,
                              bool joint = false, int max_sweeps = 100, bool runner_ups = true) {
  kept_descent k = descend_keeping_state(p, obj, std::move(start), joint, max_sweeps);
  if (runner_ups) add_runner_ups(k.result, k.state, obj);
  return std::move(k.result);
}

/// Descends from each given start and from `random_starts` random ones (seeded), keeping the
/// best (feasible first, then fastest); runner_ups as descend's, of the best only.
inline descent_result coordinate_descent(const choice_problem& p, const objective& obj,
                                         const std::vector<std::vector<int>>& starts, int random_starts = 2,
                                         std::uint64_t seed = 1, bool joint = false, bool runner_ups = true) {
  std::vector<std::vector<int>> all = starts;
  std::mt19937_64 rng(seed);
  for (int k = 0; k < random_starts; ++k) {
    std::vector<int> s(std::size_t(p.groups()));
    for (int g = 0; g < p.groups(); ++g)
      at(s, g) = int(rng() % std::uint64_t(p.group_candidates(g)));
    all.push_back(std::move(s));
  }
  if (all.empty()) all.push_back(std::vector<int>(std::size_t(p.groups()), 0));
  std::optional<kept_descent> best;  // a state holds a reference: replaced by emplace
  double best_rank = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < all.size(); ++i) {
    kept_descent k = descend_keeping_state(p, obj, all[i], joint);
    double rk = obj.rank(k.result.totals);
    if (rk < best_rank) {
      best_rank = rk;
      k.result.start = int(i);
      best.emplace(std::move(k));
    }
  }
  if (!best) return descent_result{};
  if (runner_ups) add_runner_ups(best->result, best->state, obj);
  return std::move(best->result);
}

}  // namespace autoddl
