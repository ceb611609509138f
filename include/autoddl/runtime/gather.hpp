#pragma once
// Assembling a distributed tensor on one device, for checks and reports (not a training path):
// every rank sends its shard to world rank 0 over the world communicator, which places each
// shard at its offset. Ranks map to mesh coordinates row-major, axis 0 outermost.
#include <cstdint>
#include <span>
#include <vector>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/shard.hpp"
#include "autoddl/index.hpp"
#include "autoddl/runtime/data.hpp"

namespace autoddl {

/// The whole tensor on world rank 0 (empty elsewhere). @pre `l` has no P (storage layouts,
/// gradients boxed to storage), else layout_error.
template <class T, MeshCommunicator M>
std::vector<T> gather_to_root(M& comm, const std::vector<T>& local, const tensor_shape& global, const nd_sbp& l) {
  if (l.any_partial())
    detail::fail<layout_error>("gather_to_root takes a layout without P, got " + to_string(l) + "; box it to B first");
  auto& world = comm.world();
  const device_mesh dm = uniform_mesh(comm.shape(), link{});
  if (world.rank() != 0) {
    world.send(std::span<const T>(local), 0);
    return {};
  }
  std::vector<T> out(std::size_t(global.elements()));
  for (int r = 0; r < world.size(); ++r) {
    const shard_info s = make_shard(global, l, comm.shape(), dm.coords(r));
    std::vector<T> part = r == 0 ? local : std::vector<T>(std::size_t(s.local.elements()));
    if (r != 0) world.recv(std::span<T>(part), r);
    for_each_global_index(s, [&](std::int64_t k, std::int64_t gi) { at(out, gi) = at(part, k); });
  }
  return out;
}

/// max |a - b| / max(max |b|, floor): the error of a against reference b relative to b's scale
/// (elementwise relative error is meaningless where b crosses zero). `floor` keeps a tensor that
/// vanishes analytically (e.g. the gradient of an attention key bias, exactly zero because
/// softmax ignores a per-query constant) from turning round-off into a large ratio; pass a
/// small fraction of the scale of its peers.
template <class T>
double max_rel_error(const std::vector<T>& a, const std::vector<T>& b, double floor = 0) {
  if (a.size() != b.size()) return 1e30;
  double num = 0, den = floor;
  for (std::size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

/// The largest magnitude in any of `tensors`.
template <class T>
double max_abs(const std::vector<std::vector<T>>& tensors) {
  double m = 0;
  for (const auto& t : tensors)
    for (T v : t) m = std::max(m, std::abs(double(v)));
  return m;
}

}  // namespace autoddl
