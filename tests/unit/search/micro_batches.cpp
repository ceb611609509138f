// Micro-batches and recomputation in the planner: the transformer block's activation bytes
// against Korthikanti et al. 2022's closed forms, micro-batch pricing against closed forms of the
// data-parallel plan, the choice of micro-batches and recomputation against trying every
// setting, and Megatron-LM's knobs.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/step_memory.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace micro_batches_cases {

namespace {

constexpr const char* gpt_spec = "gpt:layers=2,hidden=64,heads=4,seq=32,batch=8,vocab=128";
constexpr double s = 32, b = 8, h = 64, a = 4;  // Korthikanti's symbols for gpt_spec
constexpr double sbh = s * b * h, as2b = a * s * s * b, sb = s * b;

plan_options options(int tp, recompute_mode r, int microbatches = 1) {
  plan_options o;
  o.mesh = mesh_shape{tp};
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::bf16;  // 2-byte activations, as in Korthikanti's formulas
  o.recompute = r;
  o.microbatches = microbatches;
  return o;
}

bool ends_with(const std::string& x, const std::string& t) {
  return x.size() >= t.size() && x.compare(x.size() - t.size(), t.size(), t) == 0;
}

// Megatron-LM's layouts on a 1-D mesh (Shoeybi et al. 2019, figure 3): layernorms, dropouts and
// residual adds replicated; q, k, v and the first MLP linear column-parallel; the attention core
// split on heads; both output projections row-parallel.
bool megatron_layout(const op_node& n, const signature& sig) {
  const sbp rep = B, cols = S(2);
  auto in_is = [&](sbp x) {
    for (const auto& in : sig.inputs)
      if (!(in[0] == x)) return false;
    return true;
  };
  if (n.kind == op_kind::layernorm || n.kind == op_kind::dropout || n.kind == op_kind::add) return in_is(rep);
  if (n.kind == op_kind::attention || n.kind == op_kind::gelu) return in_is(cols);
  if (ends_with(n.name, "proj")) return in_is(cols) && sig.params[0][0] == S(0);
  if (n.kind == op_kind::linear) return in_is(rep) && sig.params[0][0] == S(1);
  return true;
}

// Activation bytes one device keeps for block 0 (and for the whole graph) under the Megatron
// layouts above.
struct kept {
  double block0 = 0, all = 0;  ///< block 0's ops, every op
};
kept megatron_block_bytes(int tp, recompute_mode r, const std::string& spec = gpt_spec) {
  const graph g = build_model(spec);
  plan_problem problem(g, options(tp, r));
  kept k;
  for (int i = 0; i < int(g.ops.size()); ++i) {
    int c = 0;
    // block ops as Megatron-LM lays them out; the rest replicated (all inputs and outputs B)
    const op_node& n = g.ops[std::size_t(i)];
    auto replicated = [&](const signature& sig) {
      for (const auto& x : sig.inputs)
        if (!(x[0] == B)) return false;
      for (const auto& x : sig.outputs)
        if (!(x[0] == B)) return false;
      return true;
    };
    const bool in_block = g.block[std::size_t(i)] >= 0;
    while (tp > 1 && !(in_block ? megatron_layout(n, problem.op_candidate(i, c)) : replicated(problem.op_candidate(i, c)))) ++c;
    const signature& sig = problem.op_candidate(i, c);
    double bytes = double(problem.op_memory(i, c, device_work(g.ops[std::size_t(i)], sig, problem.options().mesh, 2)).activations);
    for (std::size_t j = 0; j < n.inputs.size(); ++j) bytes += double(problem.kept_input_bytes(i, j, sig.inputs[j]));  // priced on its edge
    if (g.block[std::size_t(i)] == 0) k.block0 += bytes;
    k.all += bytes;
  }
  return k;
}

}  // namespace

