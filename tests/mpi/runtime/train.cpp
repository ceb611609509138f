// The library's central invariant: any valid plan computes the same loss, gradients and
// updated parameters as serial execution, with any micro-batches and recomputation. Random plans
// (fixed seeds, printed) of small GPT, VGG and MLP models on the job's ranks, on 1-D and 2-D
// meshes, against a serial run on rank 0; every step sends exactly the bytes the plan was priced
// with; and m micro-batches train like one batch of m times their rows (serially).
//
// The random-plan suites train in double (plans priced in fp64) against a double serial run, to
// 1e-10: float32's round-off (about 1e-7 relative, summed in another order by another GEMM
// shape) can flip a discrete decision, a ReLU at zero or a max-pool tie, whose gradient then goes
// elsewhere, so that a float32 oracle fails on one BLAS and passes on another, and a float32
// tolerance loose enough for that (1e-4) would hide a real error of 1e-6. Double round-off is
// 1e-16: no tie is that close in these inputs, and a real error of 1e-6 fails the check. One
// float32 smoke test stays, on models without such decisions (GPT: GELU, softmax, layernorm), and
// reports the first op whose output leaves serial execution when it fails.
//
// Built twice: on cpu_device, and with AUTODDL_TEST_OPAQUE_DEVICE on the opaque test device
// (tests/support/opaque_device.hpp: memory the host cannot reach), the meson suite `generic`,
// which proves the executor touches model tensors only through the Device and the communicator.
// Built a third time with AUTODDL_TEST_SIDE_QUEUE too, on side_queue_opaque_device, whose side
// queue defers the gradient boxings the executor puts there until the join (and catches a
// main-queue step that touches their memory before it): the same results, and each step of a
// plan whose parameter gradients box must have deferred steps and joined once.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "autoddl/models/model_file.hpp"
#include "autoddl/backend/cpu.hpp"
#include "autoddl/backend/mpi.hpp"
#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/runtime/gather.hpp"
#include "autoddl/runtime/trainer.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/plan_of.hpp"
#include "autoddl/search/solve.hpp"
#include "autoddl/search/step_memory.hpp"

#include "decisions.hpp"
#include "sampling.hpp"
#include "test_executor.hpp"

using namespace autoddl;
using testing::executor;

