#pragma once
// Failure policy of the MPI back end: a rank that meets an error prints one sentence on stderr
// and calls MPI_Abort, so the whole job stops instead of its peers hanging in a collective.
#include "autoddl/backend/mpi/c_api.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace autoddl::mpi {

/// Prints "autoddl: rank R: <what>" and aborts every rank of `comm`'s job.
[[noreturn]] inline void abort_job(MPI_Comm comm, const std::string& what) {
  int rank = -1, up = 0;
  MPI_Initialized(&up);
  if (up) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "autoddl: rank %d: %s\n", rank, what.c_str());
  std::fflush(stderr);
  if (up) MPI_Abort(comm, 3);
  std::abort();
}

/// Aborts the job when an MPI call returned an error, naming the call and MPI's reason.
inline void check(int rc, const char* call, MPI_Comm comm) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  abort_job(comm, std::string(call) + " failed: " + std::string(text, std::size_t(len)));
}

/// An element count as MPI's int, aborting when it does not fit (split the message instead).
inline int count_of(std::int64_t n, MPI_Comm comm) {
  if (n < 0 || n > std::int64_t(0x7fffffff))
    abort_job(comm, "a message of " + std::to_string(n) + " elements exceeds MPI's int count; send it in parts");
  return int(n);
}

}  // namespace autoddl::mpi
