// Catch2 under MPI: every rank runs the session; the job fails when any rank failed.
#include <catch2/catch_session.hpp>

#include "autoddl/backend/mpi/init.hpp"

int main(int argc, char** argv) {
  autoddl::mpi::init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Catch::Session session;
  if (rank != 0) session.configData().showSuccessfulTests = false;
  int failed = session.run(argc, argv);
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst == 0 ? 0 : 1;
}