namespace train_cases {

namespace {

template <class T>
using test_trainer = trainer<T, testing::executor_device, testing::executor_comm>;
static_assert(MeshCommunicator<testing::executor_comm>);
// Which pairs offer a side queue (backend/communicator.hpp): the CPU with MPI blocks, so not it.
static_assert(!SideQueue<cpu_device, mpi::mpi_mesh_comm>);
static_assert(SideQueue<testing::executor_device, testing::executor_comm> ==
#if defined(AUTODDL_TEST_SIDE_QUEUE)
              true
#else
              false
#endif
);

#if defined(AUTODDL_TEST_SIDE_QUEUE)
/// The parameter slots whose gradient the plan boxes (dual(compute) -> summing layout), which
/// the executor queues on a side queue in the last micro-batch's backward, and the collectives
/// among their paths' steps (each one a deferred step on every rank; a local step may queue
/// nothing on some ranks: B -> P on coordinate 0).
struct boxed_gradients {
  int paths = 0, collectives = 0;
};
boxed_gradients boxed_param_gradients(const plan& paths) {
  boxed_gradients n;
  for (int i = 0; i < int(paths.g().ops.size()); ++i)
    for (std::size_t j = 0; j < paths.g().ops[std::size_t(i)].param_ids.size(); ++j) {
      const boxing_path& path = paths.param(i, j).backward;
      n.paths += path.size() > 0 ? 1 : 0;
      for (const auto& st : path)
        n.collectives += st.op == collective::all_gather || st.op == collective::all_reduce ||
                         st.op == collective::reduce_scatter || st.op == collective::all_to_all;
    }
  return n;
}
#endif

/// The element type a suite trains in, its priced dtype and its tolerance against serial.
template <class T>
struct precision;
template <>
struct precision<double> {
  static constexpr dtype type = dtype::fp64;
  static constexpr double tolerance = 1e-10;
};
template <>
struct precision<float> {
  static constexpr dtype type = dtype::fp32;
  static constexpr double tolerance = 1e-4;
};

std::vector<mesh_shape> meshes_for(int ranks) {
  std::vector<mesh_shape> m{mesh_shape{ranks}};
  if (ranks == 4) m.push_back(mesh_shape{2, 2});
  if (ranks == 8) {
    m.push_back(mesh_shape{2, 4});
    m.push_back(mesh_shape{4, 2});
  }
  return m;
}

/// How a random plan is drawn: every candidate alike, or with each attention core's layout drawn
/// among its context-parallel ones (q split on the sequence on some axis, k and v gathered), or
/// each experts op's among its expert-parallel ones (whole experts per device on some axis).
enum class plan_draw { uniform, context_parallel, expert_parallel };

/// Whether an op of `kind` runs context or expert parallel under sig: an attention core's query
/// sequence split on some axis, an experts or routed_experts op's whole experts split (its
/// weights S(0) on some axis; the capacity-bound experts op's X is then S(1) there).
bool context_parallel(const signature& sig, op_kind kind = op_kind::attention) {
  if (kind == op_kind::experts || kind == op_kind::routed_experts) {
    for (int a = 0; a < sig.params[0].size(); ++a)
      if (sig.params[0][a] == S(0)) return true;
    return false;
  }
  for (int a = 0; a < sig.inputs[0].size(); ++a)
    if (sig.inputs[0][a] == S(1)) return true;
  return false;
}

/// Whether ops of kind k are the ones a draw picks among: attention cores, or either experts op.
bool drawn_kind(plan_draw draw, op_kind k) {
  if (draw == plan_draw::context_parallel) return k == op_kind::attention;
  return k == op_kind::experts || k == op_kind::routed_experts;
}

std::vector<int> random_plan(const plan_problem& problem, std::uint64_t seed, plan_draw draw = plan_draw::uniform) {
  std::mt19937_64 rng(seed);
  const auto& u = problem.untied();
  std::vector<int> pick(std::size_t(u.nodes()));
  for (int n = 0; n < u.nodes(); ++n) pick[std::size_t(n)] = int(rng() % std::uint64_t(u.candidates(n)));
  if (draw == plan_draw::uniform) return pick;
  for (int op = 0; op < int(problem.model().ops.size()); ++op) {
    const op_kind kind = problem.model().ops[std::size_t(op)].kind;
    if (!drawn_kind(draw, kind)) continue;
    std::vector<int> cp;
    for (int c = 0; c < int(problem.op_candidates(op).size()); ++c)
      if (context_parallel(problem.op_candidates(op)[std::size_t(c)], kind)) cp.push_back(c);
    if (!cp.empty()) pick[std::size_t(op)] = cp[rng() % cp.size()];
  }
  return pick;
}

/// How many attention cores (experts ops) plan `pick` runs context (expert) parallel.
int context_parallel_cores(const plan_problem& problem, const std::vector<int>& pick, plan_draw draw) {
  int n = 0;
  for (int op = 0; op < int(problem.model().ops.size()); ++op) {
    const op_kind kind = problem.model().ops[std::size_t(op)].kind;
    n += drawn_kind(draw, kind) && context_parallel(problem.op_candidates(op)[std::size_t(pick[std::size_t(op)])], kind);
  }
  return n;
}

/// Whether some op the draw picks among has a context- or expert-parallel candidate (the mesh and
/// the shapes allow the draw).
bool drawable(const plan_problem& problem, plan_draw draw) {
  for (int op = 0; op < int(problem.model().ops.size()); ++op) {
    const op_kind kind = problem.model().ops[std::size_t(op)].kind;
    if (drawn_kind(draw, kind))
      for (const signature& sig : problem.op_candidates(op))
        if (context_parallel(sig, kind)) return true;
  }
  return false;
}

/// What a step runs: micro-batches (the graph is one of them), recomputation, whether gathered
/// inputs and parameters are gathered again for backward, and the plan: random draws, or an
/// expert strategy's plan where `strategy` names one.
struct schedule {
  int microbatches = 1;
  recompute_mode recompute = recompute_mode::none;
  bool regather = true;
  bool reshard = true;
  std::string strategy{};
};

std::string to_string(const schedule& sc) {
  return std::to_string(sc.microbatches) + " micro-batches, recompute " + std::string(autoddl::to_string(sc.recompute)) +
         ", regather " + (sc.regather ? "on" : "off") + ", reshard " + (sc.reshard ? "on" : "off") +
         (sc.strategy.empty() ? "" : ", strategy " + sc.strategy);
}

/// Losses of every step, then parameters and gradients after the last, of one training run (and
/// every op's first output in the last step, with train_options::keep_outputs).
template <class T>
struct run_result {
  std::vector<double> losses;
  std::vector<std::vector<T>> params, grads, outputs;
};

/// Trains `spec` serially (mesh 1, this rank alone) for `steps` steps under schedule sc.
template <class T>
run_result<T> serial_run(const std::string& spec, const schedule& sc, const train_options& to, int steps) {
  const graph g = load_model(spec, sc.microbatches);
  plan_options so;
  so.mesh = mesh_shape{1};
  so.hw = load_hardware("cpu-local");
  so.type = precision<T>::type;
  so.microbatches = sc.microbatches;
  so.recompute = sc.recompute;
  plan_problem problem(g, so);
  executor self(mesh_shape{1}, MPI_COMM_SELF);
  test_trainer<T> t(plan_of(problem, solve_plan(problem, strategy::dp{}).pick), self.dev, self.comm, to);
  run_result<T> r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(t.train_step(s));
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    r.params.push_back(t.param_shard(int(p)));
    r.grads.push_back(t.grad_shard(int(p)));
  }
  if (to.keep_outputs)
    for (int op = 0; op < int(g.ops.size()); ++op) r.outputs.push_back(t.output_shard(op));
  return r;
}

/// Whether two plans run alike: the same signatures, chains, parameter layouts and the same steps
/// on every boxing path (a path's summed cost is the planner's note, not something that runs).
bool same_steps(const boxing_path& a, const boxing_path& b) {
  if (a.size() != b.size()) return false;
  for (int k = 0; k < a.size(); ++k)
    if (!(a[k] == b[k])) return false;
  return true;
}
bool runs_alike(const plan& a, const plan& b) {
  bool same = a.ops.size() == b.ops.size() && a.params.size() == b.params.size() && a.microbatches == b.microbatches &&
              a.recompute == b.recompute && a.mesh == b.mesh && a.type == b.type && a.stage_first_ops == b.stage_first_ops;
  for (std::size_t i = 0; same && i < a.ops.size(); ++i) {
    const op_plan &x = a.ops[i], &y = b.ops[i];
    same = x.sig == y.sig && x.chained == y.chained && x.inputs.size() == y.inputs.size() && x.params.size() == y.params.size();
    for (std::size_t j = 0; same && j < x.inputs.size(); ++j)
      same = same_steps(x.inputs[j].forward, y.inputs[j].forward) && same_steps(x.inputs[j].backward, y.inputs[j].backward);
    for (std::size_t j = 0; same && j < x.params.size(); ++j)
      same = same_steps(x.params[j].forward, y.params[j].forward) && same_steps(x.params[j].backward, y.params[j].backward);
  }
  for (std::size_t q = 0; same && q < a.params.size(); ++q)
    same = a.params[q].layouts == b.params[q].layouts && same_steps(a.params[q].sync, b.params[q].sync) &&
           same_steps(a.params[q].gather, b.params[q].gather) && same_steps(a.params[q].slice, b.params[q].slice);
  return same;
}

/// Plan `pick` of `problem` as autoddl-train --plan runs it: written as a plan file (text), read
/// back and made a plan value while the planner is forbidden (forbid_planning): nothing is
/// priced or searched; the model is loaded from its spec, as the program loads it.
plan through_plan_file(const plan_problem& problem, const std::vector<int>& pick, const std::string& spec) {
  const std::string text = plan_file_json(problem, result_of(problem, pick, strategy::automatic{}), spec, "cpu-local").dump();
  const plan_file f = parse_plan_file(text, "(random plan)");
  const plan direct = plan_of(problem, pick);
  auto g = shared_graph(load_model(spec, problem.options().microbatches));
  const forbid_planning guard;
  CHECK_THROWS_AS(plan_problem(*g, problem.options()), error);  // the guard holds
  plan p = plan_value_of(f, std::move(g));
  CHECK(runs_alike(p, direct));
  return p;
}

/// What a disagreement with serial execution means: a failure (the random-plan suites), or, for
/// a float32 diagnosis, something a flipped ReLU or max-pool decision must explain.
enum class oracle { equal, explained_by_flips };

/// Trains one step of plan `pick` and of a serial run again, keeping every op's outputs, and
/// returns on rank 0 the ReLU and max-pool decisions the two took differently in that first step
/// (decisions.hpp; a later step's inputs differ already where an earlier one flipped), each printed.
template <class T>
std::vector<testing::flipped_decision> flipped_decisions_of(const std::string& spec, const schedule& sc,
                                                            const plan_problem& problem, const std::vector<int>& pick,
                                                            train_options to) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  to.keep_outputs = true;
  run_result<T> serial;
  if (rank == 0) serial = serial_run<T>(spec, schedule{sc.microbatches, recompute_mode::none}, to, 1);
  executor on(problem.options().mesh);
  test_trainer<T> t(plan_of(problem, pick), on.dev, on.comm, to);
  t.train_step(0);
  const graph& g = problem.model();
  std::vector<std::vector<T>> ours;
  for (int op = 0; op < int(g.ops.size()); ++op)
    ours.push_back(testing::assemble_on_root(on.mpi, t.output_shard(op), g.ops[std::size_t(op)].outputs[0],
                                             t.sig(op).outputs[0]));
  if (rank != 0) return {};
  const std::vector<testing::flipped_decision> flips = testing::flipped_decisions(g, ours, serial.outputs);
  for (const auto& f : flips) std::printf("  flipped decision: %s\n", f.text.c_str());
  if (flips.empty()) std::printf("  no ReLU or max-pool decision differs from serial execution\n");
  return flips;
}

