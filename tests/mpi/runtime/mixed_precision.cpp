// Mixed-precision training as the executor runs it (runtime/detail/precision.hpp): bf16 and fp16
// parameters and activations, fp32 master weights, gradient sums and optimizer state, and fp16's
// dynamic loss scale, on cpu_device and the MPI communicator.
//
// Oracles: fp32 training of the same model (the loss a bf16 run must follow); serial bf16
// training (random plans must equal it within bf16's round-off, derived below); bf16's spacing
// near 1 (an update below half of it is lost by a pure-bf16 update, kept by the master); a run
// without the step an injected overflow skipped.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/model_file.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/search/step_memory.hpp"

using namespace autoddl;

namespace mixed_cases {
namespace {

template <class T>
using cpu_trainer = trainer<T, cpu_device, mpi::mpi_mesh_comm>;

const std::string tiny_llama = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=8,vocab=64";

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

plan_problem problem_of(const graph& g, const mesh_shape& m, dtype type, optimizer opt, bool fp32_sums = true,
                        int microbatches = 1) {
  plan_options o;
  o.mesh = m;
  o.hw = load_hardware("cpu-local");
  o.type = type;
  o.opt = opt;
  o.zero1_layouts = true;
  o.zero2_layouts = true;
  o.fp32_gradient_sums = fp32_sums;  // the trainer's gradient sums, priced as it keeps them
  o.microbatches = microbatches;  // g is one micro-batch of the step (load_model(spec, microbatches))
  return plan_problem(g, o);
}

/// Losses of `steps` steps of `spec` trained serially on this rank alone in T.
template <class T>
std::vector<double> serial_losses(const std::string& spec, dtype type, const train_options& to, int steps) {
  const graph g = load_model(spec);
  plan_problem problem = problem_of(g, mesh_shape{1}, type, to.opt);
  mpi::mpi_mesh_comm comm(mesh_shape{1}, MPI_COMM_SELF);
  cpu_device dev;
  cpu_trainer<T> t(plan_of(problem, solve_plan(problem, strategy::dp{}).pick), dev, comm, to);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(t.train_step(s));
  return losses;
}

/// Every parameter's whole value (as float) on rank 0 after training.
template <class T>
std::vector<std::vector<float>> whole_params(cpu_trainer<T>& t, mpi::mpi_mesh_comm& comm, const graph& g) {
  std::vector<std::vector<float>> r;
  for (int p = 0; p < int(g.params.size()); ++p) {
    const std::vector<T> shard = t.param_shard(p);
    r.push_back(gather_to_root(comm, std::vector<float>(shard.begin(), shard.end()), g.params[std::size_t(p)].shape,
                               t.storage(p)));
  }
  return r;
}
template <class T>
std::vector<std::vector<float>> whole_grads(cpu_trainer<T>& t, mpi::mpi_mesh_comm& comm, const graph& g) {
  std::vector<std::vector<float>> r;
  for (int p = 0; p < int(g.params.size()); ++p)
    r.push_back(gather_to_root(comm, t.grad_shard(p), g.params[std::size_t(p)].shape, t.update_layout(p)));
  return r;
}

}  // namespace

// 100 steps of Adam at lr 1e-3: the loss falls from 4.6 to about 2 (the synthetic task is
// learnable), so the runs are compared while training, not at a fixed point. bf16 keeps 8 significant bits (a relative step of 2^-8 =
// 0.4% per rounding), and the master weights keep the updates bf16 would round away: the loss
// stays within 2% of fp32's at every step.
TEST_CASE("a tiny LLaMA trained in bf16 on 4 ranks follows the fp32 run's loss within 2% at every step",
          "[mpi][runtime][mixed][llama]") {
  if (world_size() != 4) SKIP("runs on 4 ranks");
  constexpr int steps = 100;
  train_options to;
  to.opt = optimizer::adam;
  to.lr = 1e-3;
  std::vector<double> fp32;
  if (world_rank() == 0) fp32 = serial_losses<float>(tiny_llama, dtype::fp32, to, steps);
  const graph g = load_model(tiny_llama);
  for (const std::string name : {"auto", "megatron:tp=2"}) {
    const plan_strategy strategy = parse_strategy(name);
    const mesh_shape mesh = planning_mesh(strategy, mesh_shape{4});  // megatron's: 2x2, tensor parallel inner
    plan_problem problem = problem_of(g, mesh, dtype::bf16, to.opt);
    mpi::mpi_mesh_comm comm(mesh);
    cpu_device dev;
    cpu_trainer<bf16> t(plan_of(problem, solve_plan(problem, strategy).pick), dev, comm, to);
    double worst = 0;
    int worst_step = 0;
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      const double loss = t.train_step(s);
      losses.push_back(loss);
      if (world_rank() != 0) continue;
      const double rel = std::abs(loss - fp32[std::size_t(s)]) / fp32[std::size_t(s)];
      if (rel > worst) worst = rel, worst_step = s;
      INFO(name << ": step " << s << " bf16 loss " << loss << ", fp32 loss " << fp32[std::size_t(s)]);
      CHECK(rel <= 0.02);  // (every rank trains on: a REQUIRE would leave the others waiting)
    }
    if (world_rank() == 0)
      std::printf("tiny LLaMA, %s on mesh %s in bf16: loss %.4f -> %.4f over %d steps (fp32 %.4f -> %.4f); largest "
                  "relative difference %.2e at step %d\n",
                  name.c_str(), to_string(mesh).c_str(), losses.front(), losses.back(), steps, fp32.front(), fp32.back(),
                  worst, worst_step);
  }
}

