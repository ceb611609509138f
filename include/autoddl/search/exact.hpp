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
// series_parallel_optimum_within() gives up after a budget of work (series_parallel_budget: pairs priced and
// sums compared, counted, not timed, so the same command reports the same on any machine at any
// load; the planner's: exact_reference_work, about half a second here); it then reports a lower bound on the optimum instead: the reduction so far is exact, so the optimum is
// at least what it has folded into a constant plus each remaining node's least cost plus each
// remaining edge's least cost (every cost is a time, never negative; edges not yet priced add 0).
//
// tied_series_parallel_optimum_within(): the same DP over the groups of a tied problem (a
// group's repeated nodes and edges priced once and counted), conditioning on a node's pick where
// the group graph does not reduce (GPT's blocks folded onto one another with the tied embedding
// close a K4): the optimum over tied assignments, a seed for the descent.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
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
struct pick_cost_matrix {
  int rows = 0, cols = 0;            ///< picks of the row node, of the column node
  std::vector<int> row_class, col_class;
  int row_classes = 0, col_classes = 0;
  std::vector<double> v;             ///< [row class][column class]
  double value(int r, int c) const { return cls(at(row_class, r), at(col_class, c)); }
  double cls(int rc, int cc) const { return at(v, rc * col_classes + cc); }
  double& cls(int rc, int cc) { return at(v, rc * col_classes + cc); }
  double least() const { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }
  pick_cost_matrix transposed() const {
    pick_cost_matrix t{cols, rows, col_class, row_class, col_classes, row_classes, std::vector<double>(v.size())};
    for (int r = 0; r < row_classes; ++r)
      for (int c = 0; c < col_classes; ++c) t.cls(c, r) = cls(r, c);
    return t;
  }
};

// Undoes one elimination: the best pick of `node` given the picks of its neighbours a (and c),
// by their classes in the eliminated edges (a_class, c_class; empty: the pick itself).
struct elimination_undo {
  int node = 0, a = -1, c = -1;
  std::vector<int> best;  // leaf: [class of x]; series: [class of x * c_classes + class of z]; isolated, fixed: [0]
  int c_classes = 1;
  std::vector<int> a_class, c_class;
};

// The classes of the sum of two matrices along one side: pairs of the two classes (refine).
inline void refine_classes(const std::vector<int>& c1, const std::vector<int>& c2, int n2, std::vector<int>& out,
                           std::vector<std::pair<int, int>>& pairs) {
  std::vector<int> id(c1.size() * std::size_t(n2) + 1, -1);
  for (std::size_t x = 0; x < c1.size(); ++x) {
    int& slot = at(id, at(c1, x) * n2 + at(c2, x));
    if (slot < 0) {
      slot = int(pairs.size());
      pairs.push_back({at(c1, x), at(c2, x)});
    }
    out.push_back(slot);
  }
}

// Parallel edges add: the classes of the sum are pairs of classes of the two.
inline pick_cost_matrix add_parallel(const pick_cost_matrix& o, const pick_cost_matrix& m) {
  pick_cost_matrix s{o.rows, o.cols, {}, {}, 0, 0, {}};
  std::vector<std::pair<int, int>> rpairs, cpairs;
  refine_classes(o.row_class, m.row_class, m.row_classes, s.row_class, rpairs);
  refine_classes(o.col_class, m.col_class, m.col_classes, s.col_class, cpairs);
  s.row_classes = int(rpairs.size());
  s.col_classes = int(cpairs.size());
  s.v.resize(rpairs.size() * cpairs.size());
  for (int r = 0; r < s.row_classes; ++r)
    for (int c = 0; c < s.col_classes; ++c)
      s.cls(r, c) = o.cls(at(rpairs, r).first, at(cpairs, c).first) + m.cls(at(rpairs, r).second, at(cpairs, c).second);
  return s;
}

