// autoddl-calibrate: measures this machine and writes a hardware profile (docs/cost-model.md).
//   mpirun -np 2 autoddl-calibrate --out cpu-local.json            (1-D mesh of 2 ranks)
//   mpirun -np 4 autoddl-calibrate --mesh 2x2 --out mine.json
// Per mesh axis it times the ring collectives (backend/mpi) for 4 KiB..64 MiB and fits alpha, beta,
// gamma and, where the rate drops beyond a cache, a second regime (large_bytes, beta_large,
// gamma_large) by relative least squares (cost/calibration.hpp, fit_link_two_regimes); it times
// cblas_sgemm and cblas_dgemm on every rank at once (peak fp32 and fp64 = the slowest rank's
// rate, efficiency.gemm = 1) and a streaming triad for
// the memory bandwidth. The innermost axis gives the intra-node link, axis 0 the inter-node one
// (on a 1-D mesh both are the same fit). With --model SPEC (repeatable) it also measures every
// kernel the planner's candidates of those models run on the mesh, the boxing copy rate and the
// optimizer update (tools/calibrate_kernels.hpp); --base FILE takes links and device from a
// profile instead of measuring them again:
//   mpirun -np 2 autoddl-calibrate --base data/hardware/cpu-local.json --model gpt:layers=2 --out m.json
// --holdout fits the links on every other message size and prints measured/predicted for the
// sizes left out (an out-of-sample check of the alpha-beta model).
// Errors: one line on stderr, exit 2 on every rank.
#include <cblas.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fmt/core.h>
#include <string>
#include <type_traits>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/models.hpp"
#include "autoddl/runtime/op_kernels.hpp"

#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/calibration.hpp"
#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "calibrate_kernels.hpp"
#include "support/mpi_main.hpp"

namespace {

using namespace autoddl;

double wtime() { return MPI_Wtime(); }

// Efficiency of the runtime's own CPU kernels for one op of a model: (forward + backward FLOPs as
// the planner counts them) / measured seconds / peak. Element-wise work is priced at this rate
// (or the memory bandwidth, whichever is slower), so it must be the rate of the kernels that run.
double kernel_efficiency(const std::string& spec, op_kind kind, double peak, int reps) {
  graph g = build_model(spec);
  const op_node* op = nullptr;
  for (const auto& n : g.ops)
    if (n.kind == kind) {
      op = &n;
      break;
    }
  if (!op) throw error("calibration model '" + spec + "' has no " + std::string(to_string(kind)) + " op");
  cpu_device dev;
  const auto ctx = make_kernel_context<float>(*op, all_broadcast(*op, 1), mesh_shape{1}, mesh_coord{});
  std::vector<std::vector<float>> ins, prs;
  for (const auto& sh : ctx.shards.inputs) ins.emplace_back(std::size_t(sh.local.elements()), 0.25f);
  for (const auto& sh : ctx.shards.params) prs.emplace_back(std::size_t(sh.local.elements()), 0.01f);
  operands<float> in;
  for (const auto& v : ins) in.inputs.push_back(v);
  for (const auto& v : prs) in.params.push_back(v);
  std::vector<float> dy(std::size_t(ctx.shards.outputs[0].local.elements()), 0.1f);
  auto once = [&] {
    auto f = op_forward(dev, ctx, in);
    auto gr = op_backward(dev, ctx, in, f, std::span<const float>(dy));
    return gr.inputs.size();
  };
  once();
  const double t0 = wtime();
  std::size_t sink = 0;
  for (int r = 0; r < reps; ++r) sink += once();
  const double t = (wtime() - t0) / reps;
  return sink == 0 ? 0 : std::min(1.0, (forward_flops(*op) + backward_flops(*op)) / t / peak);
}


/// Slowest rank's value (min of a rate) or largest time.
double across_ranks(double v, MPI_Op op) {
  double r = 0;
  MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return r;
}

/// GEMM rate of one n^3 product in T (cblas_sgemm or cblas_dgemm), the slowest rank's.
template <class T>
void gemm_once(int n, const std::vector<T>& a, const std::vector<T>& b, std::vector<T>& c) {
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
}

template <class T>
double gemm_rate(int n, int reps) {
  std::vector<T> a(std::size_t(n) * std::size_t(n), T(0.5)), b(a.size(), T(0.25)), c(a.size(), T(0));
  gemm_once(n, a, b, c);
  double best = 1e30;
  for (int k = 0; k < reps; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = wtime();
    gemm_once(n, a, b, c);
    best = std::min(best, wtime() - t0);
  }
  return across_ranks(2.0 * n * n * double(n) / best, MPI_MIN);
}

double triad_bandwidth(std::int64_t elems, int reps) {
  std::vector<float> a(std::size_t(elems), 0.0f), b(a.size(), 1.0f), c(a.size(), 2.0f);
  double best = 1e30;
  for (int k = 0; k < reps; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = wtime();
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] + 0.5f * c[i];
    best = std::min(best, wtime() - t0);
  }
  volatile float sink = a[std::size_t(elems / 2)];
  (void)sink;
  return across_ranks(3.0 * double(elems) * sizeof(float) / best, MPI_MIN);
}