// Korthikanti et al. 2022, section 4 (table 2): per layer, 2-byte activations,
//   no recomputation  sbh (10 + 24/t + 5as/(ht))
//   selective         sbh (10 + 24/t)
//   full              2 sbh
// (q, k and v are three linears reading the layernorm's output in place: one buffer, each
// pays a third, as Megatron's fused QKV linear keeps it once.) The executor differs in three
// documented places, added here term by term:
//   - 2 as^2b / t   the attention keeps its probabilities before dropout and recomputes the
//             dropped ones in backward (Megatron keeps both);
//   - 2 sbh - as^2b / t   no dropout mask is kept (attention, attention output, MLP output):
//             masks are a counter-based hash recomputed in backward (Megatron keeps 1 byte each);
//   + 16 sb   each of the two layernorms keeps its mean and 1/std per row (2 values, in float:
//             the statistics of 2-byte types are kept in float).
// That is the unfused attention kernel (attention=unfused), whose probabilities Korthikanti
// count. The fused one (the default) keeps one log-sum-exp per row instead, in float:
//   - 2 as^2b / t + 4 asb / t
// and its output, which the output projection keeps anyway (one buffer, a share each).
TEST_CASE("divisors are those of trial division, and a batch of 2^32 needs no 2^32 steps", "[search][microbatch]") {
  for (std::int64_t n = 1; n <= 3000; ++n) {  // the oracle: every k from 1 to n tried
    std::vector<int> brute;
    for (std::int64_t k = 1; k <= n; ++k)
      if (n % k == 0) brute.push_back(int(k));
    REQUIRE(divisors(n) == brute);
  }
  std::vector<int> powers;  // 2^32's divisors an int holds: 2^0 .. 2^30
  for (int e = 0; e <= 30; ++e) powers.push_back(1 << e);
  CHECK(divisors(std::int64_t(1) << 32) == powers);
  CHECK(divisors(2147483647) == std::vector<int>{1, 2147483647});  // a prime: sqrt(n) = 46341 trials
}

TEST_CASE("a transformer block keeps Korthikanti's activation bytes, with the executor's three differences",
          "[search][memory][recompute]") {
  const std::string unfused = std::string(gpt_spec) + ",attention=unfused";
  for (int t : {1, 2, 4}) {
    INFO("tensor-parallel size " << t);
    const double none = sbh * (10 + 24.0 / t + 5 * a * s / (h * t)) - 2 * as2b / t - 2 * sbh - as2b / t + 16 * sb;
    const double selective = sbh * (10 + 24.0 / t) - 2 * sbh + 16 * sb;
    // (q, k and v's thirds are whole bytes each: within 3 bytes)
    CHECK(std::abs(megatron_block_bytes(t, recompute_mode::none, unfused).block0 - none) <= 3);
    CHECK(std::abs(megatron_block_bytes(t, recompute_mode::selective, unfused).block0 - selective) <= 3);
    const double fused_none = none - 2 * as2b / t + 4 * a * s * b / t;
    CHECK(std::abs(megatron_block_bytes(t, recompute_mode::none).block0 - fused_none) <= 3);
    CHECK(std::abs(megatron_block_bytes(t, recompute_mode::selective).block0 - selective) <= 3);
    // full: each of the L = 2 blocks keeps its 2 sbh input (the embedding dropout's output for
    // block 0); one block's activations live while it is recomputed (priced as 1/L of each
    // block's own): the whole graph keeps L 2sbh + X instead of L X, X = one block without
    CHECK(std::abs(megatron_block_bytes(t, recompute_mode::full).all -
                   (megatron_block_bytes(t, recompute_mode::none).all - (2 - 1) * fused_none + 2 * (2 * sbh))) <= 6);
  }
}

TEST_CASE("micro-batches: the data-parallel plan's bytes do not change and its compute adds up",
          "[search][microbatches]") {
  // dp on mesh 4: every gradient all-reduced once per step, 2 (n-1)/n x parameters x 4 bytes,
  // however many micro-batches; the analytical compute is linear in the batch, but for the
  // scalar loss each micro-batch writes (4 bytes forward, read and written back in backward:
  // 12 bytes at the device's memory bandwidth, element-wise roofline).
  const std::string spec = "mlp:layers=3,hidden=64,batch=32,in=32,out=8";
  const double params = double(param_count(build_model(spec)));
  double compute1 = 0;
  for (int m : {1, 2, 4, 8}) {
    INFO("micro-batches " << m);
    plan_options o;
    o.mesh = mesh_shape{4};
    o.hw = load_hardware("dgx1-v100");
    o.microbatches = m;
    plan_problem problem(build_model(spec, m), o);
    const plan_result r = solve_plan(problem, strategy::dp{});
    CHECK(r.totals.bytes == 2.0 * 3 / 4 * params * 4);
    if (m == 1) compute1 = r.totals.compute();
    const double scalar = 12.0 / o.hw.device.memory_bandwidth;
    CHECK(std::abs(r.totals.compute() - (compute1 + (m - 1) * scalar)) < 1e-9 * compute1);
    // one micro-batch's activations: a quarter of the batch per device, over m
    const memory_breakdown mem = problem.memory_of(r.pick);
    CHECK(mem.total() == std::int64_t(r.totals.peak_memory()));
    CHECK(mem.params == std::int64_t(params) * 4);
  }
}

