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
// series_parallel_optimum_within() gives up after a wall-time budget (the planner's: 0.25 s or 10 %
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

/// A cost matrix between the picks of two nodes, [row pick][column pick], stored per class of
/// picks: rows (columns) of one class are equal, so v holds one value per pair of classes.
/// Classes start as the edge's ports (choice_problem::add_ports) and refine as edges merge.
struct sp_matrix {
  int rows = 0, cols = 0;            ///< picks of the row node, of the column node
  std::vector<int> row_class, col_class;
  int row_classes = 0, col_classes = 0;
  std::vector<double> v;             ///< [row class][column class]
  double at(int r, int c) const {
    return v[std::size_t(row_class[std::size_t(r)]) * std::size_t(col_classes) + std::size_t(col_class[std::size_t(c)])];
  }
  double cls(int rc, int cc) const { return v[std::size_t(rc) * std::size_t(col_classes) + std::size_t(cc)]; }
  sp_matrix transposed() const {
    sp_matrix t{cols, rows, col_class, row_class, col_classes, row_classes, std::vector<double>(v.size())};
    for (int r = 0; r < row_classes; ++r)
      for (int c = 0; c < col_classes; ++c) t.v[std::size_t(c) * std::size_t(row_classes) + std::size_t(r)] = cls(r, c);
    return t;
  }
};

// Undoes one elimination: the best pick of `node` given the picks of its neighbours a (and c),
// by their classes in the eliminated edges (a_class, c_class; empty: the pick itself).
struct sp_undo {
  int node = 0, a = -1, c = -1;
  std::vector<int> best;  // leaf: [class of x]; series: [class of x * kc + class of z]; isolated: [0]
  int kc = 1;
  std::vector<int> a_class, c_class;
};

