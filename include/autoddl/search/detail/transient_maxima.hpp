#pragma once
// The largest transient buffer of a plan under a descent's current picks, kept as picks change:
// each node's and edge's transient, their running maximum and how many items hold it. A move
// asks for the maximum over the items it leaves alone: the running maximum serves unless the
// moving groups hold every copy of it, and only then are the other items scanned.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl::detail {

class transient_maxima {
 public:
  /// The transients of p's items under `pick` (per group).
  transient_maxima(const choice_problem& p, const std::vector<int>& pick) : p_(&p) {
    node_transient_.resize(std::size_t(p.nodes()));
    edge_transient_.resize(p.edges().size());
    for (int n = 0; n < p.nodes(); ++n) at(node_transient_, n) = p.unary(n, at(pick, p.group_of(n))).transient;
    for (std::size_t e = 0; e < p.edges().size(); ++e) {
      const auto& ed = p.edges()[e];
      edge_transient_[e] = p.pair(int(e), at(pick, p.group_of(ed.u)), at(pick, p.group_of(ed.v))).transient;
    }
    rescan();
  }

  /// The largest transient of the items group g does not own.
  double without(int g) const {
    int held = 0;
    for (int n : p_->group_nodes(g)) held += at(node_transient_, n) == largest_;
    for (int e : p_->group_edges(g)) held += at(edge_transient_, e) == largest_;
    return held < largest_count_ ? largest_ : scan_outside(g);
  }

  /// The largest transient of the items neither group ga nor gb owns.
  double without_both(int ga, int gb) const {
    if (ga == gb) return scan_outside(ga);
    // As without(): the running maximum serves unless the two groups hold every copy of it (an
    // edge between them counted once, with ga's).
    const choice_problem& p = *p_;
    int held = 0;
    for (int g : {ga, gb})
      for (int n : p.group_nodes(g)) held += at(node_transient_, n) == largest_;
    for (int e : p.group_edges(ga)) held += at(edge_transient_, e) == largest_;
    for (int e : p.group_edges(gb)) {
      const auto& ed = at(p.edges(), e);
      if (p.group_of(ed.u) != ga && p.group_of(ed.v) != ga) held += at(edge_transient_, e) == largest_;
    }
    if (held < largest_count_) return largest_;
    double m = 0;
    for (int n = 0; n < p.nodes(); ++n)
      if (p.group_of(n) != ga && p.group_of(n) != gb) m = std::max(m, at(node_transient_, n));
    for (std::size_t e = 0; e < edge_transient_.size(); ++e) {
      const auto& ed = p.edges()[e];
      const int u = p.group_of(ed.u), v = p.group_of(ed.v);
      if (u != ga && u != gb && v != ga && v != gb) m = std::max(m, edge_transient_[e]);
    }
    return m;
  }

  /// Group g now picks c (`pick`, per group, holds it already): its items' transients change.
  void repick(int g, int c, const std::vector<int>& pick) {
    const choice_problem& p = *p_;
    bool lost_largest = false;
    auto replace = [&](double& slot, double v) {
      if (slot == largest_ && --largest_count_ == 0) lost_largest = true;
      slot = v;
      if (v > largest_) { largest_ = v; largest_count_ = 1; lost_largest = false; }
      else if (v == largest_) ++largest_count_;
    };
    for (int n : p.group_nodes(g)) replace(at(node_transient_, n), p.unary(n, c).transient);
    for (int e : p.group_edges(g)) {
      const auto& ed = at(p.edges(), e);
      replace(at(edge_transient_, e), p.pair(e, at(pick, p.group_of(ed.u)), at(pick, p.group_of(ed.v))).transient);
    }
    if (lost_largest || largest_count_ <= 0) rescan();
  }

 private:
  // The largest transient of the items group g does not own, by scanning them.
  double scan_outside(int g) const {
    const choice_problem& p = *p_;
    double m = 0;
    for (int n = 0; n < p.nodes(); ++n)
      if (p.group_of(n) != g) m = std::max(m, at(node_transient_, n));
    for (std::size_t e = 0; e < edge_transient_.size(); ++e) {
      const auto& ed = p.edges()[e];
      if (p.group_of(ed.u) != g && p.group_of(ed.v) != g) m = std::max(m, edge_transient_[e]);
    }
    return m;
  }
  void rescan() {
    largest_ = 0;
    largest_count_ = 0;
    auto see = [&](double v) {
      if (v > largest_) { largest_ = v; largest_count_ = 1; }
      else if (v == largest_) ++largest_count_;
    };
    for (double v : node_transient_) see(v);
    for (double v : edge_transient_) see(v);
  }

  const choice_problem* p_;                          // outlives this (a pointer: states move)
  std::vector<double> node_transient_, edge_transient_;  // each item's transient under the picks
  double largest_ = 0;                               // their maximum
  int largest_count_ = 0;                            // how many items hold it
};

}  // namespace autoddl::detail
