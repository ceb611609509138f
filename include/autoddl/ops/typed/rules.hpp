#pragma once
// What typed layers add to the operators' signature rules (autoddl/ops/): the fix a compile
// error proposes and the layouts that follow from a result. The rules themselves are the ops'
// constexpr functions (matmul_axis, matmul_output, ...), shared with the runtime planner.
#include <optional>

#include "autoddl/ops/matmul.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl::typed_rules {

/// The W layout closest to w (same entry where it works) that makes matmul(x, W) valid: the fix
/// a compile error proposes. Every X entry has some partner, so this always exists.
constexpr nd_sbp matmul_weight_fix(const nd_sbp& x, const nd_sbp& w, int x_rank) {
  nd_sbp r;
  for (int i = 0; i < x.size(); ++i) {
    if (autoddl::matmul_axis(x[i], w[i], x_rank)) r.push_back(w[i]);
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
