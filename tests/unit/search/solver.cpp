// The layout-choice solvers on random problems with fixed, printed seeds: the exact references
// agree with each other, the descent never beats the optimum and ends in a local optimum, its
// incremental totals equal a full evaluation, and memory limits hold.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <atomic>
#include <vector>

#include "autoddl/search/coordinate_descent.hpp"
#include "autoddl/search/exact.hpp"

using namespace autoddl;

namespace solver_cases {

namespace {

cost_terms random_terms(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(0, 1);
  cost_terms t;
  t.compute_fwd = d(rng);
  t.compute_bwd = d(rng);
  t.comm_fwd = d(rng) < 0.5 ? 0 : d(rng);
  t.comm_grad = d(rng) < 0.5 ? 0 : d(rng);
  t.memory = d(rng) * 10;
  t.transient = d(rng) * 5;
  t.bytes = std::floor(d(rng) * 100);
  return t;
}

enum class shape { chain, residual, diamond, k4 };

// A random problem: n nodes with 2..4 candidates, edges by shape, pair costs from a table;
// with tie_groups > 0, node i joins group i % tie_groups and every node has 3 candidates.
choice_problem make_problem(std::uint64_t seed, int n, shape s, int tie_groups = 0) {
  const bool tie = tie_groups > 0;
  std::mt19937_64 rng(seed);
  choice_problem p;
  std::vector<int> k(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    k[std::size_t(i)] = tie ? 3 : 2 + int(rng() % 3);
    std::vector<cost_terms> u;
    for (int c = 0; c < k[std::size_t(i)]; ++c) u.push_back(random_terms(rng));
    p.add_node(u, tie ? (i % tie_groups) : -1);
  }
  int cls = 0;
  auto edge = [&](int a, int b) { p.add_edge(a, b, cls++); };
  if (s == shape::k4) {
    for (int a = 0; a < 4; ++a)
      for (int b = a + 1; b < 4; ++b) edge(a, b);
  } else {
    for (int i = 0; i + 1 < n; ++i) edge(i, i + 1);
    if (s == shape::residual)
      for (int i = 0; i + 3 < n; i += 3) edge(i, i + 3);  // skips over two nodes
    if (s == shape::diamond && n >= 4) edge(0, n - 1);
  }
  auto table = std::make_shared<std::vector<cost_terms>>();
  for (int i = 0; i < 1000; ++i) table->push_back(random_terms(rng));
  p.set_pair_cost([table](int e, int cu, int cv) { return (*table)[std::size_t(e * 16 + cu * 4 + cv) % 1000]; });
  p.finalize();
  return p;
}

objective serial_objective(double limit = 0) {
  return objective{[](const cost_terms& t) { return t.serial_time(); }, limit};
}

}  // namespace

TEST_CASE("series-parallel DP equals exhaustive enumeration on chains and residual blocks", "[search][exact]") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    INFO("seed " << seed);
    shape s = seed % 3 == 0 ? shape::chain : seed % 3 == 1 ? shape::residual : shape::diamond;
    auto p = make_problem(seed, 3 + int(seed % 5), s);
    auto dp = series_parallel_optimum(p);
    auto ex = exhaustive(p, serial_objective());
    REQUIRE(dp);
    REQUIRE(ex);
    CHECK(std::abs(dp->time - ex->time) <= 1e-9 * ex->time);
    // the DP's picks (per node; here every node is its own group) achieve its value
    CHECK(std::abs(p.evaluate(dp->pick).serial_time() - dp->time) <= 1e-9 * ex->time);
  }
}

TEST_CASE("the DP within a budget of work: the exhaustive optimum when it finishes, a time-out when the budget is spent",
          "[search][exact]") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    INFO("seed " << seed);
    auto p = make_problem(seed, 3 + int(seed % 5), seed % 2 ? shape::chain : shape::residual);
    const auto ex = exhaustive(p, serial_objective());
    REQUIRE(ex);
    const bounded_exact roomy = series_parallel_optimum_within(p, -1);  // no limit
    REQUIRE(roomy.result);
    CHECK_FALSE(roomy.timed_out);
    CHECK(std::abs(roomy.result->time - ex->time) <= 1e-9 * ex->time);
    const bounded_exact spent = series_parallel_optimum_within(p, 0);  // no work left
    CHECK_FALSE(spent.result);
    CHECK(spent.timed_out);
  }
  // a graph that does not reduce is not a time-out
  const bounded_exact k4 = series_parallel_optimum_within(make_problem(7, 4, shape::k4), -1);
  CHECK_FALSE(k4.result);
  CHECK_FALSE(k4.timed_out);
}