// The loss of a bf16 model in fp32, as the engines compute it. The oracle: the mean
// cross-entropy of the run's own bf16 logits (kept by keep_outputs) against the synthetic task's
// labels (the next id: runtime/data.hpp, label_shard), computed here in double. 6 sequences of 16
// make N = 96 rows, whose 1/N bf16 would round. A loss kept as a bf16 value, or scaled by a bf16
// 1/N, is off by up to 2^-9 of itself; the fp32 loss of 96 rows is within 1e-5 of the oracle.
TEST_CASE("a bf16 model's loss is computed and reported in fp32 from its bf16 logits", "[mpi][runtime][mixed][loss]") {
  if (world_rank() != 0) return;
  const graph g = load_model("llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=6,vocab=64");
  train_options to;
  to.keep_outputs = true;
  plan_problem problem = problem_of(g, mesh_shape{1}, dtype::bf16, to.opt);
  mpi::mpi_mesh_comm self(mesh_shape{1}, MPI_COMM_SELF);
  cpu_device dev;
  cpu_trainer<bf16> t(plan_of(problem, solve_plan(problem, strategy::dp{}).pick), dev, self, to);
  const double loss = t.train_step(0);
  const int head = g.op_inputs[std::size_t(g.loss_op)][0].op;  // the op that makes the logits
  const std::vector<bf16> logits = t.output_shard(head);
  const std::int64_t vocab = 64, rows = std::int64_t(logits.size()) / vocab;
  REQUIRE(rows == 6 * 16);
  double want = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const bf16* x = logits.data() + r * vocab;
    double top = -INFINITY, sum = 0;
    for (std::int64_t c = 0; c < vocab; ++c) top = std::max(top, double(x[c]));
    for (std::int64_t c = 0; c < vocab; ++c) sum += std::exp(double(x[c]) - top);
    const std::int64_t label = (index_value(0, vocab, to.seed, 0, r) + 1) % vocab;
    want += std::log(sum) + top - double(x[label]);
  }
  want /= double(rows);
  const double kept = double(t.output_shard(g.loss_op).at(0));  // the op's bf16 output, for the ops that read it
  std::printf("bf16 tiny LLaMA, 96 rows: loss %.7f reported, %.7f in double from its bf16 logits (relative "
              "difference %.1e); its bf16 output %.7f (%.1e off)\n",
              loss, want, std::abs(loss - want) / want, kept, std::abs(kept - want) / want);
  CHECK(std::abs(loss - want) <= 1e-5 * want);
  CHECK(std::abs(double(bf16(float(want))) - want) > 1e-5 * want);  // a 16-bit loss would be seen
  CHECK(std::abs(kept - want) <= 0x1p-8 * want);
}

