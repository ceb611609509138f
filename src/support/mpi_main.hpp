#pragma once
// The main() of an MPI program that runs one function on every rank: MPI_Init, run, any
// exception becomes one sentence on stderr (rank 0) and exit code 2, the job's exit code is the
// worst rank's, MPI_Finalize. For programs whose ranks fail together (input errors); a program
// whose ranks can fail alone must MPI_Abort instead (autoddl-train does).
#include <cstdio>
#include <exception>

#include "autoddl/backend/mpi/init.hpp"

namespace autoddl::tools {

/// @param run int(int argc, char** argv, int rank, int size), returning the rank's exit code.
template <class Run>
int mpi_main(int argc, char** argv, const char* program, Run&& run) {
  autoddl::mpi::init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 0;
  try {
    rc = run(argc, argv, rank, size);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", program, e.what());
    rc = 2;
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

}  // namespace autoddl::tools
