#pragma once
// AutoDDL's customised coordinate descent over a choice_problem: sweep the groups; for one
// group, try every candidate with all other picks fixed (the boxing on its edges priced against
// its neighbours' current picks) and keep the best by the objective, including the memory limit;
// repeat until a sweep changes nothing. Several starts (data parallel, expert plans, random
// seeds) are descended and the best result kept. Totals are updated incrementally, so trying a
// candidate costs the group's own nodes and edges, not the whole plan.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/problem.hpp"
#include "autoddl/text.hpp"

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
  /// Throws error unless `pick` gives each group of p one of its candidates: the moves read picks
  /// and the problem's accessors without bounds checks (choice_problem::finalize).
  descent_state(const choice_problem& p, std::vector<int> pick) : p_(p), pick_(std::move(pick)) {
    if (int(pick_.size()) != p_.groups())
      detail::fail("a descent starts from one pick per group of the problem, got " + detail::itos(std::int64_t(pick_.size())) +
                   " for " + detail::itos(p_.groups()) + " groups");
    for (int g = 0; g < p_.groups(); ++g)
      if (at(pick_, g) < 0 || at(pick_, g) >= p_.group_candidates(g))
        detail::fail("a descent's start picks candidate " + detail::itos(at(pick_, g)) + " of group " + detail::itos(g) +
                     ", which has " + detail::itos(p_.group_candidates(g)));
    totals_ = p_.evaluate(pick_);
    node_tr_.resize(std::size_t(p_.nodes()));
    edge_tr_.resize(p_.edges().size());
    for (int n = 0; n < p_.nodes(); ++n) at(node_tr_, n) = p_.unary(n, at(pick_, p_.group_of(n))).transient;
    for (std::size_t e = 0; e < p_.edges().size(); ++e) {
      const auto& ed = p_.edges()[e];
      edge_tr_[e] = p_.pair(int(e), at(pick_, p_.group_of(ed.u)), at(pick_, p_.group_of(ed.v))).transient;
    }
    rescan();
  }

  const choice_problem& problem() const { return p_; }
  const std::vector<int>& pick() const { return pick_; }
  const cost_terms& totals() const { return totals_; }

  /// Totals if group g picked c (others unchanged).
  cost_terms totals_with(int g, int c) const {
    if (c == at(pick_, g)) return totals_;
    return without(g) + part(g, c);
  }

  /// The totals less everything group g's pick touches: totals_with(g, c) == without(g) +
  /// part(g, c) for every c, so trying k picks computes this once.
  cost_terms without(int g) const {
    cost_terms t = totals_;
    t.subtract_additive(part(g, at(pick_, g)));
    // transient: the max over every item this change leaves alone. The running maximum serves
    // unless the group holds every copy of it; then scan the others.
    int held = 0;
    for (int n : p_.group_nodes(g)) held += at(node_tr_, n) == top_;
    for (int e : p_.group_edges(g)) held += at(edge_tr_, e) == top_;
    t.transient = held < top_count_ ? top_ : max_outside(g);
    return t;
  }

  /// The part of the totals that depends on group g when it picks c (its nodes and edges, the
  /// repeats of identical blocks priced once and counted).
  cost_terms part(int g, int c) const {
    cost_terms t = nodes_part(g, c);
    add_edges_part(t, g, c);
    return t;
  }
  /// part(g, c) in two steps, the same sums in the same order: g's nodes, then its edges.
  cost_terms nodes_part(int g, int c) const {
    cost_terms t;
    for (const auto& [n, k] : p_.group_unary_items(g)) t.add_times(p_.unary(n, c), k);
    return t;
  }
  void add_edges_part(cost_terms& t, int g, int c) const {
    for (const auto& [e, k] : p_.group_edge_items(g)) t.add_times(pair_at(e, g, c), k);
  }
  /// add_edges_part with each pair's lower bound (choice_problem::pair_lower_bound): the same
  /// additions in the same order of terms no larger, so a monotone objective ranks the sum no
  /// higher than the priced one. Prices nothing.
  void add_edges_bound(cost_terms& t, int g, int c) const {
    for (const auto& [e, k] : p_.group_edge_items(g)) t.add_times(bound_at(e, g, c), k);
  }
  /// obj.rank(without(g) + part(g, c)) given base == without(g); with a monotone objective,
  /// +infinity without pricing g's edges where its nodes alone, or its nodes and its edges' lower
  /// bounds, already rank at `cutoff` or above (the edges only add), so pairs no move can take
  /// are never priced.
  /// Within a move of g (begin_move(g), no set since) each edge's bound and price are read from
  /// a per-port cache: the picks of g that one port serves share them.
  double rank_of(const cost_terms& base, int g, int c, const objective& obj, double cutoff) const {
    cost_terms t = nodes_part(g, c);
    const move_cache* m = cache_for(g, -1);
    if (obj.monotone) {
      if (obj.rank(base + t) >= cutoff) return std::numeric_limits<double>::infinity();
      cost_terms lb = t;
      if (m) add_edges_cached(*m, lb, g, c, /*bound=*/true);
      else add_edges_bound(lb, g, c);
      if (obj.rank(base + lb) >= cutoff) return std::numeric_limits<double>::infinity();
    }
    if (m) add_edges_cached(*m, t, g, c, /*bound=*/false);
    else add_edges_part(t, g, c);
    return obj.rank(base + t);
  }

  /// Starts a move of group g: its picks are tried with every other group fixed, so an edge's
  /// price depends only on the port of g's end (choice_problem::port). Until the next set(),
  /// rank_of(.., g, ..) asks each (edge, port) for its lower bound and its price once: a 4-D op
  /// has 2401 picks but a few hundred ports an edge. The cache holds what pair_lower_bound and
  /// pair would return (a bound is replaced by the price once priced, as the memo does), so the
  /// ranks are those without it.
  void begin_move(int g) const { bind(at(moves_, 0), g, -1); }

  /// Each term's least over `v` (zero terms when v is empty).
  static cost_terms least_of(const std::vector<cost_terms>& v) {
    cost_terms least = v.empty() ? cost_terms{} : v[0];
    for (const cost_terms& x : v) cost_terms::all::for_each([&](auto m) { least.*m = std::min(least.*m, x.*m); });
    return least;
  }

  /// The best joint move of adjacent groups gu and gv: every pick cu != current of gu against
  /// every pick cv of gv, in that order, a pair kept only if it ranks below `best_rank` by more
  /// than a relative 1e-12 (as single moves). Each pair costs three additions: the totals are
  /// split into what neither group touches (fixed), gu's items without the gu-gv edges (per cu),
  /// gv's likewise (per cv), and the gu-gv edges (per pair), instead of re-pricing both groups'
  /// items per pair (k^2 of them: 117,649 pairs per edge with 343 picks on a 3-D mesh).
  /// With a monotone objective every sum is first ranked with its unpriced pairs' lower bounds
  /// (own_part(.., bound), cross_bound): a pick or pair whose bound ranks out of reach is skipped
  /// before anything is priced, and gv's part of a pick is priced only when a pair needs it.
  /// Bounds only skip what could not be kept, so the pairs tried and the one returned are
  /// those of pricing everything.
  /// Returns {cu, cv, rank}; {current, current, best_rank} when no pair improves.
  std::tuple<int, int, double> best_pair(int gu, int gv, const objective& obj, double best_rank) const {
    const int cu0 = at(pick_, gu), cv0 = at(pick_, gv);
    const int ku = p_.group_candidates(gu), kv = p_.group_candidates(gv);
    const std::vector<choice_problem::repeated> cross = cross_items(gu, gv);
    // gu's own part (without the gu-gv edges) has its other ends fixed while gu moves, and gv's
    // likewise: each is read through a cache per port (begin_move), one per group
    bind(at(moves_, 0), gu, gv);
    bind(at(moves_, 1), gv, gu);
    // What neither group owns: the totals less both groups' parts, transient the max outside.
    cost_terms base = totals_;
    base.subtract_additive(part(gu, cu0));
    base.subtract_additive(own_part(gv, cv0, gu, false));  // gv's part without the cross edges (left with gu's)
    base.transient = max_outside_both(gu, gv);
    // gv's part per pick: a lower bound now (the price itself where the objective is not
    // monotone), the price on first need. Each term's least over gv's picks bounds any pair
    // from below together with gu's part (the cross edges only add).
    std::vector<cost_terms> low(static_cast<std::size_t>(kv)), b(static_cast<std::size_t>(kv));
    std::vector<char> priced(static_cast<std::size_t>(kv), 0);
    for (int cv = 0; cv < kv; ++cv) at(low, cv) = own_part(gv, cv, gu, obj.monotone);
    const cost_terms least = least_of(low);
    auto out_of_reach = [&](const cost_terms& t) { return obj.monotone && obj.rank(t) >= best_rank * (1 - 1e-12); };
    int bu = cu0, bv = cv0;
    for (int cu = 0; cu < ku; ++cu) {
      if (cu == cu0 || out_of_reach(base + own_part(gu, cu, gv, true) + least)) continue;
      const cost_terms a = base + own_part(gu, cu, gv, false);
      if (out_of_reach(a + least)) continue;
      for (int cv = 0; cv < kv; ++cv) {
        if (out_of_reach(a + at(low, cv))) continue;
        if (!at(priced, cv)) {
          at(b, cv) = obj.monotone ? own_part(gv, cv, gu, false) : at(low, cv);
          at(priced, cv) = 1;
        }
        cost_terms t = a + at(b, cv);
        if (out_of_reach(t) || out_of_reach(cross_sum(t, cross, gu, cu, cv, true))) continue;
        t = cross_sum(t, cross, gu, cu, cv, false);
        const double rk = obj.rank(t);
        if (rk < best_rank * (1 - 1e-12)) {
          best_rank = rk;
          bu = cu;
          bv = cv;
        }
      }
    }
    return {bu, bv, best_rank};
  }

  void set(int g, int c) {
    if (c == at(pick_, g)) return;
    for (move_cache& m : moves_) m.group = -1;
    totals_ = totals_with(g, c);
    at(pick_, g) = c;
    bool lost_top = false;
    auto replace = [&](double& slot, double v) {
      if (slot == top_ && --top_count_ == 0) lost_top = true;
      slot = v;
      if (v > top_) { top_ = v; top_count_ = 1; lost_top = false; }
      else if (v == top_) ++top_count_;
    };
    for (int n : p_.group_nodes(g)) replace(at(node_tr_, n), p_.unary(n, c).transient);
    for (int e : p_.group_edges(g)) {
      const auto& ed = at(p_.edges(), e);
      replace(at(edge_tr_, e),
              p_.pair(e, at(pick_, p_.group_of(ed.u)), at(pick_, p_.group_of(ed.v))).transient);
    }
    if (lost_top || top_count_ <= 0) rescan();
  }

 private:
  // One (edge, port) of a move: its price where priced, else its lower bound once asked.
  struct port_entry {
    unsigned generation = 0;  // the cache's generation when filled; older: empty
    bool priced = false;
    cost_terms terms;
  };
  // A move of `group` with every group but it (and `skip`, whose edges it leaves out) fixed: per
  // edge item of the group, per port of its end. A new generation empties it without touching it.
  struct move_cache {
    int group = -1, skip = -1;  // group -1: none
    unsigned generation = 0;
    mutable std::vector<std::vector<port_entry>> items;  // filled as const moves read it
  };
  void bind(move_cache& m, int g, int skip) const {
    m.group = g;
    m.skip = skip;
    if (++m.generation == 0) {  // wrapped: entries of generation 0 would read as filled
      m.items.clear();
      m.generation = 1;
    }
    const auto& items = p_.group_edge_items(g);
    if (m.items.size() < items.size()) m.items.resize(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const int side = cached_side(items[i].item, g);
      const std::size_t ports = side < 0 ? 0 : std::size_t(p_.ports(items[i].item, side));
      if (at(m.items, i).size() < ports) at(m.items, i).resize(ports);
    }
  }
  // The cache bound to a move of g leaving out `skip`, or nullptr.
  const move_cache* cache_for(int g, int skip) const {
    for (const move_cache& m : moves_)
      if (m.group == g && m.skip == skip) return &m;
    return nullptr;
  }
  // g's end of edge e (0: u, 1: v), or -1 where both ends are g's (no single port).
  int cached_side(int e, int g) const {
    const auto& ed = at_unchecked(p_.edges(), e);
    if (p_.group_of(ed.u) == g && p_.group_of(ed.v) == g) return -1;
    return p_.group_of(ed.u) == g ? 0 : 1;
  }
  // Group g's edge items but those leading to m.skip, each its bound (bound) or price, read
  // through m: the same terms added in the same order as add_edges_bound / add_edges_part.
  void add_edges_cached(const move_cache& m, cost_terms& t, int g, int c, bool bound) const {
    const auto& items = p_.group_edge_items(g);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& [e, k] = items[i];
      if (m.skip >= 0 && other_group(e, g) == m.skip) continue;
      const int side = cached_side(e, g);
      if (side < 0) {
        t.add_times(bound ? bound_at(e, g, c) : pair_at(e, g, c), k);
        continue;
      }
      port_entry& x = at_unchecked(at_unchecked(m.items, i), p_.port(e, side, c));  // sized by bind
      if (x.generation != m.generation) {
        x.generation = m.generation;
        x.priced = false;
        if (bound) x.terms = bound_at(e, g, c);
      }
      if (!bound && !x.priced) {
        x.terms = pair_at(e, g, c);
        x.priced = true;
      }
      t.add_times(x.terms, k);
    }
  }
  int pick_of(int node, int g, int c) const {
    return p_.group_of(node) == g ? c : at_unchecked(pick_, p_.group_of(node));
  }
  // Pair cost of edge e (incident to group g) when g picks c and the other end keeps its pick.
  const cost_terms& pair_at(int e, int g, int c) const {
    const auto& ed = at_unchecked(p_.edges(), e);
    return p_.pair(e, pick_of(ed.u, g, c), pick_of(ed.v, g, c));
  }
  // The group at the other end of edge e from group g.
  int other_group(int e, int g) const {
    const auto& ed = at_unchecked(p_.edges(), e);
    return p_.group_of(ed.u) == g ? p_.group_of(ed.v) : p_.group_of(ed.u);
  }
  // Group gu's edge items that join it to gv.
  std::vector<choice_problem::repeated> cross_items(int gu, int gv) const {
    std::vector<choice_problem::repeated> cross;
    for (const auto& it : p_.group_edge_items(gu))
      if (other_group(it.item, gu) == gv) cross.push_back(it);
    return cross;
  }
  // Group g's nodes under pick c and its edges not leading to group `skip`, the other ends at
  // their picks; each edge's lower bound instead of its price where `bound`.
  cost_terms own_part(int g, int c, int skip, bool bound) const {
    cost_terms t;
    for (const auto& [n, k] : p_.group_unary_items(g)) t.add_times(p_.unary(n, c), k);
    if (const move_cache* m = cache_for(g, skip)) {
      add_edges_cached(*m, t, g, c, bound);
      return t;
    }
    for (const auto& [e, k] : p_.group_edge_items(g)) {
      if (other_group(e, g) == skip) continue;
      if (bound) t.add_times(bound_at(e, g, c), k);
      else t.add_times(pair_at(e, g, c), k);
    }
    return t;
  }
  // t plus the cross edges (gu picking cu, the other group cv): their prices, or their lower
  // bounds where `bound`.
  cost_terms cross_sum(cost_terms t, const std::vector<choice_problem::repeated>& cross, int gu, int cu, int cv,
                       bool bound) const {
    for (const auto& [e, k] : cross) {
      const auto& ed = at(p_.edges(), e);
      const int x = p_.group_of(ed.u) == gu ? cu : cv, y = p_.group_of(ed.v) == gu ? cu : cv;
      if (bound) t.add_times(p_.pair_lower_bound(e, x, y), k);
      else t.add_times(p_.pair(e, x, y), k);
    }
    return t;
  }
  // pair_at's lower bound (choice_problem::pair_lower_bound), pricing nothing.
  cost_terms bound_at(int e, int g, int c) const {
    const auto& ed = at_unchecked(p_.edges(), e);
    return p_.pair_lower_bound(e, pick_of(ed.u, g, c), pick_of(ed.v, g, c));
  }
  // The largest transient of the items neither group ga nor gb owns.
  double max_outside_both(int ga, int gb) const {
    if (ga == gb) return max_outside(ga);
    // As without(): the running maximum serves unless the two groups hold every copy of it (an
    // edge between them counted once, with ga's).
    int held = 0;
    for (int g : {ga, gb})
      for (int n : p_.group_nodes(g)) held += at(node_tr_, n) == top_;
    for (int e : p_.group_edges(ga)) held += at(edge_tr_, e) == top_;
    for (int e : p_.group_edges(gb)) {
      const auto& ed = at(p_.edges(), e);
      if (p_.group_of(ed.u) != ga && p_.group_of(ed.v) != ga) held += at(edge_tr_, e) == top_;
    }
    if (held < top_count_) return top_;
    double m = 0;
    for (int n = 0; n < p_.nodes(); ++n)
      if (p_.group_of(n) != ga && p_.group_of(n) != gb) m = std::max(m, at(node_tr_, n));
    for (std::size_t e = 0; e < edge_tr_.size(); ++e) {
      const auto& ed = p_.edges()[e];
      const int u = p_.group_of(ed.u), v = p_.group_of(ed.v);
      if (u != ga && u != gb && v != ga && v != gb) m = std::max(m, edge_tr_[e]);
    }
    return m;
  }
  // The largest transient of the items group g does not own.
  double max_outside(int g) const {
    double m = 0;
    for (int n = 0; n < p_.nodes(); ++n)
      if (p_.group_of(n) != g) m = std::max(m, at(node_tr_, n));
    for (std::size_t e = 0; e < edge_tr_.size(); ++e) {
      const auto& ed = p_.edges()[e];
      if (p_.group_of(ed.u) != g && p_.group_of(ed.v) != g) m = std::max(m, edge_tr_[e]);
    }
    return m;
  }
  void rescan() {
    top_ = 0;
    top_count_ = 0;
    auto see = [&](double v) {
      if (v > top_) { top_ = v; top_count_ = 1; }
      else if (v == top_) ++top_count_;
    };
    for (double v : node_tr_) see(v);
    for (double v : edge_tr_) see(v);
  }

  const choice_problem& p_;
  std::vector<int> pick_;
  cost_terms totals_;
  std::vector<double> node_tr_, edge_tr_;  // each item's transient under the current picks
  double top_ = 0;                         // their maximum
  int top_count_ = 0;                      // how many items hold it
  // The moves in progress: a single move's (begin_move), or a joint move's two groups (best_pair).
  mutable std::array<move_cache, 2> moves_;
};

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
