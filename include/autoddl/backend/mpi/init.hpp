#pragma once
// MPI_Init with the transport the cost model can price.
//
// Open MPI's shared-memory transport (btl vader) moves a large message with one cross-process
// copy by default (CMA: the receiver reads the sender's pages with process_vm_readv). On this
// project's machine kind its cost depends on the state of the pages more than on the bytes: a
// 1 MiB ring all-reduce of 2 ranks took 175 us on buffers the rank had just written, 380 us on
// buffers the previous collective had written, and up to 1 ms inside a training step
// (benchmarks/bench_step_prediction --breakdown). Two copies through the shared-memory
// queues ("single copy mechanism none") took 138 us in all three cases. The alpha-beta model
// prices one rate per link, so autoddl's programs run the transport that has one.
#include <cstdlib>

#include "autoddl/backend/mpi/c_api.hpp"

namespace autoddl::mpi {

/// The transport defaults autoddl runs and calibrates with, as Open MPI environment variables;
/// a value already set (by the user, or by `mpirun --mca`) is kept. Call before MPI_Init.
inline void set_transport_defaults() {
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", /*overwrite=*/0);
}

/// This process's place in MPI_COMM_WORLD.
struct world_place {
  int rank = 0;
  int ranks = 1;
};

/// MPI_Init after set_transport_defaults(); returns this process's rank and the number of ranks.
inline world_place init(int* argc, char*** argv) {
  set_transport_defaults();
  MPI_Init(argc, argv);
  world_place w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.ranks);
  return w;
}

}  // namespace autoddl::mpi