// The picks y of an eliminated node that can be the first best response, in index order: y
// has classes (c1[y], c2[y]) on its two edges, so its value is (e1 + unary[y]) + e2 for e1, e2
// fixed by the classes; a later y whose classes match an earlier one with unary no greater can
// never be strictly better (rounding is monotone), so it is skipped.
inline std::vector<int> worth_trying(const std::vector<double>& unary, const std::vector<int>& c1, int n1,
                                     const std::vector<int>& c2, int n2) {
  std::vector<double> least(std::size_t(n1) * std::size_t(n2), std::numeric_limits<double>::infinity());
  std::vector<int> ys;
  for (int y = 0; y < int(unary.size()); ++y) {
    double& l = at(least, at(c1, y) * n2 + at(c2, y));
    if (ys.empty() || at(unary, y) < l) {
      l = std::min(l, at(unary, y));
      ys.push_back(y);
    }
  }
  return ys;
}

// The least of a[i] + b[i] over i < n (infinity when n is 0; a NaN sum never counts), in four
// independent running minima: min is exact and order-free, so the value is the one a single
// left-to-right scan gives, found without its chain of dependent compares.
inline double least_sum(const double* a, const double* b, std::size_t n) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double m0 = inf, m1 = inf, m2 = inf, m3 = inf;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double v0 = a[i] + b[i], v1 = a[i + 1] + b[i + 1], v2 = a[i + 2] + b[i + 2], v3 = a[i + 3] + b[i + 3];
    m0 = v0 < m0 ? v0 : m0;
    m1 = v1 < m1 ? v1 : m1;
    m2 = v2 < m2 ? v2 : m2;
    m3 = v3 < m3 ? v3 : m3;
  }
  for (; i < n; ++i)
    if (const double v = a[i] + b[i]; v < m0) m0 = v;
  return std::min(std::min(m0, m1), std::min(m2, m3));
}

// The first i with a[i] + b[i] == least (0 when least is infinite or none is): with least_sum's
// value, the pick a left-to-right scan keeping the first strict improvement settles on.
inline std::size_t first_sum_equal(const double* a, const double* b, std::size_t n, double least) {
  if (least == std::numeric_limits<double>::infinity()) return 0;
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] + b[i] == least) return i;
  return 0;
}

/// Where a reduction stops: units of work (one per pair of classes an edge prices, one per
/// candidate sum an elimination compares; < 0: no limit), the same on any machine at any load,
/// so a plan and its report do not depend on where or when they were made; and a
/// count of steps (edges priced, nodes eliminated; < 0: no count), for tests that stop it at
/// every point. A pair priced costs series_parallel_price_units (pricing runs the cost model: about a
/// microsecond), a sum compared one (about a nanosecond).
inline constexpr std::int64_t series_parallel_price_units = 1000;
struct series_parallel_budget {
  std::int64_t work = -1;
  std::int64_t steps = -1;
};

/// Series-parallel reduction of a choice problem's additive costs: repeatedly eliminate a node
/// of degree <= 2 (isolated: take its best pick; leaf: fold its best response into the
/// neighbour's unary costs; series: fold it into an edge between its two neighbours, merged in
/// parallel with any existing one), then pick the nodes back in reverse elimination order.
/// Work goes by classes of picks, not picks: a leaf's best response is found once per class of
/// its neighbour, a series node's once per pair of classes; every value is the same sum in the
/// same order as the dense reduction, so optimum and picks are too. With `branch`, a graph
/// that does not reduce is solved by fixing the pick of its busiest node, each pick in turn.
class series_parallel_reduction {
 public:
  /// price(e, x, y): the additive cost of edge e for picks x of its u, y of its v.
  using price_fn = std::function<double(int, int, int)>;
  series_parallel_reduction(const choice_problem& p, series_parallel_budget budget, price_fn price = {}, bool branch = false)
      : p_(p), unary_(std::size_t(p.nodes())), nbr_(std::size_t(p.nodes())), alive_(std::size_t(p.nodes()), 1),
        budget_(budget), branch_(branch) {
    if (!price) price = [&p](int e, int x, int y) { return p.pair(e, x, y).serial_time(); };
    for (int i = 0; i < p.nodes(); ++i)
      for (int c = 0; c < p.candidates(i); ++c) at(unary_, i).push_back(p.unary(i, c).serial_time());
    for (int e = 0; e < int(p.edges().size()); ++e) {
      if (spent()) return;
      const choice_edge& ed = at(p.edges(), e);
      std::optional<pick_cost_matrix> m = edge_matrix(e, price);
      if (!m) {  // the work ran out within the edge (4-D meshes: 625 x 625 ports); it counts 0
        timed_out_ = true;
        return;
      }
      add_matrix(ed.u, ed.v, std::move(*m));
    }
  }

