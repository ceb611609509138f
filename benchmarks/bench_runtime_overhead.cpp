// Runtime overhead: a data-parallel MLP step through autoddl (plan dp, trainer, ring
// collectives) against the same step written by hand with MPI and OpenBLAS (cblas_sgemm, ReLU,
// softmax cross-entropy, one MPI_Allreduce of all gradients), both with the same optimizer:
// SGD with momentum as the trainer runs it (backend/device.hpp: v = momentum v + g; p -= lr v,
// the trainer's lr and the default momentum). The two are timed interleaved
// (benchmarks/interleaved.hpp): warm-up rounds dropped, median and inter-quartile range each.
// Target: autoddl / hand-written <= 1.10 on 2 ranks.
//   mpirun -np 2 build/benchmarks/bench_runtime_overhead [layers hidden batch in out] [--rounds N] [--warmup N]
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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

// The hand-written step: the model of build_mlp, the local batch of this rank.
struct hand_mlp {
  std::int64_t layers, hidden, batch, in, out;
  std::vector<std::vector<float>> w, b, dw, db, act;  // act[l]: input of layer l (post-ReLU)
  std::vector<std::vector<float>> w_velocity, b_velocity;  // SGD momentum state
  std::vector<float> x, grads;
  std::vector<std::int64_t> labels;
  int ranks;

  hand_mlp(std::int64_t l, std::int64_t h, std::int64_t bt, std::int64_t i, std::int64_t o, int r)
      : layers(l), hidden(h), batch(bt), in(i), out(o), ranks(r) {
    for (std::int64_t k = 0; k <= layers; ++k) {
      const std::int64_t fi = k == 0 ? in : hidden, fo = k == layers ? out : hidden;
      w.emplace_back(std::size_t(fi * fo));
      b.emplace_back(std::size_t(fo), 0.0f);
      for (std::size_t j = 0; j < w.back().size(); ++j) w.back()[j] = float(hashed_uniform(1, 1000 + std::uint64_t(k), j) * 0.05);
    }
    dw = w;
    db = b;
    for (const auto& v : w) w_velocity.emplace_back(v.size(), 0.0f);
    for (const auto& v : b) b_velocity.emplace_back(v.size(), 0.0f);
    x.resize(std::size_t(batch * in));
    for (std::size_t j = 0; j < x.size(); ++j) x[j] = float(hashed_uniform(2, 0, j));
    labels.resize(std::size_t(batch));
    for (std::size_t j = 0; j < labels.size(); ++j) labels[j] = std::int64_t(j * 7 % std::size_t(out));
    std::size_t total = 0;
    for (std::size_t k = 0; k < w.size(); ++k) total += w[k].size() + b[k].size();
    grads.resize(total);
  }