/// Random plans of `spec` under schedule sc on the job's ranks (every mesh of meshes_for, or the
/// 1-D one only), each against a serial run of the same micro-batches without recomputation on
/// rank 0, and each step's bytes against the plan's; in T (double unless a smoke test says float).
/// Under the sanitizers, testing::sampled(plans) plans per mesh (sampling.hpp).
template <class T = double>
void check_model(const std::string& spec, int plans, optimizer opt, schedule sc = {}, bool every_mesh = true,
                 oracle want = oracle::equal, plan_draw draw = plan_draw::uniform) {
  constexpr double tolerance = precision<T>::tolerance;
  int ranks = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const graph g = load_model(spec, sc.microbatches);
  train_options to;
  to.opt = opt;
  to.lr = 1e-2;
  run_result<T> serial;
  if (rank == 0) serial = serial_run<T>(spec, schedule{sc.microbatches, recompute_mode::none}, to, 2);
  std::vector<mesh_shape> meshes = meshes_for(ranks);
  if (!every_mesh) meshes.resize(1);
  for (const mesh_shape& m : meshes) {
    plan_options o;
    o.mesh = m;
    o.hw = load_hardware("cpu-local");
    o.type = precision<T>::type;
    o.microbatches = sc.microbatches;
    o.recompute = sc.recompute;
    o.regather_inputs = sc.regather;
    o.reshard_after_forward = sc.reshard;
    o.opt = opt;              // priced with the optimizer state the trainer keeps
    o.zero1_layouts = true;   // random plans draw ZeRO-1's and ZeRO-2's parameter layouts too
    o.zero2_layouts = true;
    plan_problem problem(g, o);
    for (int k = 0; k < testing::sampled(plans); ++k) {
      const std::uint64_t seed = 1000 * std::uint64_t(ranks) + 17 * std::uint64_t(k) + std::uint64_t(m.size()) +
                                 100 * std::uint64_t(sc.microbatches - 1) + 7 * std::uint64_t(sc.recompute) +
                                 (sc.regather ? 0 : 3) + (sc.reshard ? 0 : 5);
      INFO(spec << " on mesh " << to_string(m) << ", " << to_string(sc) << ", random plan seed " << seed);
      // odd plans of a context-parallel draw keep the uniform draw's attention layouts
      std::vector<int> pick = sc.strategy.empty() ? random_plan(problem, seed, k % 2 == 0 ? draw : plan_draw::uniform)
                                                  : solve_plan(problem, parse_strategy(sc.strategy)).pick;
      const int cp_cores = context_parallel_cores(problem, pick, draw);
      if (draw != plan_draw::uniform && k % 2 == 0 && drawable(problem, draw)) CHECK(cp_cores > 0);
      const cost_terms totals = problem.untied().evaluate(pick);
      const double predicted = totals.bytes;
      executor on(m);
      mpi::mpi_mesh_comm& comm = on.mpi;  // the host-side gathers below
      // even plans run from their plan file, read without the planner; odd ones as planned
      std::optional<forbid_planning> unplanned;
      test_trainer<T> t(k % 2 == 0 ? through_plan_file(problem, pick, spec) : plan_of(problem, pick), on.dev, on.comm, to);
      if (k % 2 == 0) unplanned.emplace();  // nor while it trains
      const token_order order = plan_token_order(t.the_plan());  // balanced where a core asking for it splits queries
      if (cp_cores > 0 && m.devices() > 1 && std::ranges::any_of(g.ops, [](const op_node& n) { return n.attrs.balanced_context; })) CHECK(!order.natural());
      for (int s = 0; s < 2; ++s) {
#if defined(AUTODDL_TEST_OPAQUE_DEVICE)
        const std::int64_t downloads_before = on.dev.downloads();
#endif
#if defined(AUTODDL_TEST_SIDE_QUEUE)
        const std::int64_t deferred_before = on.dev.deferred_steps(), joins_before = on.dev.joins();
#endif
        const double loss = t.train_step(s);
        CHECK(double(t.last_step_bytes()) == predicted);
#if defined(AUTODDL_TEST_SIDE_QUEUE)
        // every boxed parameter gradient went through the side queue, joined once per step
        const boxed_gradients boxed = boxed_param_gradients(t.the_plan());
        const std::int64_t deferred = on.dev.deferred_steps() - deferred_before;
        CHECK(deferred >= boxed.collectives);
        if (boxed.paths == 0) CHECK(deferred == 0);
        CHECK(on.dev.joins() - joins_before == (boxed.paths > 0 ? 1 : 0));
        CHECK(on.dev.pending_steps() == 0);
        if (rank == 0 && s == 0)
          std::printf("side queue: %d boxed parameter gradients (%d collectives), %lld deferred steps joined in step 0\n",
                      boxed.paths, boxed.collectives, static_cast<long long>(deferred));
#endif
#if defined(AUTODDL_TEST_OPAQUE_DEVICE)
        // the host reads only what a user reads: each micro-batch's loss part, the step's loss
        // and the finiteness flag (both through one all-reduced double); and a dropless
        // routed_experts op its picks, to sort the routed rows (forward, backward, and a forward
        // rerun by recomputation)
        const auto routed = std::ranges::count_if(g.ops, [](const op_node& n) { return n.kind == op_kind::routed_experts; });
        CHECK(on.dev.downloads() - downloads_before <= sc.microbatches * (1 + 3 * routed) + 2);
#endif
        if (rank == 0 && want == oracle::equal)
          CHECK(std::abs(loss - serial.losses[std::size_t(s)]) <= tolerance * std::abs(serial.losses[std::size_t(s)]));
      }
      unplanned.reset();
      std::int64_t peak = t.last_step_peak_bytes();  // the second step's, max over ranks
      MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
      // the replayed step (search/step_memory.hpp) against the device's own count of its buffers
      const step_memory replayed = replay_step_memory(problem, pick);
      const double peak_ratio = double(peak) / double(replayed.peak());
      // a tensor that vanishes analytically (the attention key bias: its gradient is round-off,
      // its value stays near 0) is compared at 1e-3 of the largest gradient's / parameter's scale
      const double floor = rank == 0 ? 1e-3 * max_abs(serial.grads) : 0;
      const double pfloor = rank == 0 ? 1e-3 * max_abs(serial.params) : 0;
      double worst_grad = 0, worst_param = 0;
      for (std::size_t p = 0; p < g.params.size(); ++p) {
        auto gp = gather_to_root(comm, t.param_shard(int(p)), g.params[p].shape, t.storage(int(p)));
        auto gg = gather_to_root(comm, t.grad_shard(int(p)), g.params[p].shape, t.update_layout(int(p)));
        if (rank != 0) continue;
        worst_param = std::max(worst_param, max_rel_error(gp, serial.params[p], pfloor));
        worst_grad = std::max(worst_grad, max_rel_error(gg, serial.grads[p], floor));
      }
      int sliced = 0;  // parameters updated in slices and gathered (ZeRO stages 1 and 2)
      for (std::size_t p = 0; p < g.params.size(); ++p) sliced += !(t.update_layout(int(p)) == t.storage(int(p)));
      if (rank == 0)
        std::printf("%s on %s, %s, plan seed %llu: bytes/step %.0f (= predicted), max rel err loss/grads/params vs "
                    "serial: grads %.2e, params %.2e; %d of %zu parameters updated in slices; peak %lld B, "
                    "measured/predicted %.3f; %d context- or expert-parallel cores, token order p=%lld\n",
                    spec.c_str(), to_string(m).c_str(), to_string(sc).c_str(), static_cast<unsigned long long>(seed),
                    predicted, worst_grad, worst_param, sliced, g.params.size(), static_cast<long long>(peak), peak_ratio,
                    cp_cores, static_cast<long long>(order.parts));
      // a disagreement is reported with the decisions that flipped (an element that decides
      // differently, and the values both runs decided on)
      int disagrees = rank == 0 && (worst_grad > tolerance || worst_param > tolerance);
      MPI_Bcast(&disagrees, 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::vector<testing::flipped_decision> flips;
      if (disagrees) flips = flipped_decisions_of<T>(spec, sc, problem, pick, to);
      if (rank == 0) {
        INFO("largest relative error: gradients " << worst_grad << ", updated parameters " << worst_param);
        if (want == oracle::equal) {
          CHECK(worst_grad <= tolerance);
          CHECK(worst_param <= tolerance);
        } else {
          CHECK((!disagrees || !flips.empty()));
        }
        CHECK(peak_ratio >= 0.9);
        CHECK(peak_ratio <= 1.1);
      }
    }
  }
}

/// Gradient accumulation's oracle, serial on rank 0: m micro-batches of batch/m rows train exactly
/// like one batch (losses of 2 steps, gradients and parameters after them), in double.
void check_accumulation(const std::string& spec, int m, optimizer opt) {
  constexpr double tolerance = precision<double>::tolerance;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  INFO(spec << ": " << m << " micro-batches against one batch");
  train_options to;
  to.opt = opt;
  to.lr = 1e-2;
  const run_result<double> whole = serial_run<double>(spec, schedule{}, to, 2);
  const run_result<double> split = serial_run<double>(spec, schedule{m, recompute_mode::none}, to, 2);
  for (std::size_t s = 0; s < whole.losses.size(); ++s)
    CHECK(std::abs(split.losses[s] - whole.losses[s]) <= tolerance * std::abs(whole.losses[s]));
  double worst_grad = 0, worst_param = 0;
  for (std::size_t p = 0; p < whole.params.size(); ++p) {
    worst_grad = std::max(worst_grad, max_rel_error(split.grads[p], whole.grads[p], 1e-3 * max_abs(whole.grads)));
    worst_param = std::max(worst_param, max_rel_error(split.params[p], whole.params[p], 1e-3 * max_abs(whole.params)));
  }
  std::printf("%s, %d micro-batches vs 1 batch: max rel err grads %.2e, params %.2e\n", spec.c_str(), m, worst_grad,
              worst_param);
  CHECK(worst_grad <= tolerance);
  CHECK(worst_param <= tolerance);
}

}  // namespace

