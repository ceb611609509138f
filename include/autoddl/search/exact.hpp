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
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <vector>

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
    while (g < p.groups() && ++pick[std::size_t(g)] == p.group_candidates(g)) pick[std::size_t(g++)] = 0;
    if (g == p.groups()) break;
  }
  return best;
}

namespace detail {
struct sp_matrix {
  int rows = 0, cols = 0;
  std::vector<double> v;
  double& at(int r, int c) { return v[std::size_t(r) * std::size_t(cols) + std::size_t(c)]; }
  double at(int r, int c) const { return v[std::size_t(r) * std::size_t(cols) + std::size_t(c)]; }
};
// Undoes one elimination: the best pick of `node` given the picks of its neighbours a (and c).
struct sp_undo {
  int node = 0, a = -1, c = -1;
  std::vector<int> best;  // leaf: [x]; series: [x * kc + z]; isolated: [0]
  int kc = 1;
};
}  // namespace detail

/// Optimum of the untied additive problem by series-parallel reduction (see the file comment).
inline std::optional<exact_result> series_parallel_optimum(const choice_problem& p) {
  const int n = p.nodes();
  std::vector<std::vector<double>> u(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < p.candidates(i); ++c) u[std::size_t(i)].push_back(p.unary(i, c).serial_time());
  // adjacency: (a, b) with a < b -> matrix indexed [pick a][pick b]
  std::map<std::pair<int, int>, detail::sp_matrix> adj;
  std::vector<std::map<int, bool>> nbr(static_cast<std::size_t>(n));
  auto add_matrix = [&](int a, int b, const detail::sp_matrix& m) {  // m indexed [a][b]
    if (a == b) {
      for (int x = 0; x < m.rows; ++x) u[std::size_t(a)][std::size_t(x)] += m.at(x, x);
      return;
    }
    bool swap = a > b;
    int lo = swap ? b : a, hi = swap ? a : b;
    auto [it, fresh] = adj.try_emplace({lo, hi});
    auto& mm = it->second;
    if (fresh) {
      mm.rows = p.candidates(lo);
      mm.cols = p.candidates(hi);
      mm.v.assign(std::size_t(mm.rows) * std::size_t(mm.cols), 0.0);
    }
    for (int x = 0; x < m.rows; ++x)
      for (int y = 0; y < m.cols; ++y) {
        if (swap) mm.at(y, x) += m.at(x, y);
        else mm.at(x, y) += m.at(x, y);
      }
    nbr[std::size_t(lo)][hi] = true;
    nbr[std::size_t(hi)][lo] = true;
  };
  for (std::size_t e = 0; e < p.edges().size(); ++e) {
    const auto& ed = p.edges()[e];
    detail::sp_matrix m{p.candidates(ed.u), p.candidates(ed.v), {}};
    m.v.resize(std::size_t(m.rows) * std::size_t(m.cols));
    for (int x = 0; x < m.rows; ++x)
      for (int y = 0; y < m.cols; ++y) m.at(x, y) = p.pair(int(e), x, y).serial_time();
    add_matrix(ed.u, ed.v, m);
  }
  auto edge_from = [&](int a, int b) {  // matrix oriented [a][b]
    detail::sp_matrix r;
    const auto& mm = adj.at({std::min(a, b), std::max(a, b)});
    r.rows = p.candidates(a);
    r.cols = p.candidates(b);
    r.v.resize(std::size_t(r.rows) * std::size_t(r.cols));
    for (int x = 0; x < r.rows; ++x)
      for (int y = 0; y < r.cols; ++y) r.at(x, y) = a < b ? mm.at(x, y) : mm.at(y, x);
    return r;
  };
  auto drop_edge = [&](int a, int b) {
    adj.erase({std::min(a, b), std::max(a, b)});
    nbr[std::size_t(a)].erase(b);
    nbr[std::size_t(b)].erase(a);
  };
  std::vector<char> alive(std::size_t(n), 1);
  std::vector<detail::sp_undo> undo;
  double constant = 0;
  int left = n;
  constexpr double inf = std::numeric_limits<double>::infinity();
  while (left > 0) {
    int b = -1;
    for (int i = 0; i < n && b < 0; ++i)
      if (alive[std::size_t(i)] && nbr[std::size_t(i)].size() <= 2) b = i;
    if (b < 0) return std::nullopt;  // not series-parallel
    const int kb = p.candidates(b);
    detail::sp_undo un;
    un.node = b;
    std::vector<int> ns;
    for (auto [x, _] : nbr[std::size_t(b)]) ns.push_back(x);
    if (ns.empty()) {
      int arg = int(std::min_element(u[std::size_t(b)].begin(), u[std::size_t(b)].end()) - u[std::size_t(b)].begin());
      constant += u[std::size_t(b)][std::size_t(arg)];
      un.best = {arg};
    } else if (ns.size() == 1) {
      int a = ns[0];
      auto e = edge_from(a, b);
      un.a = a;
      un.best.resize(std::size_t(p.candidates(a)));
      for (int x = 0; x < p.candidates(a); ++x) {
        double bv = inf;
        for (int y = 0; y < kb; ++y) {
          double v = e.at(x, y) + u[std::size_t(b)][std::size_t(y)];
          if (v < bv) { bv = v; un.best[std::size_t(x)] = y; }
        }
        u[std::size_t(a)][std::size_t(x)] += bv;
      }
      drop_edge(a, b);
    } else {
      int a = ns[0], c = ns[1];
      auto eab = edge_from(a, b), ebc = edge_from(b, c);
      const int ka = p.candidates(a), kc = p.candidates(c);
      detail::sp_matrix m{ka, kc, std::vector<double>(std::size_t(ka) * std::size_t(kc))};
      un.a = a;
      un.c = c;
      un.kc = kc;
      un.best.resize(std::size_t(ka) * std::size_t(kc));
      for (int x = 0; x < ka; ++x)
        for (int z = 0; z < kc; ++z) {
          double bv = inf;
          int arg = 0;
          for (int y = 0; y < kb; ++y) {
            double v = eab.at(x, y) + u[std::size_t(b)][std::size_t(y)] + ebc.at(y, z);
            if (v < bv) { bv = v; arg = y; }
          }
          m.at(x, z) = bv;
          un.best[std::size_t(x) * std::size_t(kc) + std::size_t(z)] = arg;
        }
      drop_edge(a, b);
      drop_edge(b, c);
      add_matrix(a, c, m);
    }
    alive[std::size_t(b)] = 0;
    --left;
    undo.push_back(std::move(un));
  }
  exact_result r;
  r.time = constant;
  r.pick.assign(std::size_t(n), 0);
  for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
    int x = it->a >= 0 ? r.pick[std::size_t(it->a)] : 0;
    int z = it->c >= 0 ? r.pick[std::size_t(it->c)] : 0;
    r.pick[std::size_t(it->node)] =
        it->c >= 0 ? it->best[std::size_t(x) * std::size_t(it->kc) + std::size_t(z)] : it->best[std::size_t(x)];
  }
  return r;
}

}  // namespace autoddl
