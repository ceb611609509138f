#pragma once
// dtensor<T, Layout, Shape>: a tensor whose distributed layout is part of its type.
//
//   dtensor<float, "[S(0),B]@2x4", static_shape<128, 64>> x;    // rows split over the 2 nodes
//   auto y = to<"[B,B]">(x);                                    // named: all-gathers on axis 0
//
// Layout is written in the notation (parsed at compile time); its mesh may be left out
// ("[S(0),B]") and given at run time. Shape dims may be `dyn`. Divisibility is checked by the
// compiler when mesh and shape are both static, else by the constructor (layout_error).
// A conversion that communicates is never implicit: only to<...>() changes a layout.
// The tensor carries its shape and mesh only (planning and type checks); storage for a shard
// belongs to the runtime.
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "autoddl/sbp/detail/diagnostics.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

/// A layout given as a template argument, written as text: `"[S(0),B]@2x4"`.
struct layout_arg {
  layout value;
  template <std::size_t N>
  consteval layout_arg(const char (&s)[N]) : value(parse_layout(std::string_view(s, N - 1))) {}  // NOLINT
  consteval layout_arg(layout l) : value(l) { check_rank(l); }                                  // NOLINT
  friend constexpr bool operator==(const layout_arg&, const layout_arg&) = default;
};

template <class T>
struct is_static_shape : std::false_type {};
template <std::int64_t... E>
struct is_static_shape<static_shape<E...>> : std::true_type {};

/// A compile-time shape type (static_shape<...>, whose dims may be dyn).
template <class S>
concept ShapeType = is_static_shape<S>::value;

template <class T, layout_arg L, ShapeType Shape>
class dtensor;

namespace detail {
template <layout_arg L, class Shape>
constexpr bool statically_uneven() {
  return L.value.has_mesh() && !divides(Shape::value, L.value);
}
}  // namespace detail

template <class T, layout_arg L, ShapeType Shape>
class dtensor {
  // A fully static shape and mesh are checked now: the message names both.
  static constexpr bool uneven = detail::statically_uneven<L, Shape>();
  [[no_unique_address]] std::conditional_t<uneven,
      detail::uneven_split<detail::text(to_string(Shape::value)), detail::text(to_string(L.value))>,
      detail::nothing> check_{};

 public:
  using value_type = T;
  using shape_type = Shape;
  static constexpr layout static_layout = L.value;
  static constexpr nd_sbp sbp = L.value.sbp;
  static constexpr bool has_static_mesh = L.value.has_mesh();

  /// A tensor of the static shape on the static mesh. @pre both are fully static.
  constexpr dtensor() requires(Shape::value.is_static() && has_static_mesh)
      : shape_(Shape::value), mesh_(L.value.mesh) {}

  /// @param shape the global shape; its static dims must match Shape.
  /// @param mesh the mesh, when the layout names none (else it must equal the layout's).
  /// @throws layout_error when a split dim does not divide, or shape/mesh disagree with the type.
  constexpr explicit dtensor(tensor_shape shape, mesh_shape mesh = L.value.mesh) : shape_(shape), mesh_(mesh) {
    const tensor_shape& s = Shape::value;
    if (shape.rank() != s.rank())
      detail::fail<layout_error>("shape " + to_string(shape) + " has " + detail::itos(shape.rank()) +
                                 " dims but the tensor type has " + detail::itos(s.rank()) + " " + to_string(s));
    for (int d = 0; d < s.rank(); ++d)
      if (s[d] != dyn && s[d] != shape[d])
        detail::fail<layout_error>("shape " + to_string(shape) + " differs from the static shape " + to_string(s) +
                                   " of the tensor type in dim " + detail::itos(d));
    if (has_static_mesh && !(mesh == L.value.mesh))
      detail::fail<layout_error>("mesh " + to_string(mesh) + " differs from the mesh of the layout " +
                                 to_string(L.value));
    check_divisible(shape, layout{sbp, mesh});
  }

  constexpr const tensor_shape& shape() const { return shape_; }
  constexpr const mesh_shape& mesh() const { return mesh_; }
  constexpr layout placement() const { return layout{sbp, mesh_}; }
  /// The shard each device holds. Example: [128,64] under [S(0),B]@2x4 -> [64,64].
  constexpr tensor_shape local_shape() const { return autoddl::local_shape(shape_, placement()); }

  /// Converting between layouts communicates (or at least changes what each device holds), so
  /// it is never implicit: the message names the call to write instead.
  template <layout_arg L2, ShapeType S2>
    requires(!(L2 == L))
  dtensor(const dtensor<T, L2, S2>&) {  // NOLINT: exists only to explain the error
    [[maybe_unused]] detail::implicit_layout_conversion<detail::text(to_string(L2.value)),
                                                        detail::text(to_string(L.value))> error;
  }

 private:
  tensor_shape shape_;
  mesh_shape mesh_;
};

template <class X>
struct is_dtensor : std::false_type {};
template <class T, layout_arg L, class S>
struct is_dtensor<dtensor<T, L, S>> : std::true_type {};

/// Any typed distributed tensor.
template <class X>
concept DTensor = is_dtensor<std::remove_cvref_t<X>>::value;

/// The boxing that to<To>(x) runs, as a layout-level record (what the executor later runs and
/// the cost model prices): the source and target layouts on the tensor's mesh.
struct boxing_plan {
  layout from;
  layout to;
  tensor_shape shape;
};

/// The named conversion: the result has layout To (same mesh and shape). The step list is
/// priced and run by cost/ and runtime/; here the result's type records the new layout.
/// Example: to<"[B,B]">(dtensor<float, "[S(0),B]@2x4", static_shape<128, 64>>{}).
template <layout_arg To, DTensor X>
constexpr auto to(const X& x) {
  using tensor = std::remove_cvref_t<X>;
  constexpr layout from = tensor::static_layout;
  constexpr layout target = To.value;
  if constexpr (target.sbp.size() != from.sbp.size()) {
    return detail::rank_mismatch<detail::text("to"), detail::text(to_string(from)), detail::text(to_string(target))>{};
  } else if constexpr (target.has_mesh() && from.has_mesh() && !(target.mesh == from.mesh)) {
    return detail::mesh_mismatch<detail::text("to"), detail::text(to_string(from)), detail::text(to_string(target))>{};
  } else {
    constexpr layout full{target.sbp, from.mesh};
    return dtensor<typename tensor::value_type, layout_arg(full), typename tensor::shape_type>(x.shape(), x.mesh());
  }
}

/// The boxing a to<To>(x) call stands for, for pricing (cost/boxing_path.hpp) and running.
template <layout_arg To, DTensor X>
constexpr boxing_plan boxing_of(const X& x) {
  return {x.placement(), layout{To.value.sbp, x.mesh()}, x.shape()};
}

}  // namespace autoddl
