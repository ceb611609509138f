// bench_collectives: the alpha-beta model's predicted time (collective_time, the search's formula) of each ring collective against the
// measured time, on a 1-D mesh of all MPI ranks, for 4 KiB..64 MiB of group bytes.
//   mpirun -np 4 bench_collectives --hardware build/cpu-local-np4.json
// Prints one row per point: predicted/measured; the target is 0.67..1.5 for messages >= 1 MiB.
// Also checks on every point that the bytes the ring sent are the model's bytes.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <fmt/core.h>
#include <string>

#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "support/mpi_main.hpp"

namespace {
using namespace autoddl;

int run(int argc, char** argv, int rank, int size) {
  CLI::App app{"Predicted (calibrated alpha-beta) vs measured ring collective times."};
  std::string profile = "cpu-local";
  std::int64_t min_bytes = 4096, max_bytes = std::int64_t(64) << 20;
  int reps = 5;
  bool markdown = false;
  app.add_option("--hardware", profile, "hardware profile: preset name or .json path");
  app.add_option("--min-bytes", min_bytes, "smallest message (group bytes)")->check(CLI::PositiveNumber);
  app.add_option("--max-bytes", max_bytes, "largest message (group bytes)")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions per point (median taken)")->check(CLI::Range(1, 1000));
  app.add_flag("--markdown", markdown, "print a Markdown table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  const hardware hw = load_hardware(profile);
  const device_mesh dm = make_device_mesh({size}, hw);
  mpi::mpi_mesh_comm mc({size});
  if (rank == 0) {
    const autoddl::link& l = dm.axis_link(0);
    fmt::print("# profile {} ({}), mesh {}, link {}: alpha {:.3e} s, beta {:.3e} B/s, gamma {:.3e} s/B", hw.name, profile,
               size, l.name.view(), l.alpha, l.beta, l.gamma);
    if (l.two_regimes())
      fmt::print("; beyond {:.0f} bytes beta_large {:.3e} B/s, gamma_large {:.3e} s/B", l.large_bytes, l.beta_large,
                 l.gamma_large);
    fmt::print("\n");
    if (markdown)
      fmt::print("| ranks | collective | T bytes | predicted s | measured s | predicted/measured |\n|---|---|---|---|---|---|\n");
    else
      fmt::print("{:>5} {:>15} {:>10} {:>12} {:>12} {:>8}\n", "ranks", "collective", "T bytes", "predicted", "measured",
                 "ratio");
  }
  int big = 0, big_ok = 0;
  for (collective c : {collective::all_gather, collective::reduce_scatter, collective::all_reduce, collective::all_to_all})
    for (std::int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const auto t = mpi::time_collective(mc.axis(0), c, bytes, reps);
      if (t.bytes_sent != bytes_factor(c, size).of(t.group_bytes))
        mpi::abort_job(MPI_COMM_WORLD, fmt::format("{} sent {} bytes but the model counts {}", to_string(c), t.bytes_sent,
                                                   bytes_factor(c, size).of(t.group_bytes)));
      const double predicted = collective_time(c, size, t.group_bytes, dm.axis_link(0));
      const double ratio = predicted / t.seconds;
      if (t.group_bytes >= (1 << 20)) {
        ++big;
        big_ok += ratio >= 0.67 && ratio <= 1.5;
      }
      if (rank != 0) continue;
      if (markdown)
        fmt::print("| {} | {} | {} | {:.3e} | {:.3e} | {:.2f} |\n", size, to_string(c), t.group_bytes, predicted, t.seconds, ratio);
      else
        fmt::print("{:>5} {:>15} {:>10} {:>12.3e} {:>12.3e} {:>8.2f}\n", size, to_string(c), t.group_bytes, predicted,
                   t.seconds, ratio);
    }
  if (rank == 0) fmt::print("# {} ranks: {} of {} points >= 1 MiB within 0.67..1.5\n", size, big_ok, big);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return autoddl::tools::mpi_main(argc, argv, "bench_collectives", run); }
