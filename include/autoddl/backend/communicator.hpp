#pragma once
// What the executor needs from a communicator, whatever carries the bytes (MPI over CPU ranks,
// NCCL over GPUs). An axis communicator joins the devices along one mesh axis; rank i of it owns
// chunk i of a buffer split into size() equal chunks. Collectives are in place where the table
// of DESIGN.md allows it, and each returns the bytes this rank sent, so the executor can check
// them against the cost model exactly.
//
// A communicator is paired with a Device (backend/device.hpp): its spans are that device's
// memory (view() of its buffers: host memory for cpu_device with MPI, GPU memory for cuda_device
// with NCCL), and its collectives run in the device's order, after every primitive called before
// them; a host that reads a result first synchronises the device (its download does).
//   all_gather(buf)      chunk rank() holds this rank's part -> every chunk holds its owner's part
//   reduce_scatter(buf)  every chunk holds an addend -> chunk rank() holds the sum
//   all_reduce(buf)      every rank ends with the element-wise sum
//   all_reduce(buf, k)   the same with k = reduce_kind::sum or ::max (what the executor calls)
//   all_to_all(in, out)  chunk j of `in` goes to rank j; chunk j of `out` comes from rank j
#include <concepts>
#include <cstdint>
#include <span>

#include "autoddl/backend/device.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/sbp/mesh_shape.hpp"

namespace autoddl {

template <class C, class T>
concept AxisCommunicatorFor = requires(C c, const C cc, std::span<T> buf, std::span<const T> in, int peer) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { cc.bytes_sent() } -> std::convertible_to<std::int64_t>;
  { c.all_gather(buf) } -> std::convertible_to<std::int64_t>;
  { c.reduce_scatter(buf) } -> std::convertible_to<std::int64_t>;
  { c.all_reduce(buf) } -> std::convertible_to<std::int64_t>;
  { c.all_reduce(buf, reduce_kind::max) } -> std::convertible_to<std::int64_t>;
  { c.all_to_all(in, buf) } -> std::convertible_to<std::int64_t>;
  { c.broadcast(buf, peer) } -> std::convertible_to<std::int64_t>;
  { c.send(std::span<const T>(in), peer) };
  { c.recv(buf, peer) };
};

/// An axis communicator for the element types training uses on CPU ranks.
template <class C>
concept AxisCommunicator = AxisCommunicatorFor<C, float> && AxisCommunicatorFor<C, double>;

/// One communicator per mesh axis plus one over the whole mesh.
template <class M>
concept MeshCommunicator = requires(M m, const M cm, int a) {
  { cm.shape() } -> std::convertible_to<mesh_shape>;
  { cm.rank() } -> std::convertible_to<int>;
  { cm.coords() } -> std::convertible_to<mesh_coord>;
  { cm.bytes_sent() } -> std::convertible_to<std::int64_t>;
  { m.axis(a) } -> AxisCommunicator;
  { m.world() } -> AxisCommunicator;
};

}  // namespace autoddl