namespace {

// dgx1-v100 on `mesh` with m micro-batches and recomputation r.
plan_options setting(const char* mesh, int m, recompute_mode r) {
  plan_options o;
  o.mesh = parse_mesh(mesh);
  o.hw = load_hardware("dgx1-v100");
  o.microbatches = m;
  o.recompute = r;
  return o;
}

// A uniformly random candidate per node of problem.untied().
std::vector<int> random_pick(const plan_problem& problem, std::mt19937_64& rng) {
  std::vector<int> pick;
  for (int n = 0; n < problem.untied().nodes(); ++n) pick.push_back(int(rng() % std::uint64_t(problem.untied().candidates(n))));
  return pick;
}

}  // namespace

TEST_CASE("memory_of adds up to the objective's peak memory for random plans in every setting",
          "[search][memory]") {
  const std::uint64_t seed = 20261203;
  std::printf("memory_of: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (const char* mesh : {"4", "2x2"})
    for (int m : {1, 2, 4})
      for (recompute_mode r : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
        plan_problem problem(build_model(gpt_spec, m), setting(mesh, m, r));
        for (int k = 0; k < 5; ++k) {
          const std::vector<int> pick = random_pick(problem, rng);
          const cost_terms t = problem.untied().evaluate(pick);
          CHECK(double(problem.memory_of(pick).total()) == t.peak_memory());
        }
      }
}

TEST_CASE("the step replay skips the middle micro-batches that repeat, with the same peak as replaying each",
          "[search][memory]") {
  const std::uint64_t seed = 20261205;
  std::printf("step replay: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (const char* spec : {gpt_spec, "mlp:layers=3,hidden=32,batch=16,in=16,out=8",
                           "vgg11:image=32,classes=16,batch=16,fc=32"})
    for (const char* mesh : {"2", "2x2"})
      for (int m : {2, 4, 8})
        for (recompute_mode r : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
          plan_options o = setting(mesh, m, r);
          o.zero1_layouts = o.zero2_layouts = true;  // sliced updates and gathered parameters too
          plan_problem problem(build_model(spec, m), o);
          for (int k = 0; k < 3; ++k) {
            const std::vector<int> pick = random_pick(problem, rng);
            INFO(spec << " on " << mesh << ", " << m << " micro-batches, recompute " << to_string(r) << ", plan " << k);
            const step_memory fast = replay_step_memory(problem, pick);
            const step_memory each = detail::step_memory_replay(problem, pick, boxed_slots_of(plan_of(problem, pick))).run(/*skip_repeats=*/false);
            CHECK(fast.stored == each.stored);
            CHECK(fast.peak_live == each.peak_live);
            CHECK(fast.peak_op == each.peak_op);
            CHECK(fast.peak_in_backward == each.peak_in_backward);
          }
        }
}

TEST_CASE("recomputation trades memory for the forward run again", "[search][recompute]") {
  // the same layouts under none / selective / full: activations shrink, compute grows by the
  // recomputed forwards, bytes grow by the boxings rerun inside blocks (none on a dp plan)
  const graph g = build_model(gpt_spec);
  double act[3], comp[3];
  for (int i = 0; i < 3; ++i) {
    const auto r = recompute_mode(i);
    plan_options o;
    o.mesh = mesh_shape{2};
    o.hw = load_hardware("dgx1-v100");
    o.recompute = r;
    plan_problem problem(g, o);
    const plan_result p = solve_plan(problem, strategy::dp{});
    act[i] = double(problem.memory_of(p.pick).activations);
    comp[i] = p.totals.compute();
    double block_fwd = 0, core_fwd = 0;  // the oracle: the forward of what reruns, from op_terms at none
    plan_options o0 = o;
    o0.recompute = recompute_mode::none;
    plan_problem p0(g, o0);
    for (int op = 0; op < int(g.ops.size()); ++op) {
      if (g.block[std::size_t(op)] < 0) continue;
      const double f = p0.op_terms(op, p.pick[std::size_t(op)]).compute_fwd;
      block_fwd += f;
      if (g.ops[std::size_t(op)].kind == op_kind::attention) core_fwd += f;
    }
    const plan_result base = solve_plan(p0, strategy::dp{});
    const double extra = r == recompute_mode::full ? block_fwd : r == recompute_mode::selective ? core_fwd : 0;
    CHECK(std::abs(p.totals.compute() - (base.totals.compute() + extra)) < 1e-12 + 1e-9 * base.totals.compute());
  }
  CHECK(act[1] < act[0]);
  CHECK(act[2] < act[1]);
  CHECK(comp[0] < comp[1]);
  CHECK(comp[1] < comp[2]);
}

