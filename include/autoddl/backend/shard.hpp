#pragma once
// Where one device's block of a tensor sits in the global tensor: the global shape, the local
// (shard) shape and the global offset of the block along every dim. Kernels need it for what
// depends on global positions: a causal mask under a query-sequence split, the vocabulary rows
// a device owns, the dropout mask keyed by global element index.
//   [8,6] under [S(0),S(1)]@2x3 on device (1,2): local [4,2], offset {4,4}
// Several axes splitting one dim nest mixed-radix, the outer axis most significant
// (autoddl/sbp/nd_sbp.hpp): [S(0),S(0)]@2x4 puts device (a,b) at chunk 4a+b of 8.
#include <array>
#include <cstdint>

#include "autoddl/index.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/sbp/layout.hpp"

namespace autoddl {

struct shard_info {
  tensor_shape global, local;
  std::array<std::int64_t, max_tensor_rank> offset{};  ///< global index of local element 0, per dim

  constexpr std::int64_t local_elements() const { return local.elements(); }
  friend constexpr bool operator==(const shard_info&, const shard_info&) = default;
};

/// The block of `global` whose local shape under `sbp` on `mesh` is `local` (known already: a
/// typed model's instance carries it as a compile-time constant), on the device at `coord`.
/// @pre coord[i] < mesh[i] (throws layout_error otherwise); local == local_shape(global, {sbp, mesh}).
constexpr shard_info shard_with_local(const tensor_shape& global, const tensor_shape& local, const nd_sbp& sbp,
                                      const mesh_shape& mesh, const mesh_coord& coord) {
  shard_info s{global, local, {}};
  for (int i = 0; i < mesh.size(); ++i)
    if (at(coord, i) < 0 || at(coord, i) >= mesh[i])
      detail::fail<layout_error>("mesh coordinate " + detail::itos(at(coord, i)) + " on axis " + detail::itos(i) +
                                 " is outside the mesh " + to_string(mesh));
  for (int d = 0; d < global.rank(); ++d) {
    std::int64_t chunk = 0;
    for (int i = 0; i < sbp.size(); ++i)
      if (sbp[i].is_split() && sbp[i].dim == d) chunk = chunk * mesh[i] + at(coord, i);
    at(s.offset, d) = chunk * s.local[d];
  }
  return s;
}

/// The block of `global` that the device at `coord` holds under `sbp` on `mesh`.
/// B and P axes do not move the block (a P device holds a whole-shape addend).
/// @pre coord[i] < mesh[i]; the split dims divide evenly (throws layout_error otherwise).
/// Example: make_shard([8,6], [S(0),S(1)], 2x3, {1,2}) -> local [4,2], offset {4,4}.
constexpr shard_info make_shard(const tensor_shape& global, const nd_sbp& sbp, const mesh_shape& mesh,
                                const mesh_coord& coord) {
  return shard_with_local(global, local_shape(global, layout{sbp, mesh}), sbp, mesh, coord);
}

/// A whole tensor held by one device: local == global, offset 0.
constexpr shard_info whole_shard(const tensor_shape& global) { return shard_info{global, global, {}}; }

}  // namespace autoddl
