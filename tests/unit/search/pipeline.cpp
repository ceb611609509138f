// Pipeline parallelism in the planner (search/pipeline.hpp): the 1F1B step and activation
// memory against an event simulation of the schedule written here, the stage cuts against brute
// force over every cut vector, a one-stage pipeline against the plan's own totals, the search
// against every (stages, micro-batches, recompute) point, and Megatron-LM's pp knobs.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search.hpp"
#include "autoddl/search/megatron_layouts.hpp"
#include "autoddl/search/pipeline.hpp"

using namespace autoddl;
using Catch::Matchers::ContainsSubstring;

namespace pipeline_cases {

namespace {

// 1F1B as Megatron-LM's schedule runs it: stage i warms up with min(p - i - 1, m) forwards, then
// alternates one forward and one backward, then drains its backwards. Each stage runs its list
// in order; F(i, j) waits for F(i-1, j), B(i, j) for B(i+1, j) (and F(p-1, j) on the last
// stage). Returns the makespan and, per stage, the most micro-batches whose forward ran and
// backward has not.
struct simulated {
  double makespan = 0;
  std::vector<int> in_flight;
};
simulated simulate_1f1b(const std::vector<double>& fwd, const std::vector<double>& bwd, int m) {
  const int p = int(fwd.size());
  std::vector<std::vector<double>> f_end(p, std::vector<double>(m, -1)), b_end(p, std::vector<double>(m, -1));
  std::vector<std::vector<std::pair<bool, int>>> order(p);  // (backward?, micro-batch)
  for (int i = 0; i < p; ++i) {
    const int warm = std::min(p - i - 1, m);
    int nf = 0, nb = 0;
    for (; nf < warm; ++nf) order[i].push_back({false, nf});
    while (nb < m) {
      if (nf < m) order[i].push_back({false, nf++});
      order[i].push_back({true, nb++});
    }
  }
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  simulated r;
  r.in_flight.assign(p, 0);
  std::vector<int> live(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < p; ++i) {
      if (next[i] == order[i].size()) continue;
      const auto [backward, j] = order[i][next[i]];
      double ready = 0;
      if (!backward && i > 0) ready = f_end[i - 1][j];
      if (backward) ready = i + 1 < p ? b_end[i + 1][j] : f_end[i][j];
      if (ready < 0) continue;
      const double start = std::max(ready, free_at[i]);
      free_at[i] = start + (backward ? bwd[i] : fwd[i]);
      (backward ? b_end : f_end)[i][j] = free_at[i];
      live[i] += backward ? -1 : 1;
      r.in_flight[i] = std::max(r.in_flight[i], live[i]);
      r.makespan = std::max(r.makespan, free_at[i]);
      ++next[i];
      progress = true;
    }
  }
  return r;
}

// Megatron-LM's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py,
// forward_backward_pipelining_with_interleaving), replayed: device i runs virtual stages
// c p + i (c < v chunks, each 1/v of its forward and backward); its warm-up is
// min((p - i - 1) 2 + (v - 1) p, m v) forwards; its k-th forward takes chunk (k / p) % v and
// micro-batch (k / (p v)) p + k % p, its k-th backward chunk v - 1 - (k / p) % v. Returns the
// makespan and, per device, the most chunk activations held at once divided by v.
struct simulated_interleaved {
  double makespan = 0;
  std::vector<double> in_flight;
};
simulated_interleaved simulate_interleaved(int p, int m, int v, double fwd, double bwd) {
  struct step {
    bool backward;
    int chunk, micro;
  };
  const int total = m * v;
  std::vector<std::vector<step>> order(p);
  for (int i = 0; i < p; ++i) {
    auto f = [&](int k) { return step{false, (k / p) % v, (k / (p * v)) * p + k % p}; };
    auto b = [&](int k) { return step{true, v - 1 - (k / p) % v, (k / (p * v)) * p + k % p}; };
    const int warm = std::min((p - i - 1) * 2 + (v - 1) * p, total);
    for (int k = 0; k < warm; ++k) order[i].push_back(f(k));
    for (int k = 0; k < total - warm; ++k) {
      order[i].push_back(f(k + warm));
      order[i].push_back(b(k));
    }
    for (int k = total - warm; k < total; ++k) order[i].push_back(b(k));
  }
  const int stages = p * v;  // virtual stages
  std::vector<std::vector<double>> f_end(stages, std::vector<double>(m, -1)), b_end(stages, std::vector<double>(m, -1));
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  std::vector<int> live(p, 0), peak(p, 0);
  simulated_interleaved r;
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < p; ++i) {
      if (next[i] == order[i].size()) continue;
      const step st = order[i][next[i]];
      const int vs = st.chunk * p + i;
      double ready = 0;
      if (!st.backward && vs > 0) ready = f_end[vs - 1][st.micro];
      if (st.backward) ready = vs + 1 < stages ? b_end[vs + 1][st.micro] : f_end[vs][st.micro];
      if (ready < 0) continue;
      free_at[i] = std::max(ready, free_at[i]) + (st.backward ? bwd : fwd) / v;
      (st.backward ? b_end : f_end)[vs][st.micro] = free_at[i];
      live[i] += st.backward ? -1 : 1;
      peak[i] = std::max(peak[i], live[i]);
      r.makespan = std::max(r.makespan, free_at[i]);
      ++next[i];
      progress = true;
    }
  }
  for (int i = 0; i < p; ++i) {
    REQUIRE(next[i] == order[i].size());  // no deadlock
    r.in_flight.push_back(double(peak[i]) / v);
  }
  return r;
}

