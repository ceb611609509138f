#pragma once
// A layout: an nd-SBP placed on a mesh, text form "[S(0),B]@2x4". The mesh part may be
// omitted ("[S(0),B]"): the layout then fits any mesh of that rank, fixed at runtime.
//
// Shards are even (uneven shards are refused, not padded): a dim split by axes of sizes n1..nk must be divisible by
// n1*...*nk. check_divisible() enforces it; local_shape() gives each device's shard.
#include <string>
#include <string_view>

#include "autoddl/sbp/mesh_shape.hpp"
#include "autoddl/sbp/nd_sbp.hpp"
#include "autoddl/sbp/shape.hpp"

namespace autoddl {

struct layout {
  nd_sbp sbp;
  mesh_shape mesh;  ///< empty: any mesh of sbp.size() axes

  constexpr bool has_mesh() const { return mesh.size() > 0; }
  friend constexpr bool operator==(const layout&, const layout&) = default;
};

constexpr std::string to_string(const layout& l) {
  std::string r = to_string(l.sbp);
  if (l.has_mesh()) r += "@" + to_string(l.mesh);
  return r;
}

/// The layout must be well formed: one SBP per mesh axis.
constexpr void check_rank(const layout& l) {
  if (l.has_mesh() && l.sbp.size() != l.mesh.size())
    detail::fail<layout_error>("layout " + to_string(l) + " has " + detail::itos(l.sbp.size()) +
                               " SBP entries for a mesh of " + detail::itos(l.mesh.size()) +
                               " axes; give one SBP per mesh axis");
}

/// Parses "[S(0),B]@2x4" or "[S(0),B]". Throws parse_error or layout_error.
constexpr layout parse_layout(std::string_view s) {
  detail::cursor c{s};
  layout l{detail::parse_nd_sbp_at(c), {}};
  if (c.eat('@')) l.mesh = detail::parse_mesh_at(c);
  c.skip_space();
  if (!c.done()) detail::fail<parse_error>("unexpected text after a layout " + c.where() + "; write e.g. [S(0),B]@2x4");
  check_rank(l);
  return l;
}

/// How many ways tensor dim d is split under sbp on mesh (1 when it is not split).
constexpr std::int64_t split_factor(const nd_sbp& sbp, const mesh_shape& mesh, int d) {
  std::int64_t f = 1;
  for (int i = 0; i < sbp.size(); ++i)
    if (sbp[i].is_split() && sbp[i].dim == d) f *= mesh[i];
  return f;
}

/// Whether every split dim of `shape` divides evenly under `l` (dyn dims always do).
constexpr bool divides(const tensor_shape& shape, const layout& l) {
  if (l.sbp.min_tensor_rank() > shape.rank()) return false;
  if (!l.has_mesh()) return true;
  for (int d = 0; d < shape.rank(); ++d) {
    std::int64_t f = split_factor(l.sbp, l.mesh, d);
    if (shape[d] != dyn && f > 1 && shape[d] % f != 0) return false;
  }
  return true;
}

/// One sentence on why `shape` cannot take `l`, or "" when it can.
constexpr std::string divisibility_problem(const tensor_shape& shape, const layout& l) {
  if (divides(shape, l)) return "";
  if (l.sbp.min_tensor_rank() > shape.rank())
    return "layout " + to_string(l) + " splits dim " + detail::itos(l.sbp.min_tensor_rank() - 1) + " of a tensor of shape " +
           to_string(shape) + " that has only " + detail::itos(shape.rank()) + " dims";
  if (!l.has_mesh()) return "";
  for (int d = 0; d < shape.rank(); ++d) {
    std::int64_t f = split_factor(l.sbp, l.mesh, d);
    if (shape[d] != dyn && f > 1 && shape[d] % f != 0)
      return "shape " + to_string(shape) + " does not divide evenly under " + to_string(l) + ": dim " + detail::itos(d) +
             " (" + detail::itos(shape[d]) + ") is split " + detail::itos(f) +
             " ways; choose a size divisible by " + detail::itos(f) + " or a layout that does not split dim " +
             detail::itos(d);
  }
  return "";
}

/// Throws layout_error (or stops compilation in a constant expression) when shards are uneven.
constexpr void check_divisible(const tensor_shape& shape, const layout& l) {
  check_rank(l);
  std::string why = divisibility_problem(shape, l);
  if (!why.empty()) detail::fail<layout_error>(why);
}

/// The shape of each device's shard. Example: [12,64] under [S(0),S(1)]@2x4 -> [6,16].
/// A layout without a mesh that splits a dim has no known shards: layout_error.
constexpr tensor_shape local_shape(const tensor_shape& shape, const layout& l) {
  check_divisible(shape, l);
  if (!l.has_mesh() && l.sbp.min_tensor_rank() > 0)
    detail::fail<layout_error>("layout " + to_string(l) + " splits a dim but names no mesh, so its shards are unknown; "
                               "give its mesh, one size per SBP entry (e.g. [S(0),B]@2x4)");
  tensor_shape r = shape;
  for (int d = 0; d < shape.rank(); ++d)
    if (r[d] != dyn) r[d] /= split_factor(l.sbp, l.mesh, d);
  return r;
}

}  // namespace autoddl
