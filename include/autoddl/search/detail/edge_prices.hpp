#pragma once
// What a move of one group reads: the price of each of its edges when it tries a pick, every
// other group keeping its current pick, or that price's lower bound (pricing nothing).
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl::detail {

/// A view of a problem and the picks of its groups; cheap to make, made per use.
struct edge_prices {
  const choice_problem& p;
  const std::vector<int>& pick;  ///< per group

  /// The pick of `node` when group g picks c and the others keep theirs.
  int pick_of(int node, int g, int c) const { return p.group_of(node) == g ? c : at_unchecked(pick, p.group_of(node)); }
  /// Pair cost of edge e (incident to group g) when g picks c and the other end keeps its pick.
  const cost_terms& price(int e, int g, int c) const {
    const auto& ed = at_unchecked(p.edges(), e);
    return p.pair(e, pick_of(ed.u, g, c), pick_of(ed.v, g, c));
  }
  /// price's lower bound (choice_problem::pair_lower_bound), pricing nothing.
  cost_terms bound(int e, int g, int c) const {
    const auto& ed = at_unchecked(p.edges(), e);
    return p.pair_lower_bound(e, pick_of(ed.u, g, c), pick_of(ed.v, g, c));
  }
};

/// The group at the other end of edge e from group g.
inline int other_group(const choice_problem& p, int e, int g) {
  const auto& ed = at_unchecked(p.edges(), e);
  return p.group_of(ed.u) == g ? p.group_of(ed.v) : p.group_of(ed.u);
}

/// g's end of edge e (0: u, 1: v), or -1 where both ends are g's (no single port).
inline int group_side(const choice_problem& p, int e, int g) {
  const auto& ed = at_unchecked(p.edges(), e);
  if (p.group_of(ed.u) == g && p.group_of(ed.v) == g) return -1;
  return p.group_of(ed.u) == g ? 0 : 1;
}

}  // namespace autoddl::detail
