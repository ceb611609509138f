#pragma once
// Per-mesh-axis signature rules of the rotary position embedding (RoFormer, Su et al. 2021;
// LLaMA's form: within each head of d dims, element i is rotated with element i + d/2 by the
// angle pos * theta^(-2i/d)) on q or k [batch, seq, heads * d]:
//   S(0) -> S(0)   batch split
//   S(1) -> S(1)   sequence split: each device rotates by the global positions it holds
//   S(2) -> S(2)   heads split, whole heads per device (a rotated pair never splits; n-D
//                  condition: the ways the hidden dim is split divide the heads, ops/signatures.hpp)
//   B -> B,  P -> P   a rotation is linear in its input, so partial sums rotate alone
// Example: rotary_axis(S(1)) == S(1); rotary_axis(P) == P.
#include <optional>

#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

constexpr std::optional<sbp> rotary_axis(sbp x) { return x; }

}  // namespace autoddl
