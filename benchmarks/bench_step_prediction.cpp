// Predicted against measured step time on this machine's MPI ranks (calibrated cpu-local), for
// the auto plan and the expert plans of a small GPT and a small VGG: the ratio per plan, and
// whether the predicted order of the plans is the measured order.
//   mpirun -np 2 build/benchmarks/bench_step_prediction   (and -np 4)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/solve.hpp"
#include "support/cli.hpp"
#include "support/stats.hpp"

using namespace autoddl;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct row {
  std::string plan;
  double predicted, measured;
};

double measure(const plan_problem& pp, const plan_result& r, const mesh_shape& m) {
  cpu_device dev;
  mpi::mpi_mesh_comm comm(m);
  train_options to;
  to.opt = optimizer::sgd_momentum;
  trainer<float, cpu_device, mpi::mpi_mesh_comm> t(pp, r.pick, dev, comm, to);
  std::vector<double> ts;
  for (int s = 0; s < 8; ++s) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    t.train_step(s);
    MPI_Barrier(MPI_COMM_WORLD);
    if (s >= 2) ts.push_back(now() - t0);
  }
  return tools::median(ts);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char* hw = argc > 1 ? argv[1] : "cpu-local";
  std::vector<mesh_shape> meshes{mesh_shape{ranks}};
  if (ranks == 4) meshes.push_back(mesh_shape{2, 2});
  for (const char* spec : {"gpt:layers=2,hidden=128,heads=4,seq=64,batch=16,vocab=256",
                           "vgg11:image=32,classes=16,batch=16,fc=128"}) {
    for (const mesh_shape& m : meshes) {
      plan_options o;
      o.mesh = m;
      o.hw = load_hardware(hw);
      plan_problem pp(build_model(spec), o);
      std::vector<row> rows;
      for (const char* s : {"auto", "dp", "megatron", "zero", "owt", "2d"}) {
        if (std::string(s) == "2d" && m.size() != 2) continue;
        plan_result r;
        try {
          r = solve_plan(pp, parse_strategy(s));
        } catch (const error&) {
          continue;
        }
        rows.push_back({s, r.time, measure(pp, r, m)});
      }
      if (rank != 0) continue;
      std::printf("%s on %d ranks, mesh %s (%s)\n", spec, ranks, to_string(m).c_str(), hw);
      std::printf("  %-9s %12s %12s %9s\n", "plan", "predicted", "measured", "meas/pred");
      for (const auto& r : rows)
        std::printf("  %-9s %9.3f ms %9.3f ms %9.2f\n", r.plan.c_str(), r.predicted * 1e3, r.measured * 1e3,
                    r.measured / r.predicted);
      // order agreement: pairs ranked the same way by prediction and measurement (Kendall)
      int agree = 0, pairs = 0;
      for (std::size_t i = 0; i < rows.size(); ++i)
        for (std::size_t j = i + 1; j < rows.size(); ++j) {
          const double dp = rows[i].predicted - rows[j].predicted, dm = rows[i].measured - rows[j].measured;
          if (std::abs(dp) < 1e-12 * rows[i].predicted) continue;  // predicted tie: no order to check
          ++pairs;
          agree += (dp > 0) == (dm > 0);
        }
      std::printf("  predicted order matches measured order on %d of %d plan pairs\n", agree, pairs);
    }
  }
  MPI_Finalize();
  return 0;
}
