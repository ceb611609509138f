// The search's shortcuts against brute force, on small cases with fixed, printed seeds:
//   - one shortest-path tree per (source, target P axes, shape) gives every target the path
//     cheapest_boxing finds for it alone (the path the executor runs);
//   - pair costs memoised per port (candidates that box alike) and a tied group's repeated nodes
//     and edges priced once and counted give the totals a full sum over the tables gives, for
//     every single move the descent tries, and the exhaustive optimum of the problem without
//     those shortcuts.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "autoddl/cost/collective_cost.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/search/coordinate_descent.hpp"
#include "autoddl/search/exact.hpp"
#include "autoddl/ops/signatures.hpp"

#include "sampling.hpp"
#include "terms_oracle.hpp"

using namespace autoddl;

namespace shortcuts_cases {

namespace {

// Every nd-SBP over {B, P, S(0..rank-1)} on `axes` axes that divides `shape` on `mesh`.
std::vector<nd_sbp> all_layouts(const mesh_shape& mesh, const tensor_shape& shape) {
  std::vector<nd_sbp> all{nd_sbp{}};
  for (int a = 0; a < mesh.size(); ++a) {
    std::vector<nd_sbp> next;
    for (const auto& v : all)
      for (int c = 0; c < 2 + shape.rank(); ++c) {
        nd_sbp w = v;
        w.push_back(c == 0 ? B : c == 1 ? P : S(c - 2));
        next.push_back(w);
      }
    all = std::move(next);
  }
  std::vector<nd_sbp> out;
  for (const auto& v : all)
    if (divides(shape, layout{v, mesh})) out.push_back(v);
  return out;
}

bool same_path(const boxing_path& a, const boxing_path& b) {
  if (a.size() != b.size() || a.cost != b.cost) return false;
  for (int i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("a boxing tree gives every target the path cheapest_boxing finds for it alone", "[search][boxing]") {
  struct mesh_case {
    const char* mesh;
    tensor_shape shape;
  };
  for (const auto& [m, shape] : {mesh_case{"2x2x2", {8, 4}}, mesh_case{"2x4", {8, 12, 4}}, mesh_case{"4x2", {6, 8}},
                                 mesh_case{"2x2x2x2", {4, 8}}, mesh_case{"8", {8, 8}}}) {
    const mesh_shape mesh = parse_mesh(m);
    hardware hw;  // two link levels: the inner axes fast, the outer ones slow
    hw.devices_per_node = 4;
    hw.intra_node = autoddl::link{1e-6, 1e11};
    hw.inter_node = autoddl::link{5e-6, 1e10};
    const device_mesh dm = make_device_mesh(mesh, hw);
    const std::vector<nd_sbp> layouts = all_layouts(mesh, shape);
    const boxing_graph g = make_boxing_graph(mesh, shape, 4, alpha_beta_cost{dm});
    std::vector<nd_sbp> sources;  // every layout; half of them under the sanitizers
    for (std::size_t f = 0; f < layouts.size(); ++f)
      if (testing::sampled_case(int(f))) sources.push_back(layouts[f]);
    int compared = 0;
    for (const nd_sbp& from : sources)
      for (unsigned pm = 0; pm < (1u << mesh.size()); ++pm) {
        const boxing_tree lazy = cheapest_boxing_tree(from, pm, mesh, shape, 4, alpha_beta_cost{dm});
        const boxing_tree built = cheapest_boxing_tree(g, from, pm);
        boxing_tree_search on_demand(g, from, pm);  // asked for targets far and near, in reverse
        for (auto to_it = layouts.rbegin(); to_it != layouts.rend(); ++to_it) {
          const nd_sbp& to = *to_it;
          if (partial_axes_of(to) != pm) continue;
          const boxing_path alone = cheapest_boxing({from, to, mesh, shape, 4}, alpha_beta_cost{dm});
          INFO(m << " " << to_string(from) << " -> " << to_string(to));
          CHECK(same_path(lazy.path_to(to), alone));
          CHECK(same_path(built.path_to(to), alone));
          CHECK(same_path(on_demand.path_to(to), alone));
          ++compared;
        }
      }
    INFO(m);
    CHECK(compared == int(sources.size() * layouts.size()));
    // and with bytes as the cost (every tie broken by the P rule)
    const boxing_graph gb = make_boxing_graph(mesh, shape, 4);
    for (const nd_sbp& from : sources) {
      for (const nd_sbp& to : layouts) {
        const boxing_tree t = cheapest_boxing_tree(gb, from, partial_axes_of(to));
        INFO(m << " bytes " << to_string(from) << " -> " << to_string(to));
        CHECK(same_path(t.path_to(to), cheapest_boxing({from, to, mesh, shape, 4})));
      }
    }
  }
}

namespace {

cost_terms random_terms(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(0, 1);
  cost_terms t;
  t.compute_fwd = d(rng);
  t.compute_bwd = d(rng);
  t.comm_fwd = d(rng) < 0.5 ? 0 : d(rng);
  t.comm_bwd = d(rng) < 0.5 ? 0 : d(rng);
  t.comm_grad = d(rng) < 0.5 ? 0 : d(rng);
  t.memory = std::floor(d(rng) * 10);
  t.transient = std::floor(d(rng) * 5);
  t.bytes = std::floor(d(rng) * 100);
  return t;
}

// A model of repeated blocks: `blocks` copies of a chain of `width` positions, consecutive
// blocks joined, every position tied across blocks (its nodes share candidate costs), edges of
// one position pair sharing a class; candidates map onto fewer ports on every edge.
struct tables {
  int width = 0, blocks = 0;
  std::vector<int> k;                                       // per position: candidates
  std::vector<std::vector<cost_terms>> unary;               // per position
  std::vector<std::vector<int>> port;                       // per position: candidate -> port
  std::vector<std::pair<int, int>> edges;                   // node ids
  std::vector<int> cls;                                     // per edge
  std::vector<std::vector<std::vector<cost_terms>>> pair;   // per class: [port u][port v]
  int node(int block, int pos) const { return block * width + pos; }
};

std::shared_ptr<const tables> make_tables(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto t = std::make_shared<tables>();
  t->width = 2 + int(rng() % 3);
  t->blocks = 2 + int(rng() % 3);
  for (int p = 0; p < t->width; ++p) {
    const int k = 2 + int(rng() % 4), ports = 1 + int(rng() % std::uint64_t(k));
    t->k.push_back(k);
    std::vector<cost_terms> u;
    std::vector<int> port;
    for (int c = 0; c < k; ++c) {
      u.push_back(random_terms(rng));
      port.push_back(c < ports ? c : int(rng() % std::uint64_t(ports)));
    }
    t->unary.push_back(u);
    t->port.push_back(port);
  }
  auto table = [&](int pu, int pv) {
    std::vector<std::vector<cost_terms>> m(static_cast<std::size_t>(pu));
    for (auto& row : m)
      for (int c = 0; c < pv; ++c) row.push_back(random_terms(rng));
    t->pair.push_back(m);
    return int(t->pair.size()) - 1;
  };
  auto nports = [&](int pos) { return *std::max_element(t->port[std::size_t(pos)].begin(), t->port[std::size_t(pos)].end()) + 1; };
  std::vector<int> inner, across;  // class per position step inside a block, per block join
  for (int p = 0; p + 1 < t->width; ++p) inner.push_back(table(nports(p), nports(p + 1)));
  const int join = table(nports(t->width - 1), nports(0));
  const int skip = t->width > 2 ? table(nports(0), nports(2)) : -1;  // a residual edge
  for (int b = 0; b < t->blocks; ++b) {
    for (int p = 0; p + 1 < t->width; ++p) {
      t->edges.push_back({t->node(b, p), t->node(b, p + 1)});
      t->cls.push_back(inner[std::size_t(p)]);
    }
    if (skip >= 0) {
      t->edges.push_back({t->node(b, 0), t->node(b, 2)});
      t->cls.push_back(skip);
    }
    if (b + 1 < t->blocks) {
      t->edges.push_back({t->node(b, t->width - 1), t->node(b + 1, 0)});
      t->cls.push_back(join);
    }
  }
  return t;
}

// The problem of t: tied by position or not, with the port maps given to the problem or read by
// the pair function itself (every pick its own price).
choice_problem make_problem(const std::shared_ptr<const tables>& t, bool tie, bool ports) {
  choice_problem p;
  for (int b = 0; b < t->blocks; ++b)
    for (int q = 0; q < t->width; ++q) p.add_node(t->unary[std::size_t(q)], tie ? q : -1);
  std::vector<int> map_of;
  for (int q = 0; q < t->width; ++q) map_of.push_back(ports ? p.add_ports(t->port[std::size_t(q)]) : -1);
  for (std::size_t e = 0; e < t->edges.size(); ++e) {
    const auto [u, v] = t->edges[e];
    p.add_edge(u, v, ports ? t->cls[e] : int(e), map_of[std::size_t(u % t->width)], map_of[std::size_t(v % t->width)]);
  }
  p.set_pair_cost([t](int e, int cu, int cv) {
    const auto [u, v] = t->edges[std::size_t(e)];
    const int pu = t->port[std::size_t(u % t->width)][std::size_t(cu)], pv = t->port[std::size_t(v % t->width)][std::size_t(cv)];
    return t->pair[std::size_t(t->cls[std::size_t(e)])][std::size_t(pu)][std::size_t(pv)];
  });
  p.finalize();
  return p;
}

// Totals of a per-node pick straight from the tables: additive terms summed, transient the max.
cost_terms brute_totals(const tables& t, const std::vector<int>& node_pick) {
  cost_terms s;
  auto add = [&](const cost_terms& x) { test::add_terms(s, x); };
  for (std::size_t n = 0; n < node_pick.size(); ++n) add(t.unary[n % std::size_t(t.width)][std::size_t(node_pick[n])]);
  for (std::size_t e = 0; e < t.edges.size(); ++e) {
    const auto [u, v] = t.edges[e];
    const int pu = t.port[std::size_t(u % t.width)][std::size_t(node_pick[std::size_t(u)])];
    const int pv = t.port[std::size_t(v % t.width)][std::size_t(node_pick[std::size_t(v)])];
    add(t.pair[std::size_t(t.cls[e])][std::size_t(pu)][std::size_t(pv)]);
  }
  return s;
}

std::vector<int> per_node(const choice_problem& p, const std::vector<int>& group_pick) {
  std::vector<int> r;
  for (int n = 0; n < p.nodes(); ++n) r.push_back(group_pick[std::size_t(p.group_of(n))]);
  return r;
}

bool close(const cost_terms& a, const cost_terms& b) {
  auto near = [](double x, double y) { return std::abs(x - y) <= 1e-9 * (1 + std::abs(x) + std::abs(y)); };
  return near(a.compute_fwd, b.compute_fwd) && near(a.compute_bwd, b.compute_bwd) && near(a.comm_fwd, b.comm_fwd) &&
         near(a.comm_bwd, b.comm_bwd) && near(a.comm_grad, b.comm_grad) && near(a.memory, b.memory) &&
         near(a.bytes, b.bytes) && a.transient == b.transient;
}

// The step time with the gradient synchronisation hidden behind backward, under a memory limit.
objective overlapped(double limit, bool monotone) {
  return objective{[](const cost_terms& x) { return x.compute() + x.comm_fwd + x.comm_bwd + std::max(x.compute_bwd, x.comm_grad); },
                   limit, monotone};
}

// One pick per group of p, drawn from rng.
std::vector<int> random_pick(const choice_problem& p, std::mt19937_64& rng) {
  std::vector<int> pick(static_cast<std::size_t>(p.groups()));
  for (int g = 0; g < p.groups(); ++g) pick[std::size_t(g)] = int(rng() % std::uint64_t(p.group_candidates(g)));
  return pick;
}

// Bounds of t's pairs scaled term by term by a factor in [0, 1] drawn from rng (0: no
// information; 1: the price itself), the transient and memory sometimes dropped.
void set_scaled_bounds(choice_problem& p, const std::shared_ptr<const tables>& t, std::mt19937_64& rng) {
  const auto scale = std::make_shared<std::vector<double>>();
  for (int i = 0; i < 64; ++i) scale->push_back(i % 5 == 0 ? 1.0 : std::uniform_real_distribution<double>(0, 1)(rng));
  p.set_pair_lower_bound([t, scale](int e, int cu, int cv) {
    const auto [u, v] = t->edges[std::size_t(e)];
    const int pu = t->port[std::size_t(u % t->width)][std::size_t(cu)], pv = t->port[std::size_t(v % t->width)][std::size_t(cv)];
    cost_terms x = t->pair[std::size_t(t->cls[std::size_t(e)])][std::size_t(pu)][std::size_t(pv)];
    const double f = (*scale)[std::size_t(e * 7 + pu * 3 + pv) % scale->size()];
    x.compute_fwd *= f, x.compute_bwd *= f, x.comm_fwd *= f, x.comm_bwd *= f, x.comm_grad *= f, x.bytes *= f;
    if (f < 0.5) x.memory = 0, x.transient = 0;
    return x;
  });
}

}  // namespace

TEST_CASE("ports and folded repeats price every move of the descent as the full tables do", "[search][descent]") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const auto t = make_tables(seed);
    INFO("seed " << seed << " (" << t->blocks << " blocks of " << t->width << ")");
    for (bool tie : {true, false}) {
      const choice_problem p = make_problem(t, tie, /*ports=*/true);
      std::mt19937_64 rng(seed * 7 + (tie ? 1 : 0));
      const std::vector<int> pick = random_pick(p, rng);
      detail::descent_state s(p, pick);
      for (int g = 0; g < p.groups(); ++g)
        for (int c = 0; c < p.group_candidates(g); ++c) {
          std::vector<int> moved = pick;
          moved[std::size_t(g)] = c;
          INFO("tied " << tie << " group " << g << " pick " << c);
          CHECK(close(s.totals_with(g, c), brute_totals(*t, per_node(p, moved))));
        }
      // the descent's own totals, after its moves, against the tables
      const objective ob{[](const cost_terms& x) { return x.serial_time() + 0.1 * x.comm(); }, 0};
      const descent_result d = descend(p, ob, pick, /*joint=*/tie);
      CHECK(close(d.totals, brute_totals(*t, per_node(p, d.pick))));
    }
    // the exhaustive optimum does not move when the shortcuts are taken away
    const objective ob{[](const cost_terms& x) { return x.serial_time(); }, 0};
    const auto with = exhaustive(make_problem(t, true, true), ob);
    const auto without = exhaustive(make_problem(t, true, false), ob);
    REQUIRE(with);
    REQUIRE(without);
    CHECK(std::abs(with->time - without->time) <= 1e-9 * without->time);
    CHECK(with->pick == without->pick);
  }
}

TEST_CASE("joint moves bounded by a monotone objective pick what the full scan of pairs picks", "[search][descent]") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const auto t = make_tables(seed);
    INFO("seed " << seed);
    const choice_problem p = make_problem(t, /*tie=*/true, /*ports=*/true);
    for (int kind = 0; kind < 2; ++kind) {
      objective full = overlapped(kind == 0 ? 0.0 : 40.0, /*monotone=*/false);
      objective bounded = full;
      bounded.monotone = true;
      std::mt19937_64 rng(seed);
      const std::vector<int> start = random_pick(p, rng);
      const descent_result a = descend(p, full, start, /*joint=*/true);
      const descent_result b = descend(p, bounded, start, /*joint=*/true);
      INFO("memory limit " << full.memory_limit);
      CHECK(a.pick == b.pick);
      CHECK(a.totals.serial_time() == b.totals.serial_time());
    }
  }
}