struct calibrate_options {
  std::string mesh_text, out = "cpu-local.json", name = "cpu-local", base;
  std::vector<std::string> models;
  std::int64_t min_bytes = 4096, max_bytes = std::int64_t(64) << 20, large_from = std::int64_t(1) << 20;
  int reps = 5, gemm_n = 1024, devices_per_node = 1, sweeps = 3, size_step = 2, kernel_reps = 7;
  bool holdout = false;
};

void add_options(CLI::App& app, calibrate_options& o) {
  app.add_option("--mesh", o.mesh_text, "mesh of the MPI ranks, e.g. 4 or 2x2 (default: all ranks on one axis)");
  app.add_option("--out", o.out, "profile file to write");
  app.add_option("--name", o.name, "profile name");
  app.add_option("--model", o.models, "also measure every kernel the planner's candidates of this model run on the mesh "
                                      "(repeatable; e.g. gpt:layers=2,hidden=128), the boxing copy rate and the optimizer");
  app.add_option("--base", o.base, "take links and device from this profile instead of measuring them (with --model)");
  app.add_option("--kernel-reps", o.kernel_reps, "timed repetitions per kernel (median taken)")->check(CLI::Range(1, 1000));
  app.add_option("--min-bytes", o.min_bytes, "smallest message (group bytes)")->check(CLI::PositiveNumber);
  app.add_option("--max-bytes", o.max_bytes, "largest message (group bytes)")->check(CLI::PositiveNumber);
  app.add_option("--fit-large-from", o.large_from, "beta (and the second regime) are fitted on messages of at least this many group bytes, alpha on smaller ones")
      ->check(CLI::PositiveNumber);
  app.add_option("--reps", o.reps, "timed repetitions per point (median taken)")->check(CLI::Range(1, 1000));
  app.add_option("--sweeps", o.sweeps, "sweeps over all sizes (median per point taken)")->check(CLI::Range(1, 100));
  app.add_option("--size-step", o.size_step, "factor between measured sizes")->check(CLI::Range(2, 16));
  app.add_flag("--holdout", o.holdout, "fit each axis's link on every other message size and report measured/predicted on "
                                       "the sizes left out (the profile keeps that half-data fit)");
  app.add_option("--gemm-n", o.gemm_n, "GEMM size n (n x n x n)")->check(CLI::Range(64, 8192));
  app.add_option("--devices-per-node", o.devices_per_node, "ranks per node (default: all ranks)")->check(CLI::PositiveNumber);
}

// One axis's collectives: whole sweeps repeated, median per point (a burst of other load on a
// shared machine then spoils one sweep's value of a point, not the point), then the fit.
autoddl::link measure_axis(mpi::ring_comm& comm, int n, const calibrate_options& o, int rank) {
  struct point {
    collective c;
    mpi::collective_timing t;
    std::vector<double> seconds;
  };
  std::vector<point> points;
  for (int sweep = 0; sweep < o.sweeps; ++sweep) {
    std::size_t i = 0;
    for (collective c : {collective::all_gather, collective::reduce_scatter, collective::all_reduce, collective::all_to_all})
      for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.size_step, ++i) {
        auto t = mpi::time_collective(comm, c, bytes, o.reps);
        if (sweep == 0) points.push_back({c, t, {}});
        points[i].seconds.push_back(t.seconds);
      }
  }
  std::vector<timing_sample> samples;
  std::vector<const point*> held_out;
  std::size_t in_collective = 0;  // index of the size within its collective's sweep
  for (std::size_t i = 0; i < points.size(); ++i, ++in_collective) {
    point& p = points[i];
    if (i > 0 && p.c != points[i - 1].c) in_collective = 0;
    std::sort(p.seconds.begin(), p.seconds.end());
    p.t.seconds = p.seconds[p.seconds.size() / 2];
    if (o.holdout && in_collective % 2 == 1) held_out.push_back(&p);
    else samples.push_back(sample_of(p.c, n, p.t.group_bytes, p.t.seconds));
    if (rank == 0)
      fmt::print("{:>16} {:>12} {:>12.3e} {:>10.3f}{}\n", to_string(p.c), p.t.group_bytes, p.t.seconds,
                 double(p.t.bytes_sent) / p.t.seconds / 1e9, o.holdout && in_collective % 2 == 1 ? "  (held out)" : "");
  }
  const autoddl::link l = fit_link_two_regimes(samples, "shared-memory", double(o.large_from));
  if (rank == 0 && !held_out.empty()) {
    // Out of sample: the fit above never saw these sizes.
    std::vector<double> ratios;
    fmt::print("held out ({} sizes, fitted on the other {}):\n{:>16} {:>12} {:>12} {:>12} {:>10}\n", held_out.size(),
               samples.size(), "collective", "T bytes", "measured", "predicted", "meas/pred");
    for (const point* p : held_out) {
      const double predicted = collective_time(p->c, n, p->t.group_bytes, l);
      ratios.push_back(p->t.seconds / predicted);
      fmt::print("{:>16} {:>12} {:>12.3e} {:>12.3e} {:>10.2f}\n", to_string(p->c), p->t.group_bytes, p->t.seconds, predicted,
                 ratios.back());
    }
    std::sort(ratios.begin(), ratios.end());
    const auto within = std::count_if(ratios.begin(), ratios.end(), [](double r) { return r >= 0.8 && r <= 1.25; });
    fmt::print("held out: measured/predicted median {:.2f}, range {:.2f}..{:.2f}; {} of {} within 0.8..1.25\n",
               ratios[ratios.size() / 2], ratios.front(), ratios.back(), within, ratios.size());
  }
  return l;
}

