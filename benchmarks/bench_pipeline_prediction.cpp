// Pipelines on this machine's MPI ranks: predicted against measured step (search/pipeline.hpp's
// 1F1B price, runtime/trainer.hpp's stages), for a small GPT on 4 ranks as 2 stages of 2
// devices, with megatron:tp=2,pp=2 and with auto layouts inside the stages, at 2, 4 and 8
// micro-batches, next to the plan without a pipeline on 2x2.
//
// The plans are timed interleaved (benchmarks/interleaved.hpp): each round runs one
// SGD-momentum step of every plan in rotated order; warm-up rounds are dropped; measured =
// median over rounds of world rank 0's step (the whole pipeline: a step ends once the last
// stage's gradients are back), spread = its inter-quartile range. Per stage: the median of its
// busiest device's time not waiting for its neighbours against m x its predicted slot + its
// step work.
//   mpirun -np 4 build/benchmarks/bench_pipeline_prediction [hardware] [--model SPEC] [--rounds N] [--warmup N] [--json]
//   (hardware: default cpu-local-4, the profile calibrated with 4 ranks on this machine kind)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/pipeline.hpp"
#include "autoddl/search/solve.hpp"
#include "interleaved.hpp"

using namespace autoddl;

namespace {

struct options {
  std::string hardware = "cpu-local-4";
  std::string model = "gpt:layers=4,hidden=128,heads=4,seq=64,batch=16,vocab=256";
  int rounds = 8;
  int warmup = 2;
  bool json = false;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") o.json = true;
    else if (a == "--rounds" && i + 1 < argc) o.rounds = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) o.warmup = std::atoi(argv[++i]);
    else if (a == "--model" && i + 1 < argc) o.model = argv[++i];
    else if (a.rfind("--", 0) != 0) o.hardware = a;
    else throw error("unknown option '" + a + "'; use [hardware] [--model SPEC] [--rounds N] [--warmup N] [--json]");
  }
  if (o.rounds < 5) throw error("--rounds " + std::to_string(o.rounds) + " is too few for quartiles; give at least 5");
  if (o.warmup < 0) throw error("--warmup must be >= 0");
  return o;
}

using cpu_trainer = trainer<float, cpu_device, mpi::mpi_mesh_comm>;

// One plan ready to step: its plan, communicators, device and trainer, and what it measured.
struct runnable {
  std::string name;
  double predicted = 0;
  std::optional<pipeline_plan> pipeline;
  std::unique_ptr<plan_problem> flat_problem;  // the plan without a pipeline
  std::unique_ptr<mpi::pipeline_comms> stages;
  std::unique_ptr<mpi::mpi_mesh_comm> flat_comm;
  std::unique_ptr<cpu_device> dev = std::make_unique<cpu_device>();
  std::unique_ptr<cpu_trainer> run;
  std::vector<double> busy_s;
  bench::spread_summary measured;
};

train_options sgd() {
  train_options to;
  to.opt = optimizer::sgd_momentum;
  return to;
}

runnable pipelined(const std::string& name, pipeline_plan&& p) {
  runnable x;
  x.name = name;
  x.predicted = p.time;
  x.pipeline = std::move(p);
  const plan_problem& problem = *x.pipeline->layouts.problem;
  x.stages = std::make_unique<mpi::pipeline_comms>(problem.options().mesh, x.pipeline->shape.stages);
  x.run = std::make_unique<cpu_trainer>(plan_of(problem, x.pipeline->layouts.result.pick, x.pipeline->cut_ops), *x.dev, x.stages->mesh(), sgd(),
                                        pipeline_stage<mpi::ring_comm>{x.stages->stage(), x.pipeline->cut_ops,
                                                                       &x.stages->pipe()});
  return x;
}

