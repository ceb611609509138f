#pragma once
// nd-SBP: one SBP per mesh axis, axis 0 outermost. Text form "[S(0),B]".
//
// Several axes may split the same tensor dim: then the chunk index is mixed-radix with the
// outer axis most significant, e.g. [S(0),S(0)] on 2x4 gives device (a,b) chunk 4a+b of 8.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "autoddl/index.hpp"
#include "autoddl/sbp/sbp.hpp"

namespace autoddl {

/// The most mesh axes a layout can have.
inline constexpr int max_mesh_axes = 4;

/// Runtime nd-SBP. Structural (usable as a template argument) and constexpr throughout.
struct nd_sbp {
  std::array<sbp, max_mesh_axes> axes{};
  std::int8_t n = 0;

  constexpr nd_sbp() = default;
  constexpr nd_sbp(std::initializer_list<sbp> l) {
    if (l.size() > std::size_t(max_mesh_axes))
      detail::fail<layout_error>("an nd-SBP has at most " + detail::itos(max_mesh_axes) + " mesh axes, got " +
                                 detail::itos(std::int64_t(l.size())));
    for (sbp v : l) at(axes, n++) = v;
  }
  /// All axes set to v. Example: nd_sbp::filled(2, B) == [B,B]
  static constexpr nd_sbp filled(int rank, sbp v) {
    nd_sbp r;
    for (int i = 0; i < rank; ++i) r.push_back(v);
    return r;
  }
  constexpr int size() const { return n; }
  constexpr sbp operator[](int i) const { return at(axes, i); }
  constexpr sbp& operator[](int i) { return at(axes, i); }
  constexpr void push_back(sbp v) {
    if (n >= max_mesh_axes)
      detail::fail<layout_error>("an nd-SBP has at most " + detail::itos(max_mesh_axes) + " mesh axes");
    at(axes, n++) = v;
  }
  constexpr const sbp* begin() const { return axes.data(); }
  constexpr const sbp* end() const { return axes.data() + n; }
  /// Same SBP with axis i replaced: the state after one single-axis boxing step.
  constexpr nd_sbp with(int i, sbp v) const {
    nd_sbp r = *this;
    r[i] = v;
    return r;
  }
  constexpr bool any_partial() const {
    for (sbp v : *this) if (v.is_partial()) return true;
    return false;
  }
  /// True when some axis splits tensor dim d.
  constexpr bool splits(int d) const {
    for (sbp v : *this) if (v.is_split() && v.dim == d) return true;
    return false;
  }
  /// The largest split dim + 1 (0 when nothing is split): the least tensor rank it fits.
  constexpr int min_tensor_rank() const {
    int r = 0;
    for (sbp v : *this) if (v.is_split() && v.dim + 1 > r) r = v.dim + 1;
    return r;
  }
  friend constexpr bool operator==(const nd_sbp& a, const nd_sbp& b) {
    if (a.n != b.n) return false;
    for (int i = 0; i < a.n; ++i) if (!(a[i] == b[i])) return false;
    return true;
  }
};

/// Compile-time nd-SBP built from compile-time SBP values: nd<split<0>, broadcast>::value.
template <StaticSbp... A>
struct nd {
  static_assert(sizeof...(A) <= std::size_t(max_mesh_axes), "autoddl: an nd-SBP has at most 4 mesh axes");
  static constexpr nd_sbp value{A::value...};
  constexpr operator nd_sbp() const { return value; }
};

constexpr std::string to_string(const nd_sbp& v) {
  std::string r = "[";
  for (int i = 0; i < v.size(); ++i) {
    if (i) r += ",";
    r += to_string(v[i]);
  }
  return r + "]";
}

namespace detail {
constexpr nd_sbp parse_nd_sbp_at(cursor& c) {
  if (!c.eat('[')) fail<parse_error>("expected '[' to open an nd-SBP " + c.where() + "; write e.g. [S(0),B]");
  nd_sbp r;
  c.skip_space();
  if (c.eat(']')) fail<parse_error>("an nd-SBP needs at least one entry " + c.where() + "; write e.g. [B]");
  while (true) {
    if (r.size() == max_mesh_axes)
      fail<parse_error>("an nd-SBP has at most " + itos(max_mesh_axes) + " entries " + c.where());
    r.push_back(parse_sbp_at(c));
    if (c.eat(',')) continue;
    if (c.eat(']')) break;
    fail<parse_error>("expected ',' or ']' " + c.where());
  }
  return r;
}
}  // namespace detail

/// Parses "[S(0),B]". Throws parse_error naming the position otherwise.
constexpr nd_sbp parse_nd_sbp(std::string_view s) {
  detail::cursor c{s};
  nd_sbp r = detail::parse_nd_sbp_at(c);
  c.skip_space();
  if (!c.done()) detail::fail<parse_error>("unexpected text after an nd-SBP " + c.where());
  return r;
}

}  // namespace autoddl
