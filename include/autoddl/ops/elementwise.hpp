#pragma once
// Per-mesh-axis signature rules of the element-wise and row-wise ops: ReLU, GeLU, dropout,
// residual add, layernorm and softmax (both over the last dim).
// Nonlinear ops never consume P (DESIGN.md): f(a) + f(b) != f(a + b).
#include <optional>

#include "autoddl/ops/detail/lift.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

/// ReLU, GeLU, dropout: any split passes through, B stays B, P is refused.
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

/// Residual add: both inputs alike, output alike; S(d)+S(d), B+B, P+P (a sum of partial sums).
/// Example: add_axis(P, P) == P; add_axis(B, P) == nullopt.
constexpr std::optional<sbp> add_axis(sbp a, sbp b) {
  if (!(a == b)) return std::nullopt;
  return a;
}

constexpr std::optional<nd_sbp> pointwise_output(const nd_sbp& x) { return detail::lift(pointwise_axis, x); }
constexpr std::optional<nd_sbp> rowwise_output(const nd_sbp& x, int rank) {
  return detail::lift([&](sbp a) { return rowwise_axis(a, rank); }, x);
}
constexpr std::optional<nd_sbp> layernorm_output(const nd_sbp& x, const nd_sbp& gamma, const nd_sbp& beta, int rank) {
  return detail::lift([&](sbp a, sbp g, sbp b) { return layernorm_axis(a, g, b, rank); }, x, gamma, beta);
}
constexpr std::optional<nd_sbp> add_output(const nd_sbp& a, const nd_sbp& b) { return detail::lift(add_axis, a, b); }

}  // namespace autoddl
