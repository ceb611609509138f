#pragma once
// The planner's strategies over a plan_problem:
//   auto        coordinate descent on the tied problem (repeated blocks share decisions) from
//               data parallel, every expert plan and random starts; then descent on the untied
//               problem from that result and from every expert plan. Descent never makes a start
//               worse, so the auto plan is never predicted slower than any expert plan.
//   dp, megatron, zero, owt, 2d   the expert plans as they are
//   exact       series-parallel DP optimum of the additive objective (nothing overlapped)
//   exhaustive  every tied assignment (tiny models only)
// optimal_gap: when the DP solves the model, the descent is rerun on the additive objective and
// compared with the DP optimum, (descent - optimum) / optimum; the DP relaxes the memory limit,
// so this bounds the true gap from above.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "autoddl/search/coordinate_descent.hpp"
#include "autoddl/search/exact.hpp"
#include "autoddl/search/experts.hpp"

namespace autoddl {

struct plan_result {
  std::string strategy;
  std::vector<int> pick;           ///< per node of plan_problem::untied()
  cost_terms totals;
  double time = 0;                 ///< predicted step time, seconds
  bool feasible = true;
  double search_s = 0;
  std::optional<double> optimal_gap;
  std::vector<double> runner_up;   ///< per node: best predicted step time with another pick there
  std::vector<std::string> notes;
};

namespace detail {

inline descent_result auto_descent(const plan_problem& pp, const objective& obj, std::uint64_t seed,
                                   const std::vector<std::vector<int>>& expert_picks) {
  const choice_problem& t = pp.tied();
  std::vector<std::vector<int>> starts;
  for (const auto& ep : expert_picks) {  // project: each group takes its first node's pick
    std::vector<int> s(std::size_t(t.groups()));
    for (int gi = 0; gi < t.groups(); ++gi) s[std::size_t(gi)] = ep[std::size_t(t.group_nodes(gi)[0])];
    starts.push_back(std::move(s));
  }
  descent_result tied = coordinate_descent(t, obj, starts, 1, seed);
  tied = descend(t, obj, tied.pick, /*joint=*/true);  // joint moves from the best start only
  descent_result best = descend(pp.untied(), obj, pp.untie(tied.pick));
  // An expert plan that still beats the result is descended too, so auto is never predicted
  // slower than any expert plan (descent never makes its start worse).
  for (std::size_t i = 0; i < expert_picks.size(); ++i) {
    const cost_terms et = pp.untied().evaluate(expert_picks[i]);
    if (obj.rank(et) < obj.rank(best.totals)) {
      descent_result d = descend(pp.untied(), obj, expert_picks[i]);
      if (obj.rank(d.totals) < obj.rank(best.totals)) best = std::move(d);
    }
  }
  return best;
}

}  // namespace detail

inline plan_result solve_plan(const plan_problem& pp, const std::string& strategy, std::uint64_t seed = 1) {
  auto t0 = std::chrono::steady_clock::now();
  const objective obj = pp.make_objective();
  plan_result r;
  r.strategy = strategy;
  const choice_problem& u = pp.untied();
  auto finish = [&](std::vector<int> pick) {
    r.pick = std::move(pick);
    r.totals = u.evaluate(r.pick);
    r.time = obj.time(r.totals);
    r.feasible = obj.feasible(r.totals);
  };
  if (strategy == "auto") {
    std::vector<std::vector<int>> eps;
    for (expert e : {expert::dp, expert::megatron, expert::zero, expert::owt, expert::two_d}) {
      if (e == expert::two_d && pp.options().mesh.size() != 2) continue;
      eps.push_back(make_expert_plan(pp, e).pick);
    }
    descent_result d = detail::auto_descent(pp, obj, seed, eps);
    finish(d.pick);
    r.runner_up.resize(d.runner_up.size());
    for (std::size_t i = 0; i < d.runner_up.size(); ++i) r.runner_up[i] = d.runner_up[i];
    r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (auto ex = series_parallel_optimum(u)) {
      descent_result ds = detail::auto_descent(pp, pp.serial_objective(), seed, eps);
      double got = ds.totals.serial_time();
      r.optimal_gap = ex->time > 0 ? (got - ex->time) / ex->time : 0.0;
    }
    return r;
  }
  if (strategy == "exact") {
    auto ex = series_parallel_optimum(u);
    if (!ex)
      detail::fail("the model graph is not series-parallel, so --strategy exact cannot solve it; use auto or exhaustive");
    finish(ex->pick);
    r.optimal_gap = 0.0;
    r.notes.push_back("exact optimum of the additive step time (nothing overlapped), memory limit not applied");
  } else if (strategy == "exhaustive") {
    auto ex = exhaustive(pp.tied(), obj);
    if (!ex)
      detail::fail("the model has too many layout combinations for --strategy exhaustive (more than 2e6); use auto or exact");
    finish(pp.untie(ex->pick));
    r.optimal_gap = 0.0;
  } else {
    expert e = parse_expert(strategy);
    if (e == expert::two_d && pp.options().mesh.size() != 2)
      detail::fail<layout_error>("the 2d plan needs a 2-D mesh, got " + to_string(pp.options().mesh));
    expert_plan ep = make_expert_plan(pp, e);
    if ((e == expert::dp || e == expert::zero) && !ep.relaxed.empty()) {
      const auto& g = pp.model();
      detail::fail<layout_error>("the " + strategy + " plan splits the batch over all " +
                                 detail::itos(pp.options().mesh.devices()) + " devices of mesh " +
                                 to_string(pp.options().mesh) + ", but op '" + ep.relaxed[0] +
                                 "' cannot take its batch split that way (model inputs " +
                                 (g.inputs.empty() ? std::string("[]") : to_string(g.inputs[0])) +
                                 "); choose a batch divisible by the mesh or another strategy");
    }
    for (const auto& n : ep.relaxed) r.notes.push_back("op '" + n + "' could not follow the " + strategy + " rules; it takes its cheapest layout");
    finish(ep.pick);
  }
  r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace autoddl
