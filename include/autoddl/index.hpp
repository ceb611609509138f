#pragma once
// Element access and sizes by a signed index. autoddl counts ops, parameters, candidates and mesh
// axes with int (negative values mean "none", as in tensor_ref::op), while the standard
// containers index and size with std::size_t: the conversion is written once, here.
//   at(g.ops, i).name    ==  g.ops[std::size_t(i)].name
//   resize(v, nops)      ==  v.resize(std::size_t(nops))
//   assign(v, nops, 0)   ==  v.assign(std::size_t(nops), 0)
#include <concepts>
#include <cstddef>

namespace autoddl {

/// v[i] for a signed or unsigned integer index. @pre 0 <= i < size of v
/// Takes lvalues only, so a reference into a temporary cannot escape.
template <class Container, std::integral I>
constexpr decltype(auto) at(Container& v, I i) {
  return v[static_cast<std::size_t>(i)];
}

/// v[i] read through v.data(), never checked, not even by libstdc++'s assertions (which check
/// at() in the meson build): for the innermost reads of a structure that validated its indices
/// once, where it was built (choice_problem::finalize). The checks of at() in choice_problem's
/// accessors measured 11 % of planning GPT-3 on 16x8x8. @pre 0 <= i < size of v
template <class Container, std::integral I>
constexpr decltype(auto) at_unchecked(Container& v, I i) {
  return v.data()[static_cast<std::size_t>(i)];
}

/// v.resize(n) for a signed or unsigned count. @pre n >= 0
template <class Container, std::integral I>
constexpr void resize(Container& v, I n) {
  v.resize(static_cast<std::size_t>(n));
}

/// v.assign(n, x): n copies of x, for a signed or unsigned count. @pre n >= 0
template <class Container, std::integral I, class T>
constexpr void assign(Container& v, I n, const T& x) {
  v.assign(static_cast<std::size_t>(n), x);
}

}  // namespace autoddl