// Hand-made unit costs: slot, activations and state per unit, everything else zero.
unit_costs units_of(const std::vector<double>& slot, const std::vector<double>& act, const std::vector<double>& state) {
  unit_costs u;
  u.slot_s = slot;
  u.activation_bytes = act;
  u.state_bytes = state;
  u.step_s.assign(slot.size(), 0.0);
  u.transient_bytes.assign(slot.size(), 0.0);
  u.send_bytes.assign(slot.size(), 0.0);
  return u;
}

autoddl::link test_link() {
  autoddl::link l;
  l.alpha = 1e-3;
  l.beta = 1e6;
  return l;
}

}  // namespace

TEST_CASE("1F1B's step is (m + p - 1) stage slots and stage i holds min(p - i, m) micro-batches, as simulated",
          "[search][pipeline]") {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 9; ++m) {
      const std::vector<double> fwd(p, 1.0), bwd(p, 2.0);
      const simulated sim = simulate_1f1b(fwd, bwd, m);
      const pipeline_shape s{p, m, 1};
      CAPTURE(p, m);
      CHECK(std::abs(pipeline_step_time(s, 3.0, 0.0, 0.0) - sim.makespan) < 1e-9);
      for (int i = 0; i < p; ++i) CHECK(in_flight_microbatches(s, i) == double(sim.in_flight[i]));
      CHECK(std::abs(pipeline_bubble_fraction(s) - (sim.makespan - m * 3.0) / (m * 3.0)) < 1e-9);
    }
}

TEST_CASE("interleaved 1F1B: step (m + (p - 1) / v) slots and each stage's activations, as Megatron-LM's order runs",
          "[search][pipeline]") {
  for (int p = 2; p <= 5; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        const simulated_interleaved sim = simulate_interleaved(p, m, v, 1.0, 2.0);
        const pipeline_shape s{p, m, v};
        CAPTURE(p, v, m);
        CHECK(std::abs(pipeline_step_time(s, 3.0, 0.0, 0.0) - sim.makespan) < 1e-9);
        CHECK(std::abs(pipeline_bubble_fraction(s) - (sim.makespan - m * 3.0) / (m * 3.0)) < 1e-9);
        for (int i = 0; i < p; ++i) CHECK(std::abs(in_flight_microbatches(s, i) - sim.in_flight[i]) < 1e-9);
      }
}

TEST_CASE("1F1B's step with unequal stages is bounded by the slowest stage's slots", "[search][pipeline]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> d(0.5, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = 1 + int(rng() % 5), m = 1 + int(rng() % 8);
    std::vector<double> fwd(p), bwd(p);
    double slowest = 0;
    for (int i = 0; i < p; ++i) {
      fwd[i] = d(rng);
      bwd[i] = 2 * fwd[i];
      slowest = std::max(slowest, fwd[i] + bwd[i]);
    }
    CAPTURE(trial, p, m);
    const double sim = simulate_1f1b(fwd, bwd, m).makespan;
    CHECK(sim <= pipeline_step_time({p, m, 1}, slowest, 0, 0) + 1e-9);
    CHECK(sim >= m * slowest - 1e-9);
  }
}

