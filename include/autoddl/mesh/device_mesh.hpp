#pragma once
// A device mesh: extents (`2x4`) plus one link per axis, and the rank <-> coordinate mapping.
// Ranks are row-major with axis 0 outermost: on 2x4, rank = c0 * 4 + c1, so ranks 0..3 are
// node 0 and the axis-1 group through rank 5 is {4,5,6,7}, the axis-0 group is {1,5}.
// The MPI communicators (backend/mpi) split MPI_COMM_WORLD with exactly this mapping.
#include <array>
#include <cstdint>
#include <string>

#include "autoddl/error.hpp"
#include "autoddl/index.hpp"
#include "autoddl/mesh/link.hpp"
#include "autoddl/sbp/mesh_shape.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// Coordinates of one device, one per mesh axis.
struct mesh_coord {
  std::array<int, max_mesh_axes> c{};
  int n = 0;
  constexpr int size() const { return n; }
  constexpr int operator[](int i) const { return at(c, i); }
  constexpr int& operator[](int i) { return at(c, i); }
  friend constexpr bool operator==(const mesh_coord& a, const mesh_coord& b) {
    if (a.n != b.n) return false;
    for (int i = 0; i < a.n; ++i) if (a[i] != b[i]) return false;
    return true;
  }
};

/// Largest axis group rank_group holds; larger axes are rejected by axis_group().
inline constexpr int max_group_size = 1 << 12;

/// The ranks of one axis group, in axis order: group[k] has coordinate k on that axis.
struct rank_group {
  std::array<int, max_group_size> r{};
  int n = 0;
  constexpr int size() const { return n; }
  constexpr int operator[](int i) const { return at(r, i); }
  constexpr const int* begin() const { return r.data(); }
  constexpr const int* end() const { return r.data() + n; }
};

struct device_mesh {
  mesh_shape shape;
  std::array<link, max_mesh_axes> links{};

  constexpr int size() const { return shape.size(); }
  constexpr std::int64_t devices() const { return shape.devices(); }
  constexpr const link& axis_link(int axis) const { return at(links, check_axis(axis)); }

  /// @pre 0 <= axis < size(); throws layout_error otherwise.
  constexpr int check_axis(int axis) const {
    if (axis < 0 || axis >= shape.size())
      detail::fail<layout_error>("mesh axis " + detail::itos(axis) + " does not exist on mesh " + to_string(shape) +
                                 "; axes are 0.." + detail::itos(shape.size() - 1));
    return axis;
  }
  /// @pre 0 <= rank < devices(); throws layout_error otherwise.
  constexpr void check_rank(std::int64_t rank) const {
    if (rank < 0 || rank >= devices())
      detail::fail<layout_error>("rank " + detail::itos(rank) + " is not on mesh " + to_string(shape) + "; ranks are 0.." +
                                 detail::itos(devices() - 1));
  }
  /// coords(5) on 2x4 == {1,1}.
  constexpr mesh_coord coords(std::int64_t rank) const {
    check_rank(rank);
    mesh_coord c;
    c.n = shape.size();
    for (int i = shape.size() - 1; i >= 0; --i) {
      c[i] = int(rank % shape[i]);
      rank /= shape[i];
    }
    return c;
  }
  /// rank({1,1}) on 2x4 == 5: ((c0*n1)+c1)*n2+...
  constexpr std::int64_t rank(const mesh_coord& c) const {
    if (c.size() != shape.size())
      detail::fail<layout_error>("a coordinate on mesh " + to_string(shape) + " needs " + detail::itos(shape.size()) +
                                 " entries, got " + detail::itos(c.size()));
    std::int64_t r = 0;
    for (int i = 0; i < shape.size(); ++i) {
      if (c[i] < 0 || c[i] >= shape[i])
        detail::fail<layout_error>("coordinate " + detail::itos(c[i]) + " is outside axis " + detail::itos(i) +
                                   " of mesh " + to_string(shape));
      r = r * shape[i] + c[i];
    }
    return r;
  }
  /// The ranks along `axis` through `rank`: axis_group(5, 0) on 2x4 == {1,5}.
  constexpr rank_group axis_group(std::int64_t through, int axis) const {
    check_axis(axis);
    if (shape[axis] > max_group_size)
      detail::fail<layout_error>("mesh axis " + detail::itos(axis) + " of " + detail::itos(shape[axis]) +
                                 " devices exceeds max_group_size");
    mesh_coord c = coords(through);
    rank_group g;
    g.n = shape[axis];
    for (int k = 0; k < shape[axis]; ++k) {
      c[axis] = k;
      at(g.r, k) = int(rank(c));
    }
    return g;
  }
  /// Index of the group along `axis` that holds `rank`: the row-major index of its coordinates
  /// with `axis` left out (the colour MPI_Comm_split uses).
  constexpr std::int64_t group_index(std::int64_t of_rank, int axis) const {
    check_axis(axis);
    mesh_coord c = coords(of_rank);
    std::int64_t r = 0;
    for (int i = 0; i < shape.size(); ++i)
      if (i != axis) r = r * shape[i] + c[i];
    return r;
  }
  friend constexpr bool operator==(const device_mesh& a, const device_mesh& b) {
    if (!(a.shape == b.shape)) return false;
    for (int i = 0; i < a.size(); ++i) if (!(at(a.links, i) == at(b.links, i))) return false;
    return true;
  }
};

/// Every axis of `shape` connected by the same link.
constexpr device_mesh uniform_mesh(const mesh_shape& shape, const link& l) {
  device_mesh m{shape, {}};
  for (int i = 0; i < shape.size(); ++i) at(m.links, i) = checked(l);
  return m;
}

}  // namespace autoddl
