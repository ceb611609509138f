#pragma once
// MPI_COMM_WORLD seen as a device mesh: one sub-communicator per mesh axis, made with
// MPI_Comm_split (colour = the coordinates on the other axes, key = the coordinate on the axis),
// so rank k of axis a's communicator is the device with coordinate k on axis a, and world ranks
// follow device_mesh's row-major mapping. On 2x4, world rank 5 = (1,1): axis 0 group {1,5},
// axis 1 group {4,5,6,7}.
#include "autoddl/backend/mpi/c_api.hpp"

#include <array>
#include <cstdint>
#include <string>

#include "autoddl/backend/mpi/error.hpp"
#include "autoddl/backend/mpi/ring_comm.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/sbp/mesh_shape.hpp"
#include "autoddl/index.hpp"

namespace autoddl::mpi {

class mpi_mesh_comm {
 public:
  /// @pre MPI is initialised and the job has shape.devices() ranks (else the job aborts with a
  /// message naming both counts).
  explicit mpi_mesh_comm(const mesh_shape& shape, MPI_Comm parent = MPI_COMM_WORLD) : mesh_(uniform_mesh(shape, link{})) {
    MPI_Comm world = MPI_COMM_NULL;
    check(MPI_Comm_dup(parent, &world), "MPI_Comm_dup", parent);
    world_ = ring_comm(world, true);
    if (world_.size() != mesh_.devices())
      abort_job(parent, "the MPI job has " + std::to_string(world_.size()) + " ranks but mesh " + to_string(shape) +
                            " needs " + std::to_string(mesh_.devices()) + "; run mpirun -np " +
                            std::to_string(mesh_.devices()) + " or choose a mesh of that many devices");
    coords_ = mesh_.coords(world_.rank());
    for (int a = 0; a < shape.size(); ++a) {
      MPI_Comm c = MPI_COMM_NULL;
      check(MPI_Comm_split(world_.handle(), int(mesh_.group_index(world_.rank(), a)), coords_[a], &c), "MPI_Comm_split",
            world_.handle());
      at(axes_, a) = ring_comm(c, true);
    }
  }

  const mesh_shape& shape() const { return mesh_.shape; }
  int rank() const { return world_.rank(); }
  const mesh_coord& coords() const { return coords_; }
  ring_comm& world() { return world_; }
  /// The communicator of mesh axis `a`; its rank() is coords()[a].
  ring_comm& axis(int a) {
    if (a < 0 || a >= mesh_.size())
      abort_job(world_.handle(), "mesh axis " + std::to_string(a) + " does not exist on mesh " + to_string(mesh_.shape));
    return at(axes_, a);
  }
  /// Bytes this rank sent over all axis communicators and the world one.
  std::int64_t bytes_sent() const {
    std::int64_t b = world_.bytes_sent();
    for (int a = 0; a < mesh_.size(); ++a) b += at(axes_, a).bytes_sent();
    return b;
  }

 private:
  device_mesh mesh_;
  mesh_coord coords_{};
  ring_comm world_;
  std::array<ring_comm, max_mesh_axes> axes_{};
};

}  // namespace autoddl::mpi