TEST_CASE("a stage's figures: its units' slots, the cut's transfer on the stage link, in-flight activations",
          "[search][pipeline]") {
  unit_costs u = units_of({1e-3, 2e-3, 3e-3, 4e-3}, {10, 20, 30, 40}, {100, 200, 300, 400});
  u.send_bytes = {0, 5e3, 6e3, 7e3};
  u.transient_bytes = {1, 2, 3, 4};
  const pipeline_shape s{2, 4, 1};
  const std::vector<stage_figures> f = stage_figures_of(u, s, {0, 2}, test_link());
  REQUIRE(f.size() == 2);
  CHECK(std::abs(f[0].slot_s - 3e-3) < 1e-12);
  CHECK(std::abs(f[1].slot_s - 7e-3) < 1e-12);
  CHECK(std::abs(f[0].send_s - (1e-3 + 6e3 / 1e6)) < 1e-12);  // alpha + bytes / beta
  CHECK(f[1].send_s == 0);
  CHECK(f[0].memory == 300 + 2 * 30 + 2);  // state + min(2 - 0, 4) x activations + transient
  // bytes per step: the units' own, then m activations out (stage 0) or m gradients back (stage 1)
  u.bytes = {1, 2, 3, 4};
  const std::vector<stage_figures> b = stage_figures_of(u, s, {0, 2}, test_link());
  CHECK(b[0].bytes == 1 + 2 + 4 * 6e3);
  CHECK(b[1].bytes == 3 + 4 + 4 * 6e3);
  CHECK(f[1].memory == 700 + 1 * 70 + 4);
  // (m + p - 1) x (slowest slot + 2 x slowest transfer)
  CHECK(std::abs(pipeline_time(f, s) - 5 * (7e-3 + 2 * 7e-3)) < 1e-12);
}

TEST_CASE("balanced cuts equal the best of every cut vector, with and without a memory limit", "[search][pipeline]") {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> d(0.1, 1.0);
  const autoddl::link l = test_link();
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + int(rng() % 7), p = 1 + int(rng() % std::min(n, 4)), m = 1 + int(rng() % 6);
    std::vector<double> slot(n), act(n), state(n), send(n, 0.0), tr(n);
    for (int k = 0; k < n; ++k) {
      slot[k] = d(rng) * 1e-2;
      act[k] = d(rng) * 100;
      state[k] = d(rng) * 100;
      tr[k] = d(rng) * 10;
      if (k > 0) send[k] = d(rng) * 1e4;
    }
    unit_costs u = units_of(slot, act, state);
    u.send_bytes = send;
    u.transient_bytes = tr;
    const double limit = (trial % 3 == 0) ? 0.0 : 150 + d(rng) * 300;
    const pipeline_shape s{p, m, 1};
    // brute force: every way of choosing p - 1 cut positions among 1..n-1
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> mask(n - 1, 0);
    std::fill(mask.begin(), mask.begin() + (p - 1), 1);
    std::sort(mask.begin(), mask.end());
    do {
      std::vector<int> starts{0};
      for (int k = 0; k < n - 1; ++k)
        if (mask[k]) starts.push_back(k + 1);
      double worst = 0;
      bool fits = true;
      for (int i = 0; i < p; ++i) {
        const int a = starts[i], b = i + 1 < p ? starts[i + 1] : n;
        double t = 0, st = 0, ac = 0, tmax = 0;
        for (int k = a; k < b; ++k) {
          t += slot[k];
          st += state[k];
          ac += act[k];
          tmax = std::max(tmax, tr[k]);
        }
        if (b < n) t += 2 * (l.alpha + send[b] / l.beta);
        if (limit > 0 && st + std::min(p - i, m) * ac + tmax > limit) fits = false;
        worst = std::max(worst, t);
      }
      if (fits) best = std::min(best, worst);
    } while (std::next_permutation(mask.begin(), mask.end()));
    CAPTURE(trial, n, p, m, limit);
    const auto cuts = balance_cuts(u, s, l, limit);
    REQUIRE(cuts.has_value() == std::isfinite(best));
    if (!cuts) continue;
    double got = 0;
    for (const stage_figures& f : stage_figures_of(u, s, *cuts, l)) {
      got = std::max(got, f.slot_s + 2 * f.send_s);
      if (limit > 0) CHECK(f.memory <= limit + 1e-9);
    }
    CHECK(std::abs(got - best) <= 1e-12 * std::max(1.0, best));
  }
}

