// A typed LLaMA trained on 2 MPI ranks: two blocks of RMSNorm, grouped-query attention with
// rotary embeddings (4 query heads sharing 2 key/value heads) and a SwiGLU MLP, a final RMSNorm
// and an output head. The attention is pinned to Megatron's layouts (q, k, v column parallel:
// each rank holds 2 query heads and the key/value head they read; o row parallel); everything
// else is left to the search. The compiler instantiates every candidate and checks the pins,
// solve_plan picks the rest, and the trainer runs each op through the compiled instance of its
// pick (typed_program). Checked: every step sends the bytes the plan was priced with, each
// step's loss equals a serial run of the same graph on one rank (1e-4), and the loss falls.
//   mpirun -np 2 build/examples/typed_llama_block
#include <autoddl/backend/cpu.hpp>
#include <autoddl/backend/mpi.hpp>
#include <autoddl/cost/hardware_io.hpp>
#include <autoddl/runtime/trainer.hpp>
#include <autoddl/runtime/typed_program.hpp>
#include <autoddl/search.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

using namespace autoddl;

constexpr std::int64_t hidden = 64, ffn = 128, vocab = 32;
using megatron_gqa = layers::gqa_attention<4, 2, /*causal=*/true,
    pin<"[B]", "[S(1)]">,               // q, k, v: X, W  (column parallel: whole heads per rank)
    pin<"[S(2)]", "[S(2)]", "[S(2)]">,  // core: q, k, v  (2 query heads, 1 key/value head per rank)
    pin<"[S(2)]", "[S(0)]">>;           // o: X, W        (row parallel: partial sums)
using llama_block = layers::repeat<2,
    layers::residual<auto_layout, layers::rmsnorm<>, megatron_gqa>,
    layers::residual<auto_layout, layers::rmsnorm<>, layers::swiglu<ffn>>>;
using llama = typed_model<float, static_mesh<2>, static_shape<4, 16, hidden>, llama_block, layers::rmsnorm<>,
                          layers::linear<vocab, auto_layout, /*Bias=*/false>, layers::cross_entropy<>>;

constexpr int steps = 12;

/// Losses of `steps` steps of `problem` under `pick` on `comm`: two batches seen again and again.
template <class Comm>
std::vector<double> train(const plan_problem& problem, const std::vector<int>& pick, Comm& comm,
                          const op_program<float, cpu_device>* instances, bool* bytes_as_priced) {
  cpu_device dev;
  train_options to;
  to.lr = 1e-2;
  trainer<float, cpu_device, Comm> t(plan_of(problem, pick), dev, comm, to);
  if (instances) t.run_instances(*instances);
  const double priced = problem.untied().evaluate(pick).bytes;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    losses.push_back(t.train_step(step % 2));
    if (double(t.last_step_bytes()) != priced) *bytes_as_priced = false;
  }
  return losses;
}

int main(int argc, char** argv) {
  autoddl::mpi::init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  {
    const graph g = llama::to_graph("typed-llama");
    plan_options o;
    o.hw = load_hardware("cpu-local");
    plan_problem problem(g, typed_plan_options<llama>(o));
    const plan_result plan = solve_plan(problem, strategy::automatic{});
    const std::vector<int> chosen = chosen_signatures(problem, plan);  // per op, an index into its candidates
    const op_program<float, cpu_device> program = typed_program<llama, float, cpu_device>(chosen);
    mpi::mpi_mesh_comm comm(llama::mesh);
    bool bytes_as_priced = true;
    const std::vector<double> losses = train(problem, plan.pick, comm, &program, &bytes_as_priced);
    if (rank == 0) {
      // the same graph on this rank alone: mesh 1, every tensor whole
      plan_options so;
      so.mesh = mesh_shape{1};
      so.hw = o.hw;
      plan_problem serial(g, so);
      mpi::mpi_mesh_comm self(mesh_shape{1}, MPI_COMM_SELF);
      bool unused = true;
      const std::vector<double> reference = train(serial, solve_plan(serial, strategy::dp{}).pick, self, nullptr, &unused);
      double worst = 0;
      for (int s = 0; s < steps; ++s) worst = std::max(worst, std::abs(losses[s] - reference[s]) / std::abs(reference[s]));
      for (int i = 0; i < int(llama::size); ++i) {
        const op_node& op = problem.model().ops[std::size_t(i)];
        const signature sig = signatures(op, llama::mesh)[std::size_t(chosen[std::size_t(i)])];
        std::printf("  %-14s %s\n", op.name.c_str(), to_string(op, sig).c_str());
      }
      std::printf("typed LLaMA, %zu ops, %zu signatures instantiated, on 2 ranks: loss %.4f -> %.4f\n", llama::size,
                  llama::instantiated_signatures, losses.front(), losses.back());
      std::printf("bytes sent per step as predicted (%.0f): %s; loss vs serial, worst step: %.1e\n", plan.totals.bytes,
                  bytes_as_priced ? "yes" : "NO", worst);
      if (!bytes_as_priced || !(worst <= 1e-4) || !(losses.back() < losses.front())) status = 1;
    } else if (!bytes_as_priced) {
      status = 1;
    }
  }
  MPI_Finalize();
  return status;
}
