// Predicted against measured step time on this machine's MPI ranks (calibrated cpu-local), for
// the auto plan and the expert plans of a small GPT and a small VGG: per plan the measured
// median and spread, and whether the predicted order of the plans is the measured order where
// the measurement can tell.
//
// The plans of one model and mesh are timed interleaved (benchmarks/interleaved.hpp): each
// round runs one SGD-momentum step of every plan in rotated order; warm-up rounds are dropped;
// spread = inter-quartile range of a plan's measured steps. Two plans are ordered by the
// measurement only where their medians differ by more than the sum of their spreads, and only
// those pairs can disagree with the predicted order.
//   mpirun -np 2 build/benchmarks/bench_step_prediction [hardware] [--model SPEC]... [--rounds N] [--warmup N] [--json]
//   (hardware: a preset name or a profile file, e.g. one written by autoddl-calibrate --model;
//   --model replaces the default GPT and VGG; plans are priced for the SGD-momentum they run)
//   (also -np 4, which adds mesh 2x2). --json prints one JSON object per plan row instead of
//   the table: model, mesh, ranks, plan, predicted_s, measured_s, spread_s. --breakdown adds,
//   per plan, where rank 0's steps spent their time (medians over the rounds of the trainer's
//   step_profile) next to the predicted compute and communication.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/solve.hpp"
#include "interleaved.hpp"

using namespace autoddl;

namespace {

struct options {
  std::string hardware = "cpu-local";
  int rounds = 8;  // measured rounds per plan (at least 5)
  int warmup = 2;
  bool json = false;
  bool breakdown = false;
  std::vector<std::string> models;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") o.json = true;
    else if (a == "--breakdown") o.breakdown = true;
    else if (a == "--rounds" && i + 1 < argc) o.rounds = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) o.warmup = std::atoi(argv[++i]);
    else if (a == "--model" && i + 1 < argc) o.models.push_back(argv[++i]);
    else if (a.rfind("--", 0) != 0) o.hardware = a;
    else throw error("unknown option '" + a + "'; use [hardware] [--model SPEC]... [--rounds N] [--warmup N] [--json] [--breakdown]");
  }
  if (o.rounds < 5) throw error("--rounds " + std::to_string(o.rounds) + " is too few for quartiles; give at least 5");
  if (o.warmup < 0) throw error("--warmup must be >= 0");
  if (o.models.empty())
    o.models = {"gpt:layers=2,hidden=128,heads=4,seq=64,batch=16,vocab=256", "vgg11:image=32,classes=16,batch=16,fc=128"};
  return o;
}

using cpu_trainer = trainer<float, cpu_device, mpi::mpi_mesh_comm>;

// One plan ready to step: its own device, communicator and trainer.
struct runnable {
  std::string plan;
  double predicted = 0;
  cost_terms terms;
  double update = 0;  // predicted optimizer update, part of terms.compute_bwd
  std::vector<step_profile> profiles;
  std::unique_ptr<cpu_device> dev;
  std::unique_ptr<mpi::mpi_mesh_comm> comm;
  std::unique_ptr<cpu_trainer> run;
  bench::spread_summary measured;
};

std::vector<runnable> prepare(const plan_problem& problem, const mesh_shape& m) {
  std::vector<runnable> out;
  for (const char* s : {"auto", "dp", "megatron", "zero", "owt", "2d"}) {
    if (std::string(s) == "2d" && m.size() != 2) continue;
    plan_result r;
    try {
      r = solve_plan(problem, parse_strategy(s));
    } catch (const error&) {
      continue;  // the expert's rules do not fit this model and mesh
    }
    runnable x{s, r.time, r.totals, 0, {}, std::make_unique<cpu_device>(), std::make_unique<mpi::mpi_mesh_comm>(m), nullptr, {}};
    for (int p = 0; p < int(problem.model().params.size()); ++p)
      x.update += problem.param_terms(p, r.pick[std::size_t(problem.param_node(p))]).compute_bwd;
    train_options to;
    to.opt = optimizer::sgd_momentum;
    x.run = std::make_unique<cpu_trainer>(plan_of(problem, r.pick), *x.dev, *x.comm, to);
    out.push_back(std::move(x));
  }
  return out;
}