namespace {

constexpr const char* gpt_spec = "gpt:layers=4,hidden=64,heads=4,seq=32,batch=16,vocab=128";

plan_options gpt_options(mesh_shape mesh) {
  plan_options o;
  o.mesh = mesh;
  o.hw = load_hardware("dgx-a100");
  o.type = dtype::bf16;
  return o;
}

graph gpt(int m) { return build_model(gpt_spec, m); }

}  // namespace

TEST_CASE("a one-stage pipeline's step is the plan's additive step time: the units partition the plan's terms",
          "[search][pipeline]") {
  for (int m : {1, 2, 4})
    for (recompute_mode r : {recompute_mode::none, recompute_mode::full}) {
      CAPTURE(m, to_string(r));
      const pipeline_plan pl = plan_pipeline(gpt, 16, gpt_options(mesh_shape{2, 2}), strategy::automatic{}, {1, m, 1}, r);
      const plan_result& res = pl.layouts.result;
      CHECK(std::abs(pl.time - res.totals.serial_time()) <= 1e-9 * res.totals.serial_time());
      REQUIRE(pl.stages.size() == 1);
      // the whole plan's memory: state + one micro-batch's activations + the largest transient
      const memory_breakdown mem = pl.layouts.problem->memory_of(res.pick);
      CHECK(std::abs(pl.stages[0].memory - double(mem.total())) <= 1e-6 * double(mem.total()));
    }
}

