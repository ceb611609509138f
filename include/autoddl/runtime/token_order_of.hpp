#pragma once
// The token order a plan runs in (token_order.hpp). Where attention ops that ask for the balanced
// order (op_attrs::balanced_context) split their queries on the sequence, into q parts each, the
// run permutes every sequence once, at its input, for p = the least common multiple of those q:
// each q divides p, so each such split is balanced. Everything else is natural, and so is a
// serial run. A plan whose balanced attention ops all split alike (as Megatron-Core's and the
// planner's plans do) runs each at p = q, the order ops/work.hpp prices it in.
#include <numeric>
#include <string>

#include "autoddl/error.hpp"
#include "autoddl/plan/plan.hpp"
#include "autoddl/sbp/layout.hpp"
#include "autoddl/token_order.hpp"

namespace autoddl {

namespace detail {
/// The first op of g that reads positions in a way a permuted order cannot follow: a position
/// table (its sequence shards hold natural rows), a dropout keyed by the element's index, experts
/// (dispatch fills slots in token order), an unfused attention; -1 where there is none.
inline int position_reader(const graph& g) {
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const op_node& n = at(g.ops, i);
    const bool reads = (n.kind == op_kind::embedding && n.attrs.positions) ||
                       (n.kind != op_kind::attention && n.attrs.dropout > 0) || n.kind == op_kind::dispatch ||
                       (n.kind == op_kind::attention && n.attrs.unfused_attention);
    if (reads) return i;
  }
  return -1;
}
}  // namespace detail

/// The token order plan p runs in (see above).
/// @throws error where a balanced split meets an op that reads positions otherwise (position_reader).
inline token_order plan_token_order(const plan& p) {
  const graph& g = p.g();
  std::int64_t parts = 1, seq = 0;
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const op_node& n = at(g.ops, i);
    if (n.kind != op_kind::attention || !n.attrs.balanced_context || n.attrs.unfused_attention) continue;
    const std::int64_t q = split_factor(p.sig(i).inputs[0], p.mesh, 1);
    if (q > 1) parts = std::lcm(parts, q);
    seq = n.inputs[0][1];
  }
  const token_order order = balanced_order(seq, parts);
  if (const int r = order.natural() ? -1 : detail::position_reader(g); r >= 0)
    detail::fail<error>("op '" + at(g.ops, r).name + "' reads token positions that the balanced context-parallel order "
                        "(op_attrs::balanced_context) would permute; set balanced_context only on models without it");
  return order;
}

}  // namespace autoddl
