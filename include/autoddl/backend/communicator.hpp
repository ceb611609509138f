#pragma once
// What the executor needs from a communicator, whatever carries the bytes (MPI over CPU ranks,
// NCCL over GPUs). An axis communicator joins the devices along one mesh axis; rank i of it owns
// chunk i of a buffer split into size() equal chunks. Collectives are in place where the boxing
// table of sbp/boxing.hpp allows it, and each returns the bytes this rank sent, so the executor can check
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
//
// Optional: a side queue (SideQueue<D, M> below), offered by a device together with its paired
// communicator, so that gradient synchronisation runs beside backward compute. One queue is
// current at a time; primitives and the communicator's collectives go on the current one.
//   dev.use_side_queue(comm)   everything queued afterwards (primitives and comm's collectives)
//                              runs on the side queue, after everything queued on the main queue
//                              so far (a fork)
//   dev.use_main_queue(comm)   back to the main queue; the side queue's work goes on beside it
//   dev.join_side_queue(comm)  the main queue waits for everything queued on the side queue so
//                              far (work queued on main afterwards runs after it)
// Rules the caller (runtime/trainer.hpp) keeps:
// - A buffer that a side-queue step reads or writes stays alive, and the main queue neither
//   writes it nor reads what the side queue writes, until the next join. (Buffers the side queue
//   itself destroys while it is current are released in its order: the device's job.)
// - upload, download, all_finite and host reads happen on the main queue; synchronize() waits for
//   the main queue only: side-queue work is waited for by a join.
// - Collectives are queued on the side queue in the same order on every rank, and so are the
//   main queue's; a rank never waits on the host for a side-queue result before the join.
// - A collective queued on the side queue returns the bytes it will send where the communicator
//   knows them at the call (NCCL), or 0 where the work is deferred (the opaque test device);
//   bytes_sent() counts every collective by the time of the join.
// cpu_device with MPI offers no side queue: its collectives block, so the CPU executor overlaps
// nothing (and the CPU hardware profiles price `overlap: none`). cuda_device with nccl_mesh_comm
// offers one: a second CUDA stream (backend/cuda/device.cuh).
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

/// Whether device D with its paired mesh communicator M offers a side queue (contract above).
/// The executor overlaps gradient synchronisation with backward only where it does
/// (`if constexpr (SideQueue<D, M>)`); without it every step runs on one queue, in order.
template <class D, class M>
concept SideQueue = MeshCommunicator<M> && requires(D& d, M& m) {
  d.use_side_queue(m);
  d.use_main_queue(m);
  d.join_side_queue(m);
};

}  // namespace autoddl