  /// Whether the budget ran out (checked per edge priced and per node eliminated).
  bool timed_out() const { return timed_out_; }
  /// The units of work left (series_parallel_budget::work; < 0: no limit was set).
  std::int64_t work_left() const { return budget_.work; }

  /// A lower bound on the optimum from the reduction so far (the optimum once it finished):
  /// the constant folded, each live node's least cost, each remaining edge's least cost.
  /// @pre every cost is non-negative (edges not priced yet count 0).
  double lower_bound() const {
    double b = constant_;
    for (int i = 0; i < p_.nodes(); ++i)
      if (at(alive_, i)) b += *std::min_element(at(unary_, i).begin(), at(unary_, i).end());
    for (const auto& [ends, m] : adj_) b += m.least();
    return b;
  }

  /// The optimum, or nullopt when some step finds no node of degree <= 2 (not series-parallel,
  /// and not `branch`) or the budget ran out.
  /// The node eliminated next is the live node of degree <= 2 with the least index, kept in an
  /// ordered set as degrees change (reducible_), so n nodes reduce in O(n log n), not O(n^2).
  std::optional<exact_result> solve() {
    if (timed_out_) return std::nullopt;
    if (!reducible_ready_) {
      for (int i = 0; i < p_.nodes(); ++i) track(i);
      reducible_ready_ = true;
    }
    while (true) {
      const int b = reducible_.empty() ? -1 : *reducible_.begin();
      if (b < 0 && alive_left_ == 0) return back_substitute();
      if (spent()) return std::nullopt;
      if (b < 0) return branch_ ? solve_by_branching() : std::nullopt;
      eliminate(b);
    }
  }

 private:
  // Edge e's matrix by classes of picks, or nullopt where the work runs out while it is priced
  // (checked per row: one edge of a 4-D mesh can take seconds).
  std::optional<pick_cost_matrix> edge_matrix(int e, const price_fn& price) {
    pick_cost_matrix m{p_.candidates(at(p_.edges(), e).u), p_.candidates(at(p_.edges(), e).v), {}, {},
                p_.ports(e, 0), p_.ports(e, 1), {}};
    std::vector<int> row_pick(std::size_t(m.row_classes), -1), col_pick(std::size_t(m.col_classes), -1);
    for (int x = 0; x < m.rows; ++x) {
      m.row_class.push_back(p_.port(e, 0, x));
      if (at(row_pick, m.row_class.back()) < 0) at(row_pick, m.row_class.back()) = x;
    }
    for (int y = 0; y < m.cols; ++y) {
      m.col_class.push_back(p_.port(e, 1, y));
      if (at(col_pick, m.col_class.back()) < 0) at(col_pick, m.col_class.back()) = y;
    }
    m.v.assign(std::size_t(m.row_classes) * std::size_t(m.col_classes), 0.0);
    for (int r = 0; r < m.row_classes; ++r) {
      if (!charge(series_parallel_price_units * m.col_classes)) return std::nullopt;
      for (int c = 0; c < m.col_classes; ++c)
        if (at(row_pick, r) >= 0 && at(col_pick, c) >= 0) m.cls(r, c) = price(e, at(row_pick, r), at(col_pick, c));
    }
    return m;
  }

  void add_matrix(int a, int b, pick_cost_matrix m) {  // m indexed [a][b]; a == b adds the diagonal
    if (a == b) {
      for (int x = 0; x < m.rows; ++x) at(at(unary_, a), x) += m.value(x, x);
      return;
    }
    if (a > b) m = m.transposed();  // [lo][hi]
    const int lo = std::min(a, b), hi = std::max(a, b);
    auto [it, fresh] = adj_.try_emplace({lo, hi});
    it->second = fresh ? std::move(m) : add_parallel(it->second, m);
    at(nbr_, lo)[hi] = true;
    at(nbr_, hi)[lo] = true;
  }

  // Removes the edge between a and b and returns its matrix, oriented [a][b] (moved, not copied:
  // an eliminated or fixed node's edges are read once and dropped).
  pick_cost_matrix take_edge(int a, int b) {
    auto node = adj_.extract({std::min(a, b), std::max(a, b)});
    at(nbr_, a).erase(b);
    at(nbr_, b).erase(a);
    return a < b ? std::move(node.mapped()) : node.mapped().transposed();
  }

