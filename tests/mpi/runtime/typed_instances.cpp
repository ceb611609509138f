// Typed models run their compiled instances (runtime/typed_program.hpp): a typed MLP, a typed
// transformer block and a typed two-block LLaMA, under random plans (fixed seeds, printed) on the
// job's ranks, trained once through the dynamic dispatch and once through their instances.
// Oracles: the two runs agree bit for bit (losses, updated parameters and gradients: the
// instances must run the same kernels on the same blocks), and both agree with a serial run of
// the model on rank 0 within 1e-4; every step sends the bytes the plan was priced with.
//
// Built twice, like train.cpp: on cpu_device, and with AUTODDL_TEST_OPAQUE_DEVICE on the opaque
// test device (suite generic).
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/runtime/typed_program.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/search/typed.hpp"

#include "test_executor.hpp"

using namespace autoddl;
using testing::executor;

namespace typed_instances_cases {

namespace {

using device_t = testing::executor_device;
using test_trainer = trainer<float, device_t, testing::executor_comm>;

template <class Mesh>
using typed_mlp = typed_model<float, Mesh, static_shape<8, 16>, layers::linear<32>, layers::relu<>, layers::linear<32>,
                              layers::relu<>, layers::linear<8>, layers::cross_entropy<>>;

template <class Mesh>
using typed_block = typed_model<
    float, Mesh, static_shape<4, 8, 32>,
    layers::residual<auto_layout, layers::layernorm<>, layers::self_attention<4, true>>,
    layers::residual<auto_layout, layers::layernorm<>, layers::linear<64>, layers::gelu<>, layers::linear<32>>,
    layers::layernorm<>, layers::cross_entropy<>>;

// Two LLaMA blocks (rmsnorm, grouped-query attention with rotary embeddings: 4 query heads
// sharing 2 key/value heads; rmsnorm, SwiGLU), a final rmsnorm and an output head without bias.
template <class Mesh, class Attention = layers::gqa_attention<4, 2>, class Mlp = layers::swiglu<64>>
using typed_llama = typed_model<
    float, Mesh, static_shape<4, 8, 32>,
    layers::repeat<2, layers::residual<auto_layout, layers::rmsnorm<>, Attention>,
                   layers::residual<auto_layout, layers::rmsnorm<>, Mlp>>,
    layers::rmsnorm<>, layers::linear<16, auto_layout, false>, layers::cross_entropy<>>;
// On 2x2, Megatron's layouts on axis 1 with the signature only grouped-query attention has
// (query heads split, keys and values whole, their linears replicated), which random plans might
// miss; the norms, adds and head are searched. Pinned, the blocks compile 1 instance an op where
// searched they would compile 9 to 49 (2x2's cost in this file's build time).
using grouped_attention = layers::gqa_attention<4, 2, true,
    pin<"[S(0),B]", "[B,S(1)]">,                 // q: column parallel
    pin<"[S(0),S(2)]", "[S(0),B]", "[S(0),B]">,  // core
    pin<"[S(0),S(2)]", "[B,S(0)]">,              // o: row parallel
    pin<"[S(0),B]", "[B,B]">>;                   // k, v
using megatron_swiglu = layers::swiglu<64, pin<"[S(0),B]", "[B,S(1)]">, pin<"[S(0),S(2)]", "[S(0),S(2)]">,
                                       pin<"[S(0),S(2)]", "[B,S(0)]">>;

constexpr int steps = 3;

struct run_result {
  std::vector<double> losses;
  std::vector<std::vector<float>> params, grads;  // this device's shards
  std::vector<nd_sbp> storage;                    // each parameter's storage layout
  std::int64_t bytes_off = 0;                     // steps whose bytes differ from the plan's
};

run_result train(const plan_problem& problem, const std::vector<int>& pick, executor& on, const op_program<float, device_t>* prog,
                 optimizer opt) {
  train_options to;
  to.opt = opt;
  to.lr = 1e-2;
  test_trainer t(plan_of(problem, pick), on.dev, on.comm, to);
  if (prog) t.run_instances(*prog);
  REQUIRE(t.runs_instances() == (prog != nullptr));
  run_result r;
  const double predicted = problem.untied().evaluate(pick).bytes;
  for (int s = 0; s < steps; ++s) {
    r.losses.push_back(t.train_step(s));
    r.bytes_off += double(t.last_step_bytes()) != predicted;
  }
  for (int p = 0; p < int(problem.model().params.size()); ++p) {
    r.params.push_back(t.param_shard(p));
    r.grads.push_back(t.grad_shard(p));
    r.storage.push_back(t.storage(p));
  }
  return r;
}

/// Serial run of the model's graph on this rank alone (mesh 1, everything replicated).
run_result serial_run(const graph& g, optimizer opt) {
  plan_options so;
  so.mesh = mesh_shape{1};
  so.hw = load_hardware("cpu-local");
  plan_problem problem(g, so);
  executor self(mesh_shape{1}, MPI_COMM_SELF);
  return train(problem, solve_plan(problem, strategy::dp{}).pick, self, nullptr, opt);
}

/// `plans` random plans of Model on the job's ranks: instances against the dynamic path (bit for
/// bit) and against serial (1e-4). SGD where a gradient is pure round-off (the attention key
/// bias: Adam's first step turns its sign into +-lr), Adam elsewhere.
template <class Model>
void check_instances(const char* name, int plans, optimizer opt) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const graph g = Model::to_graph(name);
  const run_result serial = rank == 0 ? serial_run(g, opt) : run_result{};
  plan_options o;
  o.hw = load_hardware("cpu-local");
  plan_problem problem(g, typed_plan_options<Model>(o));
  for (int k = 0; k < plans; ++k) {
    const std::uint64_t seed = 7919 * std::uint64_t(k + 1) + Model::size;
    INFO(name << " on " << to_string(Model::mesh) << ", random plan seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<int> pick(std::size_t(problem.untied().nodes()));
    for (int n = 0; n < problem.untied().nodes(); ++n) at(pick, n) = int(rng() % std::uint64_t(problem.untied().candidates(n)));
    plan_result plan;
    plan.pick = pick;
    const op_program<float, device_t> prog = typed_program<Model, float, device_t>(chosen_signatures(problem, plan));
    executor on(Model::mesh);
    const run_result dyn = train(problem, pick, on, nullptr, opt);
    const run_result inst = train(problem, pick, on, &prog, opt);
    CHECK(dyn.bytes_off == 0);
    CHECK(inst.bytes_off == 0);
    CHECK(inst.losses == dyn.losses);  // bit for bit
    CHECK(inst.params == dyn.params);
    CHECK(inst.grads == dyn.grads);
    double worst = 0;
    for (int p = 0; p < int(g.params.size()); ++p) {
      auto whole = gather_to_root(on.mpi, at(inst.params, p), at(g.params, p).shape, at(inst.storage, p));
      if (rank == 0) worst = std::max(worst, max_rel_error(whole, at(serial.params, p), 1e-3 * max_abs(serial.params)));
    }
    if (rank != 0) continue;
    double loss_err = 0;
    for (int s = 0; s < steps; ++s)
      loss_err = std::max(loss_err, std::abs(at(inst.losses, s) - at(serial.losses, s)) / std::abs(at(serial.losses, s)));
    std::printf("%s on %s, plan seed %llu: instances == dynamic bit for bit: %s; vs serial: loss %.2e, params %.2e\n", name,
                to_string(Model::mesh).c_str(), static_cast<unsigned long long>(seed),
                inst.losses == dyn.losses && inst.params == dyn.params && inst.grads == dyn.grads ? "yes" : "NO", loss_err,
                worst);
    CHECK(loss_err <= 1e-4);
    CHECK(worst <= 1e-4);
  }
}

int ranks() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace

TEST_CASE("typed models trained through their instances equal the dynamic path and serial training") {
  if (ranks() == 2) {
    check_instances<typed_mlp<static_mesh<2>>>("typed-mlp", 4, optimizer::adam);
    check_instances<typed_block<static_mesh<2>>>("typed-block", 3, optimizer::sgd_momentum);
    check_instances<typed_llama<static_mesh<2>>>("typed-llama", 3, optimizer::adam);
  } else if (ranks() == 4) {
    check_instances<typed_mlp<static_mesh<2, 2>>>("typed-mlp", 4, optimizer::adam);
    check_instances<typed_block<static_mesh<2, 2>>>("typed-block", 3, optimizer::sgd_momentum);
    using pinned_llama = typed_llama<static_mesh<2, 2>, grouped_attention, megatron_swiglu>;
    check_instances<pinned_llama>("typed-llama", 3, optimizer::adam);
  } else {
    SKIP("typed instance cases run on 2 or 4 ranks");
  }
}

TEST_CASE("a typed program for another plan is refused in one sentence") {
  if (ranks() != 2) SKIP("2 ranks");
  using M = typed_mlp<static_mesh<2>>;
  plan_options o;
  o.hw = load_hardware("cpu-local");
  plan_problem problem(M::to_graph("typed-mlp"), typed_plan_options<M>(o));
  plan_result dp = solve_plan(problem, strategy::dp{});
  std::vector<int> picks = chosen_signatures(problem, dp);
  // another allowed signature for op 0 (the first linear)
  const std::vector<std::vector<int>> allowed = M::allowed();
  for (int s : allowed.front())
    if (s != picks.front()) {
      picks.front() = s;
      break;
    }
  executor on(M::mesh);
  test_trainer t(plan_of(problem, dp.pick), on.dev, on.comm);
  auto program_of = [](const std::vector<int>& p) { return typed_program<M, float, device_t>(p); };
  CHECK_THROWS_AS(t.run_instances(program_of(picks)), layout_error);
  CHECK_THROWS_AS(program_of(std::vector<int>(2, 0)), layout_error);
}

}  // namespace typed_instances_cases