std::vector<autoddl::link> measure_links(const mesh_shape& shape, const calibrate_options& o, int rank) {
  mpi::mpi_mesh_comm mc(shape);
  std::vector<autoddl::link> fitted;
  for (int axis = 0; axis < shape.size(); ++axis) {
    if (rank == 0) fmt::print("axis {} ({} devices)\n{:>16} {:>12} {:>12} {:>10}\n", axis, shape[axis], "collective", "T bytes", "seconds", "GB/s");
    // an axis of one device never communicates
    fitted.push_back(shape[axis] > 1 ? measure_axis(mc.axis(axis), int(shape[axis]), o, rank) : autoddl::link{1e-7, 1e12, "none"});
    if (rank == 0) {
      const autoddl::link& l = fitted.back();
      fmt::print("axis {}: alpha = {:.3e} s, beta = {:.3e} B/s, gamma = {:.3e} s/B", axis, l.alpha, l.beta, l.gamma);
      if (l.two_regimes())
        fmt::print("; beyond {:.0f} bytes: beta_large = {:.3e} B/s, gamma_large = {:.3e} s/B", l.large_bytes, l.beta_large,
                   l.gamma_large);
      fmt::print("\n");
    }
  }
  return fitted;
}

hardware measure_hardware(const mesh_shape& shape, const calibrate_options& o, int rank, int size) {
  const std::vector<autoddl::link> fitted = measure_links(shape, o, rank);
  const double flops = gemm_rate<float>(o.gemm_n, 3);
  const double flops_fp64 = gemm_rate<double>(o.gemm_n, 3);
  const double bandwidth = triad_bandwidth(std::int64_t(8) << 20, 3);
  hardware h;
  h.name = o.name;
  h.description = "This machine's CPU ranks over shared memory (Open MPI), measured by autoddl-calibrate on mesh " +
                  to_string(shape) + " with " + std::to_string(size) + " ranks; one rank = one device.";
  h.sources = {"measured: ring collectives 4 KiB..64 MiB per axis (sizes x" + std::to_string(o.size_step) + ", median of " +
                   std::to_string(o.sweeps) + " sweeps); relative least squares: alpha on runs < " + std::to_string(o.large_from) +
                   " group bytes, beta and gamma on runs from there up to large_bytes, beta_large and gamma_large beyond (large_bytes chosen by least error)",
               "measured: cblas_sgemm " + std::to_string(o.gemm_n) + "^3 on every rank at once (peak fp32, efficiency.gemm = 1)",
               "measured: cblas_dgemm " + std::to_string(o.gemm_n) + "^3 on every rank at once (peak fp64)",
               "measured: streaming triad a = b + s*c over 3 x 32 MiB (memory_bandwidth)",
               "measured: efficiency.conv and efficiency.elementwise = the runtime's CPU kernels (a 3x3 conv of vgg11 and "
               "a GELU of gpt, forward + backward) in the planner's FLOPs over peak",
               "sysconf physical memory / devices_per_node (memory_bytes)",
               "overlap none: the CPU trainer's MPI ring collectives block inside backward (runtime/trainer.hpp)",
               std::string("MPI transport: btl_vader_single_copy_mechanism = ") +
                   (std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism") ? std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism") : "?") +
                   " (autoddl::mpi::init's default, backend/mpi/init.hpp; autoddl's programs run with the same)"};
  if (o.holdout) h.sources.push_back("--holdout: links fitted on every other message size only");
  h.devices_per_node = o.devices_per_node;
  h.overlap = overlap_rule::none;
  h.intra_node = fitted.back();
  h.inter_node = fitted.front();
  h.device.name = "cpu-rank";
  h.device.peak_flops = {flops, 0, 0, flops_fp64};
  h.device.efficiency = {1.0, kernel_efficiency("vgg11:image=32,classes=16,batch=8,fc=64", op_kind::conv2d, flops, 3),
                         kernel_efficiency("gpt:layers=1,hidden=256,heads=4,seq=128,batch=8,vocab=256", op_kind::gelu, flops, 5),
                         1.0};  // attention at the gemm rate (its measured kernel prices, where taken, come first)
  h.device.memory_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)) / double(o.devices_per_node);
  h.device.memory_bandwidth = bandwidth;
  if (rank == 0)
    fmt::print("gemm fp32: {:.1f} GFLOP/s, fp64: {:.1f} GFLOP/s per rank; conv efficiency {:.3f}, element-wise efficiency {:.4f}; triad: {:.2f} GB/s per rank\n",
               flops / 1e9, flops_fp64 / 1e9, h.device.efficiency[1], h.device.efficiency[2], bandwidth / 1e9);
  return h;
}

