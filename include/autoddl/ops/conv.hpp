#pragma once
// Per-mesh-axis signature rules of conv2d and max-pool (NCHW). Batch and channel splits are
// exact; spatial splits need halo exchange unless every output pixel reads only its own input
// pixel, so they are refused except for a 1x1, stride-1, unpadded convolution.
#include <optional>

#include "autoddl/ops/detail/lift.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

/// Whether a window op reads only the input pixel under each output pixel, so that an H or W
/// split is exact: kernel 1, stride 1, padding 0.
constexpr bool pointwise_window(int kernel, int stride, int padding) {
  return kernel == 1 && stride == 1 && padding == 0;
}

/// One mesh axis of Y = conv2d(X, W), X [N, C, H, W], W [O, C, k, k]:
///   X S(0) W B    -> Y S(0)   batch split (data parallel)
///   X B    W S(0) -> Y S(1)   out-channel split
///   X S(1) W S(1) -> Y P      in-channel split: partial sums
///   X S(2|3) W B  -> Y S(2|3) only when pointwise_window
///   X B W B -> Y B;  X P W B -> Y P;  X B W P -> Y P
/// Example: conv2d_axis(S(1), S(1), false) == P; conv2d_axis(S(2), B, false) == nullopt.
constexpr std::optional<sbp> conv2d_axis(sbp x, sbp w, bool pointwise) {
  if (x.is_split() && x.dim == 0 && w.is_broadcast()) return x;
  if (x.is_broadcast() && w.is_split() && w.dim == 0) return S(1);
  if (x.is_split() && x.dim == 1 && w.is_split() && w.dim == 1) return P;
  if (x.is_split() && x.dim >= 2 && w.is_broadcast() && pointwise) return x;
  if (x.is_broadcast() && w.is_broadcast()) return B;
  if (x.is_partial() && w.is_broadcast()) return P;
  if (x.is_broadcast() && w.is_partial()) return P;
  return std::nullopt;
}

/// The conv bias [O] on an axis where Y is `y`: S(0) when channels are split, P when Y is P, else B.
constexpr sbp conv_bias_for(sbp y) {
  if (y.is_partial()) return P;
  if (y.is_split() && y.dim == 1) return S(0);
  return B;
}

/// One mesh axis of conv2d with bias b [O]. Example: conv2d_bias_axis(B, S(0), S(0), false) == S(1).
constexpr std::optional<sbp> conv2d_bias_axis(sbp x, sbp w, sbp b, bool pointwise) {
  std::optional<sbp> y = conv2d_axis(x, w, pointwise);
  if (!y || !(b == conv_bias_for(*y))) return std::nullopt;
  return y;
}

/// One mesh axis of max-pool: batch and channel splits pass through, B stays B; spatial splits
/// only for a pointwise window; nonlinear, so never P.
/// Example: max_pool_axis(S(1), false) == S(1); max_pool_axis(P, false) == nullopt.
constexpr std::optional<sbp> max_pool_axis(sbp x, bool pointwise) {
  if (x.is_broadcast()) return B;
  if (x.is_split() && (x.dim < 2 || pointwise)) return x;
  return std::nullopt;
}

constexpr std::optional<nd_sbp> conv2d_output(const nd_sbp& x, const nd_sbp& w, bool pointwise = false) {
  return detail::lift([&](sbp a, sbp b) { return conv2d_axis(a, b, pointwise); }, x, w);
}
constexpr std::optional<nd_sbp> conv2d_output(const nd_sbp& x, const nd_sbp& w, const nd_sbp& b, bool pointwise) {
  return detail::lift([&](sbp u, sbp v, sbp c) { return conv2d_bias_axis(u, v, c, pointwise); }, x, w, b);
}

}  // namespace autoddl
