#pragma once
// The state of one coordinate descent (search/coordinate_descent.hpp): the pick of every group
// and the totals of the plan they make, kept incrementally, so that trying a pick of one group
// costs that group's own nodes and edges, not the whole plan. The largest transient is kept
// beside them (transient_maxima) and the prices a move reads are cached per port while it lasts
// (move_cache).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/search/detail/edge_prices.hpp"
#include "autoddl/search/detail/move_cache.hpp"
#include "autoddl/search/detail/transient_maxima.hpp"
#include "autoddl/search/problem.hpp"
#include "autoddl/text.hpp"

namespace autoddl::detail {

class descent_state {
 public:
  /// Throws error unless `pick` gives each group of p one of its candidates: the moves read picks
  /// and the problem's accessors without bounds checks (choice_problem::finalize).
  descent_state(const choice_problem& p, std::vector<int> pick)
      : p_(p), pick_(checked_start(p, std::move(pick))), totals_(p.evaluate(pick_)), transients_(p, pick_) {}

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
    // transient: the max over every item this change leaves alone
    t.transient = transients_.without(g);
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
    const edge_prices x = prices();
    for (const auto& [e, k] : p_.group_edge_items(g)) t.add_times(x.price(e, g, c), k);
  }
  /// add_edges_part with each pair's lower bound (choice_problem::pair_lower_bound): the same
  /// additions in the same order of terms no larger, so a monotone objective ranks the sum no
  /// higher than the priced one. Prices nothing.
  void add_edges_bound(cost_terms& t, int g, int c) const {
    const edge_prices x = prices();
    for (const auto& [e, k] : p_.group_edge_items(g)) t.add_times(x.bound(e, g, c), k);
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
      if (m) m->add_edges(prices(), lb, g, c, /*bound=*/true);
      else add_edges_bound(lb, g, c);
      if (obj.rank(base + lb) >= cutoff) return std::numeric_limits<double>::infinity();
    }
    if (m) m->add_edges(prices(), t, g, c, /*bound=*/false);
    else add_edges_part(t, g, c);
    return obj.rank(base + t);
  }

  /// Starts a move of group g, its picks tried with every other group fixed: until the next
  /// set(), rank_of(.., g, ..) asks each (edge, port) for its lower bound and its price once
  /// (move_cache), and ranks as it would without the cache.
  void begin_move(int g) const { at(moves_, 0).bind(p_, g, -1); }

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
    at(moves_, 0).bind(p_, gu, gv);
    at(moves_, 1).bind(p_, gv, gu);
    // What neither group owns: the totals less both groups' parts, transient the max outside.
    cost_terms base = totals_;
    base.subtract_additive(part(gu, cu0));
    base.subtract_additive(own_part(gv, cv0, gu, false));  // gv's part without the cross edges (left with gu's)
    base.transient = transients_.without_both(gu, gv);
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
    for (move_cache& m : moves_) m.unbind();
    totals_ = totals_with(g, c);
    at(pick_, g) = c;
    transients_.repick(g, c, pick_);
  }

 private:
  static std::vector<int> checked_start(const choice_problem& p, std::vector<int> pick) {
    if (int(pick.size()) != p.groups())
      detail::fail("a descent starts from one pick per group of the problem, got " + detail::itos(std::int64_t(pick.size())) +
                   " for " + detail::itos(p.groups()) + " groups");
    for (int g = 0; g < p.groups(); ++g)
      if (at(pick, g) < 0 || at(pick, g) >= p.group_candidates(g))
        detail::fail("a descent's start picks candidate " + detail::itos(at(pick, g)) + " of group " + detail::itos(g) +
                     ", which has " + detail::itos(p.group_candidates(g)));
    return pick;
  }
  edge_prices prices() const { return {p_, pick_}; }
  // The cache bound to a move of g leaving out `skip`, or nullptr.
  const move_cache* cache_for(int g, int skip) const {
    for (const move_cache& m : moves_)
      if (m.group() == g && m.skip() == skip) return &m;
    return nullptr;
  }
  // Group gu's edge items that join it to gv.
  std::vector<choice_problem::repeated> cross_items(int gu, int gv) const {
    std::vector<choice_problem::repeated> cross;
    for (const auto& it : p_.group_edge_items(gu))
      if (other_group(p_, it.item, gu) == gv) cross.push_back(it);
    return cross;
  }
  // Group g's nodes under pick c and its edges not leading to group `skip`, the other ends at
  // their picks; each edge's lower bound instead of its price where `bound`.
  cost_terms own_part(int g, int c, int skip, bool bound) const {
    cost_terms t;
    for (const auto& [n, k] : p_.group_unary_items(g)) t.add_times(p_.unary(n, c), k);
    if (const move_cache* m = cache_for(g, skip)) {
      m->add_edges(prices(), t, g, c, bound);
      return t;
    }
    const edge_prices x = prices();
    for (const auto& [e, k] : p_.group_edge_items(g)) {
      if (other_group(p_, e, g) == skip) continue;
      if (bound) t.add_times(x.bound(e, g, c), k);
      else t.add_times(x.price(e, g, c), k);
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

  const choice_problem& p_;
  std::vector<int> pick_;          // per group
  cost_terms totals_;              // of the plan pick_ makes
  transient_maxima transients_;    // its items' transients under pick_
  // The moves in progress: a single move's (begin_move), or a joint move's two groups (best_pair).
  mutable std::array<move_cache, 2> moves_;
};

}  // namespace autoddl::detail