// SGD for GPT and VGG, not Adam: Adam's first step is about lr * sign(g), so any gradient element
// that is round-off (the attention key bias's gradient is analytically zero; ReLU and max-pool
// leave many near-zero entries) moves by +-lr depending on summation order, serial execution
// included. The MLP, whose gradients are all well away from zero, covers Adam.
TEST_CASE("random plans of a small GPT train like serial execution", "[mpi][runtime][gpt]") {
  check_model("gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64", 3, optimizer::sgd_momentum);
}

TEST_CASE("random plans of a small VGG train like serial execution", "[mpi][runtime][vgg]") {
  check_model("vgg11:image=32,classes=16,batch=8,fc=32,width=16", 2, optimizer::sgd_momentum);
}

TEST_CASE("random plans of an MLP train like serial execution", "[mpi][runtime][mlp]") {
  check_model("mlp:layers=3,hidden=32,batch=16,in=16,out=8", 4, optimizer::adam);
}

// A tiny LLaMA: grouped-query attention (4 query heads sharing 2 key/value heads), rotary q and
// k, RMSNorm, SwiGLU, an untied head. Even plans draw every attention core context parallel
// (q split on the sequence, k and v all-gathered), odd ones draw uniformly. Adam, as autoddl-train
// trains it: SwiGLU and RMSNorm leave no gradient analytically zero (no key bias here).
const std::string tiny_llama = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=8,vocab=64";

