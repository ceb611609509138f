// The mesh axes as coordinates (solve.hpp, per_axis_seed): one axis step against brute force.
// On a small MLP on 2x2 and 2x2x2, every assignment of each tied group to a candidate that
// keeps the start's layouts on the other axes is enumerated here, and the step's pick must
// reach the least additive step time among them; a seed never ends above its start.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"

using namespace autoddl;

namespace axis_seed_cases {

namespace {

bool off_axis_equal(const nd_sbp& a, const nd_sbp& b, int axis) {
  for (int i = 0; i < a.size(); ++i)
    if (i != axis && !(a[i] == b[i])) return false;
  return true;
}

// Group g's candidates whose every layout equals candidate c0's off `axis`.
std::vector<int> keeps_other_axes(const plan_problem& problem, int g, int c0, int axis) {
  const int n = problem.tied().group_nodes(g)[0], nops = int(problem.model().ops.size());
  std::vector<int> out;
  for (int c = 0; c < problem.tied().group_candidates(g); ++c) {
    bool same = true;
    if (n < nops) {
      const signature &x = problem.op_candidate(n, c), &y = problem.op_candidate(n, c0);
      for (std::size_t j = 0; j < x.inputs.size(); ++j) same = same && off_axis_equal(x.inputs[j], y.inputs[j], axis);
      for (std::size_t j = 0; j < x.params.size(); ++j) same = same && off_axis_equal(x.params[j], y.params[j], axis);
      for (std::size_t j = 0; j < x.outputs.size(); ++j) same = same && off_axis_equal(x.outputs[j], y.outputs[j], axis);
    } else {
      const param_choice &x = problem.param_candidate(n - nops, c), &y = problem.param_candidate(n - nops, c0);
      same = off_axis_equal(x.storage, y.storage, axis) && off_axis_equal(x.grad_sum, y.grad_sum, axis) &&
             off_axis_equal(x.update, y.update, axis);
    }
    if (same) out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("an axis step reaches the least additive time over the picks that change that axis only", "[search][exact]") {
  for (const char* mesh : {"2x2", "2x2x2"}) {
    plan_options o;
    o.mesh = parse_mesh(mesh);
    o.hw = load_hardware("dgx-a100");
    o.type = dtype::bf16;
    const plan_problem problem(build_model("mlp:layers=1,hidden=16,batch=8,in=8,out=4"), o);
    const choice_problem& t = problem.tied();
    const std::vector<int> dp = make_expert_plan(problem, expert::dp).pick;
    std::vector<int> start;
    for (int g = 0; g < t.groups(); ++g) start.push_back(dp[std::size_t(t.group_nodes(g)[0])]);
    int enumerated = 0;
    for (int axis = 0; axis < o.mesh.size(); ++axis) {
      std::vector<std::vector<int>> choices;
      for (int g = 0; g < t.groups(); ++g) choices.push_back(keeps_other_axes(problem, g, start[std::size_t(g)], axis));
      double best = std::numeric_limits<double>::infinity();
      std::vector<std::size_t> k(choices.size(), 0);
      while (true) {  // every assignment, odometer order
        std::vector<int> pick;
        for (std::size_t g = 0; g < k.size(); ++g) pick.push_back(choices[g][k[g]]);
        best = std::min(best, t.evaluate(pick).serial_time());
        ++enumerated;
        std::size_t g = 0;
        while (g < k.size() && ++k[g] == choices[g].size()) k[g++] = 0;
        if (g == k.size()) break;
      }
      const auto got = detail::axis_optimum(problem, start, axis, -1);
      INFO(mesh << " axis " << axis);
      REQUIRE(got.has_value());
      for (int g = 0; g < t.groups(); ++g) {
        const auto& c = choices[std::size_t(g)];
        CHECK(std::find(c.begin(), c.end(), (*got)[std::size_t(g)]) != c.end());
      }
      CHECK(std::abs(t.evaluate(*got).serial_time() - best) <= 1e-12 * best);
    }
    CHECK(enumerated > 100);
    const std::vector<int> seeded = detail::per_axis_seed(problem, start, -1);
    CHECK(t.evaluate(seeded).serial_time() <= t.evaluate(start).serial_time());
  }
}

}  // namespace axis_seed_cases