TEST_CASE("a stage's step replay: one stage replays the whole step, and skipping repeated steady pairs keeps the peak",
          "[search][pipeline][memory]") {
  const std::uint64_t seed = 20261206;
  std::printf("stage replay: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int m : {1, 2, 4, 8})
    for (recompute_mode r : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
      plan_options o = gpt_options(mesh_shape{2, 2});
      o.microbatches = m;
      o.recompute = r;
      o.zero1_layouts = o.zero2_layouts = true;
      plan_problem problem(gpt(m), o);
      const int ops = int(problem.model().ops.size());
      const std::vector<int> units = pipeline_units(problem.model());
      for (int k = 0; k < 3; ++k) {
        std::vector<int> pick(std::size_t(problem.untied().nodes()));
        for (int n = 0; n < problem.untied().nodes(); ++n) at(pick, n) = int(rng() % std::uint64_t(problem.untied().candidates(n)));
        const step_memory whole = replay_step_memory(problem, pick);
        const step_memory one = replay_stage_memory(problem, pick, {1, m, 1}, {0}, 0);
        CHECK(one.peak() == whole.peak());
        CHECK(one.peak_sent_back == 0);
        for (int p : {2, 4}) {  // cuts at every p-th unit
          std::vector<int> cut_ops;
          for (int i = 0; i < p; ++i) cut_ops.push_back(at(units, i * int(units.size()) / p));
          for (int st = 0; st < p; ++st) {
            CAPTURE(m, to_string(r), k, p, st);
            const int end = st + 1 < p ? at(cut_ops, st + 1) : ops;
            const int warm = std::min(p - st, m) - 1;  // 1F1B: stage st holds min(p - st, m)
            const step_memory fast = replay_stage_memory(problem, pick, {p, m, 1}, cut_ops, st);
            const step_memory each = detail::step_memory_replay(problem, pick, boxed_slots_of(plan_of(problem, pick)), at(cut_ops, st), end, warm).run(false);
            CHECK(fast.peak() == each.peak());
            CHECK(fast.peak_op == each.peak_op);
            CHECK(fast.peak_sent_back == each.peak_sent_back);
            CHECK(fast.peak_op < end);
            CHECK((fast.peak_op < 0 || fast.peak_op >= at(cut_ops, st)));
            if (st == 0) CHECK(fast.peak_sent_back == 0);  // the first stage receives nothing
          }
        }
      }
    }
}

TEST_CASE("a pipeline plan of a GPT: stage meshes, cuts at blocks, the tied embedding on both ends",
          "[search][pipeline]") {
  CHECK(stage_mesh(mesh_shape{128, 8}, 8) == mesh_shape{16, 8});
  CHECK(stage_mesh(mesh_shape{2, 4}, 2) == mesh_shape{4});
  CHECK_THROWS_WITH(stage_mesh(mesh_shape{6, 8}, 4), ContainsSubstring("must divide the outermost axis"));
  const pipeline_plan pl = plan_pipeline(gpt, 16, gpt_options(mesh_shape{4, 2}), strategy::automatic{}, {2, 4, 1},
                                         recompute_mode::none);
  REQUIRE(pl.cuts.size() == 2);
  CHECK(pl.cuts[0] == 0);
  CHECK(pl.layouts.problem->options().mesh == mesh_shape{2, 2});
  const graph& g = pl.layouts.problem->model();
  CHECK(at(g.block, pl.cut_ops[1]) >= 0);  // the second stage starts at a block
  CHECK(at(g.block, pl.cut_ops[1] - 1) != at(g.block, pl.cut_ops[1]));
  CHECK(pl.bubble == 0.25);
  CHECK(pl.feasible);
  // the second stage receives activations, the first sends them; both exchange wte's gradient
  CHECK(pl.stages[0].send_s > 0);
  CHECK(pl.stages[1].send_s == 0);
}

namespace {

// Every (stages, micro-batches, recompute) point of the 4x2 mesh, planned one by one.
struct point_plans {
  double best = std::numeric_limits<double>::infinity();  // the fastest feasible point's step
  double least_peak_none = std::numeric_limits<double>::infinity();
  double least_peak_full = std::numeric_limits<double>::infinity();
  bool none_feasible = false;
  int recompute_faster = 0;  // points where recomputing beats not recomputing, memory roomy
  // memory roomy (half the limit to spare without recomputation): the fastest point without
  // recomputation, and the fastest recomputing one
  double best_roomy_none = std::numeric_limits<double>::infinity();
  double best_roomy_recompute = std::numeric_limits<double>::infinity();
};
point_plans plan_every_point(const plan_options& o) {
  point_plans r;
  const double limit = memory_limit_of(o);
  for (int p : {2, 4})
    for (int m : divisors(16)) {
      std::optional<pipeline_plan> none;
      for (recompute_mode rm : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
        pipeline_plan x = plan_pipeline(gpt, 16, o, strategy::automatic{}, {p, m, 1}, rm);
        if (x.feasible) r.best = std::min(r.best, x.time);
        if (rm == recompute_mode::full) r.least_peak_full = std::min(r.least_peak_full, x.peak_memory());
        const bool roomy = none && none->feasible && none->peak_memory() < 0.5 * limit;
        if (rm != recompute_mode::none && roomy) {
          r.recompute_faster += x.time < none->time;
          r.best_roomy_recompute = std::min(r.best_roomy_recompute, x.time);
        }
        if (rm == recompute_mode::none) {
          if (x.feasible && x.peak_memory() < 0.5 * limit) r.best_roomy_none = std::min(r.best_roomy_none, x.time);
          r.least_peak_none = std::min(r.least_peak_none, x.peak_memory());
          r.none_feasible = r.none_feasible || x.feasible;
          none = std::move(x);
        }
      }
    }
  return r;
}

}  // namespace

TEST_CASE("the pipeline search finds the best of every (stages, micro-batches, recompute) point it may reach",
          "[search][pipeline]") {
  // Regathering trades time for memory as recomputation does, and a fully recomputed block
  // keeps its entering copies instead of gathering them again: with it on, full recomputation
  // can be the faster of two roomy plans. The claim below is of the search without it.
  plan_options o = gpt_options(mesh_shape{4, 2});
  o.regather_inputs = false;
  const auto found = search_pipeline(gpt, 16, o, {}, 1, 100);
  REQUIRE(found);
  const point_plans every = plan_every_point(o);
  const double gap = (found->time - every.best) / every.best;
  std::printf("pipeline search: %.6g s, best of every point %.6g s, gap %.3f %%\n", found->time, every.best, 100 * gap);
  CHECK(found->feasible);
  CHECK(gap <= 0.05);
  // why the search does not try more recomputation where memory is roomy: with half the limit to
  // spare, no recomputing point is faster than the fastest point without recomputation. (At a
  // single point the layout descent may land on a slower local optimum without recomputation
  // than with it: here (4 stages, 2 micro-batches) full recomputation's layouts spend half the
  // forward boxing time; such points are counted and printed.)
  std::printf("roomy points where recomputing beats not recomputing: %d; fastest roomy point %.6g s without "
              "recomputation, %.6g s with\n", every.recompute_faster, every.best_roomy_none, every.best_roomy_recompute);
  CHECK(every.best_roomy_none <= every.best_roomy_recompute);
}

TEST_CASE("where memory binds, the pipeline search recomputes", "[search][pipeline]") {
  plan_options o = gpt_options(mesh_shape{4, 2});
  const point_plans roomy = plan_every_point(o);
  std::printf("least peak: %.6g B without recomputation, %.6g B with full\n", roomy.least_peak_none,
              roomy.least_peak_full);
  REQUIRE(roomy.least_peak_full < 0.95 * roomy.least_peak_none);
  // a limit no point fits without recomputation but some point fits with it, found by planning
  // every point under limits 10 % apart (the layouts adapt to the limit, so the peaks above
  // only start the walk)
  point_plans tight;
  for (double limit = roomy.least_peak_none; limit > 0.1 * roomy.least_peak_full; limit *= 0.9) {
    o.memory_limit = limit;
    tight = plan_every_point(o);
    std::printf("limit %.6g B: a point fits without recomputation: %d; best %.6g s\n", limit, int(tight.none_feasible),
                tight.best);
    if (!tight.none_feasible || !std::isfinite(tight.best)) break;
  }
  REQUIRE_FALSE(tight.none_feasible);
  REQUIRE(std::isfinite(tight.best));
  const auto found = search_pipeline(gpt, 16, o, {}, 1, 100);
  REQUIRE(found);
  CHECK(found->feasible);
  CHECK(found->layouts.recompute != recompute_mode::none);
  const double gap = (found->time - tight.best) / tight.best;
  std::printf("tight limit %.6g B: search %.6g s (%s), best of every point %.6g s, gap %.3f %%\n", o.memory_limit,
              found->time, std::string(to_string(found->layouts.recompute)).c_str(), tight.best, 100 * gap);
  CHECK(gap <= 0.05);
}

TEST_CASE("megatron's pp and vpp: parsed, printed, checked against the mesh and the model", "[search][pipeline]") {
  const plan_strategy s = parse_strategy("megatron:tp=2,pp=2,dp=2,mbs=1,vpp=2");
  CHECK(std::get<strategy::megatron>(s) == strategy::megatron{.tp = 2, .dp = 2, .mbs = 1, .pp = 2, .vpp = 2});
  CHECK(to_string(s) == "megatron:tp=2,pp=2,dp=2,mbs=1,vpp=2");
  CHECK(pipeline_stages(s) == 2);
  CHECK(pipeline_stages(parse_strategy("megatron:tp=2")) == 1);
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=2,pp=3"), mesh_shape{4, 2}),
                    ContainsSubstring("pp=3 must divide the outermost axis of mesh 4x2"));
  CHECK_THROWS_WITH(check_strategy(parse_strategy("megatron:tp=2,pp=2,dp=4"), mesh_shape{4, 2}),
                    ContainsSubstring("tp=2 x pp=2 x dp=4 is 16 devices, but mesh 4x2 has 8"));
  CHECK_NOTHROW(check_strategy(parse_strategy("megatron:tp=2,pp=2,dp=2"), mesh_shape{4, 2}));
  CHECK_THROWS_WITH(parse_strategy("megatron:pp=0"), ContainsSubstring("pp in strategy 'megatron:pp=0' must be"));
  // 4 blocks + the embedding, ln_f and the head: 7 layers, 8 stages is too many
  CHECK_THROWS_WITH(plan_megatron_pipeline(gpt, 16, gpt_options(mesh_shape{8, 1}), parse_strategy("megatron:tp=1,pp=8"), {}),
                    ContainsSubstring("a pipeline of 8 stages needs at least as many layers, but the model has 7"));
  CHECK_THROWS_WITH(plan_micro_batched(gpt, 16, gpt_options(mesh_shape{4, 2}), s, {}),
                    ContainsSubstring("has 2 pipeline stages"));
  const pipeline_plan pl =
      plan_megatron_pipeline(gpt, 16, gpt_options(mesh_shape{4, 2}), parse_strategy("megatron:tp=2,pp=2,mbs=2"), {});
  CHECK(pl.shape.microbatches == 4);  // batch / (mbs x dp) = 16 / (2 x 2)
  CHECK(pl.stages.size() == 2);
}

