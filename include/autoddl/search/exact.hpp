#pragma once
// Exact references for the coordinate descent.
//
// exhaustive(): every assignment of the groups (tied as in the search), the full objective and
// the memory limit. For tiny problems only.
//
// series_parallel_optimum(): dynamic programming by series-parallel reduction over the node
// graph, minimising the additive step time (cost_terms::serial_time, nothing overlapped) with
// each node free (ties relaxed) and no memory limit. Leaves fold into their neighbour
// (U_a[x] += min_y E[x][y] + U_b[y]); a node of degree two joins its neighbours
// (E_ac[x][z] += min_y E_ab[x][y] + U_b[y] + E_bc[y][z]); parallel edges add. Chains, residual
// blocks and tied embeddings reduce completely; a graph that does not returns nullopt. Relaxing
// the ties can only lower the optimum, so for a tied search this is a lower bound and
// (descent - optimum) / optimum an upper bound on the descent's true gap.
// series_parallel_optimum_within() gives up after a wall-time budget (the planner's: 1 s or 10 %
// of its search, whichever is longer), so the reference never costs more than the search.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/problem.hpp"

namespace autoddl {

struct exact_result {
  std::vector<int> pick;  ///< per node for series_parallel_optimum, per group for exhaustive
  double time = 0;        ///< the optimum
  cost_terms totals;      ///< exhaustive only
};

/// The best assignment of all groups, or nullopt when there are more than `limit` assignments.
inline std::optional<exact_result> exhaustive(const choice_problem& p, const objective& obj,
                                              double limit = 2e6) {
  double count = 1;
  for (int g = 0; g < p.groups(); ++g) count *= p.group_candidates(g);
  if (count > limit) return std::nullopt;
  std::vector<int> pick(std::size_t(p.groups()), 0);
  exact_result best;
  double best_rank = std::numeric_limits<double>::infinity();
  while (true) {
    cost_terms t = p.evaluate(pick);
    double rk = obj.rank(t);
    if (rk < best_rank) {
      best_rank = rk;
      best.pick = pick;
      best.totals = t;
      best.time = obj.time(t);
    }
    int g = 0;
    while (g < p.groups() && ++at(pick, g) == p.group_candidates(g)) at(pick, g++) = 0;
    if (g == p.groups()) break;
  }
  return best;
}

namespace detail {

/// A dense cost matrix between the picks of two nodes, [row pick][column pick].
struct sp_matrix {
  int rows = 0, cols = 0;
  std::vector<double> v;
  sp_matrix() = default;
  sp_matrix(int r, int c) : rows(r), cols(c), v(std::size_t(r) * std::size_t(c), 0.0) {}
  double& at(int r, int c) { return v[std::size_t(r) * std::size_t(cols) + std::size_t(c)]; }
  double at(int r, int c) const { return v[std::size_t(r) * std::size_t(cols) + std::size_t(c)]; }
};

// Undoes one elimination: the best pick of `node` given the picks of its neighbours a (and c).
struct sp_undo {
  int node = 0, a = -1, c = -1;
  std::vector<int> best;  // leaf: [x]; series: [x * kc + z]; isolated: [0]
  int kc = 1;
};

/// Series-parallel reduction of a choice problem's additive costs: repeatedly eliminate a node
/// of degree <= 2 (isolated: take its best pick; leaf: fold its best response into the
/// neighbour's unary costs; series: fold it into an edge between its two neighbours, merged in
/// parallel with any existing one), then pick the nodes back in reverse elimination order.
class sp_reduction {
 public:
  using clock = std::chrono::steady_clock;
  explicit sp_reduction(const choice_problem& p, clock::time_point deadline = clock::time_point::max())
      : p_(p), unary_(std::size_t(p.nodes())), nbr_(std::size_t(p.nodes())), deadline_(deadline) {
    for (int i = 0; i < p.nodes(); ++i)
      for (int c = 0; c < p.candidates(i); ++c) at(unary_, i).push_back(p.unary(i, c).serial_time());
    for (std::size_t e = 0; e < p.edges().size(); ++e) {
      if (past_deadline()) return;
      const choice_edge& ed = p.edges()[e];
      sp_matrix m(p.candidates(ed.u), p.candidates(ed.v));
      for (int x = 0; x < m.rows; ++x)
        for (int y = 0; y < m.cols; ++y) m.at(x, y) = p.pair(int(e), x, y).serial_time();
      add_matrix(ed.u, ed.v, m);
    }
  }

  /// Whether the deadline passed (checked per edge priced and per node eliminated).
  bool timed_out() const { return timed_out_; }

  /// The optimum, or nullopt when some step finds no node of degree <= 2 (not series-parallel)
  /// or the deadline passed.
  std::optional<exact_result> solve() {
    std::vector<char> alive(std::size_t(p_.nodes()), 1);
    for (int left = p_.nodes(); left > 0; --left) {
      if (past_deadline()) return std::nullopt;
      int b = -1;
      for (int i = 0; i < p_.nodes() && b < 0; ++i)
        if (at(alive, i) && at(nbr_, i).size() <= 2) b = i;
      if (b < 0) return std::nullopt;
      std::vector<int> ns;
      for (auto [x, _] : at(nbr_, b)) ns.push_back(x);
      if (ns.empty()) eliminate_isolated(b);
      else if (ns.size() == 1) eliminate_leaf(b, ns[0]);
      else eliminate_series(b, ns[0], ns[1]);
      at(alive, b) = 0;
    }
    return back_substitute();
  }

