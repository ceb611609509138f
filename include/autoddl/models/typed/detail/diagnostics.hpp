#pragma once
// Compile-time errors of typed models, in the style of autoddl/sbp/detail/diagnostics.hpp: a
// class template whose text arguments name the layer(s), the layouts and the fix, and one
// static_assert sentence with the rule. g++ prints, e.g.
//   In instantiation of 'struct autoddl::detail::pinned_layouts_need_boxing<text{"h0.attn.proj"},
//       text{"h0.add"}, text{"[S(0),P]@2x4"}, text{"[S(0),B]@2x4"}, text{"box<\"[S(0),B]\"> (all-reduce axis 1)"}>'
#include "autoddl/text.hpp"

namespace autoddl::detail {

template <text Layer, text Pinned, text Fix>
struct pinned_layouts_match_no_signature {
  static_assert(never<Layer>,
                "autoddl: no signature of this layer accepts its pinned layouts for its static shapes on the mesh; "
                "pin the layouts named as the fix in the template arguments");
};

template <text Layer, text Shapes, text Fix>
struct layer_has_no_signature {
  static_assert(never<Layer>,
                "autoddl: no signature of this layer divides its static shapes evenly on the mesh; choose sizes "
                "divisible by the mesh axes, as the template arguments say");
};

template <text Producer, text Consumer, text From, text To, text Fix>
struct pinned_layouts_need_boxing {
  static_assert(never<Producer>,
                "autoddl: pinned neighbours disagree on the layout of the tensor between them, and a boxing is never "
                "implicit; insert the box<...> named in the template arguments before the consumer");
};

}  // namespace autoddl::detail