// A 4-layer LLaMA with grouped-query attention on a 4x2 dgx1-v100 mesh: the megatron layout cases'.
graph tiny_llama(int microbatches) {
  return build_model("llama:layers=4,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,batch=16,vocab=96", microbatches);
}
plan_options tiny_llama_options() {
  plan_options o;
  o.mesh = mesh_shape{4, 2};
  o.hw = load_hardware("dgx1-v100");
  return o;
}

TEST_CASE("the megatron layout search finds the best of every megatron layout within 5 %, and prices it as asked",
          "[search][pipeline][megatron-layouts]") {
  // Oracle: every knob setting of the space (tp, problem, cp, vpp, mbs, recompute; dopt and sp on),
  // each planned as --strategy megatron:... plans it
  const auto build = tiny_llama;
  const plan_options o = tiny_llama_options();
  double best = std::numeric_limits<double>::infinity();
  std::string best_knobs;
  int plans = 0;
  for (int tp : {1, 2})
    for (int pp : {1, 2, 4})
      for (int cp : {1, 2, 4})
        for (int vpp : {1, 2})
          for (int mbs : {1, 2, 4})
            for (recompute_mode r : {recompute_mode::none, recompute_mode::selective, recompute_mode::full}) {
              strategy::megatron m{.tp = tp, .mbs = mbs, .recompute = r, .sp = tp > 1, .pp = pp > 1 ? pp : 0,
                                   .vpp = vpp > 1 ? vpp : 0, .cp = cp > 1 ? cp : 0, .dopt = true};
              if (vpp > 1 && pp == 1) continue;
              try {
                double t = 0;
                bool fits = false;
                if (pp > 1) {
                  const pipeline_plan pl = plan_megatron_pipeline(build, 16, o, m, {}, 1);
                  t = pl.time, fits = pl.feasible;
                } else {
                  const micro_batched_plan mb = plan_micro_batched(build, 16, o, m, {.with_gap = false}, 1);
                  t = mb.result.time, fits = mb.result.feasible;
                }
                ++plans;
                if (fits && t < best) best = t, best_knobs = to_string(plan_strategy{m});
              } catch (const error&) {
              }
            }
  const auto found = search_megatron_layouts(build, 16, o, {}, 1, {.pipelines = true, .interleaved = true}, 40);
  REQUIRE(found);
  const double gap = (found->time - best) / best;
  std::printf("megatron layouts: search %.6g s (%s, %d priced), best of %d %.6g s (%s), gap %.3f %%\n", found->time,
              to_string(plan_strategy{found->knobs}).c_str(), found->points, plans, best, best_knobs.c_str(), 100 * gap);
  CHECK(found->feasible);
  CHECK(found->points <= 40);
  CHECK(gap <= 0.05);
  // the plan found is the one --strategy megatron:... gives for its knobs
  const double again = found->knobs.pp > 1 ? plan_megatron_pipeline(build, 16, o, found->knobs, {}, 1).time
                                           : plan_micro_batched(build, 16, o, found->knobs, {.with_gap = false}, 1).result.time;
  CHECK(again == found->time);
}

