#pragma once
// Per-mesh-axis signature rules of the multi-head attention core,
//   out = softmax(q k^T / sqrt(d) [+ causal mask]) v  per head,
// with q [batch, seq_q, hidden], k, v [batch, seq_k, hidden], hidden = heads * d.
// Exact splits only (Megatron-LM, Shoeybi 2019: attention heads split across devices; sequence
// split of the queries as in Korthikanti 2022 / ring attention, with k and v whole).
#include <cstdint>
#include <optional>

#include "autoddl/ops/detail/lift.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

/// One mesh axis of the attention core:
///   q S(0) k S(0) v S(0) -> S(0)   batch split
///   q S(2) k S(2) v S(2) -> S(2)   heads split (hidden dim, whole heads per device: see attention_exact)
///   q S(1) k B    v B    -> S(1)   query-sequence split, keys and values whole (causal too: the
///                                  mask uses global positions)
///   q B    k B    v B    -> B
/// Nonlinear (softmax), so never P. Example: attention_axis(S(1), B, B) == S(1).
constexpr std::optional<sbp> attention_axis(sbp q, sbp k, sbp v) {
  if (q.is_partial() || k.is_partial() || v.is_partial()) return std::nullopt;
  if (q.is_split() && (q.dim == 0 || q.dim == 2) && k == q && v == q) return q;
  if (q.is_split() && q.dim == 1 && k.is_broadcast() && v.is_broadcast()) return q;
  if (q.is_broadcast() && k.is_broadcast() && v.is_broadcast()) return B;
  return std::nullopt;
}

constexpr std::optional<nd_sbp> attention_output(const nd_sbp& q, const nd_sbp& k, const nd_sbp& v) {
  return detail::lift(attention_axis, q, k, v);
}

/// The n-D condition the per-axis rule cannot see: the hidden dim may be split only into whole
/// heads, i.e. the ways it is split divide `heads`. Example: q [B,S(2)]@2x4 needs heads % 4 == 0.
constexpr bool attention_exact(const nd_sbp& q, const mesh_shape& mesh, int heads) {
  std::int64_t ways = split_factor(q, mesh, 2);
  return heads % ways == 0;
}

}  // namespace autoddl