// Random bf16 plans against serial bf16 training, 2 steps of SGD with momentum. What may differ is
// where bf16 rounds, not what is computed: a plan sums partial products and partial gradients in
// another order (in float), and a plan's collectives add bf16 partial sums, each addition rounded.
// One rounding of a value moves it by at most 2^-8 of its magnitude (half the spacing 2^-7 of
// bf16's significands in [1, 2)); a tensor passes through about 2 * (2 layers x 8 ops) roundings
// forward and backward, so a gradient element can differ by some multiple of 2^-8 of the largest
// gradient's scale; we allow 2^-3 of that scale (elements near zero cancel, so the error is
// measured against the tensor's largest magnitude, as the fp32 and fp64 suites do). The loss,
// computed in fp32 from bf16 logits that differ by their roundings, may differ by 2 of them (2 x 2^-8). The fp32 masters differ by lr
// x the gradient difference; where the two masters straddle a bf16 rounding boundary the bf16
// parameters differ by one whole spacing, at most 2^-7 of the value: 2^-7 + lr x 2^-3 x the
// gradients' scale over the parameters' scale.
TEST_CASE("random bf16 plans train like serial bf16 training within bf16's round-off, at the predicted bytes and peak",
          "[mpi][runtime][mixed][random]") {
  const int ranks = world_size(), rank = world_rank();
  train_options to;
  to.opt = optimizer::sgd_momentum;
  to.lr = 1e-2;
  const graph g = load_model(tiny_llama);
  std::vector<double> serial_loss;
  std::vector<std::vector<float>> serial_params, serial_grads;
  if (rank == 0) {
    plan_problem problem = problem_of(g, mesh_shape{1}, dtype::bf16, to.opt);
    mpi::mpi_mesh_comm self(mesh_shape{1}, MPI_COMM_SELF);
    cpu_device dev;
    cpu_trainer<bf16> t(plan_of(problem, solve_plan(problem, strategy::dp{}).pick), dev, self, to);
    for (int s = 0; s < 2; ++s) serial_loss.push_back(t.train_step(s));
    serial_params = whole_params(t, self, g);
    serial_grads = whole_grads(t, self, g);
  }
  plan_problem problem = problem_of(g, mesh_shape{ranks}, dtype::bf16, to.opt);
  for (int k = 0; k < 3; ++k) {
    const std::uint64_t seed = 5000 + 10 * std::uint64_t(ranks) + std::uint64_t(k);
    std::mt19937_64 rng(seed);
    const auto& u = problem.untied();
    std::vector<int> pick(std::size_t(u.nodes()));
    for (int n = 0; n < u.nodes(); ++n) pick[std::size_t(n)] = int(rng() % std::uint64_t(u.candidates(n)));
    INFO("tiny LLaMA on mesh " << ranks << ", random bf16 plan seed " << seed);
    mpi::mpi_mesh_comm comm(mesh_shape{ranks});
    cpu_device dev;
    cpu_trainer<bf16> t(plan_of(problem, pick), dev, comm, to);
    const double predicted = problem.untied().evaluate(pick).bytes;
    std::vector<double> losses;
    for (int s = 0; s < 2; ++s) {
      losses.push_back(t.train_step(s));
      CHECK(double(t.last_step_bytes()) == predicted);  // the collectives move bf16, as the plan prices them
    }
    // the step's replayed memory (search/step_memory.hpp) counts the fp32 master copy, gradient
    // sums and optimizer state the trainer keeps beside the bf16 parameters: the measured peak
    // (max over ranks) is the predicted one
    std::int64_t peak = t.last_step_peak_bytes();
    MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    const double peak_ratio = double(peak) / double(replay_step_memory(problem, pick).peak());
    const auto params = whole_params(t, comm, g);
    const auto grads = whole_grads(t, comm, g);
    if (rank != 0) continue;
    CHECK(peak_ratio >= 0.95);
    CHECK(peak_ratio <= 1.05);
    double worst_loss = 0, worst_grad = 0, worst_param = 0;
    for (int s = 0; s < 2; ++s)
      worst_loss = std::max(worst_loss, std::abs(losses[std::size_t(s)] - serial_loss[std::size_t(s)]) / serial_loss[std::size_t(s)]);
    for (std::size_t p = 0; p < g.params.size(); ++p) {
      worst_grad = std::max(worst_grad, max_rel_error(grads[p], serial_grads[p], 1e-3 * max_abs(serial_grads)));
      worst_param = std::max(worst_param, max_rel_error(params[p], serial_params[p], 1e-3 * max_abs(serial_params)));
    }
    std::printf("tiny LLaMA on mesh %d, random bf16 plan seed %llu: bytes/step %.0f (= predicted), peak measured/predicted "
                "%.3f; relative error vs serial bf16: loss %.2e, grads %.2e, params %.2e\n",
                ranks, static_cast<unsigned long long>(seed), predicted, peak_ratio, worst_loss, worst_grad, worst_param);
    CHECK(worst_loss <= 2 * 0x1p-8);
    CHECK(worst_grad <= 0x1p-3);
    CHECK(worst_param <= 0x1p-7 + to.lr * 0x1p-3 * max_abs(serial_grads) / max_abs(serial_params));
  }
}