TEST_CASE("interleavings of one stage count share their stage layouts and price as each alone",
          "[search][pipeline][megatron-layouts]") {
  // Oracle: each schedule planned on its own (no memo), its stages replayed with their own schedule
  const auto build = tiny_llama;
  const plan_options o = tiny_llama_options();
  stage_layouts_memo memo;
  int solved = 0;  // stage layouts solved for vpp 1 (kept gathering may be a second)
  for (const int vpp : {0, 2}) {
    const strategy::megatron m{
        .tp = 2, .mbs = 1, .recompute = recompute_mode::selective, .sp = true, .pp = 2, .vpp = vpp, .dopt = true};
    const pipeline_plan alone = plan_megatron_pipeline(build, 16, o, m, {}, 1);
    const pipeline_plan shared = plan_megatron_pipeline(build, 16, o, m, {.stage_layouts = &memo}, 1);
    CHECK(shared.time == alone.time);
    CHECK(shared.feasible == alone.feasible);
    CHECK(shared.cut_ops == alone.cut_ops);
    CHECK(shared.layouts.result.pick == alone.layouts.result.pick);
    REQUIRE(shared.stages.size() == alone.stages.size());
    for (int i = 0; i < int(shared.stages.size()); ++i) {
      const std::int64_t own =
          replay_stage_memory(*alone.layouts.problem, alone.layouts.result.pick, alone.shape, alone.cut_ops, i).peak();
      CHECK(shared.stages[std::size_t(i)].peak == double(own));
      CHECK(alone.stages[std::size_t(i)].peak == double(own));
    }
    if (vpp == 0) solved = memo.size();
  }
  CHECK(solved >= 1);
  CHECK(memo.size() == solved);  // vpp changes the schedule, not the stage layouts
}

}  // namespace pipeline_cases