/// Series-parallel reduction of a choice problem's additive costs: repeatedly eliminate a node
/// of degree <= 2 (isolated: take its best pick; leaf: fold its best response into the
/// neighbour's unary costs; series: fold it into an edge between its two neighbours, merged in
/// parallel with any existing one), then pick the nodes back in reverse elimination order.
/// Work goes by classes of picks, not picks: a leaf's best response is found once per class of
/// its neighbour, a series node's once per pair of classes; every value is the same sum in the
/// same order as the dense reduction, so optimum and picks are too.
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
      sp_matrix m{p.candidates(ed.u), p.candidates(ed.v), {}, {}, p.ports(int(e), 0), p.ports(int(e), 1), {}};
      std::vector<int> row_pick(std::size_t(m.row_classes), -1), col_pick(std::size_t(m.col_classes), -1);
      for (int x = 0; x < m.rows; ++x) {
        m.row_class.push_back(p.port(int(e), 0, x));
        if (row_pick[std::size_t(m.row_class.back())] < 0) row_pick[std::size_t(m.row_class.back())] = x;
      }
      for (int y = 0; y < m.cols; ++y) {
        m.col_class.push_back(p.port(int(e), 1, y));
        if (col_pick[std::size_t(m.col_class.back())] < 0) col_pick[std::size_t(m.col_class.back())] = y;
      }
      m.v.assign(std::size_t(m.row_classes) * std::size_t(m.col_classes), 0.0);
      for (int r = 0; r < m.row_classes; ++r)
        for (int c = 0; c < m.col_classes; ++c)
          if (row_pick[std::size_t(r)] >= 0 && col_pick[std::size_t(c)] >= 0)
            m.v[std::size_t(r) * std::size_t(m.col_classes) + std::size_t(c)] =
                p.pair(int(e), row_pick[std::size_t(r)], col_pick[std::size_t(c)]).serial_time();
      add_matrix(ed.u, ed.v, m);
    }
  }

  /// Whether the deadline passed (checked per edge priced and per node eliminated).
  bool timed_out() const { return timed_out_; }

  /// The optimum, or nullopt when some step finds no node of degree <= 2 (not series-parallel)
  /// or the deadline passed.
  std::optional<exact_result> solve() {
    if (timed_out_) return std::nullopt;
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
  void add_matrix(int a, int b, const sp_matrix& m0) {  // m0 indexed [a][b]; a == b adds the diagonal
    if (a == b) {
      for (int x = 0; x < m0.rows; ++x) at(at(unary_, a), x) += m0.at(x, x);
      return;
    }
    const sp_matrix m = a > b ? m0.transposed() : m0;  // [lo][hi]
    const int lo = std::min(a, b), hi = std::max(a, b);
    auto [it, fresh] = adj_.try_emplace({lo, hi});
    if (fresh) {
      it->second = m;
    } else {  // parallel edges add: classes of the sum are pairs of classes of the two
      const sp_matrix& o = it->second;
      sp_matrix s{o.rows, o.cols, {}, {}, 0, 0, {}};
      std::vector<std::pair<int, int>> rpairs, cpairs;
      auto refine = [](const std::vector<int>& c1, const std::vector<int>& c2, int n2, std::vector<int>& out,
                       std::vector<std::pair<int, int>>& pairs) {
        std::vector<int> id(c1.size() * std::size_t(n2) + 1, -1);
        for (std::size_t x = 0; x < c1.size(); ++x) {
          int& slot = id[std::size_t(c1[x]) * std::size_t(n2) + std::size_t(c2[x])];
          if (slot < 0) {
            slot = int(pairs.size());
            pairs.push_back({c1[x], c2[x]});
          }
          out.push_back(slot);
        }
      };
      refine(o.row_class, m.row_class, m.row_classes, s.row_class, rpairs);
      refine(o.col_class, m.col_class, m.col_classes, s.col_class, cpairs);
      s.row_classes = int(rpairs.size());
      s.col_classes = int(cpairs.size());
      s.v.resize(std::size_t(s.row_classes) * std::size_t(s.col_classes));
      for (int r = 0; r < s.row_classes; ++r)
        for (int c = 0; c < s.col_classes; ++c)
          s.v[std::size_t(r) * std::size_t(s.col_classes) + std::size_t(c)] =
              o.cls(rpairs[std::size_t(r)].first, cpairs[std::size_t(c)].first) +
              m.cls(rpairs[std::size_t(r)].second, cpairs[std::size_t(c)].second);
      it->second = std::move(s);
    }
    at(nbr_, lo)[hi] = true;
    at(nbr_, hi)[lo] = true;
  }

  sp_matrix edge_from(int a, int b) const {  // oriented [a][b]
    const sp_matrix& mm = adj_.at({std::min(a, b), std::max(a, b)});
    return a < b ? mm : mm.transposed();
  }

  void drop_edge(int a, int b) {
    adj_.erase({std::min(a, b), std::max(a, b)});
    at(nbr_, a).erase(b);
    at(nbr_, b).erase(a);
  }

  // The picks y of an eliminated node that can be the first best response, in index order: y
  // has classes (c1[y], c2[y]) on its two edges, so its value is (e1 + ub[y]) + e2 for e1, e2
  // fixed by the classes; a later y whose classes match an earlier one with ub no greater can
  // never be strictly better (rounding is monotone), so it is skipped.
  static std::vector<int> worth_trying(const std::vector<double>& ub, const std::vector<int>& c1, int n1,
                                       const std::vector<int>& c2, int n2) {
    std::vector<double> least(std::size_t(n1) * std::size_t(n2), std::numeric_limits<double>::infinity());
    std::vector<int> ys;
    for (std::size_t y = 0; y < ub.size(); ++y) {
      double& l = least[std::size_t(c1[y]) * std::size_t(n2) + std::size_t(c2[y])];
      if (ys.empty() || ub[y] < l) {
        l = std::min(l, ub[y]);
        ys.push_back(int(y));
      }
    }
    return ys;
  }

  void eliminate_isolated(int b) {
    const auto& ub = at(unary_, b);
    const int arg = int(std::min_element(ub.begin(), ub.end()) - ub.begin());
    constant_ += at(ub, arg);
    undo_.push_back({b, -1, -1, {arg}, 1, {}, {}});
  }

  void eliminate_leaf(int b, int a) {
    const sp_matrix e = edge_from(a, b);
    const std::vector<double>& ub = at(unary_, b);
    sp_undo un{b, a, -1, std::vector<int>(std::size_t(e.row_classes)), 1, e.row_class, {}};
    std::vector<double> best_of(std::size_t(e.row_classes));
    const std::vector<int> ys = worth_trying(ub, e.col_class, e.col_classes, std::vector<int>(ub.size(), 0), 1);
    for (int r = 0; r < e.row_classes; ++r) {
      double best = std::numeric_limits<double>::infinity();
      for (int y : ys)
        if (const double v = e.cls(r, e.col_class[std::size_t(y)]) + ub[std::size_t(y)]; v < best) {
          best = v;
          un.best[std::size_t(r)] = y;
        }
      best_of[std::size_t(r)] = best;
    }
    for (int x = 0; x < e.rows; ++x) at(at(unary_, a), x) += best_of[std::size_t(e.row_class[std::size_t(x)])];
    drop_edge(a, b);
    undo_.push_back(std::move(un));
  }

  void eliminate_series(int b, int a, int c) {
    const sp_matrix eab = edge_from(a, b), ecb = edge_from(c, b);  // [a][b] and [c][b]
    const int kb = p_.candidates(b);
    const int ra = eab.row_classes, rc = ecb.row_classes;
    sp_matrix m{eab.rows, ecb.rows, eab.row_class, ecb.row_class, ra, rc,
                std::vector<double>(std::size_t(ra) * std::size_t(rc))};
    sp_undo un{b, a, c, std::vector<int>(std::size_t(ra) * std::size_t(rc)), rc, eab.row_class, ecb.row_class};
    const std::vector<double>& ub = at(unary_, b);
    const std::vector<int> ys = worth_trying(ub, eab.col_class, eab.col_classes, ecb.col_class, ecb.col_classes);
    const std::size_t ny = ys.size();
    std::vector<double> row(ny), col(ny);
    (void)kb;
    for (int x = 0; x < ra; ++x) {
      for (std::size_t i = 0; i < ny; ++i) row[i] = eab.cls(x, eab.col_class[std::size_t(ys[i])]) + ub[std::size_t(ys[i])];
      for (int z = 0; z < rc; ++z) {
        for (std::size_t i = 0; i < ny; ++i) col[i] = ecb.cls(z, ecb.col_class[std::size_t(ys[i])]);
        double best = std::numeric_limits<double>::infinity();
        int arg = 0;
        for (std::size_t i = 0; i < ny; ++i)
          if (const double v = row[i] + col[i]; v < best) {
            best = v;
            arg = ys[i];
          }
        un.best[std::size_t(x) * std::size_t(rc) + std::size_t(z)] = arg;
        m.v[std::size_t(x) * std::size_t(rc) + std::size_t(z)] = best;
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
      int x = it->a >= 0 ? at(r.pick, it->a) : 0;
      int z = it->c >= 0 ? at(r.pick, it->c) : 0;
      if (!it->a_class.empty()) x = at(it->a_class, x);
      if (!it->c_class.empty()) z = at(it->c_class, z);
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