TEST_CASE("the series-parallel DP by classes of picks finds the optimum every pick on its own finds", "[search][exact]") {
  int checked_exhaustive = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const auto t = make_tables(seed);
    INFO("seed " << seed);
    const choice_problem with = make_problem(t, /*tie=*/false, /*ports=*/true);
    const choice_problem without = make_problem(t, /*tie=*/false, /*ports=*/false);
    const auto a = series_parallel_optimum(with);
    const auto b = series_parallel_optimum(without);
    REQUIRE(a.has_value() == b.has_value());
    if (!a) continue;
    CHECK(std::abs(a->time - b->time) <= 1e-9 * (1 + b->time));
    CHECK(std::abs(with.evaluate(a->pick).serial_time() - a->time) <= 1e-9 * (1 + a->time));
    const objective serial{[](const cost_terms& x) { return x.serial_time(); }, 0};
    if (const auto ex = exhaustive(without, serial, 2e5)) {  // brute force where it is small enough
      CHECK(std::abs(ex->time - a->time) <= 1e-9 * (1 + a->time));
      ++checked_exhaustive;
    }
  }
  CHECK(checked_exhaustive >= 5);
}

TEST_CASE("pair lower bounds skip moves without changing what the descent picks", "[search][descent]") {
  // The bound of a pair is its table entry scaled term by term by a factor in [0, 1] drawn here
  // (0: no information; 1: the price itself), the transient and memory sometimes dropped.
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const auto t = make_tables(seed);
    INFO("seed " << seed);
    for (bool tie : {true, false}) {
      const choice_problem plain = make_problem(t, tie, /*ports=*/true);
      choice_problem bounded = make_problem(t, tie, /*ports=*/true);
      std::mt19937_64 rng(seed * 13 + (tie ? 1 : 0));
      set_scaled_bounds(bounded, t, rng);
      for (double limit : {0.0, 40.0}) {
        const objective ob = overlapped(limit, /*monotone=*/true);
        const std::vector<int> start = random_pick(plain, rng);
        const descent_result a = descend(plain, ob, start, /*joint=*/tie);
        const descent_result b = descend(bounded, ob, start, /*joint=*/tie);
        INFO("tied " << tie << " memory limit " << limit);
        CHECK(a.pick == b.pick);
        CHECK(a.totals.serial_time() == b.totals.serial_time());
        CHECK(a.runner_up == b.runner_up);
      }
    }
  }
}