void print_table(const plan_problem& problem, const std::vector<runnable>& rows, const char* spec, int ranks, const mesh_shape& m, const options& o) {
  std::printf("%s on %d ranks, mesh %s (%s), %d interleaved rounds after %d warm-up\n", spec, ranks,
              to_string(m).c_str(), o.hardware.c_str(), o.rounds, o.warmup);
  const kernel_price_counts k = problem.kernel_price_counts_of();
  std::printf("  kernel prices: %d measured, %d fitted per op kind, %d analytical\n", k.measured, k.fitted, k.analytical);
  std::printf("  %-9s %12s %12s %12s %9s\n", "plan", "predicted", "measured", "spread(IQR)", "meas/pred");
  for (const auto& r : rows)
    std::printf("  %-9s %9.3f ms %9.3f ms %9.3f ms %9.2f\n", r.plan.c_str(), r.predicted * 1e3, r.measured.median * 1e3,
                r.measured.iqr() * 1e3, r.measured.median / r.predicted);
  int predicted_pairs = 0, separated_pairs = 0, disagree = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = i + 1; j < rows.size(); ++j) {
      const double dp = rows[i].predicted - rows[j].predicted;
      if (std::abs(dp) < 1e-12 * rows[i].predicted) continue;  // predicted tie: no order to check
      ++predicted_pairs;
      if (!bench::separated(rows[i].measured, rows[j].measured)) continue;
      ++separated_pairs;
      disagree += (dp > 0) != (rows[i].measured.median > rows[j].measured.median);
    }
  std::printf("  order: of %d plan pairs with distinct predictions, %d are measurably apart (medians differ by more\n"
              "  than the sum of their IQRs); the predicted order disagrees with the measured one on %d of those\n",
              predicted_pairs, separated_pairs, disagree);
}

double median_of(const std::vector<step_profile>& ps, double (*get)(const step_profile&)) {
  std::vector<double> v;
  for (const auto& p : ps) v.push_back(get(p));
  return tools::median(v);
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// Measured (rank 0, medians over rounds) against predicted, in ms.
void print_breakdown(const std::vector<runnable>& rows) {
  std::printf("  %-9s %18s %18s %18s %8s %8s %8s %8s %8s\n", "plan", "kernels meas/pred", "boxing meas/pred",
              "update meas/pred", "inputs", "accum", "loss", "sync", "rest");
  for (const auto& r : rows) {
    const auto& ps = r.profiles;
    const double k = median_of(ps, [](const step_profile& p) { return sum(p.kernel_s); });
    const double b = median_of(ps, [](const step_profile& p) { return sum(p.boxing_s); });
    const double rest = median_of(ps, [](const step_profile& p) {
      return p.total_s - sum(p.kernel_s) - sum(p.boxing_s) - p.inputs_s - p.accumulate_s - p.loss_s - p.sync_s - p.update_s;
    });
    const cost_terms& t = r.terms;
    std::printf("  %-9s %8.3f/%8.3f %8.3f/%8.3f %8.3f/%8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", r.plan.c_str(), k * 1e3,
                (t.compute_fwd + t.compute_bwd - r.update) * 1e3, b * 1e3, (t.comm_fwd + t.comm_bwd + t.comm_grad) * 1e3,
                median_of(ps, [](const step_profile& p) { return p.update_s; }) * 1e3, r.update * 1e3,
                median_of(ps, [](const step_profile& p) { return p.inputs_s; }) * 1e3,
                median_of(ps, [](const step_profile& p) { return p.accumulate_s; }) * 1e3,
                median_of(ps, [](const step_profile& p) { return p.loss_s; }) * 1e3,
                median_of(ps, [](const step_profile& p) { return p.sync_s; }) * 1e3, rest * 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto [rank, ranks] = autoddl::mpi::init(&argc, &argv);
  const int rc = tools::guarded("bench_step_prediction", [&] {
    const options o = parse(argc, argv);
    std::vector<mesh_shape> meshes{mesh_shape{ranks}};
    if (ranks == 4) meshes.push_back(mesh_shape{2, 2});
    for (const std::string& model : o.models) {
      const char* spec = model.c_str();
      for (const mesh_shape& m : meshes) {
        plan_options po;
        po.mesh = m;
        po.hw = load_hardware(o.hardware);
        po.opt = optimizer::sgd_momentum;  // what prepare()'s trainers run
        plan_problem problem(build_model(spec), po);
        std::vector<runnable> rows = prepare(problem, m);
        const auto seconds = bench::time_interleaved(rows.size(), o.warmup, o.rounds,
                                                     [&](std::size_t i, int round) {
                                                       rows[i].run->train_step(round);
                                                       rows[i].profiles.push_back(rows[i].run->last_step_profile());
                                                     });
        for (std::size_t i = 0; i < rows.size(); ++i) rows[i].measured = bench::summarize(seconds[i]);
        if (rank != 0) continue;
        if (!o.json) {
          print_table(problem, rows, spec, ranks, m, o);
          if (o.breakdown) print_breakdown(rows);
          continue;
        }
        for (const auto& r : rows)
          std::printf("%s\n", nlohmann::ordered_json{{"model", spec}, {"mesh", to_string(m)}, {"ranks", ranks}, {"plan", r.plan},
                                             {"predicted_s", r.predicted}, {"measured_s", r.measured.median},
                                             {"spread_s", r.measured.iqr()}}
                                  .dump()
                                  .c_str());
      }
    }
  });
  MPI_Finalize();
  return rc;
}
