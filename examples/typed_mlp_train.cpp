// A typed MLP trained on 2 MPI ranks: the first layer is pinned data parallel, the rest is left
// to the search; the compiler checks the pinned layouts, solve_plan picks the others, and the
// trainer runs each layer through the compiled instance of its pick (typed_program), sending
// exactly the predicted bytes.
//   mpirun -np 2 build/examples/typed_mlp_train
#include <autoddl/backend/cpu.hpp>
#include <autoddl/backend/mpi.hpp>
#include <autoddl/cost/hardware_io.hpp>
#include <autoddl/runtime/trainer.hpp>
#include <autoddl/runtime/typed_program.hpp>
#include <autoddl/search.hpp>

#include <cstdio>

using namespace autoddl;

using mlp = typed_model<float, static_mesh<2>, static_shape<32, 64>,
                        layers::linear<128, pin<"[S(0)]", "[B]">>,  // pinned: batch split, W replicated
                        layers::relu<>,                             // searched
                        layers::linear<128>,                        // searched
                        layers::relu<>,                             // searched
                        layers::linear<16>,                         // searched
                        layers::cross_entropy<>>;

int main(int argc, char** argv) {
  autoddl::mpi::init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  {
    plan_options o;
    o.hw = load_hardware("cpu-local");
    plan_problem problem(mlp::to_graph("typed-mlp"), typed_plan_options<mlp>(o));
    plan_result plan = solve_plan(problem, strategy::automatic{});
    cpu_device dev;
    mpi::mpi_mesh_comm comm(mlp::mesh);
    train_options to;
    to.lr = 1e-2;
    trainer<float, cpu_device, mpi::mpi_mesh_comm> t(plan_of(problem, plan.pick), dev, comm, to);
    t.run_instances(typed_program<mlp, float, cpu_device>(chosen_signatures(problem, plan)));
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      last = t.train_step(step % 2);  // two batches, seen again and again: the loss must fall
      if (step == 0) first = last;
      if (double(t.last_step_bytes()) != plan.totals.bytes) status = 1;
    }
    if (rank == 0) {
      for (int i = 0; i < int(mlp::size); ++i)
        std::printf("  %-10s %s\n", problem.model().ops[std::size_t(i)].name.c_str(),
                    to_string(problem.model().ops[std::size_t(i)], t.sig(i)).c_str());
      std::printf("typed MLP on 2 ranks: loss %.4f -> %.4f, %.0f bytes sent per step (as predicted: %s)\n", first, last,
                  plan.totals.bytes, status == 0 ? "yes" : "NO");
    }
    if (!(last < first)) status = 1;
  }
  MPI_Finalize();
  return status;
}