TEST_CASE("the planner's micro-batch and recomputation choice against trying every setting",
          "[search][microbatches]") {
  // memory limits from tight to loose: every (divisor, recomputation) solved on its own is the
  // oracle; the choice fits whenever a setting does, and is within 5 % of the fastest setting
  const std::string spec = "gpt:layers=2,hidden=64,heads=4,seq=32,batch=16,vocab=128";
  plan_options o;
  o.mesh = mesh_shape{2, 2};
  o.hw = load_hardware("dgx1-v100");
  auto build = [&](int m) { return build_model(spec, m); };
  for (double limit : {3.0e6, 4.0e6, 6.0e6}) {
    INFO("memory limit " << limit);
    o.memory_limit = limit;
    double best = 1e300;
    for (int m : divisors(16))
      for (recompute_mode r : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
        plan_options x = o;
        x.microbatches = m;
        x.recompute = r;
        plan_problem problem(build(m), x);
        const plan_result p = solve_plan(problem, strategy::automatic{});
        if (p.feasible) best = std::min(best, p.time);
      }
    const micro_batched_plan c = plan_micro_batched(build, 16, o, strategy::automatic{}, {});
    CHECK(c.result.feasible == (best < 1e300));
    if (best < 1e300) CHECK(c.result.time <= best * 1.05);
    std::printf("limit %.0f: chose %d/%s, %.6g s against the best setting's %.6g s, %d settings tried\n", limit,
                c.microbatches, std::string(to_string(c.recompute)).c_str(), c.result.time, best, c.settings_tried);
  }
}

