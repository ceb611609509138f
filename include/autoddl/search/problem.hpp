#pragma once
// The layout-choice problem the planner solves, independent of what the choices mean: nodes
// (operators, parameters) each pick one of their candidates; an edge between two nodes costs
// by the pair of picks (boxing between them); nodes of one group pick the same index (identical
// repeated blocks share a decision). Pair costs are computed on demand and memoised per edge
// class (edges between corresponding ops of identical blocks share one class).
// finalize() checks every index the problem holds (edge ends, classes, port maps), so the
// accessors the search calls millions of times read without a bounds check (at_unchecked);
// their own arguments are the caller's to keep in range (@pre), as with operator[].
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/search/terms.hpp"

namespace autoddl {

struct choice_edge {
  int u = 0;
  int v = 0;
  int cls = 0;       ///< edges of one class have equal pair costs for equal picks
  int u_ports = -1;  ///< port map of u's candidates on this edge (add_ports), -1: every pick its own
  int v_ports = -1;  ///< likewise for v
};

class choice_problem {
 public:
  using pair_fn = std::function<cost_terms(int edge, int cu, int cv)>;

  /// Adds a node with its candidates' own costs; returns its index. group < 0: its own group.
  int add_node(std::vector<cost_terms> unary, int group = -1) {
    if (unary.empty()) detail::fail("a node of the layout-choice problem needs at least one candidate");
    own_.push_back(int(owned_.size()));
    owned_.push_back(std::move(unary));
    ext_.push_back(nullptr);
    group_key_.push_back(group);
    return int(own_.size()) - 1;
  }
  /// The same, the costs held by the caller (a pointer), who keeps them alive and unchanged as long as this
  /// problem (and its copies) lives: nodes and problems that price alike share one copy (a
  /// GPT-3's 96 blocks, the tied and untied problems of a plan_problem: building the
  /// problems of its micro-batch settings is otherwise mostly first touches of fresh memory).
  int add_node(const std::vector<cost_terms>* unary, int group = -1) {
    if (!unary || unary->empty()) detail::fail("a node of the layout-choice problem needs at least one candidate");
    own_.push_back(-1);
    ext_.push_back(unary);
    group_key_.push_back(group);
    return int(own_.size()) - 1;
  }
  /// Adds an edge u-v whose cost pair(edge, pick of u, pick of v) is shared by class `cls`.
  /// u_ports, v_ports (from add_ports, or -1): which picks of u (of v) the pair cost cannot tell
  /// apart, so that one price serves them all.
  void add_edge(int u, int v, int cls, int u_ports = -1, int v_ports = -1) {
    edges_.push_back({u, v, cls, u_ports, v_ports});
  }
  /// Registers a port map: port_of[c] is the port of candidate c on an edge. Two candidates with
  /// one port must give every pair cost of the edges that use the map equal terms (e.g. two
  /// signatures of an op with the same output layout, on the edge that carries that output).
  /// Returns the map's id for add_edge. Example: {0, 1, 0}: candidates 0 and 2 box alike.
  int add_ports(std::vector<int> port_of) {
    int n = 0;
    for (int x : port_of) {
      if (x < 0) detail::fail("a port map gives every candidate a port of at least 0");
      n = std::max(n, x + 1);
    }
    port_maps_.push_back(std::move(port_of));
    port_counts_.push_back(n);
    return int(port_maps_.size()) - 1;
  }
  /// The port of candidate c of edge e's end u (side 0) or v (side 1); c itself without a map.
  /// @pre finalized, 0 <= e < edges().size(), 0 <= c < candidates of that end
  int port(int e, int side, int c) const {
    const choice_edge& ed = at_unchecked(edges_, e);
    const int m = side == 0 ? ed.u_ports : ed.v_ports;
    return m < 0 ? c : at_unchecked(at_unchecked(port_maps_, m), c);
  }
  /// How many ports edge e's end u (side 0) or v (side 1) has: its candidates without a map.
  /// @pre finalized, 0 <= e < edges().size()
  int ports(int e, int side) const {
    const choice_edge& ed = at_unchecked(edges_, e);
    const int m = side == 0 ? ed.u_ports : ed.v_ports;
    return m < 0 ? candidates(side == 0 ? ed.u : ed.v) : at_unchecked(port_counts_, m);
  }
  void set_pair_cost(pair_fn f) { pair_ = std::move(f); }
  /// A cheap lower bound on every term of pair(edge, cu, cv) (e.g. boxing_lower_bound's time
  /// on the comm terms, zero elsewhere): the descent skips a move whose bound ranks out of
  /// reach without pricing its pairs. Without one the bound is zero (terms are never negative).
  void set_pair_lower_bound(pair_fn f) { pair_bound_ = std::move(f); }

