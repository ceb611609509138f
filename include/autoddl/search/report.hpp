#pragma once
// A plan as a person reads it: one row per op with its signature in the notation, its compute,
// the communication on its edges (forward, backward and gradient boxing into it, plus any
// statistic all-reduce it runs), its memory, the communication lower bound of matmul-like ops,
// and the predicted step time had it taken its runner-up.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/solve.hpp"

namespace autoddl {

struct plan_row {
  std::string name;
  std::string op;
  std::string signature;      ///< "X[S(0),B] W[B,S(1)] b[B,S(0)] -> Y[S(0),S(1)]", storage after '|'
  double compute_s = 0;       ///< forward + backward
  double comm_bytes = 0;      ///< bytes one device sends on this op's incoming edges, per step
  double comm_s = 0;
  double memory_bytes = 0;    ///< activations kept + its parameters' storage and gathered copies
  std::optional<double> lower_bound_bytes;
  /// Predicted step time with this op's next-best candidate; empty when there is none that
  /// fits: the op has one candidate, or every other one puts the plan over the memory limit
  /// (runner_up_over_memory).
  std::optional<double> runner_up_s;
  bool runner_up_over_memory = false;
};

/// Memory-independent communication lower bound of one product C = A B of dims m x k x n on p
/// processors, in words (Al Daas, Ballard, Grigori, Kumar, Rouse 2022, with d1 >= d2 >= d3 the
/// sorted dims):  p <= d1/d2: d2 d3 (1 - 1/p);  d1/d2 < p <= d1 d2 / d3^2: 2 d3 sqrt(d1 d2 / p)
/// - (d1 d3 + d2 d3) / p;  else 3 (d1 d2 d3 / p)^(2/3) - (d1 d2 + d1 d3 + d2 d3) / p.
inline double matmul_lower_bound_words(double m, double k, double n, double p) {
  double d[3] = {m, k, n};
  std::sort(d, d + 3, [](double a, double b) { return a > b; });
  const double d1 = d[0], d2 = d[1], d3 = d[2];
  if (p <= 1) return 0;
  if (p <= d1 / d2) return d2 * d3 * (1 - 1 / p);
  if (p <= d1 * d2 / (d3 * d3)) return 2 * d3 * std::sqrt(d1 * d2 / p) - (d1 * d3 + d2 * d3) / p;
  return 3 * std::pow(d1 * d2 * d3 / p, 2.0 / 3.0) - (d1 * d2 + d1 * d3 + d2 * d3) / p;
}

/// For linear and matmul ops: the bound for the forward product and the two backward products
/// (each over the same three dims), in bytes; nullopt for other ops.
inline std::optional<double> op_lower_bound_bytes(const op_node& n, double devices, int elem_bytes) {
  if (n.kind != op_kind::linear && n.kind != op_kind::matmul) return std::nullopt;
  if (n.inputs.empty() || n.params.empty()) return std::nullopt;
  const tensor_shape& x = n.inputs[0];
  const double k = double(x[x.rank() - 1]);
  const double m = double(x.elements()) / k;
  const tensor_shape& w = n.params[0];
  const double out = double(w.elements()) / k;
  return 3 * matmul_lower_bound_words(m, k, out, devices) * elem_bytes;
}

inline std::vector<plan_row> plan_rows(const plan_problem& problem, const plan_result& r) {
  const graph& g = problem.model();
  const choice_problem& u = problem.untied();
  const int nops = int(g.ops.size());
  std::vector<plan_row> rows(static_cast<std::size_t>(nops));
  for (int i = 0; i < nops; ++i) {
    const op_node& n = at(g.ops, i);
    const signature& sig = at(problem.op_candidates(i), at(r.pick, i));
    plan_row& row = at(rows, i);
    row.name = n.name;
    row.op = std::string(to_string(n.kind));
    row.signature = to_string(n, sig);
    cost_terms t = u.unary(i, at(r.pick, i));
    row.compute_s = t.compute();
    row.comm_s = t.comm();
    row.comm_bytes = t.bytes;
    row.memory_bytes = t.memory;
    row.lower_bound_bytes = op_lower_bound_bytes(n, double(problem.options().mesh.devices()), bytes_of(problem.options().type));
    if (!r.runner_up.empty()) {  // the search's rank: infinite without another candidate, >= 1e30 over memory
      const double ru = at(r.runner_up, i);
      if (ru < 1e30) row.runner_up_s = ru;
      else row.runner_up_over_memory = std::isfinite(ru);
    }
  }
  std::vector<char> param_seen(g.params.size(), 0);  // per parameter: whether an earlier edge used it
  for (std::size_t e = 0; e < u.edges().size(); ++e) {
    const auto& ed = u.edges()[e];
    const auto& info = problem.edge_infos()[e];
    cost_terms t = u.pair(int(e), at(r.pick, ed.u), at(r.pick, ed.v));
    plan_row& row = at(rows, info.to_node);
    row.comm_s += t.comm();
    row.comm_bytes += t.bytes;
    row.memory_bytes += t.memory;
    if (info.param) {
      const int p = info.from_node - nops;
      const param_choice& st = at(problem.param_candidates(p), at(r.pick, ed.u));
      row.signature += " | " + at(g.params, p).name + " stored " + to_string(st.storage);
      if (!(st.grad_sum == st.update)) row.signature += " (gradients summed in " + to_string(st.grad_sum) + ", synced once)";
      if (!(st.update == st.storage))
        row.signature += " (optimizer state and gradient in " + to_string(st.update) + ", updated slices gathered)";
      // storage, gradient and optimizer bytes are counted at the parameter's first user
      const bool first = !at(param_seen, p);
      at(param_seen, p) = 1;
      if (first) {  // and a tied parameter's one synchronisation
        const cost_terms& own = u.unary(info.from_node, at(r.pick, ed.u));
        row.memory_bytes += own.memory;
        row.comm_s += own.comm();
        row.comm_bytes += own.bytes;
      }
    }
  }
  return rows;
}

/// A stretch of a model's ops as the table and the picture show them: one op outside repeated
/// blocks (count 1, no block), or a repeated block [first, end) followed by count - 1 more blocks
/// laid out alike (the last of them starting at op last_first).
struct op_run {
  int first = 0, end = 0, count = 1, last_first = 0;
  bool block = false;
};

/// The ops of g split into runs, consecutive repeated blocks with equal key(first, end) folded.
template <class Key>
std::vector<op_run> fold_repeated_blocks(const graph& g, Key&& key) {
  const int n = int(g.ops.size());
  auto block_end = [&](int i) {
    int e = i;
    while (e < n && at(g.block, e) == at(g.block, i)) ++e;
    return e;
  };
  std::vector<op_run> runs;
  for (int i = 0; i < n;) {
    if (at(g.block, i) < 0) {
      runs.push_back({i, i + 1, 1, i, false});
      ++i;
      continue;
    }
    op_run r{i, block_end(i), 1, i, true};
    const auto k = key(r.first, r.end);
    int next = r.end;
    while (next < n && at(g.block, next) >= 0 && key(next, block_end(next)) == k) {
      r.last_first = next;
      next = block_end(next);
      ++r.count;
    }
    runs.push_back(r);
    i = next;
  }
  return runs;
}

/// The block part of an op name: "h3" of "h3.attn.q".
inline std::string block_prefix(const std::string& op_name) { return op_name.substr(0, op_name.find('.')); }

}  // namespace autoddl