TEST_CASE("Megatron-LM's knobs: tp inside the innermost axis, dp, mbs, recompute", "[search][strategy]") {
  const plan_strategy m = parse_strategy("megatron:tp=2,dp=16,mbs=4,recompute=selective,sp=1");
  CHECK(to_string(m) == "megatron:tp=2,dp=16,mbs=4,recompute=selective,sp=1");
  CHECK(parse_strategy(to_string(m)) == m);
  CHECK(planning_mesh(m, mesh_shape{4, 8}) == mesh_shape{4, 4, 2});
  CHECK(planning_mesh(parse_strategy("megatron:tp=8"), mesh_shape{4, 8}) == mesh_shape{4, 8});
  CHECK(planning_mesh(parse_strategy("megatron:tp=1"), mesh_shape{4, 8}) == mesh_shape{4, 8});
  CHECK(megatron_microbatches(m, mesh_shape{4, 8}, 512) == 8);  // 512 / (4 x 16)
  CHECK_THROWS_WITH(megatron_microbatches(m, mesh_shape{4, 8}, 96),
                    ContainsSubstring("mbs=4 x dp=16 does not divide the batch of 96"));
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=3"), mesh_shape{4, 8}),
                    ContainsSubstring("megatron:tp=3 must divide the innermost axis of mesh 4x8"));
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=2,dp=8"), mesh_shape{4, 8}),
                    ContainsSubstring("tp=2 x dp=8 is 16 devices, but mesh 4x8 has 32"));
  CHECK_THROWS_WITH(parse_strategy("megatron:xp=2"), ContainsSubstring("unknown knob 'xp=2'"));
  CHECK(to_string(parse_strategy("megatron:tp=4,ep=8,etp=1")) == "megatron:tp=4,ep=8,etp=1");
  // expert parallelism: ep = tp folds onto the tensor axis; otherwise carved just outside it
  CHECK(planning_mesh(parse_strategy("megatron:tp=2,ep=4"), mesh_shape{4, 8}) == mesh_shape{4, 4, 2});
  CHECK(expert_parallel_axes(parse_strategy("megatron:tp=2,ep=4"), mesh_shape{4, 4, 2}) == 0b010u);
  CHECK(planning_mesh(parse_strategy("megatron:tp=2,ep=2"), mesh_shape{8, 8}) == mesh_shape{8, 4, 2});
  CHECK(planning_mesh(parse_strategy("megatron:tp=1,ep=4"), mesh_shape{8, 8}) == mesh_shape{8, 2, 4});
  CHECK(expert_parallel_axes(parse_strategy("megatron:tp=1,ep=4"), mesh_shape{8, 2, 4}) == 0b100u);
  CHECK(planning_mesh(parse_strategy("megatron:tp=8,ep=8"), mesh_shape{4, 8}) == mesh_shape{4, 8});
  CHECK(expert_parallel_axes(parse_strategy("megatron:tp=8,ep=8"), mesh_shape{4, 8}) == 0b10u);
  CHECK(expert_parallel_axes(parse_strategy("megatron:tp=4,cp=2,ep=8"), mesh_shape{64, 2, 4}) == 0b110u);
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=4,cp=2,ep=4"), mesh_shape{64, 8}),
                    ContainsSubstring("write ep=8 (tp x cp)"));
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=4,ep=3"), mesh_shape{4, 8}),
                    ContainsSubstring("megatron ep=3 must equal tp=4 or divide the data-parallel devices"));
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=4,etp=2"), mesh_shape{4, 8}),
                    ContainsSubstring("megatron etp=2 must be 1 or tp=4"));
  CHECK_THROWS_WITH(parse_strategy("megatron:recompute=some"), ContainsSubstring("unknown recomputation 'some'"));

  // the knobs reach the plan: 2 micro-batches of 4 on tp=2 x dp=2, full recomputation
  plan_options o;
  o.mesh = mesh_shape{4};
  o.hw = load_hardware("dgx1-v100");
  const micro_batched_plan p = plan_micro_batched([](int k) { return build_model(gpt_spec, k); }, 8, o,
                                                  parse_strategy("megatron:tp=2,mbs=2,recompute=full"), {});
  CHECK(p.microbatches == 2);
  CHECK(p.recompute == recompute_mode::full);
  CHECK(p.problem->options().mesh == mesh_shape{2, 2});
  CHECK_THROWS_WITH(plan_micro_batched([](int k) { return build_model(gpt_spec, k); }, 8, o,
                                       parse_strategy("megatron:tp=2,mbs=2"), {.microbatches = 4}),
                    ContainsSubstring("means 2 micro-batches of the batch of 8, but --microbatches asks for 4"));
  CHECK_THROWS_WITH(build_model(gpt_spec, 3), ContainsSubstring("--microbatches 3 does not divide the batch of 8"));
}

TEST_CASE("megatron knobs beyond an int are refused, not wrapped (fuzz regression)", "[search][strategy][errors]") {
  // tp=462949672929 once became a negative tp (tests/fuzz/regressions/strategy/tp-beyond-int-wraps)
  CHECK_THROWS_WITH(parse_strategy("megatron:tp=462949672929"),
                    ContainsSubstring("tp in strategy 'megatron:tp=462949672929' must be a positive integer up to 2147483647"));
  CHECK_THROWS_AS(parse_strategy("megatron:mbs=2147483648"), parse_error);
  CHECK(std::get<strategy::megatron>(parse_strategy("megatron:dp=2147483647")).dp == 2147483647);
}

TEST_CASE("sequence parallelism: layernorms, dropouts and residual adds split the sequence on the tensor axis",
          "[search][strategy]") {
  // Korthikanti et al. 2022, section 4.2.2: with sp=1 those ops of every block take S(1) (the
  // sequence dim of [batch, seq, hidden]) on the tensor-parallel axis; without it they do not
  plan_options o;
  o.mesh = mesh_shape{2, 2};
  o.hw = load_hardware("dgx1-v100");
  const graph g = build_model(gpt_spec);
  plan_problem problem(g, o);
  for (bool sp : {false, true}) {
    const plan_result r = solve_plan(problem, sp ? parse_strategy("megatron:sp=1") : parse_strategy("megatron"));
    int split = 0, between = 0;
    for (int i = 0; i < int(g.ops.size()); ++i) {
      const op_node& n = g.ops[std::size_t(i)];
      if (g.block[std::size_t(i)] < 0 || !(n.kind == op_kind::layernorm || n.kind == op_kind::dropout || n.kind == op_kind::add))
        continue;
      ++between;
      if (problem.op_candidate(i, r.pick[std::size_t(i)]).inputs[0][1] == S(1)) ++split;
    }
    INFO("sp " << sp);
    CHECK(between == 2 * 6);  // ln1, attn.drop, attn.res, ln2, mlp.drop, mlp.res per layer
    CHECK(split == (sp ? between : 0));
    CHECK(r.notes.empty());   // no op had to leave the rules
  }
}