TEST_CASE("a graph that is not series-parallel is refused by the DP", "[search][exact]") {
  auto p = make_problem(7, 4, shape::k4);
  CHECK_FALSE(series_parallel_optimum(p));
}

TEST_CASE("coordinate descent ends in a local optimum no better than the optimum", "[search][descent]") {
  int found_optimum = 0;
  const int runs = 60;
  for (std::uint64_t seed = 100; seed < 100 + runs; ++seed) {
    INFO("seed " << seed);
    auto p = make_problem(seed, 3 + int(seed % 5), seed % 2 ? shape::residual : shape::chain);
    auto obj = serial_objective();
    auto cd = coordinate_descent(p, obj, {}, 3, seed);
    auto ex = exhaustive(p, obj);
    REQUIRE(ex);
    CHECK(cd.time >= ex->time - 1e-12);
    for (int g = 0; g < p.groups(); ++g) CHECK(cd.runner_up[std::size_t(g)] >= cd.time - 1e-9);
    if (cd.time <= ex->time * (1 + 1e-9)) ++found_optimum;
  }
  INFO(found_optimum << " of " << runs << " found the optimum");
  CHECK(found_optimum >= runs * 3 / 4);
}

TEST_CASE("incremental totals of the descent equal a full evaluation", "[search][descent]") {
  const std::uint64_t seed = 4242;
  INFO("seed " << seed);
  auto p = make_problem(seed, 8, shape::residual);
  std::mt19937_64 rng(seed);
  detail::descent_state s(p, std::vector<int>(std::size_t(p.groups()), 0));
  for (int step = 0; step < 200; ++step) {
    int g = int(rng() % std::uint64_t(p.groups()));
    int c = int(rng() % std::uint64_t(p.group_candidates(g)));
    auto pred = s.totals_with(g, c);
    s.set(g, c);
    auto full = p.evaluate(s.pick());
    REQUIRE(std::abs(pred.serial_time() - full.serial_time()) < 1e-9);
    REQUIRE(std::abs(pred.memory - full.memory) < 1e-9);
    REQUIRE(pred.transient == full.transient);
    REQUIRE(pred.bytes == full.bytes);
  }
}

TEST_CASE("a memory limit is respected by the descent and by exhaustive search", "[search][memory]") {
  for (std::uint64_t seed = 300; seed < 330; ++seed) {
    INFO("seed " << seed);
    auto p = make_problem(seed, 5, shape::chain);
    auto free_obj = serial_objective();
    auto unconstrained = exhaustive(p, free_obj);
    // a limit just under the unconstrained optimum's peak forces another plan, if one fits
    double limit = unconstrained->totals.peak_memory() * 0.97;
    auto obj = serial_objective(limit);
    auto ex = exhaustive(p, obj);
    auto cd = coordinate_descent(p, obj, {ex->pick}, 2, seed);  // started at a feasible plan
    if (obj.feasible(ex->totals)) {
      CHECK(cd.feasible);
      CHECK(cd.totals.peak_memory() <= limit);
      CHECK(ex->time >= unconstrained->time);
    }
  }
}

TEST_CASE("tied nodes pick the same candidate", "[search][groups]") {
  auto p = make_problem(9, 6, shape::chain, 2);
  REQUIRE(p.groups() == 2);
  auto obj = serial_objective();
  auto ex = exhaustive(p, obj);
  auto cd = coordinate_descent(p, obj, {}, 4, 9);
  CHECK(ex->pick.size() == 2);
  CHECK(cd.time >= ex->time - 1e-12);
  // relaxing the ties can only help: the untied DP is a lower bound
  auto dp = series_parallel_optimum(p);
  REQUIRE(dp);
  CHECK(dp->time <= ex->time + 1e-12);
}

TEST_CASE("a DP stopped at any step bounds the optimum from below, and is the optimum once it finishes",
          "[search][exact][bound]") {
  int stopped = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const shape s = seed % 4 == 0 ? shape::chain : seed % 4 == 1 ? shape::residual : seed % 4 == 2 ? shape::diamond : shape::k4;
    const auto p = make_problem(seed, s == shape::k4 ? 4 : 3 + int(seed % 6), s);
    const auto ex = exhaustive(p, serial_objective());  // brute force over every assignment
    REQUIRE(ex);
    for (std::int64_t steps = 0;; ++steps) {
      INFO("seed " << seed << ", stopped after " << steps << " steps");
      const bounded_exact b = series_parallel_optimum_within(p, -1, steps);
      CHECK(b.lower_bound <= ex->time * (1 + 1e-12));
      CHECK(b.lower_bound >= 0);
      if (!b.timed_out) {
        if (b.result) CHECK(std::abs(b.lower_bound - ex->time) <= 1e-9 * ex->time);
        break;
      }
      CHECK_FALSE(b.result);
      ++stopped;
    }
  }
  CHECK(stopped > 100);
}