namespace {

// Runs body(t, p, rng, tie, bounds) for 40 seeds' tables, tied and untied, without and with
// scaled pair bounds; rng is seeded from the seed times mult.
template <class Body>
void for_each_table_case(std::uint64_t mult, Body body) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const auto t = make_tables(seed);
    INFO("seed " << seed);
    for (bool tie : {true, false})
      for (bool bounds : {false, true}) {
        choice_problem p = make_problem(t, tie, /*ports=*/true);
        std::mt19937_64 rng(seed * mult + (tie ? 1 : 0) + (bounds ? 2 : 0));
        if (bounds) set_scaled_bounds(p, t, rng);
        INFO("tied " << tie << " bounds " << bounds);
        body(t, p, rng);
      }
  }
}

// Checks every pick of group g, in a shuffled order and twice (the second pass reads the move's
// cache), against the tables: rank_of is the rank of the brute totals, or +infinity only where
// that rank is at the cutoff or above (a random other pick's rank, or none).
void check_move(const detail::descent_state& s, const tables& t, const objective& ob, int g, std::mt19937_64& rng) {
  const choice_problem& p = s.problem();
  std::vector<int> order;
  for (int c = 0; c < p.group_candidates(g); ++c) order.push_back(c);
  auto brute_rank = [&](int c) {
    std::vector<int> moved = s.pick();
    moved[std::size_t(g)] = c;
    return ob.rank(brute_totals(t, per_node(p, moved)));
  };
  const cost_terms base = s.without(g);
  s.begin_move(g);
  for (int pass = 0; pass < 2; ++pass) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int c : order) {
      const double cutoff = rng() % 3 == 0 ? std::numeric_limits<double>::infinity() : brute_rank(order[rng() % order.size()]);
      const double got = s.rank_of(base, g, c, ob, cutoff), want = brute_rank(c);
      INFO("group " << g << " pick " << c << " pass " << pass << " cutoff " << cutoff << " got " << got << " want " << want);
      if (std::isinf(got)) CHECK(want >= cutoff * (1 - 1e-9));
      else CHECK(std::abs(got - want) <= 1e-9 * (1 + std::abs(want)));
    }
  }
}

}  // namespace