  void step(float lr, float momentum) {
    act.assign(std::size_t(layers + 2), {});
    act[0] = x;
    for (std::int64_t k = 0; k <= layers; ++k) {
      const std::int64_t fi = k == 0 ? in : hidden, fo = k == layers ? out : hidden;
      std::vector<float> y(std::size_t(batch * fo));
      for (std::int64_t r = 0; r < batch; ++r) std::copy(b[std::size_t(k)].begin(), b[std::size_t(k)].end(), y.begin() + r * fo);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(batch), int(fo), int(fi), 1.0f, act[std::size_t(k)].data(),
                  int(fi), w[std::size_t(k)].data(), int(fo), 1.0f, y.data(), int(fo));
      if (k < layers)
        for (float& v : y) v = std::max(v, 0.0f);
      act[std::size_t(k + 1)] = std::move(y);
    }
    // softmax cross-entropy, mean over the global batch
    std::vector<float> dy(std::size_t(batch * out));
    const float scale = 1.0f / float(batch * ranks);
    for (std::int64_t r = 0; r < batch; ++r) {
      const float* z = act[std::size_t(layers + 1)].data() + r * out;
      float m = *std::max_element(z, z + out), s = 0;
      for (std::int64_t c = 0; c < out; ++c) s += std::exp(z[c] - m);
      for (std::int64_t c = 0; c < out; ++c)
        dy[std::size_t(r * out + c)] = (std::exp(z[c] - m) / s - (c == labels[std::size_t(r)] ? 1.0f : 0.0f)) * scale;
    }
    for (std::int64_t k = layers; k >= 0; --k) {
      const std::int64_t fi = k == 0 ? in : hidden, fo = k == layers ? out : hidden;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(fi), int(fo), int(batch), 1.0f, act[std::size_t(k)].data(),
                  int(fi), dy.data(), int(fo), 0.0f, dw[std::size_t(k)].data(), int(fo));
      std::fill(db[std::size_t(k)].begin(), db[std::size_t(k)].end(), 0.0f);
      for (std::int64_t r = 0; r < batch; ++r)
        for (std::int64_t c = 0; c < fo; ++c) db[std::size_t(k)][std::size_t(c)] += dy[std::size_t(r * fo + c)];
      if (k == 0) break;
      std::vector<float> dx(std::size_t(batch * fi));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(batch), int(fi), int(fo), 1.0f, dy.data(), int(fo),
                  w[std::size_t(k)].data(), int(fo), 0.0f, dx.data(), int(fi));
      const auto& a = act[std::size_t(k)];
      for (std::size_t j = 0; j < dx.size(); ++j)
        if (a[j] <= 0) dx[j] = 0;
      dy = std::move(dx);
    }
    std::size_t o = 0;
    for (std::size_t k = 0; k < w.size(); ++k) {
      std::copy(dw[k].begin(), dw[k].end(), grads.begin() + std::ptrdiff_t(o));
      o += dw[k].size();
      std::copy(db[k].begin(), db[k].end(), grads.begin() + std::ptrdiff_t(o));
      o += db[k].size();
    }
    MPI_Allreduce(MPI_IN_PLACE, grads.data(), int(grads.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    o = 0;
    for (std::size_t k = 0; k < w.size(); ++k) {
      for (std::size_t j = 0; j < w[k].size(); ++j) {
        w_velocity[k][j] = momentum * w_velocity[k][j] + grads[o++];
        w[k][j] -= lr * w_velocity[k][j];
      }
      for (std::size_t j = 0; j < b[k].size(); ++j) {
        b_velocity[k][j] = momentum * b_velocity[k][j] + grads[o++];
        b[k][j] -= lr * b_velocity[k][j];
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const auto [rank, ranks] = autoddl::mpi::init(&argc, &argv);
  const int rc = tools::guarded("bench_runtime_overhead", [&] {
    std::int64_t a[5] = {4, 1024, 256, 1024, 16};
    int rounds = 10, warmup = 2, given = 0;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
      else if (arg == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
      else if (arg.rfind("--", 0) != 0 && given < 5) a[given++] = std::atoll(argv[i]);
      else throw error("unexpected argument '" + arg + "'; use [layers hidden batch in out] [--rounds N] [--warmup N]");
    }
    if (rounds < 5 || warmup < 0) throw error("give --rounds >= 5 and --warmup >= 0");
    const std::string spec = "mlp:layers=" + std::to_string(a[0]) + ",hidden=" + std::to_string(a[1]) +
                             ",batch=" + std::to_string(a[2]) + ",in=" + std::to_string(a[3]) + ",out=" + std::to_string(a[4]);
    plan_options o;
    o.mesh = mesh_shape{ranks};
    o.hw = load_hardware("cpu-local");
    plan_problem problem(build_model(spec), o);
    plan_result plan = solve_plan(problem, strategy::dp{});
    cpu_device dev;
    mpi::mpi_mesh_comm comm(o.mesh);
    train_options to;
    to.opt = optimizer::sgd_momentum;
    trainer<float, cpu_device, mpi::mpi_mesh_comm> t(plan_of(problem, plan.pick), dev, comm, to);
    hand_mlp h(a[0], a[1], a[2] / ranks, a[3], a[4], ranks);  // layers + 1 linears, as build_mlp
    const float momentum = float(optimizer_step{}.momentum);   // the trainer's SGD-momentum rule
    const auto seconds = bench::time_interleaved(2, warmup, rounds, [&](std::size_t which, int round) {
      if (which == 0) t.train_step(round);
      else h.step(float(to.lr), momentum);
    });
    const bench::spread_summary lib = bench::summarize(seconds[0]), hand = bench::summarize(seconds[1]);
    if (rank == 0) {
      std::printf("%s on %d ranks, SGD momentum %.2f lr %g on both, %d interleaved rounds after %d warm-up\n",
                  spec.c_str(), ranks, double(momentum), to.lr, rounds, warmup);
      std::printf("  autoddl dp step                  median %8.2f ms, spread (IQR) %6.2f ms\n", lib.median * 1e3,
                  lib.iqr() * 1e3);
      std::printf("  hand-written MPI+OpenBLAS step   median %8.2f ms, spread (IQR) %6.2f ms\n", hand.median * 1e3,
                  hand.iqr() * 1e3);
      std::printf("  ratio of medians %.3f (target <= 1.10); the medians %s apart by more than the sum of the IQRs\n",
                  lib.median / hand.median, bench::separated(lib, hand) ? "are" : "are not");
    }
  });
  MPI_Finalize();
  return rc;
}