TEST_CASE("the DP's budget is work, not time: the same budget gives the same answer beside busy threads",
          "[search][exact][load]") {
  // A budget on the clock would make the report depend on the machine's load. Oracle: the
  // same call on a quiet machine; busy: two threads spinning beside it on this 2-core machine
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const auto p = make_problem(seed, 6, seed % 2 ? shape::chain : shape::diamond);
    std::vector<std::int64_t> budgets;
    for (std::int64_t w = 0; w < 40'000'000; w = w * 3 + 1000) budgets.push_back(w);
    std::vector<bounded_exact> quiet;
    for (std::int64_t w : budgets) quiet.push_back(series_parallel_optimum_within(p, w));
    std::atomic<bool> stop{false};
    std::vector<std::thread> busy;
    for (int t = 0; t < 2; ++t)
      busy.emplace_back([&stop] {
        volatile double x = 0;
        while (!stop.load()) x = x + 1;
      });
    std::vector<bounded_exact> loaded;
    for (std::int64_t w : budgets) loaded.push_back(series_parallel_optimum_within(p, w));
    stop = true;
    for (auto& t : busy) t.join();
    int solved = 0;
    for (std::size_t i = 0; i < budgets.size(); ++i) {
      INFO("seed " << seed << ", budget " << budgets[i]);
      CHECK(quiet[i].timed_out == loaded[i].timed_out);
      CHECK(quiet[i].lower_bound == loaded[i].lower_bound);
      REQUIRE(bool(quiet[i].result) == bool(loaded[i].result));
      if (quiet[i].result) {
        CHECK(quiet[i].result->pick == loaded[i].result->pick);
        ++solved;
      }
    }
    CHECK(solved > 0);                    // the largest budgets finish
    CHECK(solved < int(budgets.size()));  // the smallest do not
  }
}

TEST_CASE("the DP over tied groups finds the enumerated optimum over tied assignments", "[search][exact][groups]") {
  int branched = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const shape s = seed % 4 == 0 ? shape::chain : seed % 4 == 1 ? shape::residual : seed % 4 == 2 ? shape::diamond : shape::k4;
    const int groups = 2 + int(seed % 4);
    const auto p = make_problem(seed, s == shape::k4 ? 4 : 4 + int(seed % 5), s, groups);
    INFO("seed " << seed << ", " << p.groups() << " groups");
    const auto ex = exhaustive(p, serial_objective());  // every tied assignment
    REQUIRE(ex);
    const bounded_exact t = tied_series_parallel_optimum_within(p, -1);
    REQUIRE(t.result);
    CHECK(std::abs(t.result->time - ex->time) <= 1e-9 * ex->time);
    REQUIRE(int(t.result->pick.size()) == p.groups());
    CHECK(std::abs(p.evaluate(t.result->pick).serial_time() - ex->time) <= 1e-9 * ex->time);
    if (!series_parallel_optimum(detail::fold_groups(p).problem)) ++branched;  // solved only by fixing a pick
    // out of steps: no result, and a time-out rather than a refusal
    const bounded_exact none = tied_series_parallel_optimum_within(p, -1, 1);
    CHECK_FALSE(none.result);
    CHECK(none.timed_out);
  }
  CHECK(branched >= 10);
}