  void eliminate(int b) {
    std::vector<int> ns;
    for (auto [x, _] : at(nbr_, b)) ns.push_back(x);
    if (ns.empty()) eliminate_isolated(b);
    else if (ns.size() == 1) eliminate_leaf(b, ns[0]);
    else eliminate_series(b, ns[0], ns[1]);
    retire(b, ns);
  }

  // Node n is gone; its neighbours ns have lost it and may have gained each other.
  void retire(int n, const std::vector<int>& ns) {
    at(alive_, n) = 0;
    --alive_left_;
    track(n);
    for (int m : ns) track(m);
  }
  // reducible_ holds n where n is live with degree <= 2.
  void track(int n) {
    if (at(alive_, n) && at(nbr_, n).size() <= 2) reducible_.insert(n);
    else reducible_.erase(n);
  }

  void eliminate_isolated(int b) {
    const auto& b_unary = at(unary_, b);
    const int arg = int(std::min_element(b_unary.begin(), b_unary.end()) - b_unary.begin());
    constant_ += at(b_unary, arg);
    undo_.push_back({b, -1, -1, {arg}, 1, {}, {}});
  }

  void eliminate_leaf(int b, int a) {
    const pick_cost_matrix e = take_edge(a, b);
    const std::vector<double>& b_unary = at(unary_, b);
    elimination_undo un{b, a, -1, std::vector<int>(std::size_t(e.row_classes)), 1, e.row_class, {}};
    std::vector<double> best_of(std::size_t(e.row_classes));
    const std::vector<int> ys = worth_trying(b_unary, e.col_class, e.col_classes, std::vector<int>(b_unary.size(), 0), 1);
    charge(std::int64_t(e.row_classes) * std::int64_t(ys.size()));
    for (int r = 0; r < e.row_classes; ++r) {
      double best = std::numeric_limits<double>::infinity();
      for (int y : ys)
        if (const double v = e.cls(r, at(e.col_class, y)) + at(b_unary, y); v < best) {
          best = v;
          at(un.best, r) = y;
        }
      at(best_of, r) = best;
    }
    for (int x = 0; x < e.rows; ++x) at(at(unary_, a), x) += at(best_of, at(e.row_class, x));
    undo_.push_back(std::move(un));
  }

  void eliminate_series(int b, int a, int c) {
    const pick_cost_matrix eab = take_edge(a, b), ecb = take_edge(c, b);  // [a][b] and [c][b]
    const int ra = eab.row_classes, rc = ecb.row_classes;
    pick_cost_matrix m{eab.rows, ecb.rows, eab.row_class, ecb.row_class, ra, rc,
                std::vector<double>(std::size_t(ra) * std::size_t(rc))};
    elimination_undo un{b, a, c, std::vector<int>(std::size_t(ra) * std::size_t(rc)), rc, eab.row_class, ecb.row_class};
    const std::vector<double>& b_unary = at(unary_, b);
    const std::vector<int> ys = worth_trying(b_unary, eab.col_class, eab.col_classes, ecb.col_class, ecb.col_classes);
    const std::size_t ny = ys.size();
    charge(std::int64_t(ra) * std::int64_t(rc) * std::int64_t(ny));
    std::vector<double> row(ny), cols(ny * std::size_t(rc));  // cols: [z][i], gathered once
    for (int z = 0; z < rc; ++z)
      for (std::size_t i = 0; i < ny; ++i) cols[std::size_t(z) * ny + i] = ecb.cls(z, at(ecb.col_class, ys[i]));
    for (int x = 0; x < ra; ++x) {
      for (std::size_t i = 0; i < ny; ++i) row[i] = eab.cls(x, at(eab.col_class, ys[i])) + at(b_unary, ys[i]);
      for (int z = 0; z < rc; ++z) {
        const double* col = cols.data() + std::size_t(z) * ny;
        const double best = least_sum(row.data(), col, ny);
        at(un.best, x * rc + z) = at(ys, first_sum_equal(row.data(), col, ny, best));
        m.cls(x, z) = best;
      }
    }
    add_matrix(a, c, std::move(m));
    undo_.push_back(std::move(un));
  }

