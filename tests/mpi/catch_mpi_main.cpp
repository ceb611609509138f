// Catch2 under MPI: every rank runs the session; the job fails when any rank failed.
#include <catch2/catch_session.hpp>

#include "autoddl/backend/mpi/init.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
// Under AddressSanitizer only (scripts/sanitize): Open MPI's plugins (mca_*.so) stay loaded to the
// end, so LeakSanitizer names the module of an allocation Open MPI keeps past MPI_Finalize and
// tests/sanitizers/lsan.supp matches it from the allocating frame. Unloaded, such a frame is an
// unknown module and only a full unwind of every malloc (fast_unwind_on_malloc=0, about four
// times slower) reaches a frame to match. This definition takes the place of libc's for every
// library of the test process.
extern "C" int dlclose(void*) noexcept { return 0; }
#endif

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
