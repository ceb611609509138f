// Oracle for plan_result::runner_up on real planner problems: per node of the untied problem,
// the best objective (predicted step time where feasible) with another candidate at that node
// and every other node as picked. The expected value is enumerated here: each alternative's
// totals are summed from the problem's per-candidate and per-edge terms by this test (not by
// choice_problem::evaluate or the descent's incremental totals), then ranked by the planner's
// objective.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/solve.hpp"

#include "terms_oracle.hpp"

using namespace autoddl;

namespace runner_up_oracle_cases {

namespace {

cost_terms totals_of(const choice_problem& p, const std::vector<int>& pick) {
  cost_terms s;
  auto add = [&](const cost_terms& x) { test::add_terms(s, x); };
  for (int i = 0; i < p.nodes(); ++i) add(p.unary(i, pick[std::size_t(i)]));
  for (std::size_t e = 0; e < p.edges().size(); ++e) {
    const choice_edge& ed = p.edges()[e];
    add(p.pair(int(e), pick[std::size_t(ed.u)], pick[std::size_t(ed.v)]));
  }
  return s;
}

bool close(double a, double b) { return a == b || std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

struct planner_case {
  const char* spec;
  const char* mesh;
  const char* hw;
  double memory_limit;  // 0: the device's memory
};

}  // namespace

TEST_CASE("each node's runner_up is the best objective with another pick there, by enumeration",
          "[search][planner][oracle]") {
  const planner_case cases[] = {
      {"mlp:layers=2,hidden=32,batch=8,in=16,out=8", "2", "cpu-local", 0},
      {"mlp:layers=2,hidden=32,batch=8,in=16,out=8", "2", "dgx1-v100", 0},
      {"mlp:layers=3,hidden=64,batch=16,in=32,out=8", "2x2", "dgx1-v100", 0},
      {"gpt:layers=1,hidden=32,heads=2,seq=8,batch=4,vocab=64", "2", "cpu-local", 0},
  };
  for (const auto& c : cases) {
    INFO(c.spec << " on " << c.mesh << " / " << c.hw);
    plan_options o;
    o.mesh = parse_mesh(std::string(c.mesh));
    o.hw = load_hardware(c.hw);
    o.memory_limit = c.memory_limit;
    plan_problem problem(build_model(c.spec), o);
    const plan_result r = solve_plan(problem, strategy::automatic{});
    const choice_problem& u = problem.untied();
    const objective obj = problem.make_objective();
    REQUIRE(r.runner_up.size() == std::size_t(u.nodes()));
    REQUIRE(close(r.time, obj.time(totals_of(u, r.pick))));
    int compared = 0;
    for (int n = 0; n < u.nodes(); ++n) {
      std::vector<int> pick = r.pick;
      double best = std::numeric_limits<double>::infinity();
      for (int k = 0; k < u.candidates(n); ++k) {
        if (k == r.pick[std::size_t(n)]) continue;
        pick[std::size_t(n)] = k;
        best = std::min(best, obj.rank(totals_of(u, pick)));
      }
      INFO("node " << n << " of " << u.nodes() << ", " << u.candidates(n) << " candidates");
      CHECK(close(r.runner_up[std::size_t(n)], best));
      // no other pick at one node is predicted faster: the plan is a local optimum
      CHECK(best >= obj.rank(totals_of(u, r.pick)) * (1 - 1e-9));
      compared += u.candidates(n) > 1;
    }
    CHECK(compared > 0);
  }
}

TEST_CASE("under a tight memory limit runner_up ranks infeasible alternatives after feasible ones",
          "[search][planner][oracle][memory]") {
  plan_options o;
  o.mesh = parse_mesh(std::string("2x2"));
  o.hw = load_hardware("dgx1-v100");
  const graph g = build_model("mlp:layers=3,hidden=64,batch=16,in=32,out=8");
  double peak = 0;
  {
    plan_problem free_pp(g, o);
    peak = solve_plan(free_pp, strategy::automatic{}).totals.peak_memory();
  }
  o.memory_limit = peak * 1.0001;  // the free plan fits; many single changes do not
  plan_problem problem(g, o);
  const plan_result r = solve_plan(problem, strategy::automatic{});
  REQUIRE(r.feasible);
  const choice_problem& u = problem.untied();
  const objective obj = problem.make_objective();
  int infeasible_only = 0;
  for (int n = 0; n < u.nodes(); ++n) {
    std::vector<int> pick = r.pick;
    double best_rank = std::numeric_limits<double>::infinity(), best_time = best_rank;
    bool any_feasible = false;
    for (int k = 0; k < u.candidates(n); ++k) {
      if (k == r.pick[std::size_t(n)]) continue;
      pick[std::size_t(n)] = k;
      const cost_terms t = totals_of(u, pick);
      best_rank = std::min(best_rank, obj.rank(t));
      best_time = std::min(best_time, obj.time(t));
      any_feasible = any_feasible || obj.feasible(t);
    }
    INFO("node " << n << ": best objective " << best_rank << ", best predicted step time " << best_time);
    CHECK(close(r.runner_up[std::size_t(n)], best_rank));
    if (u.candidates(n) > 1 && !any_feasible) ++infeasible_only;
  }
  std::printf("memory limit %.0f bytes: %d of %d nodes have only infeasible alternatives\n", o.memory_limit,
              infeasible_only, u.nodes());
}

// Known discrepancy, hidden (run with "[known-bug]"): plan_result::runner_up is documented (and
// reported as the "if runner-up" column and runner_up_step_s) as a predicted step time, but it
// holds objective::rank, which is ~1e30 for an alternative that breaks the memory limit.
TEST_CASE("runner_up is a predicted step time even where the alternatives break the memory limit",
          "[.][known-bug][search][planner][memory]") {
  plan_options o;
  o.mesh = parse_mesh(std::string("2x2"));
  o.hw = load_hardware("dgx1-v100");
  const graph g = build_model("mlp:layers=3,hidden=64,batch=16,in=32,out=8");
  {
    plan_problem free_pp(g, o);
    o.memory_limit = solve_plan(free_pp, strategy::automatic{}).totals.peak_memory() * 1.0001;
  }
  plan_problem problem(g, o);
  const plan_result r = solve_plan(problem, strategy::automatic{});
  const choice_problem& u = problem.untied();
  const objective obj = problem.make_objective();
  for (int n = 0; n < u.nodes(); ++n) {
    if (u.candidates(n) < 2) continue;
    std::vector<int> pick = r.pick;
    double best_time = std::numeric_limits<double>::infinity();
    for (int k = 0; k < u.candidates(n); ++k) {
      if (k == r.pick[std::size_t(n)]) continue;
      pick[std::size_t(n)] = k;
      best_time = std::min(best_time, obj.time(totals_of(u, pick)));
    }
    INFO("node " << n << ": runner_up " << r.runner_up[std::size_t(n)] << ", best predicted step time " << best_time);
    CHECK(close(r.runner_up[std::size_t(n)], best_time));
  }
}

}  // namespace runner_up_oracle_cases
