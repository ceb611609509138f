#pragma once
// Timing one ring collective on one communicator, the way calibration and the collectives
// benchmark both measure: all ranks synchronise, run the collective, and the run's time is the
// slowest rank's (MPI_MAX); the result is the median over repetitions after one warm-up run.
// Group bytes T follow sbp/boxing.hpp's table: all-gather / reduce-scatter / all-reduce run on a
// buffer of T bytes (n chunks); all-to-all exchanges a per-rank shard of T/n bytes.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "autoddl/backend/mpi/c_api.hpp"
#include "autoddl/backend/mpi/error.hpp"
#include "autoddl/backend/mpi/ring_comm.hpp"
#include "autoddl/sbp/boxing.hpp"

namespace autoddl::mpi {

struct collective_timing {
  std::int64_t group_bytes = 0;  ///< T actually used (rounded down to whole chunks of floats)
  std::int64_t bytes_sent = 0;   ///< by this rank in one run
  double seconds = 0;            ///< median over the repetitions of the slowest rank's time
};

/// Runs `c` on `comm` for about `group_bytes` of floats after a warm-up, at least `reps` >= 1
/// times and, while the runs so far took less than `budget_s` in all, more (up to 20 * reps),
/// so small messages get enough runs for a stable median.
inline collective_timing time_collective(ring_comm& comm, collective c, std::int64_t group_bytes, int reps,
                                         double budget_s = 0.05) {
  const std::int64_t n = comm.size();
  const std::int64_t unit = c == collective::all_to_all ? n * n : n;
  std::int64_t elems = group_bytes / std::int64_t(sizeof(float)) / unit * unit;
  if (elems < unit) elems = unit;
  const std::int64_t local = c == collective::all_to_all ? elems / n : elems;
  std::vector<float> buf(std::size_t(local), 1.0f), out(c == collective::all_to_all ? std::size_t(local) : 0);
  collective_timing r;
  r.group_bytes = elems * std::int64_t(sizeof(float));
  auto run = [&] {
    switch (c) {
      case collective::all_gather: return comm.all_gather(std::span<float>(buf));
      case collective::reduce_scatter: return comm.reduce_scatter(std::span<float>(buf));
      case collective::all_reduce: return comm.all_reduce(std::span<float>(buf));
      case collective::all_to_all: return comm.all_to_all(std::span<const float>(buf), std::span<float>(out));
      default: abort_job(comm.handle(), "time_collective times only all-gather, reduce-scatter, all-reduce and all-to-all");
    }
  };
  std::vector<double> times;
  double spent = 0;
  reps = std::max(reps, 1);
  for (int k = 0; k <= reps || (spent < budget_s && k <= 20 * reps); ++k) {
    comm.barrier();
    const double t0 = MPI_Wtime();
    r.bytes_sent = run();
    double t = MPI_Wtime() - t0, worst = 0;
    check(MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, comm.handle()), "MPI_Allreduce", comm.handle());
    if (k > 0) times.push_back(worst);
    spent += worst;
  }
  std::sort(times.begin(), times.end());
  r.seconds = times[times.size() / 2];
  return r;
}

}  // namespace autoddl::mpi
