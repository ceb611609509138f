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

/// MPI_Init after set_transport_defaults().
inline void init(int* argc, char*** argv) {
  set_transport_defaults();
  MPI_Init(argc, argv);
}

}  // namespace autoddl::mpi
