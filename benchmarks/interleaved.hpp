#pragma once
// Interleaved timing on a shared, noisy machine (TOOLCHAIN.md, "Timing on this machine"): the
// alternatives run round-robin, one step each per round, the round's starting alternative
// rotating so none always follows the same neighbour; warm-up rounds are dropped; each
// alternative is reported by its median and its inter-quartile range (the spread), and two are
// ordered only where their medians differ by more than the sum of their spreads.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

#include "autoddl/backend/mpi/c_api.hpp"
#include "autoddl/backend/mpi/error.hpp"
#include "autoddl/backend/mpi/wait.hpp"
#include "support/cli.hpp"
#include "support/stats.hpp"

namespace autoddl::bench {

inline double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

/// Median and inter-quartile range of a sample (support/stats.hpp: linear interpolation between
/// order statistics).
struct spread_summary {
  double median = 0, q1 = 0, q3 = 0;
  double iqr() const { return q3 - q1; }
};

inline spread_summary summarize(const std::vector<double>& v) {
  return {tools::median(v), tools::quantile(v, 0.25), tools::quantile(v, 0.75)};
}

/// Whether two measured alternatives are ordered: medians apart by more than their spreads.
inline bool separated(const spread_summary& a, const spread_summary& b) {
  return std::abs(a.median - b.median) > a.iqr() + b.iqr();
}

/// Runs `step(i, round)` of every alternative i once per round, in rotated order, each between
/// two barriers of the whole job, for warmup + rounds rounds; returns per alternative the
/// seconds of the measured rounds as this rank saw them.
inline std::vector<std::vector<double>> time_interleaved(std::size_t alternatives, int warmup, int rounds,
                                                         const std::function<void(std::size_t, int)>& step) {
  std::vector<std::vector<double>> seconds(alternatives);
  for (int r = 0; r < warmup + rounds; ++r)
    for (std::size_t k = 0; k < alternatives; ++k) {
      const std::size_t i = (k + std::size_t(r)) % alternatives;
      mpi::check(mpi::barrier(MPI_COMM_WORLD), "MPI_Barrier", MPI_COMM_WORLD);
      const double t0 = now();
      step(i, r);
      mpi::check(mpi::barrier(MPI_COMM_WORLD), "MPI_Barrier", MPI_COMM_WORLD);
      if (r >= warmup) seconds[i].push_back(now() - t0);
    }
  return seconds;
}

}  // namespace autoddl::bench
