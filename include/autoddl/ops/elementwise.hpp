#pragma once
// Per-mesh-axis signature rules of the element-wise and row-wise ops: ReLU, GeLU, SiLU, dropout,
// residual add, element-wise product, layernorm, RMSNorm and softmax (the norms and softmax over
// the last dim). Nonlinear ops never consume P: f(a) + f(b) != f(a + b); the
// element-wise product is linear in each factor alone, so one factor may be P.
#include <optional>

#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

/// ReLU, GeLU, SiLU, dropout: any split passes through, B stays B, P is refused.
/// Dropout under B draws the same mask on every device of the axis (a shared seed).
/// Example: pointwise_axis(S(1)) == S(1); pointwise_axis(P) == nullopt.
constexpr std::optional<sbp> pointwise_axis(sbp x) {
  if (x.is_partial()) return std::nullopt;
  return x;
}

/// Layernorm and softmax over the last dim of a rank-r tensor: that dim may not be split
/// (the row statistics would need a reduction), other splits pass through, never P.
/// Example: rowwise_axis(S(0), 3) == S(0); rowwise_axis(S(2), 3) == nullopt.
constexpr std::optional<sbp> rowwise_axis(sbp x, int rank) {
  if (x.is_partial() || (x.is_split() && x.dim == rank - 1)) return std::nullopt;
  return x;
}

/// Layernorm with gamma, beta [h]: rowwise_axis, and both parameters B.
constexpr std::optional<sbp> layernorm_axis(sbp x, sbp gamma, sbp beta, int rank) {
  if (!gamma.is_broadcast() || !beta.is_broadcast()) return std::nullopt;
  return rowwise_axis(x, rank);
}

/// RMSNorm with gamma over the last dim of a rank-r tensor normed as `groups` groups of equal size
/// (1: the whole dim, LLaMA's; heads: Qwen3's per-head norm of q and k): the last dim may split
/// only where groups > 1 (whole groups per device, an n-D condition: ops/signatures.hpp), gamma
/// (one group's size) B, never P.
/// Example: rmsnorm_axis(S(1), B, 3, 1) == S(1); rmsnorm_axis(S(2), B, 3, 1) == nullopt.
constexpr std::optional<sbp> rmsnorm_axis(sbp x, sbp gamma, int rank, int groups) {
  if (!gamma.is_broadcast() || x.is_partial()) return std::nullopt;
  if (x.is_split() && x.dim == rank - 1 && groups <= 1) return std::nullopt;
  return x;
}

/// Element-wise product: both factors alike (S(d) S(d), B B), or one P and the other B: the
/// product of a partial sum with a whole tensor is a partial sum (P B -> P, B P -> P); never P P.
/// Example: mul_axis(P, B) == P; mul_axis(P, P) == nullopt; mul_axis(S(0), S(0)) == S(0).
constexpr std::optional<sbp> mul_axis(sbp a, sbp b) {
  if (a.is_partial() && b.is_broadcast()) return P;
  if (a.is_broadcast() && b.is_partial()) return P;
  if (a.is_partial() || b.is_partial() || !(a == b)) return std::nullopt;
  return a;
}

/// SwiGLU's fused product silu(gate) * up: both factors alike (S(d) S(d), B B), or gate B and up
/// P (silu(g) (u1 + u2) = silu(g) u1 + silu(g) u2); a partial gate is never whole under silu.
/// Example: swiglu_axis(B, P) == P; swiglu_axis(P, B) == nullopt; swiglu_axis(S(2), S(2)) == S(2).
constexpr std::optional<sbp> swiglu_axis(sbp gate, sbp up) {
  if (gate.is_broadcast() && up.is_partial()) return P;
  if (gate.is_partial() || up.is_partial() || !(gate == up)) return std::nullopt;
  return gate;
}

/// Residual add: both inputs alike, output alike; S(d)+S(d), B+B, P+P (a sum of partial sums).
/// Example: add_axis(P, P) == P; add_axis(B, P) == nullopt.
constexpr std::optional<sbp> add_axis(sbp a, sbp b) {
  if (!(a == b)) return std::nullopt;
  return a;
}

}  // namespace autoddl