// The measured sections (tools/calibrate_kernels.hpp) for o.models on `shape`.
void measure_models(hardware& h, const mesh_shape& shape, const calibrate_options& o, int rank) {
  mpi::mpi_mesh_comm mc(shape);  // only for this rank's coordinates
  const std::vector<tools::kernel_case> cases = tools::kernel_cases(o.models, shape);
  h.measured.kernels.clear();
  for (const auto& c : cases) h.measured.kernels.push_back(tools::measure_kernel(c, shape, mc.coords(), o.kernel_reps));
  h.measured.copy = tools::measure_copy_rate(o.kernel_reps);
  h.measured.sgd_momentum = tools::measure_optimizer(false, o.kernel_reps);
  h.measured.adam = tools::measure_optimizer(true, o.kernel_reps);
  std::string models;
  for (const auto& m : o.models) models += (models.empty() ? "" : " ") + m;
  h.sources.push_back("measured: kernels = forward (context + op_forward) and backward (op_backward) of every distinct kernel of the "
                      "candidate signatures of " + models + " on mesh " + to_string(shape) +
                      ", all ranks at once, span from the first start to the last end per rep, median of " + std::to_string(o.kernel_reps) +
                      " reps, each after 2 MiB of other writes (operands out of the core's L2, as in a step), on values spread "
                      "like a step's");
  h.sources.push_back("measured: copy = runtime/boxing.hpp chunks_along/concat_along 16 KiB..16 MiB; optimizer = cpu_device "
                      "sgd_momentum/adam 1 Ki..4 Mi elements, each rep after 64 MiB of other writes; both fitted alpha + size * rate");
  if (rank == 0)
    fmt::print("kernels: {} measured; copy: alpha {:.2e} s, {:.2f} GB/s; sgd-momentum {:.2e} s/element, adam {:.2e} s/element\n",
               cases.size(), h.measured.copy.alpha, h.measured.copy.bandwidth / 1e9, h.measured.sgd_momentum.per_element,
               h.measured.adam.per_element);
}

int run(int argc, char** argv, int rank, int size) {
  CLI::App app{"Measures alpha, beta and GEMM rate of this machine (and with --model its kernels) and writes a hardware profile."};
  calibrate_options o;
  o.mesh_text = std::to_string(size);
  o.devices_per_node = size;
  add_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  const mesh_shape shape = parse_mesh(o.mesh_text);
  if (shape.devices() != size)
    throw error("mesh " + to_string(shape) + " has " + std::to_string(shape.devices()) + " devices but the job has " +
                std::to_string(size) + " ranks; pass --mesh with that many devices or change mpirun -np");
  if (!o.base.empty() && o.models.empty()) throw error("--base only makes sense with --model; give the models to measure");
  const double start = wtime();
  // a profile measured on OpenBLAS's fallback kernels prices GEMMs at their speed: say so first
  if (const auto advice = cpu_blas_core_advice(); advice && rank == 0) fmt::print(stderr, "autoddl-calibrate note: {}\n", *advice);
  hardware h = o.base.empty() ? measure_hardware(shape, o, rank, size) : load_hardware(o.base);
  if (!o.base.empty()) h.name = o.name;
  if (!o.models.empty()) measure_models(h, shape, o, rank);
  h.cpu_model = this_cpu_model();  // the CPU measured: autoddl-plan and -train say so on another
  if (rank == 0) {
    save_hardware(h, o.out);
    fmt::print("wrote {} in {:.1f} s\n", o.out, wtime() - start);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return autoddl::tools::mpi_main(argc, argv, "autoddl-calibrate", run); }