// The measured peak of bf16 training against the replayed prediction (search/step_memory.hpp)
// under each ZeRO stage with Adam and with SGD with momentum: the trainer's bf16 parameters, fp32
// master weights, fp32 gradient sums and fp32 optimizer state, sharded as each stage shards them
// (docs/reference/cost.md's table). The oracle is the device's own count of bytes in use
// (mallinfo2 on the CPU), sampled by the trainer at every op boundary.
TEST_CASE("bf16 training's measured peak equals the predicted peak within 5% under ZeRO stages 1 to 3, Adam and SGD",
          "[mpi][runtime][mixed][memory]") {
  const int ranks = world_size(), rank = world_rank();
  if (ranks < 2) SKIP("ZeRO shards over 2 or more ranks");
  const graph g = load_model(tiny_llama);
  for (const optimizer opt : {optimizer::adam, optimizer::sgd_momentum})
    for (const std::string name : {"dp", "zero:stage=1", "zero:stage=2", "zero:stage=3"}) {
      train_options to;
      to.opt = opt;
      to.lr = 1e-3;
      plan_problem problem = problem_of(g, mesh_shape{ranks}, dtype::bf16, opt);
      const std::vector<int> pick = solve_plan(problem, parse_strategy(name)).pick;
      mpi::mpi_mesh_comm comm(mesh_shape{ranks});
      cpu_device dev;
      cpu_trainer<bf16> t(plan_of(problem, pick), dev, comm, to);
      const double predicted_bytes = problem.untied().evaluate(pick).bytes;
      for (int s = 0; s < 2; ++s) t.train_step(s);
      std::int64_t peak = t.last_step_peak_bytes();
      MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
      const step_memory predicted = replay_step_memory(problem, pick);
      if (rank != 0) continue;
      const double ratio = double(peak) / double(predicted.peak());
      INFO(name << ", " << to_string(opt) << " on " << ranks << " ranks: measured peak " << peak << " B, predicted "
                << predicted.peak() << " B (stored " << predicted.stored << " B)");
      CHECK(double(t.last_step_bytes()) == predicted_bytes);
      CHECK(ratio >= 0.95);
      CHECK(ratio <= 1.05);
      // what persists between steps, against docs/reference/cost.md's closed form: bf16 parameters
      // (2 bytes, sharded at stage 3) and the fp32 master with Adam's m and v (12) or SGD's velocity
      // (8), sharded from stage 1
      std::int64_t params = 0;
      for (const auto& q : g.params) params += q.shape.elements();
      const std::int64_t state = opt == optimizer::adam ? 12 : 8;
      const std::int64_t stored = (name == "zero:stage=3" ? 2 * params / ranks : 2 * params) +
                                  (name == "dp" ? state * params : state * params / ranks);
      CHECK(predicted.stored == stored);
      std::printf("tiny LLaMA in bf16, %s, %s on %d ranks: peak measured %lld B, predicted %lld B (ratio %.4f; stored "
                  "%lld B)\n",
                  name.c_str(), std::string(to_string(opt)).c_str(), ranks, static_cast<long long>(peak),
                  static_cast<long long>(predicted.peak()), ratio, static_cast<long long>(predicted.stored));
    }
}