 private:
  void add_matrix(int a, int b, const sp_matrix& m) {  // m indexed [a][b]; a == b adds the diagonal
    if (a == b) {
      for (int x = 0; x < m.rows; ++x) at(at(unary_, a), x) += m.at(x, x);
      return;
    }
    const bool swap = a > b;
    const int lo = swap ? b : a, hi = swap ? a : b;
    auto [it, fresh] = adj_.try_emplace({lo, hi});
    if (fresh) it->second = sp_matrix(p_.candidates(lo), p_.candidates(hi));
    for (int x = 0; x < m.rows; ++x)
      for (int y = 0; y < m.cols; ++y) (swap ? it->second.at(y, x) : it->second.at(x, y)) += m.at(x, y);
    at(nbr_, lo)[hi] = true;
    at(nbr_, hi)[lo] = true;
  }

  sp_matrix edge_from(int a, int b) const {  // oriented [a][b]
    const sp_matrix& mm = adj_.at({std::min(a, b), std::max(a, b)});
    sp_matrix r(p_.candidates(a), p_.candidates(b));
    for (int x = 0; x < r.rows; ++x)
      for (int y = 0; y < r.cols; ++y) r.at(x, y) = a < b ? mm.at(x, y) : mm.at(y, x);
    return r;
  }

  void drop_edge(int a, int b) {
    adj_.erase({std::min(a, b), std::max(a, b)});
    at(nbr_, a).erase(b);
    at(nbr_, b).erase(a);
  }

  void eliminate_isolated(int b) {
    const auto& ub = at(unary_, b);
    const int arg = int(std::min_element(ub.begin(), ub.end()) - ub.begin());
    constant_ += at(ub, arg);
    undo_.push_back({b, -1, -1, {arg}, 1});
  }

  void eliminate_leaf(int b, int a) {
    const sp_matrix e = edge_from(a, b);
    sp_undo un{b, a, -1, std::vector<int>(std::size_t(p_.candidates(a))), 1};
    for (int x = 0; x < p_.candidates(a); ++x) {
      double best = std::numeric_limits<double>::infinity();
      for (int y = 0; y < p_.candidates(b); ++y)
        if (const double v = e.at(x, y) + at(at(unary_, b), y); v < best) {
          best = v;
          at(un.best, x) = y;
        }
      at(at(unary_, a), x) += best;
    }
    drop_edge(a, b);
    undo_.push_back(std::move(un));
  }

  void eliminate_series(int b, int a, int c) {
    const sp_matrix eab = edge_from(a, b), ecb = edge_from(c, b);  // [a][b] and [c][b]: rows of b
    const int ka = p_.candidates(a), kb = p_.candidates(b), kc = p_.candidates(c);
    sp_matrix m(ka, kc);
    sp_undo un{b, a, c, std::vector<int>(std::size_t(ka) * std::size_t(kc)), kc};
    const std::vector<double>& ub = at(unary_, b);
    std::vector<double> row(static_cast<std::size_t>(kb));
    for (int x = 0; x < ka; ++x) {
      for (int y = 0; y < kb; ++y) row[std::size_t(y)] = eab.at(x, y) + ub[std::size_t(y)];
      for (int z = 0; z < kc; ++z) {
        const double* col = &ecb.v[std::size_t(z) * std::size_t(kb)];
        double best = std::numeric_limits<double>::infinity();
        int arg = 0;
        for (int y = 0; y < kb; ++y)
          if (const double v = row[std::size_t(y)] + col[y]; v < best) {
            best = v;
            arg = y;
          }
        un.best[std::size_t(x) * std::size_t(kc) + std::size_t(z)] = arg;
        m.at(x, z) = best;
      }
    }
    drop_edge(a, b);
    drop_edge(b, c);
    add_matrix(a, c, m);
    undo_.push_back(std::move(un));
  }

  exact_result back_substitute() const {
    exact_result r;
    r.time = constant_;
    r.pick.assign(std::size_t(p_.nodes()), 0);
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
      const int x = it->a >= 0 ? at(r.pick, it->a) : 0;
      const int z = it->c >= 0 ? at(r.pick, it->c) : 0;
      at(r.pick, it->node) = it->best[std::size_t(x) * std::size_t(it->kc) + std::size_t(z)];
    }
    return r;
  }

  bool past_deadline() {
    if (deadline_ != clock::time_point::max() && clock::now() > deadline_) timed_out_ = true;
    return timed_out_;
  }

  const choice_problem& p_;
  std::vector<std::vector<double>> unary_;
  std::map<std::pair<int, int>, sp_matrix> adj_;  ///< (a, b) with a < b -> [pick a][pick b]
  std::vector<std::map<int, bool>> nbr_;
  std::vector<sp_undo> undo_;
  double constant_ = 0;
  clock::time_point deadline_;
  bool timed_out_ = false;
};

}  // namespace detail

/// Optimum of the untied additive problem by series-parallel reduction (see the file comment).
inline std::optional<exact_result> series_parallel_optimum(const choice_problem& p) {
  return detail::sp_reduction(p).solve();
}

/// series_parallel_optimum within `budget_s` seconds of wall time (pricing every pair included):
/// `result` is nullopt when the graph does not reduce or the budget ran out, which `timed_out`
/// tells apart.
struct bounded_exact {
  std::optional<exact_result> result;
  bool timed_out = false;
};
inline bounded_exact series_parallel_optimum_within(const choice_problem& p, double budget_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(budget_s));
  detail::sp_reduction r(p, deadline);
  bounded_exact out;
  out.result = r.solve();
  out.timed_out = r.timed_out();
  return out;
}

}  // namespace autoddl