TEST_CASE("a move's cache per port ranks every pick as the tables do, and a set ends it", "[search][descent]") {
  for_each_table_case(31, [](const std::shared_ptr<const tables>& t, choice_problem& p, std::mt19937_64& rng) {
    for (double limit : {0.0, 40.0}) {
      INFO("memory limit " << limit);
      const objective ob = overlapped(limit, /*monotone=*/true);
      detail::descent_state s(p, random_pick(p, rng));
      for (int g = 0; g < p.groups(); ++g) check_move(s, *t, ob, g, rng);
      // a move of g, then a neighbour changes: g's prices must be read anew
      for (int g = 0; g + 1 < p.groups(); ++g) {
        check_move(s, *t, ob, g, rng);
        s.set(g + 1, int(rng() % std::uint64_t(p.group_candidates(g + 1))));
        const cost_terms base = s.without(g);
        for (int c = 0; c < p.group_candidates(g); ++c) {
          std::vector<int> moved = s.pick();
          moved[std::size_t(g)] = c;
          const double want = ob.rank(brute_totals(*t, per_node(p, moved)));
          CHECK(std::abs(s.rank_of(base, g, c, ob, std::numeric_limits<double>::infinity()) - want) <= 1e-9 * (1 + want));
        }
      }
    }
  });
}