TEST_CASE("random plans of a tiny LLaMA, context parallel among them, train like serial execution",
          "[mpi][runtime][llama]") {
  check_model(tiny_llama, 4, optimizer::adam, {}, true, oracle::equal, plan_draw::context_parallel);
}

TEST_CASE("random plans of a tiny LLaMA with micro-batches and recomputation train like serial execution",
          "[mpi][runtime][llama][schedule]") {
  check_model(tiny_llama, 2, optimizer::adam, schedule{2, recompute_mode::selective}, false, oracle::equal,
              plan_draw::context_parallel);
  check_model(tiny_llama, 1, optimizer::adam, schedule{1, recompute_mode::full}, false, oracle::equal,
              plan_draw::context_parallel);
}

// An hf config.json written by rank 0 for every rank to read (the ranks wait for it); its path.
std::string config_for_every_rank(const std::string& stem, const char* json) {
  int ranks = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string path = stem + "-" + std::to_string(ranks) + "-ranks.json";
  if (rank == 0) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f);
    std::fputs(json, f);
    std::fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

// Its file removed once every rank is done with it.
void remove_config(const std::string& path) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::remove(path.c_str());
}

// Hugging Face's config.json fields for a tiny Llama (written by rank 0, read by every rank).
TEST_CASE("random plans of a tiny LLaMA read from an hf config train like serial execution", "[mpi][runtime][llama][hf]") {
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::string path = config_for_every_rank("tiny-llama-config",
    R"({"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 16,
      "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true})");
  // Qwen2: biases on q, k and v, tied embeddings
  check_model("hf:" + path + ":batch=8", 2, optimizer::adam, {}, ranks <= 4, oracle::equal, plan_draw::context_parallel);
  remove_config(path);
}

