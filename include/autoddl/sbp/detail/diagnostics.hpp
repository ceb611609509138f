#pragma once
// Compile-time layout errors. Each is a class template whose arguments are the op, the
// layouts and the fix written in the notation, so the compiler's "In instantiation of ..."
// line names them, e.g.
//   In instantiation of 'struct autoddl::detail::nonlinear_op_given_partial_sum<
//       text{"relu"}, text{"[P,B]@2x2"}, text{"to<\"[B,B]\">(x) (all-reduce)"}>'
//   error: static assertion failed: autoddl: a nonlinear op cannot take a partial-sum (P) ...
// and the static_assert message states the rule and the fix in one sentence.
#include "autoddl/text.hpp"

namespace autoddl::detail {

struct nothing {};

template <text Op, text Input, text Fix>
struct nonlinear_op_given_partial_sum {
  static_assert(never<Op>,
                "autoddl: a nonlinear op cannot take a partial-sum (P) input; box it first with the fix named in "
                "the template arguments (to<...>(x): P->B all-reduce or P->S(d) reduce-scatter)");
};

template <text Op, text Left, text Right, text Fix>
struct no_signature_for_layouts {
  static_assert(never<Op>,
                "autoddl: no signature of this op accepts these input layouts; insert the boxing named in the "
                "template arguments (to<...>(x)) so the layouts match a valid signature");
};

template <text Op, text Left, text Right, text Fix>
struct layouts_differ {
  static_assert(never<Op>,
                "autoddl: an element-wise op needs both inputs in the same layout; box one of them with the fix "
                "named in the template arguments");
};

template <text Op, text Left, text Right>
struct mesh_mismatch {
  static_assert(never<Op>, "autoddl: the tensors live on different meshes; both layouts must name the same mesh");
};

template <text Op, text Left, text Right>
struct rank_mismatch {
  static_assert(never<Op>,
                "autoddl: the layouts have different numbers of mesh axes; give one SBP per mesh axis");
};

template <text Op, text Left, text Right>
struct shape_mismatch {
  static_assert(never<Op>, "autoddl: the operand shapes do not fit this op (e.g. matmul needs X[..,k] and W[k,n])");
};

template <text From, text To>
struct implicit_layout_conversion {
  static_assert(never<From>,
                "autoddl: a layout conversion is never implicit; write to<\"[...]\">(x) with the target layout to "
                "box the tensor");
};

template <text Shape, text Layout>
struct uneven_split {
  static_assert(never<Shape>,
                "autoddl: a split dim of this static shape is not divisible by the mesh axes that split it; "
                "choose a divisible size or a layout that does not split that dim");
};

}  // namespace autoddl::detail
