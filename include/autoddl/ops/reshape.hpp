#pragma once
// How a split moves through a reshape (row-major, same element count).
//
// Rule: S(d) of the input becomes S(e) of the output when the dims before d and the dims before
// e hold the same number of elements (prefix products agree), e being the first such output dim
// of size > 1. Then both shapes read as [prefix, rest] in memory, and cutting dim d (or e) into
// n even chunks cuts `rest` into the same n contiguous chunks, so every device keeps exactly its
// data; nested splits of several axes stay mixed-radix on both sides. Any other split would
// need data movement, and is refused.
//   [8,512,7,7] -> [8,25088]:  S(0) -> S(0), S(1) -> S(1);  S(2) refused
//   [4,16,64]   -> [64,64]:    S(0) -> S(0) (when 64 divides);  S(1) refused
#include <cstdint>
#include <optional>
#include <string>

#include "autoddl/ops/detail/lift.hpp"
#include "autoddl/sbp/nd_sbp.hpp"
#include "autoddl/sbp/shape.hpp"

namespace autoddl {

/// The output dim that input dim d's split lands on, or -1 when the split does not survive.
constexpr int reshape_split_dim(int d, const tensor_shape& from, const tensor_shape& to) {
  if (d < 0 || d >= from.rank() || !from.is_static() || !to.is_static()) return -1;
  std::int64_t prefix = 1;
  for (int i = 0; i < d; ++i) prefix *= from[i];
  std::int64_t p = 1;
  for (int e = 0; e < to.rank(); ++e) {
    if (p == prefix && to[e] > 1) return e;
    if (p > prefix) return -1;
    p *= to[e];
  }
  return -1;
}

/// One mesh axis of Y = reshape(X): B -> B, P -> P (linear), S(d) -> S(reshape_split_dim).
/// Example: reshape_axis(S(1), [8,512,7,7], [8,25088]) == S(1).
constexpr std::optional<sbp> reshape_axis(sbp x, const tensor_shape& from, const tensor_shape& to) {
  if (!x.is_split()) return x;
  int e = reshape_split_dim(x.dim, from, to);
  if (e < 0) return std::nullopt;
  return S(e);
}

constexpr std::optional<nd_sbp> reshape_output(const nd_sbp& x, const tensor_shape& from, const tensor_shape& to) {
  return detail::lift([&](sbp a) { return reshape_axis(a, from, to); }, x);
}

/// One sentence on why `x` cannot pass a reshape from -> to, or "" when it can.
constexpr std::string reshape_problem(const nd_sbp& x, const tensor_shape& from, const tensor_shape& to) {
  for (int i = 0; i < x.size(); ++i) {
    if (!x[i].is_split() || reshape_split_dim(x[i].dim, from, to) >= 0) continue;
    return "reshape " + to_string(from) + " -> " + to_string(to) + " cannot keep " + to_string(x) + ": the split of dim " +
           detail::itos(x[i].dim) + " on mesh axis " + detail::itos(i) +
           " does not stay a leading split of the output; gather that dim (S -> B) before the reshape";
  }
  return "";
}

}  // namespace autoddl