TEST_CASE("context parallelism: megatron cp=C splits every activation's sequence next to the tensor axis",
          "[search][strategy][context-parallel]") {
  // Megatron-Core orders ranks tp, cp, dp, pp (fastest first): cp takes the devices just outside
  // the tensor-parallel ones
  const plan_strategy m = parse_strategy("megatron:tp=2,cp=2,dp=2");
  CHECK(to_string(m) == "megatron:tp=2,cp=2,dp=2");
  CHECK(parse_strategy(to_string(m)) == m);
  CHECK(planning_mesh(m, mesh_shape{8}) == mesh_shape{2, 2, 2});
  CHECK(planning_mesh(parse_strategy("megatron:tp=4,cp=2"), mesh_shape{4, 4}) == mesh_shape{2, 2, 4});
  CHECK(planning_mesh(parse_strategy("megatron:tp=1,cp=2"), mesh_shape{8}) == mesh_shape{4, 2});
  CHECK(planning_mesh(parse_strategy("megatron:tp=8,cp=2"), mesh_shape{16, 8}) == mesh_shape{8, 2, 8});
  CHECK(context_parallel_axis(m, mesh_shape{2, 2, 2}) == 1);
  // dopt=1: Megatron-LM's distributed optimizer, ZeRO-1's layouts on megatron's storage
  const plan_strategy d = parse_strategy("megatron:tp=2,cp=2,dopt=1");
  CHECK(to_string(d) == "megatron:tp=2,cp=2,dopt=1");
  CHECK(uses_zero1_layouts(d));
  CHECK_THROWS_WITH(parse_strategy("megatron:dopt=2"), ContainsSubstring("dopt in strategy 'megatron:dopt=2' must be 0 or 1"));
  CHECK(context_parallel_axis(parse_strategy("megatron:tp=1,cp=2"), mesh_shape{4, 2}) == 1);
  CHECK(context_parallel_axis(parse_strategy("megatron:tp=2"), mesh_shape{4, 2}) == -1);
  CHECK(megatron_microbatches(parse_strategy("megatron:tp=2,cp=2,mbs=1"), mesh_shape{8}, 8) == 4);  // dp = 2
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=2,cp=3"), mesh_shape{8}),
                    ContainsSubstring("megatron cp=3 must divide the devices next to the tensor-parallel ones"));
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=2,cp=2,dp=4"), mesh_shape{8}),
                    ContainsSubstring("tp=2 x cp=2 x dp=4 is 16 devices, but mesh 8 has 8"));

  // the plan: on the cp axis every block activation splits dim 1, the cores gather k and v (B),
  // every weight is replicated; a sequence cp does not divide is one sentence
  const std::string llama = "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,batch=8,vocab=96";
  plan_options o;
  o.mesh = planning_mesh(m, mesh_shape{8});
  o.hw = load_hardware("dgx1-v100");
  const graph g = build_model(llama);
  plan_problem problem(g, o);
  const plan_result r = solve_plan(problem, m);
  CHECK(r.notes.empty());
  int cores = 0;
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const signature& sig = problem.op_candidate(i, r.pick[std::size_t(i)]);
    INFO(g.ops[std::size_t(i)].name << " " << to_string(g.ops[std::size_t(i)], sig));
    for (std::size_t k = 0; k < sig.inputs.size(); ++k) {
      if (g.ops[std::size_t(i)].inputs[k].rank() < 2) continue;
      const bool gathered = g.ops[std::size_t(i)].kind == op_kind::attention && k > 0;
      CHECK(sig.inputs[k][1] == (gathered ? B : S(1)));
    }
    for (const nd_sbp& w : sig.params) CHECK(w[1] == B);
    cores += g.ops[std::size_t(i)].kind == op_kind::attention;
  }
  CHECK(cores == 2);
  plan_problem odd(build_model("llama:layers=1,hidden=64,heads=4,kv_heads=2,ffn=96,seq=9,batch=8,vocab=96"), o);
  CHECK_THROWS_WITH(solve_plan(odd, m), ContainsSubstring("megatron cp=2 does not divide the sequence of 9"));
}