// 16-bit gradient sums (the trainer's Sum = bf16: Megatron-LM's bf16 training with
// --grad-reduce-in-bf16, without fp32 accumulation): the gradients are summed, reduced and kept in
// bf16 and widened only as the update reads them; fp32 sums are reduced in fp32 (twice the bytes). Four micro-batches a step, so that the sums add in bf16:
// fp32 sums round once (for the collective, or not at all), bf16 sums after each of 3 additions.
// Oracles: the same plan trained with fp32 sums: the first step's gradients differ (the sums did
// add in bf16), by at most 3 roundings of 2^-9 of a partial sum, bounded here by 2^-6 of the
// tensor's largest gradient (elements near zero cancel); the loss follows within 2% at every step;
// and the device's bytes in use: the
// peak the replay predicts for a plan priced with 16-bit sums, and the difference to the fp32-sum
// run's peak (2 bytes per gradient element held at the peak) as predicted.
TEST_CASE("bf16 gradient sums train like fp32 sums, at the predicted, smaller peak", "[mpi][runtime][mixed][sums]") {
  const int ranks = world_size(), rank = world_rank();
  constexpr int microbatches = 4;  // of 4 sequences (the batch split over up to 4 ranks)
  const graph g = load_model("llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=16,vocab=64", microbatches);
  std::vector<std::string> names{"dp"};
  if (ranks > 1) names.insert(names.end(), {"zero:stage=1", "zero:stage=2", "zero:stage=3"});
  for (const std::string& name : names) {
    train_options to;
    to.opt = optimizer::adam;
    to.lr = 1e-3;
    plan_problem wide = problem_of(g, mesh_shape{ranks}, dtype::bf16, to.opt, true, microbatches);
    plan_problem narrow = problem_of(g, mesh_shape{ranks}, dtype::bf16, to.opt, false, microbatches);
    const std::vector<int> pick = solve_plan(wide, parse_strategy(name)).pick;  // one plan, priced both ways
    mpi::mpi_mesh_comm comm(mesh_shape{ranks});
    cpu_device dev;
    cpu_trainer<bf16> fp32_sums(plan_of(wide, pick), dev, comm, to);
    trainer<bf16, cpu_device, mpi::mpi_mesh_comm, bf16> bf16_sums(plan_of(narrow, pick), dev, comm, to);
    double worst_loss = 0, worst_grad = 0, differing = 0;
    std::int64_t params = 0;
    for (const auto& q : g.params) params += q.shape.elements();
    for (int s = 0; s < 20; ++s) {
      const double a = fp32_sums.train_step(s), b = bf16_sums.train_step(s);
      worst_loss = std::max(worst_loss, std::abs(b - a) / a);
      // the gradient collectives move the sums' type: fp32 or bf16, as priced; dp's only collectives
      // are each gradient's ring all-reduce, 2 (n - 1) / n of its bytes (every parameter's elements
      // divide by n here)
      CHECK(double(fp32_sums.last_step_bytes()) == wide.untied().evaluate(pick).bytes);
      CHECK(double(bf16_sums.last_step_bytes()) == narrow.untied().evaluate(pick).bytes);
      if (name == "dp") CHECK(fp32_sums.last_step_bytes() == 2 * (ranks - 1) * 4 * params / ranks);
      if (name == "dp") CHECK(bf16_sums.last_step_bytes() == 2 * (ranks - 1) * 2 * params / ranks);
      for (int p = 0; s == 0 && p < int(g.params.size()); ++p) {
        const std::vector<float> x = fp32_sums.grad_shard(p), y = bf16_sums.grad_shard(p);
        double scale = 0;
        for (float v : x) scale = std::max(scale, double(std::abs(v)));
        for (std::size_t e = 0; e < x.size(); ++e) {
          differing += x[e] != y[e];
          if (scale > 0) worst_grad = std::max(worst_grad, std::abs(double(x[e]) - double(y[e])) / scale);
        }
      }
    }
    std::int64_t peaks[2] = {fp32_sums.last_step_peak_bytes(), bf16_sums.last_step_peak_bytes()};
    MPI_Allreduce(MPI_IN_PLACE, peaks, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &worst_grad, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &differing, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const std::int64_t want_wide = replay_step_memory(wide, pick).peak(), want_narrow = replay_step_memory(narrow, pick).peak();
    if (rank != 0) continue;
    INFO(name << " on " << ranks << " ranks");
    std::printf("tiny LLaMA in bf16, %s on %d ranks, Adam, %d micro-batches: bf16 sums' first gradients differ from fp32 "
                "sums' in %.0f elements, by at most %.2e of the tensor's largest; loss within %.2e over 20 steps; peak "
                "measured %lld B (predicted %lld B) against fp32 sums' %lld B (predicted %lld B)\n",
                name.c_str(), ranks, microbatches, differing, worst_grad, worst_loss, static_cast<long long>(peaks[1]),
                static_cast<long long>(want_narrow), static_cast<long long>(peaks[0]), static_cast<long long>(want_wide));
    CHECK(differing > 0);
    CHECK(worst_grad <= 0x1p-6);
    CHECK(worst_loss <= 0.02);
    CHECK(std::abs(double(peaks[1]) / double(want_narrow) - 1) <= 0.05);
    CHECK(peaks[0] - peaks[1] == want_wide - want_narrow);
  }
}

// RMSNorm gains start at exactly 1, where bf16's spacing below 1 is 2^-8: a change smaller than
// half of it (2^-9 ~ 0.00195) rounds back to 1. Adam moves each element by about lr = 1e-3 per step
// (its first step by exactly lr), so a pure-bf16 update never moves a gain; the fp32 master
// accumulates the steps and, after enough of them (3 x 1e-3 > 2^-9 + margin), the bf16 gains move.
TEST_CASE("an update below bf16's resolution moves the fp32 master weights, and after enough steps the bf16 weights",
          "[mpi][runtime][mixed][master]") {
  if (world_rank() != 0) return;
  train_options to;
  to.opt = optimizer::adam;
  to.lr = 1e-3;
  REQUIRE(to.lr < 0x1p-9);  // below half the spacing of bf16 just under 1: a pure-bf16 update is lost
  REQUIRE(float(bf16(1.0f - float(to.lr))) == 1.0f);
  const graph g = load_model(tiny_llama);
  plan_problem problem = problem_of(g, mesh_shape{1}, dtype::bf16, to.opt);
  mpi::mpi_mesh_comm self(mesh_shape{1}, MPI_COMM_SELF);
  cpu_device dev;
  cpu_trainer<bf16> t(plan_of(problem, solve_plan(problem, strategy::dp{}).pick), dev, self, to);
  std::vector<int> gains;  // parameters that start at exactly 1
  for (int p = 0; p < int(g.params.size()); ++p) {
    const std::vector<bf16> v = t.param_shard(p);
    bool ones = !v.empty();
    for (bf16 x : v) ones = ones && float(x) == 1.0f;
    if (ones) gains.push_back(p);
  }
  REQUIRE(gains.size() >= 4);  // two norms per layer and the final one
  const auto moved = [&](int p, bool master) {
    int n = 0;
    if (master)
      for (float x : t.moment_shard(p, 2)) n += x != 1.0f;
    else
      for (bf16 x : t.param_shard(p)) n += float(x) != 1.0f;
    return n;
  };
  t.train_step(0);
  int master_moved = 0, bf16_moved = 0;
  for (int p : gains) master_moved += moved(p, true), bf16_moved += moved(p, false);
  std::printf("after 1 step at lr %.0e: %d gain elements moved in the fp32 master, %d in bf16\n", to.lr, master_moved,
              bf16_moved);
  CHECK(master_moved > 0);
  CHECK(bf16_moved == 0);
  for (int s = 1; s < 8; ++s) t.train_step(s);
  bf16_moved = 0;
  for (int p : gains) bf16_moved += moved(p, false);
  std::printf("after 8 steps: %d gain elements moved in bf16\n", bf16_moved);
  CHECK(bf16_moved > 0);  // a pure-bf16 update leaves every gain at 1
}

// fp16 with a dynamic loss scale of 1024 doubling after 3 clean steps (the loss gradient, scale /
// micro-batches, is an fp16 value: a scale of 65536 overflows at once, above fp16's 65,504): steps 0 and 1 are clean,
// step 2's loss gradient is made infinite (an injected overflow), so its update is skipped and the
// scale halves; steps 3, 4 and 5 are clean, and the third doubles it again. The run then equals a
// run that never took step 2 (steps 0, 1, 3, 4, 5): a power-of-two scale changes no rounding.
TEST_CASE("fp16: an overflowing step is skipped, the loss scale halves and training goes on", "[mpi][runtime][mixed][fp16]") {
  if (world_rank() != 0) return;
  train_options to;
  to.opt = optimizer::adam;
  to.lr = 1e-3;
  to.loss_scale = 1024;
  to.loss_scale_window = 3;
  const graph g = load_model(tiny_llama);
  plan_problem problem = problem_of(g, mesh_shape{1}, dtype::fp16, to.opt);
  const std::vector<int> pick = solve_plan(problem, strategy::dp{}).pick;
  mpi::mpi_mesh_comm self(mesh_shape{1}, MPI_COMM_SELF);
  cpu_device dev;
  train_options injected = to;
  injected.inject_overflow_step = 2;
  cpu_trainer<fp16> t(plan_of(problem, pick), dev, self, injected), plain(plan_of(problem, pick), dev, self, to);
  const std::vector<double> want_scale{1024, 1024, 512, 512, 512, 1024};
  std::vector<double> losses, plain_losses;
  for (int s = 0; s < 6; ++s) {
    const std::vector<fp16> before = t.param_shard(0);
    losses.push_back(t.train_step(s));
    INFO("step " << s);
    CHECK(t.loss_scale() == want_scale[std::size_t(s)]);
    CHECK(t.last_step_skipped() == (s == 2));
    if (s == 2) CHECK(t.param_shard(0) == before);  // skipped: nothing updated
    CHECK(std::isfinite(losses.back()));
    if (s != 2) plain_losses.push_back(plain.train_step(s));
  }
  CHECK(t.steps_done() == 5);
  for (int s : {3, 4, 5}) CHECK(losses[std::size_t(s)] == plain_losses[std::size_t(s - 1)]);
  // The master weights equal those of the run without step 2 but where a gradient element was an
  // fp16 subnormal (below 2^-14 before unscaling): its rounding depends on the scale, 512 here
  // and 1024 or 2048 there, and Adam's update of such an element can differ by up to lr per step.
  double worst = 0;
  int differ = 0, elements = 0;
  for (int p = 0; p < int(g.params.size()); ++p) {
    const std::vector<float> a = t.moment_shard(p, 2), b = plain.moment_shard(p, 2);
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i]))), differ += a[i] != b[i];
    elements += int(a.size());
  }
  CHECK(worst <= 3 * to.lr);
  CHECK(differ * 1000 <= elements);  // fewer than 1 in 1000 elements
  std::printf("fp16, overflow injected at step 2: loss scale after each step 1024 1024 512 512 512 1024, losses %.4f "
              "%.4f (skipped) %.4f %.4f %.4f, equal to the run without step 2; master weights: %d of %d elements "
              "differ, by at most %.2e\n",
              losses[0], losses[1], losses[3], losses[4], losses[5], differ, elements, worst);
}

}  // namespace mixed_cases
