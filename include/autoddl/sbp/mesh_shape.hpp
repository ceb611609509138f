#pragma once
// The extents of a device mesh: "2x4" = 2 nodes x 4 devices, axis 0 outermost.
// Links, rank mapping and communicators live in autoddl/mesh/; this is the vocabulary part
// that the notation `[S(0),B]@2x4` and the operators need.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "autoddl/index.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

struct mesh_shape {
  std::array<int, max_mesh_axes> extent{};
  std::int8_t n = 0;

  constexpr mesh_shape() = default;
  constexpr mesh_shape(std::initializer_list<int> l) {
    if (l.size() > std::size_t(max_mesh_axes))
      detail::fail<layout_error>("a mesh has at most " + detail::itos(max_mesh_axes) + " axes, got " +
                                 detail::itos(std::int64_t(l.size())));
    for (int v : l) push_back(v);
  }
  constexpr void push_back(int v) {
    if (n >= max_mesh_axes) detail::fail<layout_error>("a mesh has at most " + detail::itos(max_mesh_axes) + " axes");
    if (v < 1) detail::fail<layout_error>("a mesh axis needs at least 1 device, got " + detail::itos(v));
    at(extent, n++) = v;
  }
  constexpr int size() const { return n; }
  constexpr int operator[](int i) const { return at(extent, i); }
  constexpr const int* begin() const { return extent.data(); }
  constexpr const int* end() const { return extent.data() + n; }
  /// Total number of devices (1 for an empty mesh).
  constexpr std::int64_t devices() const {
    std::int64_t r = 1;
    for (int v : *this) r *= v;
    return r;
  }
  friend constexpr bool operator==(const mesh_shape& a, const mesh_shape& b) {
    if (a.n != b.n) return false;
    for (int i = 0; i < a.n; ++i) if (a[i] != b[i]) return false;
    return true;
  }
};

/// Compile-time mesh: static_mesh<2,4>::value == mesh_shape{2,4}.
template <int... E>
struct static_mesh {
  static_assert(sizeof...(E) >= 1 && sizeof...(E) <= std::size_t(max_mesh_axes),
                "autoddl: a mesh has 1 to 4 axes");
  static_assert(((E >= 1) && ...), "autoddl: every mesh axis needs at least 1 device");
  static constexpr mesh_shape value{E...};
};

constexpr std::string to_string(const mesh_shape& m) {
  std::string r;
  for (int i = 0; i < m.size(); ++i) {
    if (i) r += "x";
    r += detail::itos(m[i]);
  }
  return r;
}

/// The most devices a parsed mesh may have (per axis and in all), so that device counts and split
/// factors stay far from overflow.
inline constexpr std::int64_t max_mesh_devices = std::int64_t(1) << 24;

namespace detail {
constexpr mesh_shape parse_mesh_at(cursor& c) {
  mesh_shape m;
  while (true) {
    std::int64_t v = c.number();
    if (v < 1)
      fail<parse_error>("expected a positive device count " + c.where() + "; write a mesh as 8, 2x4 or 2x2x2");
    if (m.size() == max_mesh_axes) fail<parse_error>("a mesh has at most " + itos(max_mesh_axes) + " axes " + c.where());
    if (v > max_mesh_devices) fail<parse_error>("mesh axis of " + itos(v) + " devices is too large " + c.where());
    if (m.devices() * v > max_mesh_devices)
      fail<parse_error>("a mesh of " + itos(m.devices() * v) + " devices is too large " + c.where() + "; at most " +
                        itos(max_mesh_devices) + " devices in all");
    m.push_back(int(v));
    c.skip_space();
    if (c.peek() == 'x' || c.peek() == 'X') { ++c.i; continue; }
    break;
  }
  return m;
}
}  // namespace detail

/// Parses "8", "2x4", "2x2x2". Throws parse_error naming the position otherwise.
constexpr mesh_shape parse_mesh(std::string_view s) {
  detail::cursor c{s};
  mesh_shape m = detail::parse_mesh_at(c);
  c.skip_space();
  if (!c.done()) detail::fail<parse_error>("unexpected text after a mesh " + c.where() + "; write a mesh as 8, 2x4 or 2x2x2");
  return m;
}

}  // namespace autoddl