// float32, the type autoddl-train trains in, on a model without discrete decisions (GELU, softmax,
// layernorm: round-off moves every value by round-off only), to 1e-4.
// A tiny mixture of experts (4 experts, top-2): capacity 1.25 (10 slots of 16 tokens' 32
// routes, so sequences drop tokens) and dropless (routed_experts); even plans draw every experts
// op expert parallel where the mesh allows (the dispatch's S(0) -> S(1), an all-to-all; dropless,
// whole experts per device over every token, its partial output summed by boxing).
const std::string tiny_moe = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=32,experts=4,topk=2,seq=16,batch=8,vocab=64";

TEST_CASE("random plans of a tiny mixture of experts, expert parallel among them, train like serial execution",
          "[mpi][runtime][moe]") {
  check_model(tiny_moe, 4, optimizer::adam, {}, true, oracle::equal, plan_draw::expert_parallel);
  check_model(tiny_moe + ",capacity=0,shared_experts=1", 2, optimizer::adam, {}, false, oracle::equal,
              plan_draw::expert_parallel);
  check_model(tiny_moe, 2, optimizer::adam, schedule{2, recompute_mode::selective}, false, oracle::equal,
              plan_draw::expert_parallel);
}

// Qwen2-MoE's block: top-2 of 4 experts without renormalisation, a shared SwiGLU of width 48
// whose output is scaled per token by sigmoid(x w) (sigmoid_gate), dropless; and the same read
// from a qwen2_moe config.json (capacity 1.25, biases on q, k and v), written by rank 0.
TEST_CASE("random plans of a tiny Qwen2-MoE, shared expert gated, train like serial execution", "[mpi][runtime][moe][hf]") {
  check_model(tiny_moe + ",capacity=0,shared_ffn=48,shared_gate=1,norm_topk=0", 2, optimizer::adam, {}, false,
              oracle::equal, plan_draw::expert_parallel);
  const std::string path = config_for_every_rank("tiny-qwen2-moe-config",
    R"({"model_type": "qwen2_moe", "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
      "shared_expert_intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": false, "vocab_size": 64,
      "max_position_embeddings": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0})");
  check_model("hf:" + path + ":batch=8", 2, optimizer::adam, {}, false, oracle::equal, plan_draw::expert_parallel);
  remove_config(path);
}

