#pragma once
// Waiting for MPI requests. Open MPI's shared-memory transport completes a request only while
// some call polls it, and its blocking calls (MPI_Wait, MPI_Sendrecv, MPI_Barrier) poll in a
// loop for as long as the peer takes. By default wait_all does the same. With
// AUTODDL_MPI_WAIT=sleep it polls for as long as the message would take to copy when the peer
// is there (a large message moves in 32 KiB fragments that both sides' polls push along, so
// sleeping between them slows it several times), then sleeps between polls, the sleep doubling
// up to a cap: where other processes share the ranks' cores, a rank spinning in a wait takes
// core time from the peer it waits for (a 2-rank MLP step beside two busy loops: 234 ms
// sleeping, 267 ms spinning), but every wait that sleeps ends up to a nap late, which many small
// messages pay for (8 ranks on 2 cores, the random-plan tests: 16 s sleeping, 6 s spinning).
#include "autoddl/backend/mpi/c_api.hpp"

#include <time.h>  // nanosleep (POSIX); <thread> would bring POSIX ::link along

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

namespace autoddl::mpi {

/// How wait_all polls: until done, or where `sleeps`, for `spin` plus `spin_ns_per_byte` per byte
/// of the message (0.5: 2 GB/s, below the shared-memory copy rate of a 2-rank ring all-reduce
/// here), then sleeping `first_nap`, doubling up to `longest_nap`, between polls.
struct wait_policy {
  bool sleeps = false;  ///< false: poll until done, as MPI_Wait does
  std::chrono::microseconds spin{200};
  double spin_ns_per_byte = 0.5;
  std::chrono::microseconds first_nap{5};
  std::chrono::microseconds longest_nap{100};
};

/// The policy the waits use: sleeps where the environment's AUTODDL_MPI_WAIT is "sleep" (read
/// once); polling until done otherwise.
inline const wait_policy& default_wait_policy() {
  static const wait_policy p = [] {
    wait_policy w;
    const char* e = std::getenv("AUTODDL_MPI_WAIT");
    w.sleeps = e != nullptr && std::string_view(e) == "sleep";
    return w;
  }();
  return p;
}

/// Completes every request of `requests` (MPI_Waitall's contract, statuses ignored), which move
/// `bytes` each way, and returns MPI_SUCCESS or the first error code MPI_Testall reported.
inline int wait_all(std::span<MPI_Request> requests, std::int64_t bytes = 0,
                    const wait_policy& policy = default_wait_policy()) {
  const auto start = std::chrono::steady_clock::now();
  const auto spin = policy.spin + std::chrono::nanoseconds(std::int64_t(policy.spin_ns_per_byte * double(bytes)));
  auto nap = policy.first_nap;
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    if (!policy.sleeps || std::chrono::steady_clock::now() - start < spin) continue;
    const timespec ts{0, long(std::chrono::nanoseconds(nap).count())};
    ::nanosleep(&ts, nullptr);
    nap = std::min(nap * 2, policy.longest_nap);
  }
}

/// wait_all for one request.
inline int wait_one(MPI_Request& request, std::int64_t bytes = 0, const wait_policy& policy = default_wait_policy()) {
  return wait_all(std::span<MPI_Request>(&request, 1), bytes, policy);
}

/// MPI_Barrier on `comm`, its wait through wait_one; returns MPI's error code.
inline int barrier(MPI_Comm comm) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Ibarrier(comm, &r);
  return rc != MPI_SUCCESS ? rc : wait_one(r);
}

}  // namespace autoddl::mpi