  // Node n takes pick x: its edges fold into its neighbours' costs, its own cost into the constant.
  void fix(int n, int x) {
    std::vector<int> ns;
    for (auto [m, _] : at(nbr_, n)) ns.push_back(m);
    for (int m : ns) {
      const pick_cost_matrix e = take_edge(m, n);
      for (int y = 0; y < e.rows; ++y) at(at(unary_, m), y) += e.value(y, x);
    }
    constant_ += at(at(unary_, n), x);
    undo_.push_back({n, -1, -1, {x}, 1, {}, {}});
    retire(n, ns);
  }

  // The picks of live node n worth fixing: one per tuple of its classes on its edges (the
  // neighbours see only those), the cheapest on its own (the first on ties).
  std::vector<int> distinct_picks(int n) const {
    std::map<std::vector<int>, int> by_tuple;
    for (int x = 0; x < p_.candidates(n); ++x) {
      std::vector<int> key;
      for (auto [m, _] : at(nbr_, n)) {
        const pick_cost_matrix& e = adj_.at({std::min(m, n), std::max(m, n)});
        key.push_back(m < n ? at(e.col_class, x) : at(e.row_class, x));
      }
      auto [it, fresh] = by_tuple.try_emplace(std::move(key), x);
      if (!fresh && at(at(unary_, n), x) < at(at(unary_, n), it->second)) it->second = x;
    }
    std::vector<int> picks;
    for (const auto& [key, x] : by_tuple) picks.push_back(x);
    return picks;
  }

  // No node reduces: the best over the picks of the live node with the fewest distinct picks
  // (distinct_picks), each fixed in a copy of the reduction.
  std::optional<exact_result> solve_by_branching() {
    int n = -1;
    std::vector<int> picks;
    for (int i = 0; i < p_.nodes(); ++i)
      if (at(alive_, i)) {
        std::vector<int> d = distinct_picks(i);
        if (n < 0 || d.size() < picks.size()) {
          n = i;
          picks = std::move(d);
        }
      }
    std::optional<exact_result> best;
    for (int x : picks) {
      series_parallel_reduction branch = *this;
      branch.fix(n, x);
      std::optional<exact_result> r = branch.solve();
      budget_.steps = branch.budget_.steps;
      budget_.work = branch.budget_.work;
      if (branch.timed_out_) timed_out_ = true;
      if (timed_out_ || !r) return std::nullopt;
      if (!best || r->time < best->time) best = std::move(r);
    }
    return best;
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
      at(r.pick, it->node) = at(it->best, x * it->c_classes + z);
    }
    return r;
  }

  bool spent() {
    if (budget_.steps == 0) timed_out_ = true;
    if (budget_.steps > 0) --budget_.steps;
    if (budget_.work == 0) timed_out_ = true;
    return timed_out_;
  }

  // Takes n units of work; false (and the budget spent) where fewer were left.
  bool charge(std::int64_t n) {
    if (budget_.work < 0) return true;
    if (budget_.work < n) {
      budget_.work = 0;
      timed_out_ = true;
      return false;
    }
    budget_.work -= n;
    return true;
  }

  const choice_problem& p_;
  std::vector<std::vector<double>> unary_;
  std::map<std::pair<int, int>, pick_cost_matrix> adj_;  ///< (a, b) with a < b -> [pick a][pick b]
  std::vector<std::map<int, bool>> nbr_;
  std::vector<char> alive_;
  int alive_left_ = int(alive_.size());  ///< live nodes
  std::set<int> reducible_;               ///< live nodes of degree <= 2 (solve)
  bool reducible_ready_ = false;
  std::vector<elimination_undo> undo_;
  double constant_ = 0;
  series_parallel_budget budget_;
  bool branch_ = false;
  bool timed_out_ = false;
};



/// A problem whose nodes are p's groups: a group's costs are its nodes' summed, an edge stands
/// for the edges of one class between two groups (folded in choice_problem::group_edge_items),
/// `edge_of` tells which edge of p and how many (its price is p's times that count).
struct folded_groups {
  choice_problem problem;
  std::vector<choice_problem::repeated> edge_of;
};