TEST_CASE("a joint move through the per-port caches finds the best pair the tables give", "[search][descent]") {
  // best_pair of every adjacent pair of groups against the brute ranks of every (cu != current,
  // cv) from the tables; after a single move's cache was filled, and without, with and without
  // bounds, so stale or shared cache entries would show; without and with a memory limit (the
  // largest transient outside both groups then decides which pairs fit).
  for_each_table_case(17, [](const std::shared_ptr<const tables>& t, choice_problem& p, std::mt19937_64& rng) {
    for (double limit : {0.0, 40.0}) {
      INFO("memory limit " << limit);
      const objective ob = overlapped(limit, /*monotone=*/true);
      detail::descent_state s(p, random_pick(p, rng));
      for (const auto& ed : p.edges()) {
        const int gu = std::min(p.group_of(ed.u), p.group_of(ed.v)), gv = std::max(p.group_of(ed.u), p.group_of(ed.v));
        if (gu == gv) continue;
        if (rng() % 2) check_move(s, *t, ob, gu, rng);
        const double r0 = ob.rank(brute_totals(*t, per_node(p, s.pick())));
        double want = r0;
        for (int cu = 0; cu < p.group_candidates(gu); ++cu)
          for (int cv = 0; cu != s.pick()[std::size_t(gu)] && cv < p.group_candidates(gv); ++cv) {
            std::vector<int> moved = s.pick();
            moved[std::size_t(gu)] = cu;
            moved[std::size_t(gv)] = cv;
            want = std::min(want, ob.rank(brute_totals(*t, per_node(p, moved))));
          }
        const auto [bu, bv, rk] = s.best_pair(gu, gv, ob, ob.rank(s.totals()));
        std::vector<int> got = s.pick();
        got[std::size_t(gu)] = bu;
        got[std::size_t(gv)] = bv;
        INFO("groups " << gu << ", " << gv);
        CHECK(std::abs(ob.rank(brute_totals(*t, per_node(p, got))) - rk) <= 1e-9 * (1 + rk));
        if (want < r0 * (1 - 1e-9)) CHECK(std::abs(rk - want) <= 1e-9 * (1 + want));
        else CHECK(rk >= want * (1 - 1e-9));
      }
    }
  });
}