TEST_CASE("float32 smoke test: random plans of a small GPT train like float32 serial execution",
          "[mpi][runtime][gpt][fp32]") {
  check_model<float>("gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64", 2, optimizer::sgd_momentum);
}

// Run by hand (the tag [fp32-decisions] selects it): VGG in float32, whose ReLU and max-pool
// decisions round-off can flip. Every plan either agrees with serial float32 to 1e-4 or a
// flipped decision, printed with the values both runs decided on, explains why not. With
// OPENBLAS_CORETYPE=SkylakeX on 8 ranks, seed 8001 on mesh 8 is such a plan.
TEST_CASE("float32 VGG plans agree with serial execution or a flipped ReLU or max-pool decision explains it",
          "[.][mpi][runtime][vgg][fp32-decisions]") {
  check_model<float>("vgg11:image=32,classes=16,batch=8,fc=32", 2, optimizer::sgd_momentum, {}, true,
                     oracle::explained_by_flips);
}

// Micro-batches and recomputation: one random plan per schedule, against a serial run of the same
// micro-batches WITHOUT recomputation (recomputing must change no number), bytes == predicted.
TEST_CASE("random plans of a small GPT with micro-batches and recomputation train like serial execution",
          "[mpi][runtime][gpt][schedule]") {
  const std::string gpt = "gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64";
  check_model(gpt, 1, optimizer::sgd_momentum, schedule{1, recompute_mode::full});
  check_model(gpt, 1, optimizer::sgd_momentum, schedule{2, recompute_mode::none});
  check_model(gpt, 1, optimizer::sgd_momentum, schedule{4, recompute_mode::selective});
  check_model(gpt, 1, optimizer::sgd_momentum, schedule{2, recompute_mode::full});
}

TEST_CASE("random plans of VGG and an MLP with micro-batches and recomputation train like serial execution",
          "[mpi][runtime][vgg][mlp][schedule]") {
  check_model("vgg11:image=32,classes=16,batch=8,fc=32,width=16", 1, optimizer::sgd_momentum, schedule{2, recompute_mode::full},
              false);
  check_model("mlp:layers=3,hidden=32,batch=16,in=16,out=8", 1, optimizer::adam, schedule{4, recompute_mode::full});
  check_model("mlp:layers=3,hidden=32,batch=16,in=16,out=8", 1, optimizer::adam, schedule{2, recompute_mode::selective},
              false);
}