std::vector<runnable> prepare(const options& o, int ranks) {
  plan_options base;
  base.mesh = ranks == 4 ? mesh_shape{2, 2} : mesh_shape{ranks};
  base.hw = load_hardware(o.hardware);
  base.opt = optimizer::sgd_momentum;
  const auto build = [&](int m) { return build_model(o.model, m); };
  const std::int64_t batch = graph_batch(build_model(o.model));
  std::vector<runnable> rows;
  for (int m : {2, 4, 8}) {
    step_settings pin;
    pin.microbatches = m;
    rows.push_back(pipelined("megatron:tp=2,pp=2 m=" + std::to_string(m),
                             plan_megatron_pipeline(build, batch, base, parse_strategy("megatron:tp=2,pp=2"), pin)));
    rows.push_back(pipelined("auto, 2 stages m=" + std::to_string(m),
                             plan_pipeline(build, batch, base, strategy::automatic{}, pipeline_shape{2, m, 1},
                                           recompute_mode::none, 1, false)));
  }
  runnable flat;
  flat.name = "auto, no pipeline";
  flat.flat_problem = std::make_unique<plan_problem>(build(1), base);
  const plan_result r = solve_plan(*flat.flat_problem, strategy::automatic{});
  flat.predicted = r.time;
  flat.flat_comm = std::make_unique<mpi::mpi_mesh_comm>(base.mesh);
  flat.run = std::make_unique<cpu_trainer>(plan_of(*flat.flat_problem, r.pick), *flat.dev, *flat.flat_comm, sgd());
  rows.push_back(std::move(flat));
  return rows;
}

// Per stage of row x: the busiest device's median busy time (world rank 0 gets them all).
std::vector<double> stage_busy(const runnable& x, int ranks) {
  std::vector<double> b = x.busy_s;
  std::sort(b.begin(), b.end());
  double mine = b.empty() ? 0 : b[b.size() / 2];
  std::vector<double> all(static_cast<std::size_t>(ranks), 0.0);
  MPI_Gather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  const int stages = x.pipeline ? x.pipeline->shape.stages : 1;
  std::vector<double> r(static_cast<std::size_t>(stages), 0.0);
  for (int k = 0; k < ranks; ++k) r[std::size_t(k / (ranks / stages))] = std::max(r[std::size_t(k / (ranks / stages))], all[std::size_t(k)]);
  return r;
}

void print_row(const runnable& x, const std::vector<double>& busy) {
  std::printf("  %-24s %9.3f ms %9.3f ms %9.3f ms %9.2f\n", x.name.c_str(), x.predicted * 1e3, x.measured.median * 1e3,
              x.measured.iqr() * 1e3, x.measured.median / x.predicted);
  if (!x.pipeline) return;
  for (int i = 0; i < x.pipeline->shape.stages; ++i) {
    const stage_figures& f = at(x.pipeline->stages, i);
    const double predicted = x.pipeline->shape.microbatches * f.slot_s + f.step_s;
    std::printf("    stage %d busy %9.3f ms, predicted %9.3f ms (%.2f)\n", i, busy[std::size_t(i)] * 1e3, predicted * 1e3,
                busy[std::size_t(i)] / predicted);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto [rank, ranks] = autoddl::mpi::init(&argc, &argv);
  const int rc = tools::guarded("bench_pipeline_prediction", [&] {
    const options o = parse(argc, argv);
    if (ranks % 2 != 0) throw error("run on an even number of ranks (mpirun -np 4): the pipelines have 2 stages");
    std::vector<runnable> rows = prepare(o, ranks);
    const auto seconds = bench::time_interleaved(rows.size(), o.warmup, o.rounds, [&](std::size_t i, int round) {
      rows[i].run->train_step(round);
      const step_profile& p = rows[i].run->last_step_profile();
      if (round >= o.warmup) rows[i].busy_s.push_back(p.total_s - p.pipe_wait_s);
    });
    std::vector<std::vector<double>> busy;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      rows[i].measured = bench::summarize(seconds[i]);
      busy.push_back(stage_busy(rows[i], ranks));
    }
    if (rank != 0) return;
    if (!o.json) {
      std::printf("%s on %d ranks (%s), %d interleaved rounds after %d warm-up\n", o.model.c_str(), ranks,
                  o.hardware.c_str(), o.rounds, o.warmup);
      std::printf("  %-24s %12s %12s %12s %9s\n", "plan", "predicted", "measured", "spread(IQR)", "meas/pred");
      for (std::size_t i = 0; i < rows.size(); ++i) print_row(rows[i], busy[i]);
      return;
    }
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::printf("%s\n", nlohmann::ordered_json{{"model", o.model}, {"ranks", ranks}, {"plan", rows[i].name},
                                                 {"stages", rows[i].pipeline ? rows[i].pipeline->shape.stages : 1},
                                                 {"predicted_s", rows[i].predicted}, {"measured_s", rows[i].measured.median},
                                                 {"spread_s", rows[i].measured.iqr()}, {"stage_busy_s", busy[i]}}
                              .dump()
                              .c_str());
  });
  MPI_Finalize();
  return rc;
}
