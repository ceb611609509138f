#pragma once
// AutoDDL's customised coordinate descent over a choice_problem: sweep the groups; for one
// group, try every candidate with all other picks fixed (the boxing on its edges priced against
// its neighbours' current picks) and keep the best by the objective, including the memory limit;
// repeat until a sweep changes nothing. Several starts (data parallel, expert plans, random
// seeds) are descended and the best result kept. Totals are updated incrementally, so trying a
// candidate costs the group's own nodes and edges, not the whole plan.
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

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

class descent_state {
 public:
  descent_state(const choice_problem& p, std::vector<int> pick) : p_(p), pick_(std::move(pick)) {
    totals_ = p_.evaluate(pick_);
    node_tr_.resize(std::size_t(p_.nodes()));
    edge_tr_.resize(p_.edges().size());
    for (int n = 0; n < p_.nodes(); ++n) {
      node_tr_[std::size_t(n)] = p_.unary(n, pick_[std::size_t(p_.group_of(n))]).transient;
      transients_.insert(node_tr_[std::size_t(n)]);
    }
    for (std::size_t e = 0; e < p_.edges().size(); ++e) {
      const auto& ed = p_.edges()[e];
      edge_tr_[e] = p_.pair(int(e), pick_[std::size_t(p_.group_of(ed.u))], pick_[std::size_t(p_.group_of(ed.v))]).transient;
      transients_.insert(edge_tr_[e]);
    }
  }

  const std::vector<int>& pick() const { return pick_; }
  const cost_terms& totals() const { return totals_; }

  /// Totals if group g picked c (others unchanged).
  cost_terms totals_with(int g, int c) {
    const int cur = pick_[std::size_t(g)];
    if (c == cur) return totals_;
    cost_terms t = totals_;
    t.subtract_additive(part(g, cur));
    cost_terms np = part(g, c);
    // transient: the max over every item this change leaves alone, then the new items
    auto removed = current_transients(g);
    for (double v : removed) transients_.erase(transients_.find(v));
    t.transient = transients_.empty() ? 0.0 : *transients_.rbegin();
    for (double v : removed) transients_.insert(v);
    t += np;  // max with the new items' transients
    return t;
  }

  void set(int g, int c) {
    if (c == pick_[std::size_t(g)]) return;
    totals_ = totals_with(g, c);
    pick_[std::size_t(g)] = c;
    for (int n : p_.group_nodes(g)) replace(node_tr_[std::size_t(n)], p_.unary(n, c).transient);
    for (int e : p_.group_edges(g)) {
      const auto& ed = p_.edges()[std::size_t(e)];
      replace(edge_tr_[std::size_t(e)],
              p_.pair(e, pick_[std::size_t(p_.group_of(ed.u))], pick_[std::size_t(p_.group_of(ed.v))]).transient);
    }
  }

 private:
  int pick_of(int node, int g, int c) const {
    return p_.group_of(node) == g ? c : pick_[std::size_t(p_.group_of(node))];
  }
  // The part of the totals that depends on group g when it picks c (its nodes and edges).
  cost_terms part(int g, int c) const {
    cost_terms t;
    for (int n : p_.group_nodes(g)) t += p_.unary(n, c);
    for (int e : p_.group_edges(g)) {
      const auto& ed = p_.edges()[std::size_t(e)];
      t += p_.pair(e, pick_of(ed.u, g, c), pick_of(ed.v, g, c));
    }
    return t;
  }
  std::vector<double> current_transients(int g) const {
    std::vector<double> r;
    for (int n : p_.group_nodes(g)) r.push_back(node_tr_[std::size_t(n)]);
    for (int e : p_.group_edges(g)) r.push_back(edge_tr_[std::size_t(e)]);
    return r;
  }
  void replace(double& slot, double v) {
    transients_.erase(transients_.find(slot));
    slot = v;
    transients_.insert(v);
  }

  const choice_problem& p_;
  std::vector<int> pick_;
  cost_terms totals_;
  std::vector<double> node_tr_, edge_tr_;
  std::multiset<double> transients_;  // one entry per node and per edge
};

}  // namespace detail

/// Descends from one start. Deterministic: groups in index order, ties keep the current pick.
inline descent_result descend(const choice_problem& p, const objective& obj, std::vector<int> start,
                              int max_sweeps = 100) {
  if (int(start.size()) != p.groups()) detail::fail("a start must pick one candidate per group");
  detail::descent_state s(p, std::move(start));
  descent_result r;
  bool changed = true;
  while (changed && r.sweeps < max_sweeps) {
    changed = false;
    ++r.sweeps;
    for (int g = 0; g < p.groups(); ++g) {
      int best = s.pick()[std::size_t(g)];
      double best_rank = obj.rank(s.totals());
      for (int c = 0; c < p.group_candidates(g); ++c) {
        if (c == s.pick()[std::size_t(g)]) continue;
        double rk = obj.rank(s.totals_with(g, c));
        if (rk < best_rank * (1 - 1e-12)) {
          best_rank = rk;
          best = c;
        }
      }
      if (best != s.pick()[std::size_t(g)]) {
        s.set(g, best);
        changed = true;
      }
    }
  }
  r.pick = s.pick();
  r.totals = p.evaluate(r.pick);
  r.time = obj.time(r.totals);
  r.feasible = obj.feasible(r.totals);
  r.runner_up.assign(std::size_t(p.groups()), 0.0);
  for (int g = 0; g < p.groups(); ++g) {
    double second = std::numeric_limits<double>::infinity();
    for (int c = 0; c < p.group_candidates(g); ++c)
      if (c != r.pick[std::size_t(g)]) second = std::min(second, obj.rank(s.totals_with(g, c)));
    r.runner_up[std::size_t(g)] = second;
  }
  return r;
}

/// Descends from each given start and from `random_starts` random ones (seeded), keeping the
/// best (feasible first, then fastest).
inline descent_result coordinate_descent(const choice_problem& p, const objective& obj,
                                         const std::vector<std::vector<int>>& starts, int random_starts = 2,
                                         std::uint64_t seed = 1) {
  std::vector<std::vector<int>> all = starts;
  std::mt19937_64 rng(seed);
  for (int k = 0; k < random_starts; ++k) {
    std::vector<int> s(std::size_t(p.groups()));
    for (int g = 0; g < p.groups(); ++g)
      s[std::size_t(g)] = int(rng() % std::uint64_t(p.group_candidates(g)));
    all.push_back(std::move(s));
  }
  if (all.empty()) all.push_back(std::vector<int>(std::size_t(p.groups()), 0));
  descent_result best;
  double best_rank = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < all.size(); ++i) {
    descent_result r = descend(p, obj, all[i]);
    double rk = obj.rank(r.totals);
    if (rk < best_rank) {
      best_rank = rk;
      best = std::move(r);
      best.start = int(i);
    }
  }
  return best;
}

}  // namespace autoddl
