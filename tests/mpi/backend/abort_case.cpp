// A rank that misuses a collective must stop the whole job, not leave its peers waiting:
// rank 1 hands all-gather a buffer that does not split into 2 chunks while rank 0 enters the
// collective correctly. Expected: MPI_Abort, a message naming the fix, a non-zero exit.
#include <span>
#include <vector>

#include "autoddl/backend/mpi.hpp"

int main(int argc, char** argv) {
  autoddl::mpi::init(&argc, &argv);
  autoddl::mpi::ring_comm world(MPI_COMM_WORLD);
  std::vector<float> buf(world.rank() == 1 ? 7 : 8, 1.0f);
  world.all_gather(std::span<float>(buf));
  MPI_Finalize();
  return 0;  // not reached with 2 ranks
}
