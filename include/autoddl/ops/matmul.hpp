#pragma once
// Per-mesh-axis signature rules of the GEMM family: matmul, linear (matmul + bias) and batched
// matmul. Sources: the OneFlow docs' SBP signature table for matmul (and its 2D SBP section),
// Megatron-LM (Shoeybi et al. 2019) column- and row-parallel linear layers.
#include <optional>

#include "autoddl/ops/detail/lift.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

/// One mesh axis of Y = X W, X [..., k] of rank x_rank, W [k, n] (or [n, k] when transpose_w):
///   X S(d) W B    -> Y S(d)         d < x_rank-1: rows split (data parallel)
///   X B    W S(n) -> Y S(x_rank-1)  columns split (Megatron column parallel)
///   X S(k) W S(k) -> Y P            contraction split: partial sums (row parallel)
///   X B W B -> Y B;  X P W B -> Y P;  X B W P -> Y P   (linear in one side at a time)
/// Example: matmul_axis(S(1), S(0), 2) == P; matmul_axis(P, P, 2) == nullopt.
constexpr std::optional<sbp> matmul_axis(sbp x, sbp w, int x_rank, bool transpose_w = false) {
  const int k_w = transpose_w ? 1 : 0, n_w = 1 - k_w, last = x_rank - 1;
  if (x.is_split() && x.dim < last && w.is_broadcast()) return x;
  if (x.is_broadcast() && w.is_split() && w.dim == n_w) return S(last);
  if (x.is_split() && x.dim == last && w.is_split() && w.dim == k_w) return P;
  if (x.is_broadcast() && w.is_broadcast()) return B;
  if (x.is_partial() && w.is_broadcast()) return P;
  if (x.is_broadcast() && w.is_partial()) return P;
  return std::nullopt;
}

/// The bias's SBP on an axis where the matmul output is `y`: B when Y is B or row-split, S(0)
/// when Y is column-split, P when Y is P (each device adds its part of the bias).
constexpr sbp bias_for(sbp y, int y_rank) {
  if (y.is_partial()) return P;
  if (y.is_split() && y.dim == y_rank - 1) return S(0);
  return B;
}

/// One mesh axis of Y = X W + b: matmul_axis, and b as bias_for(Y).
/// Example: linear_axis(B, S(1), S(0), 2) == S(1); linear_axis(S(1), S(0), B, 2) == nullopt.
constexpr std::optional<sbp> linear_axis(sbp x, sbp w, sbp b, int x_rank, bool transpose_w = false) {
  std::optional<sbp> y = matmul_axis(x, w, x_rank, transpose_w);
  if (!y || !(b == bias_for(*y, x_rank))) return std::nullopt;
  return y;
}

/// One mesh axis of Y = A B, A [..., m, k], B [..., k, n], both of rank r >= 3:
///   A S(d) B S(d) -> Y S(d)   d < r-2 (batch dims)
///   A S(r-2) B B  -> Y S(r-2) ;  A B B S(r-1) -> Y S(r-1) ;  A S(r-1) B S(r-2) -> Y P
///   A B B B -> Y B;  A P B B -> Y P;  A B B P -> Y P
/// Example: batched_matmul_axis(S(0), S(0), 3) == S(0).
constexpr std::optional<sbp> batched_matmul_axis(sbp a, sbp b, int rank) {
  if (a.is_split() && b.is_split() && a.dim == b.dim && a.dim < rank - 2) return a;
  if (a.is_split() && a.dim == rank - 2 && b.is_broadcast()) return a;
  if (a.is_broadcast() && b.is_split() && b.dim == rank - 1) return b;
  if (a.is_split() && a.dim == rank - 1 && b.is_split() && b.dim == rank - 2) return P;
  if (a.is_broadcast() && b.is_broadcast()) return B;
  if (a.is_partial() && b.is_broadcast()) return P;
  if (a.is_broadcast() && b.is_partial()) return P;
  return std::nullopt;
}

/// n-D forms: the per-axis rules side by side.
/// Example: matmul_output([S(0),B], [B,S(1)], 2) == [S(0),S(1)].
constexpr std::optional<nd_sbp> matmul_output(const nd_sbp& x, const nd_sbp& w, int x_rank, bool transpose_w = false) {
  return detail::lift([&](sbp a, sbp b) { return matmul_axis(a, b, x_rank, transpose_w); }, x, w);
}
constexpr std::optional<nd_sbp> linear_output(const nd_sbp& x, const nd_sbp& w, const nd_sbp& b, int x_rank,
                                              bool transpose_w = false) {
  return detail::lift([&](sbp a, sbp c, sbp d) { return linear_axis(a, c, d, x_rank, transpose_w); }, x, w, b);
}
constexpr std::optional<nd_sbp> batched_matmul_output(const nd_sbp& a, const nd_sbp& b, int rank) {
  return detail::lift([&](sbp u, sbp v) { return batched_matmul_axis(u, v, rank); }, a, b);
}

}  // namespace autoddl
