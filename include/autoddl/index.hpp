#pragma once
// Element access by a signed index. autoddl counts ops, parameters, candidates and mesh axes
// with int (negative values mean "none", as in tensor_ref::op), while the standard containers
// index with std::size_t: at(v, i) is v[i] with the conversion written once, here.
//   at(g.ops, i).name  ==  g.ops[std::size_t(i)].name
#include <concepts>
#include <cstddef>

namespace autoddl {

/// v[i] for a signed or unsigned integer index. @pre 0 <= i < size of v
/// Takes lvalues only, so a reference into a temporary cannot escape.
template <class Container, std::integral I>
constexpr decltype(auto) at(Container& v, I i) {
  return v[static_cast<std::size_t>(i)];
}

}  // namespace autoddl
