#pragma once
// The planner's strategies over a plan_problem:
//   auto        coordinate descent on the tied problem (repeated blocks share decisions) from
//               data parallel, every expert plan and random starts; then descent on the untied
//               problem from that result and from every expert plan. Descent never makes a start
//               worse, so the auto plan is never predicted slower than any expert plan.
//   dp, megatron, zero, owt, 2d   the expert plans as they are (owt: "one weird trick",
//               Krizhevsky 2014: convolutions data parallel, fully connected layers model parallel)
//   exact       series-parallel DP optimum of the additive objective (nothing overlapped)
//   exhaustive  every tied assignment (tiny models only)
// The auto strategy's descent also starts from the tied optimum of the additive objective (the DP
// over the groups, exact.hpp) where that prices at most 500,000 port pairs (a count, not a clock,
// so the plan does not depend on the machine's load). Beyond that count (4-D meshes) it starts
// also from the mesh axes taken as coordinates (per_axis_seed: per axis, the tied DP over the
// candidates that keep the other axes' layouts).
// optimal_gap: when the DP solves the model within its budget (exact_reference_work), the
// descent is rerun on the additive objective and compared with the DP optimum,
// (descent - optimum) / optimum; the DP relaxes the memory limit, so this bounds the true gap
// from above. Over budget: exact_status::bounded, a lower bound on the optimum from the
// reduction so far, this plan's gap to it (an upper bound on its additive gap), and a note.
#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/coordinate_descent.hpp"
#include "autoddl/search/exact.hpp"
#include "autoddl/search/experts.hpp"
#include "autoddl/search/planning_time.hpp"
#include "autoddl/search/strategy.hpp"

