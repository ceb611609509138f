#pragma once
// The per-axis signature rules that typed layers check at compile time.
//   matmul Y = X W, X [..., k], W [k, n], on one mesh axis (OneFlow's matmul SBP table):
//     X S(i<last) W B    -> Y S(i)        X B    W S(1) -> Y S(last)
//     X S(last)   W S(0) -> Y P           X B    W B    -> Y B
//     X P         W B    -> Y P           X B    W P    -> Y P
#include <optional>

#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl::typed_rules {

/// Y's SBP on one axis, or nullopt when no signature takes (x, w). x_rank is X's tensor rank.
constexpr std::optional<sbp> matmul_axis(sbp x, sbp w, int x_rank) {
  const int k = x_rank - 1;
  if (x.is_broadcast() && w.is_broadcast()) return B;
  if (x.is_split() && x.dim < k && w.is_broadcast()) return x;
  if (x.is_broadcast() && w.is_split() && w.dim == 1) return S(k);
  if (x.is_split() && x.dim == k && w.is_split() && w.dim == 0) return P;
  if (x.is_partial() && w.is_broadcast()) return P;
  if (x.is_broadcast() && w.is_partial()) return P;
  return std::nullopt;
}

/// Y's nd-SBP, or nullopt when some axis has no signature.
constexpr std::optional<nd_sbp> matmul_output(const nd_sbp& x, const nd_sbp& w, int x_rank) {
  if (x.size() != w.size()) return std::nullopt;
  nd_sbp y;
  for (int i = 0; i < x.size(); ++i) {
    auto v = matmul_axis(x[i], w[i], x_rank);
    if (!v) return std::nullopt;
    y.push_back(*v);
  }
  return y;
}

/// The W layout closest to w (same entry where it works) that makes matmul(x, W) valid: the fix
/// a compile error proposes. Every X entry has some partner, so this always exists.
constexpr nd_sbp matmul_weight_fix(const nd_sbp& x, const nd_sbp& w, int x_rank) {
  nd_sbp r;
  for (int i = 0; i < x.size(); ++i) {
    if (matmul_axis(x[i], w[i], x_rank)) r.push_back(w[i]);
    else if (x[i].is_split() && x[i].dim == x_rank - 1) r.push_back(S(0));
    else r.push_back(B);
  }
  return r;
}

/// The bias layout that matches Y on each axis: S(0) where Y splits its last dim, P where Y is
/// partial (one device holds the bias), B elsewhere. y_rank is Y's tensor rank.
constexpr nd_sbp bias_layout(const nd_sbp& y, int y_rank) {
  nd_sbp b;
  for (sbp v : y) {
    if (v.is_split() && v.dim == y_rank - 1) b.push_back(S(0));
    else if (v.is_partial()) b.push_back(P);
    else b.push_back(B);
  }
  return b;
}

/// A nonlinear op keeps S and B and never takes P; the fix all-reduces the P axes.
constexpr nd_sbp without_partial(const nd_sbp& x) {
  nd_sbp r = x;
  for (int i = 0; i < r.size(); ++i)
    if (r[i].is_partial()) r[i] = B;
  return r;
}

}  // namespace autoddl::typed_rules
