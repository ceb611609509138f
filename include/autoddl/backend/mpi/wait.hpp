#pragma once
// Waiting for MPI requests without holding a core while the peer is away. Open MPI's
// shared-memory transport completes a request only while some call polls it, and its blocking
// calls (MPI_Wait, MPI_Sendrecv, MPI_Barrier) poll in a loop for as long as the peer takes.
// Where the ranks share their cores with other work, a rank spinning in a wait takes core time
// from the peer it waits for, and its own share of the core is spent before it computes again.
// wait_all polls for as long as the message would take to copy when the peer is there (a
// large message moves in 32 KiB fragments that both sides' polls push along, so sleeping
// between them slows it several times), and then sleeps between polls, the sleep doubling up to
// a cap that bounds the latency it adds once the peer arrives.
#include "autoddl/backend/mpi/c_api.hpp"

#include <time.h>  // nanosleep (POSIX); <thread> would bring POSIX ::link along

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>

namespace autoddl::mpi {

/// How wait_all polls: spin for `spin` plus `spin_ns_per_byte` per byte of the message (0.5:
/// 2 GB/s, below the shared-memory copy rate of a 2-rank ring all-reduce here), then sleep
/// `first_nap`, doubling up to `longest_nap`.
struct wait_policy {
  std::chrono::microseconds spin{200};
  double spin_ns_per_byte = 0.5;
  std::chrono::microseconds first_nap{5};
  std::chrono::microseconds longest_nap{100};
};

/// Completes every request of `requests` (MPI_Waitall's contract, statuses ignored), which move
/// `bytes` each way, and returns MPI_SUCCESS or the first error code MPI_Testall reported.
inline int wait_all(std::span<MPI_Request> requests, std::int64_t bytes = 0, const wait_policy& policy = {}) {
  const auto start = std::chrono::steady_clock::now();
  const auto spin = policy.spin + std::chrono::nanoseconds(std::int64_t(policy.spin_ns_per_byte * double(bytes)));
  auto nap = policy.first_nap;
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    if (std::chrono::steady_clock::now() - start < spin) continue;
    const timespec ts{0, long(std::chrono::nanoseconds(nap).count())};
    ::nanosleep(&ts, nullptr);
    nap = std::min(nap * 2, policy.longest_nap);
  }
}

/// wait_all for one request.
inline int wait_one(MPI_Request& request, std::int64_t bytes = 0, const wait_policy& policy = {}) {
  return wait_all(std::span<MPI_Request>(&request, 1), bytes, policy);
}

/// MPI_Barrier on `comm`, its wait through wait_one; returns MPI's error code.
inline int barrier(MPI_Comm comm) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Ibarrier(comm, &r);
  return rc != MPI_SUCCESS ? rc : wait_one(r);
}

}  // namespace autoddl::mpi