  /// Freezes the groups: call once after the last add_node. Throws error where an edge names a
  /// node, class or port map that does not exist, a port map misses candidates of its node, the
  /// edges of one class differ in their ports, or nodes tied into one group differ in their
  /// candidates: what the accessors then read unchecked.
  void finalize() {
    const int n = int(own_.size());
    for (const choice_edge& e : edges_) {
      if (e.u < 0 || e.u >= n || e.v < 0 || e.v >= n)
        detail::fail("an edge of the layout-choice problem joins a node that does not exist");
      if (e.cls < 0) detail::fail("an edge of the layout-choice problem needs a class of at least 0");
      for (int m : {e.u_ports, e.v_ports})
        if (m < -1 || m >= int(port_maps_.size()))
          detail::fail("an edge of the layout-choice problem names a port map that add_ports did not give");
    }
    group_of_.assign(own_.size(), -1);
    groups_.clear();
    std::vector<std::pair<int, int>> key_to_group;
    for (std::size_t i = 0; i < own_.size(); ++i) {
      int g = -1;
      if (group_key_[i] >= 0)
        for (auto [k, gg] : key_to_group)
          if (k == group_key_[i]) g = gg;
      if (g < 0) {
        g = int(groups_.size());
        groups_.push_back({});
        if (group_key_[i] >= 0) key_to_group.push_back({group_key_[i], g});
      }
      if (!at(groups_, g).empty() &&
          costs(at(groups_, g)[0]).size() != costs(int(i)).size())
        detail::fail("nodes tied into one group must have the same number of candidates");
      at(groups_, g).push_back(int(i));
      group_of_[i] = g;
    }
    incident_.assign(groups_.size(), {});
    for (std::size_t e = 0; e < edges_.size(); ++e) {
      int gu = at(group_of_, edges_[e].u), gv = at(group_of_, edges_[e].v);
      at(incident_, gu).push_back(int(e));
      if (gv != gu) at(incident_, gv).push_back(int(e));
    }
    build_group_items();
    int classes = 0;
    for (const auto& e : edges_) classes = std::max(classes, e.cls + 1);
    own_memo_.slot.assign(std::size_t(classes), {});
    own_memo_.prices = {};
    memo_source_ = nullptr;
    for (const auto& e : edges_)
      for (int m : {e.u_ports, e.v_ports})
        if (m >= 0 && at(port_maps_, m).size() != std::size_t(candidates(m == e.u_ports ? e.u : e.v)))
          detail::fail("a port map must give a port to every candidate of the node it serves");
    std::vector<std::pair<int, int>> class_ports(std::size_t(classes), {-1, -1});  // the memo's rows and columns
    for (std::size_t e = 0; e < edges_.size(); ++e) {
      auto& cp = at(class_ports, edges_[e].cls);
      const std::pair<int, int> here{ports(int(e), 0), ports(int(e), 1)};
      if (cp.first >= 0 && cp != here)
        detail::fail("edges of one class must join nodes with the same candidate and port counts");
      cp = here;
    }
  }

  /// Uses o's memo of pair costs from now on (both finalized). @pre o has the same edges with
  /// the same classes, ports and pair costs, e.g. the same problem with other groups.
  void share_pair_memo(const choice_problem& o) {
    if (o.edges_.size() != edges_.size() || o.memo().slot.size() != memo().slot.size())
      detail::fail("share_pair_memo needs two finalized problems with the same edges and classes");
    for (std::size_t e = 0; e < edges_.size(); ++e)
      if (o.edges_[e].cls != edges_[e].cls || o.ports(int(e), 0) != ports(int(e), 0) || o.ports(int(e), 1) != ports(int(e), 1))
        detail::fail("share_pair_memo needs two finalized problems with the same edges and classes");
    memo_source_ = &o.memo_owner();
  }