TEST_CASE("the boxing lower bound is at most the cheapest path and exact for one collective", "[search][boxing]") {
  hardware hw;
  hw.devices_per_node = 4;
  hw.intra_node = autoddl::link{1e-6, 1e11};
  hw.inter_node = autoddl::link{5e-6, 1e10};
  struct mesh_case {
    const char* mesh;
    tensor_shape shape;
  };
  for (const auto& [m, shape] : {mesh_case{"2x2x2", {8, 4}}, mesh_case{"2x4", {8, 12, 4}}, mesh_case{"2x2x2x2", {4, 8}},
                                 mesh_case{"8", {8, 8}}}) {
    const mesh_shape mesh = parse_mesh(m);
    const device_mesh dm = make_device_mesh(mesh, hw);
    const boxing_lower_bound lb = make_boxing_lower_bound(make_boxing_graph(mesh, shape, 4, alpha_beta_cost{dm}));
    const std::vector<nd_sbp> layouts = all_layouts(mesh, shape);
    int tight = 0, sources = 0;
    for (std::size_t f = 0; f < layouts.size(); ++f) {
      if (!testing::sampled_case(int(f))) continue;  // half the sources under the sanitizers
      const nd_sbp& from = layouts[f];
      ++sources;
      for (const nd_sbp& to : layouts) {
        const double cost = cheapest_boxing({from, to, mesh, shape, 4}, alpha_beta_cost{dm}).cost;
        INFO(m << " " << to_string(from) << " -> " << to_string(to));
        CHECK(lb(from, to) <= cost * (1 + 1e-12));
        CHECK(lb(from, to) >= 0);
        tight += lb(from, to) >= cost * (1 - 1e-12);
        CHECK(lb.between(from, true, to, false) == lb(dual(from), to));  // the duals read in place
        CHECK(lb.between(from, true, to, true) == lb(dual(from), dual(to)));
      }
    }
    INFO(m);
    CHECK(tight >= sources);  // at least every from == to, and some single steps
  }
  // One axis of 8 on one link (closed forms, Thakur et al. 2005): an all-gather of T is
  // 7 alpha + 7/8 T / beta; a P -> B is the ring all-reduce 14 alpha + 14/8 T / beta.
  const mesh_shape mesh = parse_mesh("8");
  const device_mesh dm = make_device_mesh(mesh, hw);  // 8 devices, 4 per node: the inter-node link
  const boxing_lower_bound lb = make_boxing_lower_bound(make_boxing_graph(mesh, {64, 8}, 4, alpha_beta_cost{dm}));
  const double bytes = 64 * 8 * 4, alpha = 5e-6, beta = 1e10;
  nd_sbp s0, b, p;
  s0.push_back(S(0));
  b.push_back(B);
  p.push_back(P);
  CHECK(std::abs(lb(s0, b) - (7 * alpha + 7.0 / 8 * bytes / beta)) <= 1e-15);
  CHECK(std::abs(lb(p, b) - (14 * alpha + 14.0 / 8 * bytes / beta)) <= 1e-15);
  CHECK(lb(b, s0) == 0);  // a split is local
}

}  // namespace shortcuts_cases
