// Catch2 under MPI for the NCCL tests. Every rank exits 77 (Meson: skipped) when some rank sees
// no CUDA device, or when a node runs more ranks than it has GPUs: NCCL (>= 2.5) refuses two
// ranks of one communicator on one GPU ("Duplicate GPU detected"), so that job cannot use NCCL.
#include <catch2/catch_session.hpp>

#include <cstdio>
#include <string>

#include "autoddl/backend/cuda/error.cuh"
#include "autoddl/backend/mpi/c_api.hpp"
#include "autoddl/backend/nccl/comm.cuh"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string why;
  int mine = autoddl::cuda::device_available(&why) ? 0 : 1, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (rank == 0) std::printf("skipped: a rank has no usable CUDA device (%s)\n", why.empty() ? "another rank" : why.c_str());
    MPI_Finalize();
    return 77;
  }
  if (autoddl::nccl::ranks_share_a_gpu(MPI_COMM_WORLD)) {
    if (rank == 0)
      std::printf("skipped: more ranks than GPUs on a node; NCCL refuses two ranks of one communicator on one GPU\n");
    MPI_Finalize();
    return 77;
  }
  Catch::Session session;
  if (rank != 0) session.configData().showSuccessfulTests = false;
  const int failed = session.run(argc, argv);
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst == 0 ? 0 : 1;
}