  int nodes() const { return int(own_.size()); }
  int groups() const { return int(groups_.size()); }
  int candidates(int node) const { return int(costs(node).size()); }
  /// @pre 0 <= g < groups(); likewise for the node, group and candidate arguments below
  int group_candidates(int g) const { return candidates(at_unchecked(at_unchecked(groups_, g), 0)); }
  int group_of(int node) const { return at_unchecked(group_of_, node); }
  const std::vector<int>& group_nodes(int g) const { return at(groups_, g); }
  const std::vector<int>& group_edges(int g) const { return at(incident_, g); }
  const std::vector<choice_edge>& edges() const { return edges_; }
  const cost_terms& unary(int node, int c) const { return at_unchecked(costs(node), c); }

  /// A group's nodes and incident edges with the repeats folded: `count` items price alike under
  /// every pick, `item` stands for them (nodes with equal candidate costs; edges of one class
  /// between the same two groups). Identical repeated blocks tie into one group, so a group of
  /// 96 layers' q projections prices as one node and a handful of edges, times 96.
  struct repeated {
    int item = 0;
    int count = 1;
  };
  const std::vector<repeated>& group_unary_items(int g) const { return at_unchecked(unary_items_, g); }
  const std::vector<repeated>& group_edge_items(int g) const { return at_unchecked(edge_items_, g); }

  /// Pair cost of edge e for picks cu (of e.u) and cv (of e.v), memoised per class and pair of
  /// ports (picks of one port share the price).
  /// A class's rows (ports of u) are allocated on first use: on a 4-D mesh a class can have
  /// 625 x 625 port pairs, most of which no move ever asks for.
  /// @pre finalized, 0 <= e < edges().size(), cu and cv candidates of its ends
  const cost_terms& pair(int e, int cu, int cv) const {
    const choice_edge& ed = at_unchecked(edges_, e);
    pair_memo& memo_ = memo();
    auto& m = at_unchecked(memo_.slot, ed.cls);
    if (m.empty()) m.resize(std::size_t(ports(e, 0)));  // one class, one port count (finalize)
    auto& row = at_unchecked(m, port(e, 0, cu));
    if (row.empty()) row.assign(std::size_t(ports(e, 1)), -1);
    std::int32_t& slot = at_unchecked(row, port(e, 1, cv));
    if (slot < 0) {
      slot = memo_.prices.push(pair_ ? pair_(e, cu, cv) : cost_terms{});
    }
    return memo_.prices[slot];
  }

  /// Each term of pair(e, cu, cv) or less: the memoised price where it is known, else the
  /// bound set_pair_lower_bound gave (zero without one). Prices nothing.
  cost_terms pair_lower_bound(int e, int cu, int cv) const {
    if (const cost_terms* known = memoised(e, cu, cv)) return *known;
    return pair_bound_ ? pair_bound_(e, cu, cv) : cost_terms{};
  }
  /// The memoised price of pair(e, cu, cv), or nullptr where it is not priced yet.
  const cost_terms* memoised(int e, int cu, int cv) const {
    const pair_memo& memo_ = memo();
    const auto& m = at_unchecked(memo_.slot, at_unchecked(edges_, e).cls);
    if (m.empty()) return nullptr;
    const auto& row = at_unchecked(m, port(e, 0, cu));
    if (row.empty()) return nullptr;
    const std::int32_t slot = at_unchecked(row, port(e, 1, cv));
    return slot < 0 ? nullptr : &memo_.prices[slot];
  }

  /// Total terms of a full assignment (one pick per group).
  cost_terms evaluate(const std::vector<int>& pick) const {
    cost_terms t;
    for (int i = 0; i < nodes(); ++i) t += unary(i, at(pick, group_of(i)));
    for (std::size_t e = 0; e < edges_.size(); ++e)
      t += pair(int(e), at(pick, group_of(edges_[e].u)), at(pick, group_of(edges_[e].v)));
    return t;
  }

 private:
  std::vector<std::vector<cost_terms>> owned_;       ///< the costs add_node copied in
  std::vector<int> own_;                             ///< per node: its costs in owned_, or -1
  std::vector<const std::vector<cost_terms>*> ext_;  ///< per node: the caller's costs where own_ is -1
  std::vector<int> group_key_;
  const std::vector<cost_terms>& costs(int node) const {
    const int k = at_unchecked(own_, node);
    return k >= 0 ? at_unchecked(owned_, k) : *at_unchecked(ext_, node);
  }
  std::vector<choice_edge> edges_;
  std::vector<std::vector<int>> port_maps_;
  std::vector<int> port_counts_;
  pair_fn pair_;
  pair_fn pair_bound_;
  std::vector<int> group_of_;
  std::vector<std::vector<int>> groups_;
  std::vector<std::vector<int>> incident_;
  std::vector<std::vector<repeated>> unary_items_, edge_items_;