inline folded_groups fold_groups(const choice_problem& p) {
  folded_groups f;
  for (int g = 0; g < p.groups(); ++g) {
    std::vector<cost_terms> u(std::size_t(p.group_candidates(g)));
    for (const auto& [n, k] : p.group_unary_items(g))
      for (int c = 0; c < p.group_candidates(g); ++c) at(u, c).add_times(p.unary(n, c), k);
    f.problem.add_node(std::move(u));
  }
  auto port_map = [&](int e, int side, int node) {
    std::vector<int> m;
    for (int c = 0; c < p.candidates(node); ++c) m.push_back(p.port(e, side, c));
    return f.problem.add_ports(std::move(m));
  };
  for (int g = 0; g < p.groups(); ++g)
    for (const choice_problem::repeated& it : p.group_edge_items(g)) {
      const choice_edge& ed = at(p.edges(), it.item);
      if (p.group_of(ed.u) != g) continue;  // listed under both ends: take it once
      f.problem.add_edge(g, p.group_of(ed.v), int(f.edge_of.size()), port_map(it.item, 0, ed.u),
                         port_map(it.item, 1, ed.v));
      f.edge_of.push_back(it);
    }
  f.problem.finalize();
  return f;
}

}  // namespace detail

/// Optimum of the untied additive problem by series-parallel reduction (see the file comment).
inline std::optional<exact_result> series_parallel_optimum(const choice_problem& p) {
  return detail::series_parallel_reduction(p, {}).solve();
}

/// A reference run within a budget: `result` is nullopt when the graph does not reduce or the
/// budget ran out, which `timed_out` tells apart; `lower_bound` is then a lower bound on the
/// optimum from the reduction so far (where it finished, the optimum itself).
struct bounded_exact {
  std::optional<exact_result> result;
  bool timed_out = false;
  double lower_bound = 0;
};

/// series_parallel_optimum within `work` units (series_parallel_budget: pricing every pair included; < 0: no
/// limit) and, where max_steps >= 0, that many steps (edges priced, nodes eliminated).
inline bounded_exact series_parallel_optimum_within(const choice_problem& p, std::int64_t work,
                                                    std::int64_t max_steps = -1) {
  // pricing every edge alone would spend the budget (4-D meshes): stop before, with the bound
  // of the least unary costs, rather than price part of it
  std::int64_t pricing = 0;
  for (int e = 0; e < int(p.edges().size()) && work >= 0 && pricing <= work; ++e)
    pricing += detail::series_parallel_price_units * std::int64_t(p.ports(e, 0)) * std::int64_t(p.ports(e, 1));
  if (work >= 0 && pricing > work) work = 0;
  detail::series_parallel_reduction r(p, {work, max_steps});
  bounded_exact out;
  out.result = r.solve();
  out.timed_out = r.timed_out();
  out.lower_bound = out.result ? out.result->time : r.lower_bound();
  return out;
}

/// The pairs of ports the DP over p's groups prices (tied_series_parallel_optimum_within): what
/// it costs, known before it runs (about 2 us a pair here; 150,000 for GPT-2 on 4x4x8, 3.2
/// million for a GPT with hidden size 64 on 2x2x2x2).
inline std::int64_t tied_port_pairs(const choice_problem& p) {
  std::int64_t n = 0;
  for (int g = 0; g < p.groups(); ++g)
    for (const choice_problem::repeated& it : p.group_edge_items(g))
      if (p.group_of(at(p.edges(), it.item).u) == g) n += std::int64_t(p.ports(it.item, 0)) * p.ports(it.item, 1);
  return n;
}

/// The optimum of p's additive objective over tied assignments (one pick per group: `pick`),
/// within `work` units (series_parallel_budget): the DP over p's groups (detail::fold_groups), fixing picks
/// where the group graph does not reduce. A seed for the descent; ties kept, so no lower bound.
inline bounded_exact tied_series_parallel_optimum_within(const choice_problem& p, std::int64_t work,
                                                         std::int64_t max_steps = -1) {
  const detail::folded_groups f = detail::fold_groups(p);
  auto price = [&](int e, int x, int y) {
    return p.pair(at(f.edge_of, e).item, x, y).serial_time() * at(f.edge_of, e).count;
  };
  detail::series_parallel_reduction r(f.problem, {work, max_steps}, price, /*branch=*/true);
  bounded_exact out;
  out.result = r.solve();
  out.timed_out = r.timed_out();
  return out;
}

}  // namespace autoddl
