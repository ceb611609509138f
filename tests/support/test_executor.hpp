#pragma once
// The device and communicator an MPI test's trainer runs on, chosen when the test is built:
//   default                    cpu_device on the MPI mesh itself (suite mpi)
//   AUTODDL_TEST_OPAQUE_DEVICE the opaque device, the mesh wrapped to work on its memory (generic)
//   AUTODDL_TEST_SIDE_QUEUE    the same with a deferring side queue (generic)
// (opaque_device.hpp). Needs MPI initialised.
#include <type_traits>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"

#if defined(AUTODDL_TEST_OPAQUE_DEVICE) || defined(AUTODDL_TEST_SIDE_QUEUE)
#include "opaque_device.hpp"
#endif

namespace autoddl::testing {

struct executor {
  explicit executor(const mesh_shape& m, MPI_Comm parent = MPI_COMM_WORLD) : mpi(m, parent) {}
  mpi::mpi_mesh_comm mpi;
#if defined(AUTODDL_TEST_SIDE_QUEUE)
  side_queue_opaque_device dev;
  opaque_mesh_comm<mpi::mpi_mesh_comm> comm{mpi};
#elif defined(AUTODDL_TEST_OPAQUE_DEVICE)
  opaque_device dev;
  opaque_mesh_comm<mpi::mpi_mesh_comm> comm{mpi};
#else
  cpu_device dev;
  mpi::mpi_mesh_comm& comm = mpi;
#endif
};
using executor_device = decltype(executor::dev);
using executor_comm = std::remove_reference_t<decltype(executor::comm)>;

}  // namespace autoddl::testing
