#pragma once
// Walking the kinds of an enum numbered 0 .. Count - 1 whose facts live in traits specialised per
// kind (the op tables: ops/op.hpp, ops/shapes.hpp, ops/signatures.hpp, ops/work.hpp,
// runtime/op_kernels.hpp). Both are generic over the enum so that a test can check a table of its
// own kinds with the checks the library runs on op_kind.
#include <cstddef>
#include <type_traits>
#include <utility>

namespace autoddl::detail {

template <class Kind, Kind K>
using kind_constant = std::integral_constant<Kind, K>;

/// check(kind_constant<Kind, K>{}) && ... for every kind K: a fold, one instantiation per kind.
/// Example: every_kind<op_kind, op_kind_count>([](auto k) { return check<op_traits<k.value>>(); })
template <class Kind, std::size_t Count, class Check>
constexpr bool every_kind(Check check) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return (check(kind_constant<Kind, Kind(I)>{}) && ...);
  }(std::make_index_sequence<Count>{});
}

/// f(kind_constant<Kind, k>{}) for a kind known at run time, through a jump table (one entry per
/// kind, built at compile time); every entry must return the same type.
/// @pre std::size_t(k) < Count
template <class Kind, std::size_t Count, class F>
constexpr decltype(auto) visit_kind(Kind k, F&& f) {
  using result = decltype(f(kind_constant<Kind, Kind(0)>{}));
  return [&]<std::size_t... I>(std::index_sequence<I...>) -> result {
    constexpr result (*table[])(F&) = {[](F& g) -> result { return g(kind_constant<Kind, Kind(I)>{}); }...};
    return table[std::size_t(k)](f);
  }(std::make_index_sequence<Count>{});
}

}  // namespace autoddl::detail