// ZeRO (Rajbhandari et al. 2020, section 5.1, figure 1): per device, Psi parameters on N_d
// data-parallel devices, 2-byte parameters and gradients, K = 12 bytes of mixed-precision Adam
// state per parameter: stage 1 (2 + 2) Psi + K Psi / N_d; stage 2 2 Psi + (2 + K) Psi / N_d;
// stage 3 (2 + 2 + K) Psi / N_d. Stages 1 and 2 send what data parallelism sends (a
// reduce-scatter and an all-gather move what one all-reduce moves, section 7.2.1).
TEST_CASE("ZeRO stages 1, 2 and 3 hold the paper's model-state bytes; 1 and 2 send what dp sends", "[search][strategy][zero]") {
  for (const char* text : {"zero:stage=1", "zero:stage=2", "zero"}) CHECK(to_string(parse_strategy(text)) == text);
  CHECK(parse_strategy("zero:stage=3") == parse_strategy("zero"));
  CHECK_THROWS_WITH(parse_strategy("zero:stage=4"), ContainsSubstring("zero takes one knob, stage=1, 2 or 3"));
  CHECK_THROWS_WITH(parse_strategy("zero:tp=2"), ContainsSubstring("zero takes one knob"));
  {
    plan_options bare;
    bare.mesh = mesh_shape{4};
    bare.hw = load_hardware("dgx-a100");
    plan_problem no_zero1(build_model("mlp:layers=2,hidden=16,batch=8,in=8,out=4"), bare);
    CHECK_THROWS_WITH(solve_plan(no_zero1, parse_strategy("zero:stage=1")), ContainsSubstring("needs ZeRO-1's layouts"));
    CHECK_THROWS_WITH(solve_plan(no_zero1, parse_strategy("zero:stage=2")), ContainsSubstring("needs ZeRO-2's layouts"));
  }

  const graph g = build_model("mlp:layers=3,hidden=64,batch=16,in=16,out=8");
  double psi = 0;
  for (const auto& p : g.params) psi += double(p.shape.elements());
  const double nd = 8, k = 12;
  plan_options o;
  o.mesh = mesh_shape{8};
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::bf16;
  o.opt = optimizer::adam;
  o.memory_limit = 1e30;
  o.zero1_layouts = o.zero2_layouts = true;  // (plan_micro_batched sets them for zero:stage=1 and 2)
  plan_problem problem(g, o);
  struct expected {
    const char* strategy;
    double params, grads, optimizer;
  };
  for (const expected& e : {expected{"zero:stage=1", 2 * psi, 2 * psi, k * psi / nd},
                            expected{"zero:stage=2", 2 * psi, 2 * psi / nd, k * psi / nd},
                            expected{"zero", 2 * psi / nd, 2 * psi / nd, k * psi / nd}}) {
    INFO(e.strategy);
    const plan_result r = solve_plan(problem, parse_strategy(e.strategy));
    memory_breakdown m;
    for (int p = 0; p < int(g.params.size()); ++p) m += problem.param_memory(p, at(r.pick, problem.param_node(p)));
    CHECK(double(m.params) == e.params);
    CHECK(double(m.grads) == e.grads);
    CHECK(double(m.optimizer) == e.optimizer);
  }
  const double dp_bytes = solve_plan(problem, strategy::dp{}).totals.bytes;
  CHECK(solve_plan(problem, parse_strategy("zero:stage=1")).totals.bytes == dp_bytes);
  CHECK(solve_plan(problem, parse_strategy("zero:stage=2")).totals.bytes == dp_bytes);
  // stage 3 resharding after forward gathers each weight for its forward and again for its
  // backward, then reduce-scatters its gradient: 1.5x dp's bytes (the paper's section 7.2.2);
  // keeping the gathered copy to the backward, one all-gather and a reduce-scatter, as much as dp
  CHECK(solve_plan(problem, parse_strategy("zero")).totals.bytes == 1.5 * dp_bytes);
  plan_options kept = o;
  kept.reshard_after_forward = false;
  plan_problem keeping(g, kept);
  CHECK(solve_plan(keeping, parse_strategy("zero")).totals.bytes == dp_bytes);
  // offered ZeRO-2's layouts, the search starts from that plan too: never worse than it
  CHECK(solve_plan(problem, strategy::automatic{}).time <= solve_plan(problem, parse_strategy("zero:stage=2")).time * (1 + 1e-9));
}

}  // namespace micro_batches_cases