TEST_CASE("nodes whose costs the caller holds price like nodes that own a copy", "[search][groups]") {
  // the same random tied problem built twice, once with copied costs and once with costs held
  // outside the problem and shared by the nodes that repeat them (as plan_problem builds it):
  // evaluations of random picks, the folded repeats and the descent's end agree
  for (std::uint64_t seed : {11u, 12u, 13u}) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    std::vector<std::vector<cost_terms>> lists(3);  // node i repeats list i % 3 (groups of i % 4)
    for (auto& l : lists)
      for (int c = 0; c < 3; ++c) l.push_back(random_terms(rng));
    choice_problem owned, held;
    for (int i = 0; i < 12; ++i) {
      owned.add_node(lists[std::size_t(i % 3)], i % 4);
      held.add_node(&lists[std::size_t(i % 3)], i % 4);
    }
    auto table = std::make_shared<std::vector<cost_terms>>();
    for (int i = 0; i < 100; ++i) table->push_back(random_terms(rng));
    for (choice_problem* p : {&owned, &held}) {
      for (int i = 0; i + 1 < 12; ++i) p->add_edge(i, i + 1, i % 5);
      p->set_pair_cost([table](int e, int cu, int cv) { return (*table)[std::size_t(e % 5 * 9 + cu * 3 + cv)]; });
      p->finalize();
    }
    REQUIRE(held.nodes() == owned.nodes());
    for (int g = 0; g < owned.groups(); ++g) {
      REQUIRE(held.group_unary_items(g).size() == owned.group_unary_items(g).size());
      for (std::size_t k = 0; k < owned.group_unary_items(g).size(); ++k) {
        CHECK(held.group_unary_items(g)[k].item == owned.group_unary_items(g)[k].item);
        CHECK(held.group_unary_items(g)[k].count == owned.group_unary_items(g)[k].count);
      }
    }
    for (int round = 0; round < 20; ++round) {
      std::vector<int> pick(std::size_t(owned.groups()));
      for (int& x : pick) x = int(rng() % 3);
      CHECK(held.evaluate(pick).serial_time() == owned.evaluate(pick).serial_time());
    }
    const descent_result a = descend(owned, serial_objective(), std::vector<int>(4, 0), true);
    const descent_result b = descend(held, serial_objective(), std::vector<int>(4, 0), true);
    CHECK(a.pick == b.pick);
  }
}

TEST_CASE("finalize refuses edges whose nodes, classes or port maps do not exist, and classes whose ports differ",
          "[search][errors]") {
  // the accessors read these indices without a bounds check once finalize accepted them, so each
  // bad one must stop it with its sentence: a node past the last, a negative class, a port map
  // add_ports never gave, a map short of its node's candidates, one class over 2 and 3 ports
  auto problem = [] {
    choice_problem p;
    p.add_node(std::vector<cost_terms>(2));
    p.add_node(std::vector<cost_terms>(3));
    p.add_node(std::vector<cost_terms>(3));
    return p;
  };
  auto message = [](choice_problem& p) -> std::string {
    try {
      p.finalize();
    } catch (const error& e) {
      return e.what();
    }
    return "";
  };
  {
    choice_problem p = problem();
    p.add_edge(0, 3, 0);
    CHECK(message(p) == "an edge of the layout-choice problem joins a node that does not exist");
  }
  {
    choice_problem p = problem();
    p.add_edge(-1, 1, 0);
    CHECK(message(p) == "an edge of the layout-choice problem joins a node that does not exist");
  }
  {
    choice_problem p = problem();
    p.add_edge(0, 1, -2);
    CHECK(message(p) == "an edge of the layout-choice problem needs a class of at least 0");
  }
  {
    choice_problem p = problem();
    p.add_edge(0, 1, 0, 0);
    CHECK(message(p) == "an edge of the layout-choice problem names a port map that add_ports did not give");
  }
  {
    choice_problem p = problem();
    p.add_edge(0, 1, 0, -1, p.add_ports({0, 1}));  // node 1 has 3 candidates
    CHECK(message(p) == "a port map must give a port to every candidate of the node it serves");
  }
  {
    choice_problem p = problem();
    p.add_edge(0, 1, 0);
    p.add_edge(0, 2, 0, -1, p.add_ports({0, 1, 0}));  // 2 x 2 ports where the class has 2 x 3
    CHECK(message(p) == "edges of one class must join nodes with the same candidate and port counts");
  }
  {  // the same class over equal port counts, and every map that exists: accepted
    choice_problem p = problem();
    const int m = p.add_ports({0, 0, 1});
    p.add_edge(0, 1, 0, -1, m);
    p.add_edge(0, 2, 0, -1, m);
    p.add_edge(1, 2, 1);
    CHECK(message(p).empty());
    CHECK(p.ports(1, 1) == 2);
  }
}

TEST_CASE("a descent refuses a start that is not one candidate per group", "[search][errors]") {
  // its moves read the picks without a bounds check, so a bad start stops at the door
  choice_problem p = make_problem(5, 4, shape::chain);
  std::vector<int> ok(std::size_t(p.groups()), 0);
  CHECK_NOTHROW(detail::descent_state(p, ok));
  std::vector<int> short_ = ok;
  short_.pop_back();
  CHECK_THROWS_AS(detail::descent_state(p, short_), error);
  std::vector<int> past = ok;
  past.back() = p.group_candidates(p.groups() - 1);
  CHECK_THROWS_AS(detail::descent_state(p, past), error);
  std::vector<int> negative = ok;
  negative.front() = -1;
  CHECK_THROWS_AS(detail::descent_state(p, negative), error);
}

}  // namespace solver_cases
