#pragma once
// The layout-choice problem the planner solves, independent of what the choices mean: nodes
// (operators, parameters) each pick one of their candidates; an edge between two nodes costs
// by the pair of picks (boxing between them); nodes of one group pick the same index (identical
// repeated blocks share a decision). Pair costs are computed on demand and memoised per edge
// class (edges between corresponding ops of identical blocks share one class).
#include <cstddef>
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
  int cls = 0;  ///< edges of one class have equal pair costs for equal picks
};

class choice_problem {
 public:
  using pair_fn = std::function<cost_terms(int edge, int cu, int cv)>;

  /// Adds a node with its candidates' own costs; returns its index. group < 0: its own group.
  int add_node(std::vector<cost_terms> unary, int group = -1) {
    if (unary.empty()) detail::fail("a node of the layout-choice problem needs at least one candidate");
    int id = int(unary_.size());
    unary_.push_back(std::move(unary));
    group_key_.push_back(group);
    return id;
  }
  /// Adds an edge u-v whose cost pair(edge, pick of u, pick of v) is shared by class `cls`.
  void add_edge(int u, int v, int cls) { edges_.push_back({u, v, cls}); }
  void set_pair_cost(pair_fn f) { pair_ = std::move(f); }

  /// Freezes the groups: call once after the last add_node.
  void finalize() {
    group_of_.assign(unary_.size(), -1);
    groups_.clear();
    std::vector<std::pair<int, int>> key_to_group;
    for (std::size_t i = 0; i < unary_.size(); ++i) {
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
          at(unary_, at(groups_, g)[0]).size() != unary_[i].size())
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
    int classes = 0;
    for (const auto& e : edges_) classes = std::max(classes, e.cls + 1);
    memo_.assign(std::size_t(classes), {});
  }

  int nodes() const { return int(unary_.size()); }
  int groups() const { return int(groups_.size()); }
  int candidates(int node) const { return int(at(unary_, node).size()); }
  int group_candidates(int g) const { return candidates(at(groups_, g)[0]); }
  int group_of(int node) const { return at(group_of_, node); }
  const std::vector<int>& group_nodes(int g) const { return at(groups_, g); }
  const std::vector<int>& group_edges(int g) const { return at(incident_, g); }
  const std::vector<choice_edge>& edges() const { return edges_; }
  const cost_terms& unary(int node, int c) const { return at(at(unary_, node), c); }

  /// Pair cost of edge e for picks cu (of e.u) and cv (of e.v), memoised per class.
  const cost_terms& pair(int e, int cu, int cv) const {
    const choice_edge& ed = at(edges_, e);
    auto& m = at(memo_, ed.cls);
    const int ku = candidates(ed.u), kv = candidates(ed.v);
    if (m.empty()) m.resize(std::size_t(ku) * std::size_t(kv));
    if (m.size() != std::size_t(ku) * std::size_t(kv))
      detail::fail("edges of one class must join nodes with the same candidate counts");
    auto& slot = m[std::size_t(cu) * std::size_t(kv) + std::size_t(cv)];
    if (!slot) slot = pair_ ? pair_(e, cu, cv) : cost_terms{};
    return *slot;
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
  std::vector<std::vector<cost_terms>> unary_;
  std::vector<int> group_key_;
  std::vector<choice_edge> edges_;
  pair_fn pair_;
  std::vector<int> group_of_;
  std::vector<std::vector<int>> groups_;
  std::vector<std::vector<int>> incident_;
  mutable std::vector<std::vector<std::optional<cost_terms>>> memo_;
};

/// What the search minimises and what it must respect.
struct objective {
  std::function<double(const cost_terms&)> time;  ///< predicted step time from the totals
  double memory_limit = 0;                        ///< bytes per device; 0: no limit

  bool feasible(const cost_terms& t) const { return memory_limit <= 0 || t.peak_memory() <= memory_limit; }
  /// Infeasible plans rank after feasible ones, by how far they exceed the limit.
  double rank(const cost_terms& t) const {
    if (feasible(t)) return time(t);
    return 1e30 * (1 + (t.peak_memory() - memory_limit) / memory_limit);
  }
};

}  // namespace autoddl
