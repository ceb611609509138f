#pragma once
// nccl_mesh_comm: the MeshCommunicator of autoddl/backend/communicator.hpp over NCCL. The MPI
// job is the mesh exactly as in mpi_mesh_comm (autoddl/backend/mpi/mesh_comm.hpp): one MPI
// sub-communicator per mesh axis by MPI_Comm_split, and one NCCL communicator per axis (plus
// one over the world) bootstrapped over it, so NCCL rank k of axis a is the device with
// coordinate k on axis a. On 2x4, world rank 5 = (1,1): axis 0 group {1,5}, axis 1 {4,5,6,7}.
// One GPU per rank: NCCL refuses two ranks of a communicator on one GPU (see ranks_share_a_gpu).
// Declare it after the cuda_device whose stream it uses, so that it is destroyed first: its
// communicators are then destroyed (or aborted, see nccl_comm) before the device goes.
// Host-only: compiles with g++ (with MPI's and CUDA's include paths) as well as nvcc.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <string>

#include "autoddl/backend/communicator.hpp"
#include "autoddl/backend/mpi/mesh_comm.hpp"
#include "autoddl/backend/nccl/comm.cuh"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/sbp/mesh_shape.hpp"

namespace autoddl::nccl {

class nccl_mesh_comm {
 public:
  /// @pre MPI is initialised, the job has shape.devices() ranks, and `device` (this rank's GPU,
  /// e.g. local_device_ordinal()) is the one `stream` belongs to. Collective over `parent`.
  nccl_mesh_comm(const mesh_shape& shape, int device, cudaStream_t stream, MPI_Comm parent = MPI_COMM_WORLD)
      : mpi_(shape, parent) {
    check(cudaSetDevice(device), "cudaSetDevice", parent);
    world_ = nccl_comm(mpi_.world().handle(), stream);
    for (int a = 0; a < shape.size(); ++a) axes_[std::size_t(a)] = nccl_comm(mpi_.axis(a).handle(), stream);
  }

  const mesh_shape& shape() const { return mpi_.shape(); }
  int rank() const { return mpi_.rank(); }
  const mesh_coord& coords() const { return mpi_.coords(); }
  nccl_comm& world() { return world_; }
  /// The NCCL communicator of mesh axis `a`; its rank() is coords()[a].
  nccl_comm& axis(int a) {
    if (a < 0 || a >= shape().size())
      mpi::abort_job(mpi_.world().handle(),
                     "mesh axis " + std::to_string(a) + " does not exist on mesh " + to_string(shape()));
    return axes_[std::size_t(a)];
  }
  /// The MPI mesh underneath (host-side control messages, barriers).
  mpi::mpi_mesh_comm& mpi() { return mpi_; }
  /// Queues every later collective of every communicator on `s`.
  void set_stream(cudaStream_t s) {
    world_.set_stream(s);
    for (int a = 0; a < shape().size(); ++a) axes_[std::size_t(a)].set_stream(s);
  }
  /// Bytes this rank sent over all axis communicators and the world one.
  std::int64_t bytes_sent() const {
    std::int64_t b = world_.bytes_sent();
    for (int a = 0; a < shape().size(); ++a) b += axes_[std::size_t(a)].bytes_sent();
    return b;
  }

 private:
  mpi::mpi_mesh_comm mpi_;  // declared first: the NCCL communicators are destroyed before it
  nccl_comm world_;
  std::array<nccl_comm, max_mesh_axes> axes_{};
};

static_assert(MeshCommunicator<nccl_mesh_comm>, "nccl_mesh_comm must model MeshCommunicator");

}  // namespace autoddl::nccl
