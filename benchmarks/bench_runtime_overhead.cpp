// Runtime overhead: a data-parallel MLP step through autoddl (plan dp, trainer, ring
// collectives) against the same step written by hand with MPI and OpenBLAS (cblas_sgemm, ReLU,
// softmax cross-entropy, one MPI_Allreduce of all gradients, SGD), in the same run, alternating.
// Target: autoddl / hand-written <= 1.10 on 2 ranks.
//   mpirun -np 2 build/benchmarks/bench_runtime_overhead [layers hidden batch in out]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

// The hand-written step: the model of build_mlp, the local batch of this rank.
struct hand_mlp {
  std::int64_t layers, hidden, batch, in, out;
  std::vector<std::vector<float>> w, b, dw, db, act;  // act[l]: input of layer l (post-ReLU)
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
    x.resize(std::size_t(batch * in));
    for (std::size_t j = 0; j < x.size(); ++j) x[j] = float(hashed_uniform(2, 0, j));
    labels.resize(std::size_t(batch));
    for (std::size_t j = 0; j < labels.size(); ++j) labels[j] = std::int64_t(j * 7 % std::size_t(out));
    std::size_t total = 0;
    for (std::size_t k = 0; k < w.size(); ++k) total += w[k].size() + b[k].size();
    grads.resize(total);
  }

  void step(float lr) {
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
      for (float& v : w[k]) v -= lr * grads[o++];
      for (float& v : b[k]) v -= lr * grads[o++];
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::int64_t a[5] = {4, 1024, 256, 1024, 16};
  for (int i = 1; i < argc && i < 6; ++i) a[i - 1] = std::atoll(argv[i]);
  const std::string spec = "mlp:layers=" + std::to_string(a[0]) + ",hidden=" + std::to_string(a[1]) +
                           ",batch=" + std::to_string(a[2]) + ",in=" + std::to_string(a[3]) + ",out=" + std::to_string(a[4]);
  {
    plan_options o;
    o.mesh = mesh_shape{ranks};
    o.hw = load_hardware("cpu-local");
    plan_problem pp(build_model(spec), o);
    plan_result plan = solve_plan(pp, strategy::dp{});
    cpu_device dev;
    mpi::mpi_mesh_comm comm(o.mesh);
    train_options to;
    to.opt = optimizer::sgd_momentum;
    trainer<float, cpu_device, mpi::mpi_mesh_comm> t(pp, plan.pick, dev, comm, to);
    hand_mlp h(a[0], a[1], a[2] / ranks, a[3], a[4], ranks);  // layers + 1 linears, as build_mlp
    std::vector<double> ta, th;
    for (int rep = 0; rep < 12; ++rep) {  // alternate, so both see the same machine state
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now();
      t.train_step(rep);
      MPI_Barrier(MPI_COMM_WORLD);
      double t1 = now();
      h.step(1e-3f);
      MPI_Barrier(MPI_COMM_WORLD);
      double t2 = now();
      if (rep >= 2) {  // warm-up
        ta.push_back(t1 - t0);
        th.push_back(t2 - t1);
      }
    }
    if (rank == 0)
      std::printf("%s on %d ranks: autoddl dp step %.2f ms, hand-written MPI+OpenBLAS step %.2f ms, ratio %.3f (target <= 1.10)\n",
                  spec.c_str(), ranks, tools::median(ta) * 1e3, tools::median(th) * 1e3, tools::median(ta) / tools::median(th));
  }
  MPI_Finalize();
  return 0;
}
