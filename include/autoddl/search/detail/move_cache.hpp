#pragma once
// The prices a move of one group reads, kept per (edge, port) while the move lasts. A move tries
// every pick of a group with the other groups fixed, so an edge's price depends only on the port
// of the moving group's end (choice_problem::port): a 4-D op has 2401 picks but a few hundred
// ports an edge. The cache holds what pair_lower_bound and pair would return (a bound is replaced
// by the price once priced, as the problem's memo does), so sums read through it are the sums
// without it.
#include <cstddef>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/detail/edge_prices.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl::detail {

/// A move of group() with every group but it (and skip(), whose edges it leaves out) fixed: per
/// edge item of the group, per port of its end. A new generation empties it without touching it.
class move_cache {
 public:
  int group() const { return group_; }  ///< -1: bound to no move
  int skip() const { return skip_; }
  void unbind() { group_ = -1; }

  /// Binds the cache to a move of g leaving out `skip` (-1: none), emptying it.
  void bind(const choice_problem& p, int g, int skip) {
    group_ = g;
    skip_ = skip;
    if (++generation_ == 0) {  // wrapped: entries of generation 0 would read as filled
      items_.clear();
      generation_ = 1;
    }
    const auto& items = p.group_edge_items(g);
    if (items_.size() < items.size()) items_.resize(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const int side = group_side(p, items[i].item, g);
      const std::size_t ports = side < 0 ? 0 : std::size_t(p.ports(items[i].item, side));
      if (at(items_, i).size() < ports) at(items_, i).resize(ports);
    }
  }

  /// Adds to t group g's edge items under pick c but those leading to skip(), each its bound
  /// (bound) or price, read through the cache: the same terms added in the same order as adding
  /// prices.bound or prices.price per item. @pre bound to a move of g
  void add_edges(const edge_prices& prices, cost_terms& t, int g, int c, bool bound) const {
    const choice_problem& p = prices.p;
    const auto& items = p.group_edge_items(g);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& [e, k] = items[i];
      if (skip_ >= 0 && other_group(p, e, g) == skip_) continue;
      const int side = group_side(p, e, g);
      if (side < 0) {
        t.add_times(bound ? prices.bound(e, g, c) : prices.price(e, g, c), k);
        continue;
      }
      port_entry& x = at_unchecked(at_unchecked(items_, i), p.port(e, side, c));  // sized by bind
      if (x.generation != generation_) {
        x.generation = generation_;
        x.priced = false;
        if (bound) x.terms = prices.bound(e, g, c);
      }
      if (!bound && !x.priced) {
        x.terms = prices.price(e, g, c);
        x.priced = true;
      }
      t.add_times(x.terms, k);
    }
  }

 private:
  // One (edge, port) of a move: its price where priced, else its lower bound once asked.
  struct port_entry {
    unsigned generation = 0;  // the cache's generation when filled; older: empty
    bool priced = false;
    cost_terms terms;
  };
  int group_ = -1, skip_ = -1;
  unsigned generation_ = 0;
  mutable std::vector<std::vector<port_entry>> items_;  // filled as const moves read it
};

}  // namespace autoddl::detail