// Gathering again for backward: random plans of GPT and the tiny LLaMA (context-parallel
// attention among them: its k and v are gathered copies its backward reads) with regathering and
// resharding each on and off; a sequence-parallel Megatron plan (each column-parallel linear's
// input all-gathered from sequence shards), alone and under selective recomputation, and with
// FSDP beside it; and
// ZeRO-3 plans of 2 micro-batches (every weight gathered for each forward and backward; a batch
// of 16, whose micro-batches split over 8 ranks), alone and under full recomputation.
TEST_CASE("random plans that gather inputs or parameters again for backward train like serial execution",
          "[mpi][runtime][gpt][llama][regather]") {
  const std::string gpt = "gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64";
  const std::string gpt16 = "gpt:layers=2,hidden=32,heads=4,seq=16,batch=16,vocab=64";
  const std::string tiny_llama16 = "llama:layers=2,hidden=32,heads=4,kv_heads=2,ffn=48,seq=16,batch=16,vocab=64";
  for (const auto& [regather, reshard] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
    schedule sc{2, recompute_mode::none, regather, reshard};
    check_model(gpt, 1, optimizer::sgd_momentum, sc, false);
    sc.recompute = recompute_mode::selective;
    check_model(tiny_llama, 1, optimizer::adam, sc, false, oracle::equal, plan_draw::context_parallel);
  }
  check_model(gpt, 1, optimizer::sgd_momentum, schedule{1, recompute_mode::none, true, true, "megatron:sp=1"});
  check_model(tiny_llama, 1, optimizer::adam, schedule{2, recompute_mode::selective, true, true, "megatron:sp=1"});
  // FSDP beside tensor parallelism (fsdp=1, torchtitan's layout): each weight gathered from its
  // shards over the data-parallel ranks for forward and again for backward, its gradient
  // reduce-scattered; the output layer column parallel, the loss vocabulary parallel
  check_model(tiny_llama, 1, optimizer::adam, schedule{2, recompute_mode::none, true, true, "megatron:sp=1,fsdp=1"});
  check_model(gpt16, 1, optimizer::sgd_momentum, schedule{2, recompute_mode::none, true, true, "zero"});
  check_model(tiny_llama16, 1, optimizer::adam, schedule{2, recompute_mode::full, true, true, "zero"}, false);
}

TEST_CASE("m micro-batches of batch/m rows train like one batch (gradient accumulation)", "[mpi][runtime][schedule]") {
  check_accumulation("gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64,dropout=0", 2, optimizer::sgd_momentum);
  check_accumulation("gpt:layers=2,hidden=32,heads=4,seq=16,batch=8,vocab=64,dropout=0", 4, optimizer::sgd_momentum);
  check_accumulation("mlp:layers=3,hidden=32,batch=16,in=16,out=8", 4, optimizer::adam);
}

#if defined(AUTODDL_TEST_SIDE_QUEUE)
// The test device's own contract, on one rank: side-queue steps run at the join, in order; a
// main-queue step that writes what they read, or reads what they write, is refused; a buffer
// destroyed on the side queue keeps its storage until the join but leaves bytes_in_use at once.
TEST_CASE("the opaque side queue defers its steps to the join and refuses main-queue steps on their memory",
          "[mpi][runtime][side_queue]") {
  executor on(mesh_shape{1}, MPI_COMM_SELF);
  auto& dev = on.dev;
  auto x = dev.alloc<float>(4), y = dev.alloc<float>(4), z = dev.alloc<float>(4);
  dev.fill(dev.view(x), 2.0f);
  const std::int64_t bytes_before = dev.bytes_in_use();
  dev.use_side_queue(on.comm);
  {
    auto tmp = dev.alloc<float>(4);
    dev.copy(dev.view(std::as_const(x)), dev.view(tmp));       // tmp = 2
    dev.axpy(3.0f, dev.view(std::as_const(tmp)), dev.view(y));  // y = 6
  }  // tmp dies on the side queue
  on.comm.axis(0).all_reduce(dev.view(y));  // one rank: y unchanged, but deferred too
  dev.use_main_queue(on.comm);
  CHECK(dev.pending_steps() == 3);
  CHECK(dev.bytes_in_use() == bytes_before);
  CHECK_NOTHROW(dev.fill(dev.view(z), 1.0f));                                 // memory no side step touches
  CHECK_NOTHROW(dev.copy(dev.view(std::as_const(x)), dev.view(z)));           // reading what a side step reads
  CHECK_THROWS_AS(dev.fill(dev.view(x), 0.0f), std::logic_error);             // writing it
  CHECK_THROWS_AS(dev.copy(dev.view(std::as_const(y)), dev.view(z)), std::logic_error);  // reading what one writes
  CHECK_THROWS_AS(on.comm.axis(0).all_reduce(dev.view(y)), std::logic_error);  // a main-queue collective on it
  dev.join_side_queue(on.comm);
  CHECK(dev.pending_steps() == 0);
  std::vector<float> h(4);
  dev.download(dev.view(std::as_const(y)), std::span<float>(h));
  CHECK(h == std::vector<float>(4, 6.0f));
}
#endif

}  // namespace train_cases