namespace autoddl {

enum class exact_status { not_run, solved, bounded, not_series_parallel };
constexpr const char* to_string(exact_status s) {
  return s == exact_status::solved ? "solved" : s == exact_status::bounded ? "bounded"
       : s == exact_status::not_series_parallel ? "not series-parallel" : "not run";
}

struct plan_result {
  plan_strategy strategy;
  std::vector<int> pick;           ///< per node of plan_problem::untied()
  cost_terms totals;
  double time = 0;                 ///< predicted step time, seconds
  bool feasible = true;
  double search_s = 0;
  /// Of the planning a program reports as search_s, the seconds of each phase (planning_clock;
  /// zero where the program does not measure them). A figure only, as search_s.
  std::array<double, planning_phases> search_parts_s{};
  std::optional<double> optimal_gap;
  /// How the exact reference went: solved (optimal_gap set), bounded (over its budget:
  /// lower_bound and bound_gap set), not series-parallel, or not run.
  exact_status exact = exact_status::not_run;
  std::optional<double> lower_bound;  ///< seconds: no plan's additive step time is lower
  std::optional<double> bound_gap;    ///< (this plan's additive step time - lower_bound) / lower_bound
  std::vector<int> tied_seed;         ///< the tied DP's optimum where it fit its budget (a start)
  std::vector<double> runner_up;   ///< per node: best predicted step time with another pick there
  std::vector<std::string> notes;
  /// The memory limit the plan is held to where it is not its problem's: a pipeline's stage
  /// layouts are searched under p times the limit and the cuts hold each stage to it
  /// (search/pipeline.hpp). Unset: the problem's.
  std::optional<double> memory_limit{};
};

namespace detail {

/// Port pairs beyond which the tied DP is not tried (tied_port_pairs; about 1 s of pricing here).
inline constexpr std::int64_t tied_seed_max_pairs = 500'000;
/// A safety net only (series_parallel_budget's units): below tied_seed_max_pairs the DP takes 0.3-0.6 s on
/// bench_search's 3-D rows; this is about 10 s of it.
inline constexpr std::int64_t tied_seed_work = 10'000'000'000;
/// The exact reference's budget (series_parallel_budget's units): GPT-2 medium on 4x4x8 solves in 2.8e9 of
/// them (0.4 s here), GPT-3 on 16x8x8 needs 1.4e10 (1.5 s) and is bounded; where pricing the
/// edges alone would spend it (4-D meshes), it stops before pricing.
inline constexpr std::int64_t exact_reference_work = 3'000'000'000;

inline descent_result auto_descent(const plan_problem& problem, const objective& obj, std::uint64_t seed,
                                   const std::vector<std::vector<int>>& expert_picks,
                                   const std::vector<std::vector<int>>& tied_seeds = {}, bool joint_seeds = true,
                                   bool runner_ups = true) {
  const choice_problem& t = problem.tied();
  std::vector<std::vector<int>> starts;
  for (const auto& ep : expert_picks) {  // project: each group takes its first node's pick
    std::vector<int> s(std::size_t(t.groups()));
    for (int gi = 0; gi < t.groups(); ++gi) at(s, gi) = at(ep, t.group_nodes(gi)[0]);
    starts.push_back(std::move(s));
  }
  // joint moves from every start: one that single moves leave behind can end best (a 3-layer
  // MLP on 2x2x2, dgx-a100 bf16: 33 % above the optimum with joint moves from the best start only,
  // 0.01 % with them from every start); each start ends where it would have with joint moves
  // after the fact, so the best of them is never worse than before
  const descent_result tied = coordinate_descent(t, obj, starts, 1, seed, /*joint=*/true, /*runner_ups=*/false);
  // Only the untied winner's runner-ups are read: the tied descents price none, and each untied
  // one keeps its state until another beats it (the runner-ups of 2401 picks an op on a 4-D
  // mesh cost more than the descents).
  std::optional<kept_descent> best;
  best.emplace(descend_keeping_state(problem.untied(), obj, problem.untie(tied.pick)));
  // Each seed is descended on its own, tied then untied, and kept where it ends better: the best
  // tied plan need not untie best (the small GPT on 2x2x2: the tied optimum's untied descent
  // ends 1.6 % above the experts' on the additive objective), so the seeds only ever add.
  for (const auto& sd : tied_seeds) {
    const descent_result ts = descend(t, obj, sd, joint_seeds, 100, /*runner_ups=*/false);
    if (ts.pick == tied.pick) continue;  // where the others ended: nothing new to untie
    kept_descent d = descend_keeping_state(problem.untied(), obj, problem.untie(ts.pick));
    if (obj.rank(d.result.totals) < obj.rank(best->result.totals)) best.emplace(std::move(d));
  }
  // An expert plan that still beats the result is descended too, so auto is never predicted
  // slower than any expert plan (descent never makes its start worse).
  for (std::size_t i = 0; i < expert_picks.size(); ++i) {
    const cost_terms et = problem.untied().evaluate(expert_picks[i]);
    if (obj.rank(et) < obj.rank(best->result.totals)) {
      kept_descent d = descend_keeping_state(problem.untied(), obj, expert_picks[i]);
      if (obj.rank(d.result.totals) < obj.rank(best->result.totals)) best.emplace(std::move(d));
    }
  }
  if (runner_ups) add_runner_ups(best->result, best->state, obj);
  return std::move(best->result);
}

/// The picks of every expert plan that applies to problem's mesh: the starts of the search.
inline std::vector<std::vector<int>> expert_starts(const plan_problem& problem) {
  std::vector<std::vector<int>> expert_picks;
  for (expert e : {expert::dp, expert::megatron, expert::zero, expert::owt, expert::two_d}) {
    if (e == expert::two_d && problem.options().mesh.size() != 2) continue;
    expert_picks.push_back(make_expert_plan(problem, e).pick);
  }
  if (problem.options().zero2_layouts)  // ZeRO-2 (ZeRO-1 sends as much, holds more)
    expert_picks.push_back(make_expert_plan(problem, expert::zero, {.zero_stage = 2}).pick);
  return expert_picks;
}

/// The tied optimum of the additive objective (tied_series_parallel_optimum_within), where it
/// fits `budget_s`: a start that sees several groups move at once (GPT-2 on 4x4x8: Megatron's
/// MLP with sequence-split attention, 25 groups away from where the descent from the experts
/// stops, 3.1 % above it).
inline std::vector<std::vector<int>> tied_optimum_seeds(const plan_problem& problem, std::int64_t work) {
  if (tied_port_pairs(problem.tied()) > tied_seed_max_pairs) return {};  // would spend its budget and fail
  const bounded_exact ex = tied_series_parallel_optimum_within(problem.tied(), work);
  if (!ex.result) return {};
  return {ex.result->pick};
}

// Whether a and b agree on every mesh axis but `axis`.
inline bool agree_off_axis(const nd_sbp& a, const nd_sbp& b, int axis) {
  for (int i = 0; i < a.size(); ++i)
    if (i != axis && !(a[i] == b[i])) return false;
  return true;
}

// Tied group g's candidates that agree with its candidate c0 on every mesh axis but `axis`
// (an op: every tensor's nd-SBP; a parameter: its storage, summing and update layouts); c0
// among them.
inline std::vector<int> axis_neighbours(const plan_problem& problem, int g, int c0, int axis) {
  const int n = problem.tied().group_nodes(g)[0], nops = int(problem.model().ops.size());
  std::vector<int> out;
  for (int c = 0; c < problem.tied().group_candidates(g); ++c) {
    bool same = true;
    if (n < nops) {
      const signature &x = problem.op_candidate(n, c), &y = problem.op_candidate(n, c0);
      for (const auto side : {&signature::inputs, &signature::params, &signature::outputs})
        for (std::size_t j = 0; same && j < (x.*side).size(); ++j) same = agree_off_axis((x.*side)[j], (y.*side)[j], axis);
    } else {
      const param_choice &x = problem.param_candidate(n - nops, c), &y = problem.param_candidate(n - nops, c0);
      same = agree_off_axis(x.storage, y.storage, axis) && agree_off_axis(x.grad_sum, y.grad_sum, axis) &&
             agree_off_axis(x.update, y.update, axis);
    }
    if (same) out.push_back(c);
  }
  return out;
}

// The tied optimum of the additive objective over the picks that change only mesh axis `axis`
// of `pick` (each group among its axis_neighbours: a handful of candidates, so the DP over
// groups is cheap where the whole one is not), or nullopt over budget.
inline std::optional<std::vector<int>> axis_optimum(const plan_problem& problem, const std::vector<int>& pick, int axis,
                                                    std::int64_t work) {
  const choice_problem& t = problem.tied();
  std::vector<std::vector<int>> keep;
  for (int g = 0; g < t.groups(); ++g) keep.push_back(axis_neighbours(problem, g, at(pick, g), axis));
  choice_problem sub;
  for (int n = 0; n < t.nodes(); ++n) {
    std::vector<cost_terms> u;
    for (int c : at(keep, t.group_of(n))) u.push_back(t.unary(n, c));
    sub.add_node(std::move(u), t.group_of(n));
  }
  for (int e = 0; e < int(t.edges().size()); ++e) sub.add_edge(at(t.edges(), e).u, at(t.edges(), e).v, e);
  auto original = [&t, &keep](int e, int cu, int cv) {
    const choice_edge& ed = at(t.edges(), e);
    return std::pair<int, int>{at(at(keep, t.group_of(ed.u)), cu), at(at(keep, t.group_of(ed.v)), cv)};
  };
  sub.set_pair_cost([&t, original](int e, int cu, int cv) {
    const auto [x, y] = original(e, cu, cv);
    return t.pair(e, x, y);
  });
  sub.finalize();
  const bounded_exact ex = tied_series_parallel_optimum_within(sub, work);
  if (!ex.result) return std::nullopt;
  std::vector<int> out(std::size_t(t.groups()));
  for (int n = 0; n < t.nodes(); ++n) at(out, t.group_of(n)) = at(at(keep, t.group_of(n)), at(ex.result->pick, sub.group_of(n)));
  return out;
}

/// Where the whole tied DP is out of reach (4-D meshes: 2401 candidates an op): the mesh axes
/// as coordinates. From `start`, each axis in turn takes the tied optimum of the additive
/// objective with the other axes' layouts fixed (axis_optimum), while a round improves it
/// (at most `rounds`): many groups move at once along one axis, which single and pair moves
/// of the descent cannot. A start for the descent, kept where it ends better.
inline std::vector<int> per_axis_seed(const plan_problem& problem, std::vector<int> pick, std::int64_t work, int rounds = 4) {
  double best = problem.tied().evaluate(pick).serial_time();
  for (int round = 0; round < rounds; ++round) {
    bool moved = false;
    for (int a = 0; a < problem.options().mesh.size(); ++a) {
      const std::optional<std::vector<int>> next = axis_optimum(problem, pick, a, work);
      if (!next) continue;
      const double v = problem.tied().evaluate(*next).serial_time();
      if (v < best * (1 - 1e-12)) {
        best = v;
        pick = *next;
        moved = true;
      }
    }
    if (!moved) break;
  }
  return pick;
}

inline void solve_auto(const plan_problem& problem, std::uint64_t seed, plan_result& r, bool runner_ups) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int>> seeds = tied_optimum_seeds(problem, tied_seed_work);
  bool joint_seeds = true;
  if (seeds.empty() && tied_port_pairs(problem.tied()) > tied_seed_max_pairs && problem.options().mesh.size() > 1) {
    const std::vector<int> dp = make_expert_plan(problem, expert::dp).pick;  // from data parallel, tied
    std::vector<int> s(std::size_t(problem.tied().groups()));
    for (int gi = 0; gi < problem.tied().groups(); ++gi) at(s, gi) = at(dp, problem.tied().group_nodes(gi)[0]);
    seeds.push_back(per_axis_seed(problem, std::move(s), tied_seed_work));
    joint_seeds = false;  // single moves from it: joint ones over 2401 x 2401 picks cost more than they found
  }
  if (!seeds.empty()) r.tied_seed = seeds[0];
  descent_result d = auto_descent(problem, problem.make_objective(), seed, expert_starts(problem), seeds, joint_seeds, runner_ups);
  r.pick = std::move(d.pick);
  r.runner_up = std::move(d.runner_up);
  r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace detail

/// The gap of r (an auto plan of problem) on the additive objective, where the exact reference fits
/// its budget (exact_reference_work: units of work, not seconds, so the same command reports
/// the same at any load; about half a second here, so the report never costs much more than the
/// search).
/// Over budget: the reduction so far gives a lower bound on the optimum (exact.hpp) and r's gap
/// to it, an upper bound on r's additive gap, and a note says so.
/// A solved exact reference is never beaten: with `adopt`, where its plan, descended
/// under the plan's own objective, ranks better than r's, it becomes r's plan (re-priced, its
/// runner-ups recomputed where r had them), the gap is that plan's, and a note gives the search's
/// own gap. Callers that priced r.pick already into something else (a pipeline's stages) pass
/// adopt = false.
inline void attach_runner_ups(const plan_problem& problem, plan_result& r);

inline void attach_optimal_gap(const plan_problem& problem, std::uint64_t seed, plan_result& r, bool adopt = true) {
  const planning_clock::scope timing(planning_phase::exact_reference);
  const bounded_exact ex = series_parallel_optimum_within(problem.untied(), detail::exact_reference_work);
  if (ex.result && adopt) {
    const objective obj = problem.make_objective();
    kept_descent d = descend_keeping_state(problem.untied(), obj, ex.result->pick);
    // faster as well as better ranked: the additive memory is an upper bound that the caller may
    // have checked against the replayed step already (r.feasible), so a plan it calls over the
    // limit is not traded for a slower one on that bound alone
    const cost_terms mine = problem.untied().evaluate(r.pick);
    if (obj.rank(d.result.totals) < obj.rank(mine) && obj.time(d.result.totals) < obj.time(mine)) {
      const double searched = problem.untied().evaluate(r.pick).serial_time();
      r.pick = std::move(d.result.pick);
      r.totals = problem.untied().evaluate(r.pick);
      r.time = obj.time(r.totals);
      r.feasible = obj.feasible(r.totals);
      if (!r.runner_up.empty()) attach_runner_ups(problem, r);
      r.optimal_gap = ex.result->time > 0 ? std::max(0.0, (r.totals.serial_time() - ex.result->time) / ex.result->time) : 0.0;
      r.exact = exact_status::solved;
      r.lower_bound = ex.result->time;
      r.notes.push_back("the exact reference's plan, descended under the step's own objective, is faster than the "
                        "search's, so it is the plan (the search alone ended " +
                        std::to_string(100 * (searched - ex.result->time) / ex.result->time).substr(0, 5) +
                        " % above the additive optimum)");
      return;
    }
  }
  if (ex.result) {
    std::vector<std::vector<int>> seeds;
    if (!r.tied_seed.empty()) seeds.push_back(r.tied_seed);
    const bool joint_seeds = tied_port_pairs(problem.tied()) <= detail::tied_seed_max_pairs;  // as solve_auto
    descent_result ds = detail::auto_descent(problem, problem.serial_objective(), seed, detail::expert_starts(problem), seeds, joint_seeds,
                                                 /*runner_ups=*/false);  // only its totals are read
    const double got = ds.totals.serial_time();
    r.optimal_gap = ex.result->time > 0 ? (got - ex.result->time) / ex.result->time : 0.0;
    r.exact = exact_status::solved;
    r.lower_bound = ex.result->time;
  } else if (ex.timed_out) {
    r.exact = exact_status::bounded;
    r.lower_bound = ex.lower_bound;
    const double mine = problem.untied().evaluate(r.pick).serial_time();
    if (ex.lower_bound > 0) r.bound_gap = (mine - ex.lower_bound) / ex.lower_bound;
    r.notes.push_back("no gap to the exact optimum: the series-parallel DP did not finish within its budget of " +
                      std::to_string(detail::exact_reference_work / 1'000'000) + " million units of work (exact.hpp's "
                      "series_parallel_budget, about 0.4 s here); the optimum of the additive step time is at least " +
                      std::to_string(ex.lower_bound) + " s");
  } else {
    r.exact = exact_status::not_series_parallel;
  }
}

namespace detail {

/// Context parallelism splits the sequence (dim 1 of the model's first input, [batch, seq]):
/// cp must divide it. @throws layout_error naming the knob and the sequence.
inline void check_context_parallel(const graph& g, int cp) {
  if (g.inputs.empty() || g.inputs[0].rank() < 2)
    fail<layout_error>("megatron cp=" + itos(cp) + " splits the sequence, but the model's first input " +
                       (g.inputs.empty() ? std::string("[]") : to_string(g.inputs[0])) + " has no sequence dim");
  if (g.inputs[0][1] % cp != 0)
    fail<layout_error>("megatron cp=" + itos(cp) + " does not divide the sequence of " + itos(g.inputs[0][1]) +
                       "; choose a context-parallel size that divides it");
}

// An expert whose rules place a weighted op (a linear or a convolution: what its rules are about)
// nowhere on this mesh is no such plan: refused with the op, its weight and the mesh. (Other ops,
// an embedding under context parallelism, take their cheapest layout with a note.)
inline void refuse_relaxed_weights(const plan_problem& problem, const plan_strategy& s, const std::vector<std::string>& relaxed) {
  const graph& g = problem.model();
  for (const bool gemm : {true, false})  // a linear or convolution first: the op the rules are about
    for (const std::string& name : relaxed)
      for (const op_node& n : g.ops) {
        if (n.name != name || n.param_ids.empty() || n.kind == op_kind::embedding) continue;
        if (gemm && n.kind != op_kind::linear && n.kind != op_kind::conv2d) continue;
        fail<layout_error>("the " + to_string(s) + " rules do not fit mesh " + to_string(problem.options().mesh) + ": op '" +
                           name + "' (input " + to_string(n.inputs.at(0)) + ", weight " +
                           to_string(at(g.params, n.param_ids[0]).shape) +
                           ") has no layout by them there, as its dimensions do not split over the mesh axes the rules "
                           "use; choose a mesh, batch or tensor-parallel size that divides them, or --strategy auto");
      }
}

// ep must divide every experts op's expert count (each device holds E / ep whole experts).
inline void check_expert_parallel(const graph& g, int ep) {
  bool any = false;
  for (const op_node& n : g.ops) {
    if (n.kind != op_kind::experts && n.kind != op_kind::routed_experts) continue;
    any = true;
    if (n.params[0][0] % ep != 0)
      fail<layout_error>("megatron ep=" + itos(ep) + " does not divide the " + itos(n.params[0][0]) + " experts of op '" +
                         n.name + "'; choose an ep that divides the expert count");
  }
  if (!any) fail<layout_error>("megatron ep=" + itos(ep) + " needs a model with experts (llama:...,experts=E)");
}

inline void solve_expert(const plan_problem& problem, const plan_strategy& s, plan_result& r) {
  expert e = expert_of(s);
  const auto* mg = std::get_if<strategy::megatron>(&s);
  if (mg && mg->tp == 1) e = mg->fsdp ? expert::zero : expert::dp;  // no tensor parallelism: data parallel on every axis
  const auto* z = std::get_if<strategy::zero>(&s);
  const int cp_axis = context_parallel_axis(s, problem.options().mesh);
  if (cp_axis >= 0) check_context_parallel(problem.model(), mg->cp);
  expert_knobs knobs{.sequence_parallel = mg && mg->sp, .zero_stage = z ? z->stage : 3, .cp_axis = cp_axis,
                     .sharded_optimizer = mg && mg->dopt, .sharded_params = mg && mg->fsdp && mg->tp != 1};
  detail::moe_rules& moe = knobs.moe;
  if (mg) {
    moe.ep_axes = expert_parallel_axes(s, problem.options().mesh);
    moe.etp_split = mg->etp == 0 ? !folded_experts(*mg, problem.options().mesh) : mg->etp > 1;
    if (moe.ep_axes != 0) check_expert_parallel(problem.model(), mg->ep);
  }
  expert_plan ep = make_expert_plan(problem, e, knobs);
  if ((e == expert::dp || e == expert::zero) && !ep.relaxed.empty()) {
    const graph& g = problem.model();
    fail<layout_error>("the " + to_string(s) + " plan splits the batch over all " + itos(problem.options().mesh.devices()) +
                       " devices of mesh " + to_string(problem.options().mesh) + ", but op '" + ep.relaxed[0] +
                       "' cannot take its batch split that way (model inputs " +
                       (g.inputs.empty() ? std::string("[]") : to_string(g.inputs[0])) +
                       "); choose a batch divisible by the mesh or another strategy");
  }
  refuse_relaxed_weights(problem, s, ep.relaxed);
  for (const auto& n : ep.relaxed)
    r.notes.push_back("op '" + n + "' could not follow the " + to_string(s) + " rules; it takes its cheapest layout");
  r.pick = std::move(ep.pick);
}

}  // namespace detail

/// r.runner_up for r.pick, an auto plan of problem (per node, the best predicted step time with
/// another pick there): what solve_plan adds unless told not to, for a caller that solves many
/// settings and keeps one (plan_micro_batched, search_pipeline: a twentieth of planning GPT-3
/// on 16x8x8 went on runner-ups nobody read).
inline void attach_runner_ups(const plan_problem& problem, plan_result& r) {
  const detail::descent_state s(problem.untied(), r.pick);
  descent_result d;
  d.pick = r.pick;
  add_runner_ups(d, s, problem.make_objective());
  r.runner_up = std::move(d.runner_up);
}

/// Chooses a plan for problem by strategy s (see search/strategy.hpp), e.g.
///   solve_plan(problem, strategy::automatic{});   solve_plan(problem, strategy::megatron{.tp = 4});
/// Throws layout_error when s does not fit problem's mesh or model (check_strategy).
/// with_gap = false skips the auto plan's exact reference (attach_optimal_gap adds it later);
/// runner_ups = false its runner-ups (attach_runner_ups adds them later).
/// Prices r.pick as the search does: totals, predicted step time, feasibility.
inline void price_pick(const plan_problem& problem, plan_result& r) {
  const objective obj = problem.make_objective();
  r.totals = problem.untied().evaluate(r.pick);
  r.time = obj.time(r.totals);
  r.feasible = obj.feasible(r.totals);
}

inline plan_result solve_plan(const plan_problem& problem, const plan_strategy& s, std::uint64_t seed = 1,
                              bool with_gap = true, bool runner_ups = true) {
  const auto t0 = std::chrono::steady_clock::now();
  check_strategy(s, problem.options().mesh);
  if (!(planning_mesh(s, problem.options().mesh) == problem.options().mesh))
    detail::fail<layout_error>(to_string(s) + " plans on mesh " + to_string(planning_mesh(s, problem.options().mesh)) +
                               " (tensor parallelism innermost), but the problem is on mesh " +
                               to_string(problem.options().mesh) + "; build the problem on planning_mesh(s, mesh)");
  plan_result r;
  r.strategy = s;
  if (std::holds_alternative<strategy::automatic>(s)) {
    detail::solve_auto(problem, seed, r, runner_ups);
    if (with_gap) attach_optimal_gap(problem, seed, r);
  } else if (std::holds_alternative<strategy::exact>(s)) {
    auto ex = series_parallel_optimum(problem.untied());
    if (!ex)
      detail::fail("the model graph is not series-parallel, so --strategy exact cannot solve it; use auto or exhaustive");
    r.pick = std::move(ex->pick);
    r.optimal_gap = 0.0;
    r.exact = exact_status::solved;
    r.lower_bound = ex->time;
    r.notes.push_back("exact optimum of the additive step time (nothing overlapped), memory limit not applied");
  } else if (std::holds_alternative<strategy::exhaustive>(s)) {
    auto ex = exhaustive(problem.tied(), problem.make_objective());
    if (!ex)
      detail::fail("the model has too many layout combinations for --strategy exhaustive (more than 2e6); use auto or exact");
    r.pick = problem.untie(ex->pick);
    r.optimal_gap = 0.0;
  } else {
    detail::solve_expert(problem, s, r);
  }
  price_pick(problem, r);
  if (!std::holds_alternative<strategy::automatic>(s))
    r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace autoddl