  void build_group_items() {
    unary_items_.assign(groups_.size(), {});
    edge_items_.assign(groups_.size(), {});
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      auto& items = unary_items_[g];
      for (int n : groups_[g]) {
        auto f = std::find_if(items.begin(), items.end(), [&](const repeated& r) {
          const std::vector<cost_terms> &a = costs(r.item), &b = costs(n);
          return &a == &b || a == b;  // every term of every candidate
        });
        if (f == items.end()) items.push_back({n, 1});
        else ++f->count;
      }
      auto& eitems = edge_items_[g];
      for (int e : incident_[g]) {
        const choice_edge& ed = edges_[std::size_t(e)];
        auto f = std::find_if(eitems.begin(), eitems.end(), [&](const repeated& r) {
          const choice_edge& o = edges_[std::size_t(r.item)];
          return o.cls == ed.cls && group_of_[std::size_t(o.u)] == group_of_[std::size_t(ed.u)] &&
                 group_of_[std::size_t(o.v)] == group_of_[std::size_t(ed.v)];
        });
        if (f == eitems.end()) eitems.push_back({e, 1});
        else ++f->count;
      }
    }
  }
  /// Prices in chunks of 1024 (72 KiB, from the heap a finished problem gave back rather than
  /// fresh pages), each reserved once, so a price once made stays where pair() returned it. A
  /// std::deque allocates a 512-byte node per 7 prices: millions of allocations on a 4-D mesh.
  class price_store {
   public:
    const cost_terms& operator[](std::int32_t i) const {
      return at_unchecked(at_unchecked(chunks_, i >> chunk_bits), i & (chunk - 1));  // i from push
    }
    /// Appends t; returns its index.
    std::int32_t push(const cost_terms& t) {
      if (chunks_.empty() || chunks_.back().size() == chunk) {
        chunks_.emplace_back();
        chunks_.back().reserve(chunk);
      }
      chunks_.back().push_back(t);
      return count_++;
    }

   private:
    static constexpr int chunk_bits = 10;
    static constexpr std::size_t chunk = std::size_t(1) << chunk_bits;
    std::vector<std::vector<cost_terms>> chunks_;  // a chunk's buffer never moves: never past its reserve
    std::int32_t count_ = 0;
  };
  /// Per class, per port of u, per port of v: the index of the price in `prices` (-1: not priced
  /// yet; 4 bytes a slot where an optional price took 72: a 4-D class has 390,625 of them).
  /// This problem's own, or (share_pair_memo) the one of memo_source_, which must outlive this
  /// problem (a plan_problem holds both).
  struct pair_memo {
    std::vector<std::vector<std::vector<std::int32_t>>> slot;
    price_store prices;
  };
  mutable pair_memo own_memo_;
  const choice_problem* memo_source_ = nullptr;
  const choice_problem& memo_owner() const { return memo_source_ ? memo_source_->memo_owner() : *this; }
  pair_memo& memo() const { return memo_owner().own_memo_; }
};

/// What the search minimises and what it must respect.
struct objective {
  std::function<double(const cost_terms&)> time;  ///< predicted step time from the totals
  double memory_limit = 0;                        ///< bytes per device; 0: no limit
  /// Whether `time` never decreases when a term grows (and terms are never negative), so a
  /// partial sum of a plan's terms bounds its rank from below and the descent may skip picks by
  /// that bound. step_time and serial_time are; a made-up objective need not be.
  bool monotone = false;

  bool feasible(const cost_terms& t) const { return memory_limit <= 0 || t.peak_memory() <= memory_limit; }
  /// Infeasible plans rank after feasible ones, by how far they exceed the limit.
  double rank(const cost_terms& t) const {
    if (feasible(t)) return time(t);
    return 1e30 * (1 + (t.peak_memory() - memory_limit) / memory_limit);
  }
};

}  // namespace autoddl
