#pragma once
// Typed layers over dtensor: the layout of every result is computed by the compiler from the
// signature rules, and a layout no signature takes is a compile error that names the op, the
// layouts and the boxing to insert.
//
//   dtensor<float, "[S(0),B]@2x4", static_shape<128, 64>> x;
//   dtensor<float, "[B,S(1)]@2x4", static_shape<64, 256>> w;
//   auto y = matmul(x, w);        // dtensor<float, "[S(0),S(1)]@2x4", static_shape<128, 256>>
//   auto z = relu(matmul(x2, w2)); // error if the product is P: "to<"[S(0),B]">(x) (all-reduce)"
#include <type_traits>

#include "autoddl/ops/typed/rules.hpp"
#include "autoddl/sbp/dtensor.hpp"

namespace autoddl {

namespace detail {

template <class Shape>
constexpr int rank_of() { return Shape::value.rank(); }

/// static_shape of Y = X W from static shapes (dyn stays dyn).
template <class SX, class SW, std::size_t... I>
constexpr auto matmul_shape(std::index_sequence<I...>) {
  return static_shape<SX::value[int(I)]..., SW::value[1]>{};
}

constexpr bool dims_clash(std::int64_t a, std::int64_t b) { return a != dyn && b != dyn && a != b; }

}  // namespace detail

/// Y = X W, X [..., k] (rank >= 2), W [k, n]. The result's layout follows the matmul rules.
template <DTensor X, DTensor W>
constexpr auto matmul(const X& x, const W& w) {
  using tx = std::remove_cvref_t<X>;
  using tw = std::remove_cvref_t<W>;
  using sx = typename tx::shape_type;
  using sw = typename tw::shape_type;
  constexpr int xr = detail::rank_of<sx>();
  constexpr layout lx = tx::static_layout, lw = tw::static_layout;
  if constexpr (xr < 2 || detail::rank_of<sw>() != 2 || detail::dims_clash(sx::value[xr - 1], sw::value[0])) {
    return detail::shape_mismatch<detail::text("matmul"), detail::text(to_string(sx::value)),
                                  detail::text(to_string(sw::value))>{};
  } else if constexpr (lx.sbp.size() != lw.sbp.size()) {
    return detail::rank_mismatch<detail::text("matmul"), detail::text(to_string(lx)), detail::text(to_string(lw))>{};
  } else if constexpr (lx.has_mesh() && lw.has_mesh() && !(lx.mesh == lw.mesh)) {
    return detail::mesh_mismatch<detail::text("matmul"), detail::text(to_string(lx)), detail::text(to_string(lw))>{};
  } else if constexpr (!matmul_output(lx.sbp, lw.sbp, xr)) {
    constexpr nd_sbp fix = typed_rules::matmul_weight_fix(lx.sbp, lw.sbp, xr);
    return detail::no_signature_for_layouts<detail::text("matmul"), detail::text("X" + to_string(lx)),
                                            detail::text("W" + to_string(lw)),
                                            detail::text("to<\"" + to_string(fix) + "\">(w)")>{};
  } else {
    constexpr nd_sbp y = *matmul_output(lx.sbp, lw.sbp, xr);
    using sy = decltype(detail::matmul_shape<sx, sw>(std::make_index_sequence<std::size_t(xr - 1)>{}));
    if (!lx.has_mesh() && !(x.mesh() == w.mesh()))
      detail::fail<layout_error>("matmul operands live on meshes " + to_string(x.mesh()) + " and " +
                                 to_string(w.mesh()) + "; both must be on the same mesh");
    if (x.shape()[xr - 1] != w.shape()[0])
      detail::fail<layout_error>("matmul needs X[..,k] and W[k,n], got X" + to_string(x.shape()) + " and W" +
                                 to_string(w.shape()));
    tensor_shape ys;
    for (int d = 0; d < xr - 1; ++d) ys.push_back(x.shape()[d]);
    ys.push_back(w.shape()[1]);
    return dtensor<typename tx::value_type, layout_arg(layout{y, lx.mesh}), sy>(ys, x.mesh());
  }
}

/// Y = X W + b with b [n] laid out as typed_rules::bias_layout(Y) (S(0) beside a split last
/// dim, P beside a partial Y, else B).
template <DTensor X, DTensor W, DTensor Bias>
constexpr auto linear(const X& x, const W& w, const Bias& b) {
  auto y = matmul(x, w);
  using ty = decltype(y);
  if constexpr (!DTensor<ty>) {
    return y;  // matmul's error already names the problem
  } else {
    using tb = std::remove_cvref_t<Bias>;
    constexpr nd_sbp want = typed_rules::bias_layout(ty::sbp, ty::shape_type::value.rank());
    if constexpr (!(tb::sbp == want)) {
      return detail::no_signature_for_layouts<detail::text("linear bias"), detail::text("Y" + to_string(ty::static_layout)),
                                              detail::text("b" + to_string(tb::static_layout)),
                                              detail::text("to<\"" + to_string(want) + "\">(b)")>{};
    } else {
      if (!(b.shape() == tensor_shape{y.shape()[y.shape().rank() - 1]}))
        detail::fail<layout_error>("linear bias must have shape [n] = [" + detail::itos(y.shape()[y.shape().rank() - 1]) +
                                   "], got " + to_string(b.shape()));
      return y;
    }
  }
}

namespace detail {
template <text Op, DTensor X>
constexpr auto nonlinear(const X& x) {
  using tx = std::remove_cvref_t<X>;
  if constexpr (tx::sbp.any_partial()) {
    return nonlinear_op_given_partial_sum<Op, text(to_string(tx::static_layout)),
                                          text("to<\"" + to_string(typed_rules::without_partial(tx::sbp)) +
                                               "\">(x) (all-reduce)")>{};
  } else {
    return x;  // same layout, same shape
  }
}
}  // namespace detail

/// Element-wise nonlinear activations keep S and B and reject P at compile time.
template <DTensor X> constexpr auto relu(const X& x) { return detail::nonlinear<"relu">(x); }
template <DTensor X> constexpr auto gelu(const X& x) { return detail::nonlinear<"gelu">(x); }
/// Softmax over the last dim: that dim may not be split either.
template <DTensor X>
constexpr auto softmax(const X& x) {
  using tx = std::remove_cvref_t<X>;
  constexpr int last = tx::shape_type::value.rank() - 1;
  if constexpr (tx::sbp.splits(last)) {
    return detail::no_signature_for_layouts<detail::text("softmax"), detail::text("X" + to_string(tx::static_layout)),
                                            detail::text("(the normalised last dim is split)"),
                                            detail::text("to<...>(x) with the last dim not split")>{};
  } else {
    return detail::nonlinear<"softmax">(x);
  }
}

/// Residual add: both inputs in one layout (S+S, B+B, P+P); shapes equal.
template <DTensor A, DTensor Bt>
constexpr auto add(const A& a, const Bt& b) {
  using ta = std::remove_cvref_t<A>;
  using tb = std::remove_cvref_t<Bt>;
  if constexpr (!(ta::static_layout.sbp == tb::static_layout.sbp)) {
    return detail::layouts_differ<detail::text("add"), detail::text(to_string(ta::static_layout)),
                                  detail::text(to_string(tb::static_layout)),
                                  detail::text("to<\"" + to_string(ta::static_layout.sbp) + "\">(b)")>{};
  } else {
    if (!(a.shape() == b.shape()))
      detail::fail<layout_error>("add needs equal shapes, got " + to_string(a.shape()) + " and " + to_string(b.shape()));
    if (!(a.mesh() == b.mesh()))
      detail::fail<layout_error>("add operands live on meshes " + to_string(a.mesh()) + " and " + to_string(b.mesh()));
    return a;
  }
}

}  // namespace autoddl
