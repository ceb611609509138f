#pragma once
// Pipeline parallelism in the planner: stages along the outermost mesh axis, contiguous layer
// ranges per stage, the 1F1B schedule. (Not in the umbrella autoddl/search.hpp: it builds on
// search/micro_batches.hpp, which includes <memory>, see mesh/link.hpp.)
//
// A pipeline plan of degree p on mesh a0 x a1 x ... splits the outermost axis into p stages of
// (a0 / p) x a1 x ... devices (Megatron-LM's rank order: tensor innermost, then data, pipeline
// outermost). 128x8 with p = 8 is 8 stages of 16x8. Inside a stage the SBP layouts are the
// planner's, searched on the sub-mesh for one micro-batch of batch / m; every stage
// lays out its ops as that plan does (repeated blocks are alike, so one search serves all).
// The schedule's formulas: search/pipeline_shape.hpp; units and cuts: search/pipeline_cuts.hpp;
// a plan priced at its cuts: search/pipeline_plan.hpp. Here: the plans of a given shape, of a
// megatron strategy with pp > 1, and the search over stages, micro-batches and recomputation.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/pipeline_cuts.hpp"
#include "autoddl/search/pipeline_plan.hpp"
#include "autoddl/search/pipeline_shape.hpp"
#include "autoddl/search/stage_layouts.hpp"
#include "autoddl/search/step_memory.hpp"

namespace autoddl {

namespace detail {

// Better: feasible first, then faster; among infeasible, less memory.
inline bool better_pipeline(const pipeline_plan& a, const pipeline_plan& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (!a.feasible) return a.peak_memory() < b.peak_memory();
  return a.time < b.time * (1 - 1e-9);
}

// plan_pipeline under the settings `pin` (its stage layouts, then the cuts and the stage replays).
inline pipeline_plan plan_pipeline_pinned(const std::function<graph(int)>& build, std::int64_t batch, const plan_options& base,
                                          const plan_strategy& stage_strategy, const pipeline_shape& s, step_settings pin,
                                          std::uint64_t seed, std::optional<double> replay_below) {
  plan_options sub = base;
  sub.mesh = stage_mesh(base.mesh, s.stages);
  sub.memory_limit = memory_limit_of(base) * s.stages;
  pin.replay_below = -std::numeric_limits<double>::infinity();  // the stages are replayed instead
  if (!megatron_microbatches(stage_strategy, sub.mesh, batch)) pin.microbatches = s.microbatches;  // else its mbs says
  const auto solve = [&] { return plan_micro_batched(build, batch, sub, stage_strategy, pin, seed); };
  if (pin.stage_layouts) {  // solved once for every schedule of these layouts
    const stage_layouts_memo::entry& e = pin.stage_layouts->get(stage_strategy, sub, pin, solve);
    pipeline_shape shape = s;
    shape.microbatches = e.layouts.microbatches;
    return price_pipeline(micro_batched_plan(e.layouts), e.units, shape, base, replay_below);
  }
  micro_batched_plan layouts = solve();
  pipeline_shape shape = s;
  shape.microbatches = layouts.microbatches;
  return price_pipeline(std::move(layouts), shape, base, replay_below);
}

}  // namespace detail

/// Plans a pipeline of shape s for the model `build(m)` makes (one micro-batch of a step of m,
/// batch `batch` in all): the layouts of one stage by `stage_strategy` (auto, or an expert
/// without its pipeline) on stage_mesh(base.mesh, p), the graph one micro-batch of batch / m,
/// then the cuts. The layout search sees p times the memory limit (a stage keeps about 1/p of
/// the model); the cuts then hold every stage to the limit itself. with_gap: the stage layouts'
/// gap to the exact reference (attach_optimal_gap), for auto; runner_ups: their runner-ups
/// (attach_runner_ups); replay_below: where the step is no faster than it, the stages are not
/// replayed (pipeline_plan::replayed); gathering: the caller's pins of regathering and
/// resharding (step_settings::regather_inputs, ::reshard_after_forward; unset: chosen here).
/// Gathering again for backward buys memory with communication, and only the replayed stages
/// tell whether a pipeline needs it (the stage layouts' own choice, plan_micro_batched's, sees
/// p times the limit and no replay, so it never keeps anything): where the plan regathers input
/// copies, then where it reshards parameters, that the caller left open, and it fits or was not
/// replayed, it is planned again keeping them, and the better pipeline kept (better_pipeline).
/// Throws layout_error when p does not divide the outermost axis or exceeds the layers.
inline pipeline_plan plan_pipeline(const std::function<graph(int)>& build, std::int64_t batch, const plan_options& base,
                                   const plan_strategy& stage_strategy, const pipeline_shape& s,
                                   std::optional<recompute_mode> recompute, std::uint64_t seed = 1,
                                   bool with_gap = true, bool runner_ups = true,
                                   std::optional<double> replay_below = std::nullopt, const step_settings& gathering = {}) {
  step_settings pin;
  pin.recompute = recompute;
  pin.with_gap = with_gap;
  pin.runner_ups = runner_ups;
  pin.regather_inputs = gathering.regather_inputs;
  pin.reshard_after_forward = gathering.reshard_after_forward;
  pin.stage_layouts = gathering.stage_layouts;
  pipeline_plan best = detail::plan_pipeline_pinned(build, batch, base, stage_strategy, s, pin, seed, replay_below);
  for (const gathered_kind kind : {gathered_kind::input, gathered_kind::param}) {
    std::optional<bool>& open = kind == gathered_kind::input ? pin.regather_inputs : pin.reshard_after_forward;
    if (open || !(best.feasible || !best.replayed) || !gathers_again(*best.layouts.problem, best.layouts.result.pick, kind)) continue;
    step_settings kept = pin;  // the best's other choice, this one kept through the step
    kept.regather_inputs = kind == gathered_kind::input ? false : best.layouts.problem->options().regather_inputs;
    kept.reshard_after_forward = kind == gathered_kind::param ? false : best.layouts.problem->options().reshard_after_forward;
    pipeline_plan p = detail::plan_pipeline_pinned(build, batch, base, stage_strategy, s, kept, seed, replay_below);
    if (detail::better_pipeline(p, best)) best = std::move(p);
    else if (p.replayed && !p.feasible && p.time < best.time) best.faster_over = p.time;
  }
  return best;
}

namespace detail {

// The micro-batch counts worth trying for p stages: divisors of the batch from p up to 8p (the
// bubble (p - 1) / m falls, each micro-batch's kernels shrink), the smallest above 8p where none.
inline std::vector<int> pipeline_microbatch_counts(std::int64_t batch, int p) {
  std::vector<int> r;
  for (int d : divisors(batch))
    if (d >= p && d <= 8 * p) r.push_back(d);
  if (r.empty()) r.push_back(divisors(batch).back());
  return r;
}


// The state of search_pipeline: the points tried (a point: indices into the stage counts, the
// micro-batch counts and the recomputations it tries) and the best so far.
class pipeline_search {
 public:
  using point = std::tuple<int, int, int>;

  pipeline_search(const std::function<graph(int)>& build_model, std::int64_t batch, const plan_options& base,
                  const step_settings& pin, std::uint64_t seed, int max_points)
      : build_model_(build_model), batch_(batch), base_(base), pin_(pin), seed_(seed), max_points_(max_points) {
    build_ = [this](int m) { return graph(kept_graph(graphs_, build_model_, m)); };
    const int units = int(pipeline_units(build_(1)).size());
    for (int d : divisors(base.mesh[0]))
      if (d > 1 && d <= units) ps_.push_back(d);
    ms_ = pin.microbatches ? std::vector<int>{*pin.microbatches} : divisors(batch);
    if (pin.recompute) rs_ = {*pin.recompute};
  }

  /// Whether no stage count fits the mesh and the model.
  bool empty() const { return ps_.empty(); }
  /// Every stage count at the largest of its pipeline_microbatch_counts, without recomputation.
  void start() {
    for (int i = 0; i < int(ps_.size()); ++i) eval({i, clamp(index_of(pipeline_microbatch_counts(batch_, at(ps_, i)).back())), 0});
  }
  bool found() const { return best_.has_value(); }
  int points() const { return int(seen_.size()); }
  pipeline_plan take_best() { return std::move(*seen_[*best_]); }

  /// One round from the best point: its neighbours, or with `diagonal` the moves of p or m that
  /// do not fit, tried again with more recomputation. Whether the best point moved.
  bool round(bool diagonal) {
    const point from = *best_;
    const auto [pi, mi, ri] = from;
    const int m = at(ms_, mi);
    const point moves[] = {{pi - 1, mi, ri}, {pi + 1, mi, ri}, {pi, mi - 1, ri}, {pi, mi + 1, ri},
                           {pi, clamp(index_of(2 * m)), ri}, {pi, clamp(index_of((m + 1) / 2)), ri},
                           {pi, mi, (ri + 1) % int(rs_.size())}, {pi, mi, (ri + 2) % int(rs_.size())}};
    // Recomputation only trades time for memory: where the best point's plan fits with half the
    // limit to spare, more of it is not tried (plan_micro_batched's rule; the 12-layer GPT on
    // 2x2x2x2: 5 points instead of 15, the same plan).
    const pipeline_plan& here = *seen_[from];
    const bool roomy = here.feasible && here.peak_memory() < 0.5 * memory_limit_of(base_);
    for (int k = 0; k < (diagonal ? 6 : 8); ++k) {
      const auto [p, mm, r] = moves[k];
      if (p < 0 || p >= int(ps_.size()) || mm < 0 || mm >= int(ms_.size())) continue;
      if (roomy && r > ri) continue;  // rs_ runs none, selective, full
      if (!diagonal) {
        eval(moves[k]);
        continue;
      }
      for (int more = r + 1; more < int(rs_.size()); ++more) {
        std::optional<pipeline_plan>& got = eval({p, mm, more - 1});
        if (!got || fits(*got)) break;
        eval({p, mm, more});
      }
    }
    return !(*best_ == from);
  }

 private:
  // Point x's pipeline plan, planned once (nullopt where the batch does not split that way or
  // the budget of points is spent). A plan no faster than the best point's, where that fits,
  // is not replayed until its memory is read (fits): it does not become the best.
  std::optional<pipeline_plan>& eval(point x) {
    auto it = seen_.find(x);
    if (it != seen_.end()) return it->second;
    std::optional<pipeline_plan>& slot = seen_[x];
    if (int(seen_.size()) > max_points_) return slot;
    const pipeline_shape sh{at(ps_, std::get<0>(x)), at(ms_, std::get<1>(x)), 1};
    try {
      const pipeline_plan* best = best_ ? &*seen_[*best_] : nullptr;
      slot = plan_pipeline(build_, batch_, base_, strategy::automatic{}, sh, at(rs_, std::get<2>(x)), seed_,
                           /*with_gap=*/false, /*runner_ups=*/false,
                           best && best->feasible ? std::optional<double>(best->time) : std::nullopt, pin_);
    } catch (const error&) {  // the batch does not split that way: no such point
    }
    if (slot && (!best_ || better_pipeline(*slot, *seen_[*best_]))) best_ = x;
    return slot;
  }
  // Whether p fits the memory limit, its stages replayed first where eval left them.
  bool fits(pipeline_plan& p) const {
    if (!p.replayed) replay_stages(p, base_);
    return p.feasible;
  }
  int index_of(int m) const { return int(std::lower_bound(ms_.begin(), ms_.end(), m) - ms_.begin()); }
  int clamp(int i) const { return std::clamp(i, 0, int(ms_.size()) - 1); }

  const std::function<graph(int)>& build_model_;
  std::map<int, graph> graphs_;  ///< points of one micro-batch count copy one graph
  std::function<graph(int)> build_;
  std::int64_t batch_;
  const plan_options& base_;
  step_settings pin_;  ///< the caller's pins (its regathering and resharding reach every point)
  std::uint64_t seed_;
  int max_points_;
  std::vector<int> ps_, ms_;  ///< stage counts and micro-batch counts tried
  std::vector<recompute_mode> rs_{recompute_mode::none, recompute_mode::selective, recompute_mode::full};
  std::map<point, std::optional<pipeline_plan>> seen_;
  std::optional<point> best_;
};

}  // namespace detail

/// The pipeline plan of a megatron strategy with pp > 1 (its tp, dp, mbs, recompute, sp and vpp;
/// micro-batches as `pin` or, unset, the planner's choice among a few multiples of pp).
/// rival: the step time of a feasible plan the caller has; where one micro-batch count and one
/// recomputation are all this tries (mbs or pin, recompute or pin), a plan no faster than the
/// rival is not replayed (pipeline_plan::replayed): whatever its memory, it does not beat the
/// rival, and the stage replays are most of a point's price.
/// @pre pipeline_stages(s) > 1
inline pipeline_plan plan_megatron_pipeline(const std::function<graph(int)>& build, std::int64_t batch,
                                            const plan_options& base, const plan_strategy& s, step_settings pin,
                                            std::uint64_t seed = 1, std::optional<double> rival = std::nullopt) {
  check_strategy(s, base.mesh);
  const auto& m = std::get<strategy::megatron>(s);
  if (m.recompute) pin.recompute = m.recompute;
  const pipeline_shape shape{m.pp, 1, std::max(1, m.vpp)};
  const plan_strategy inner = without_pipeline(s);
  std::vector<int> counts = pin.microbatches ? std::vector<int>{*pin.microbatches}
                                             : detail::pipeline_microbatch_counts(batch, m.pp);
  if (m.mbs > 0) counts = {1};  // its mbs says (plan_pipeline)
  // one plan decides (no count or recomputation compared): it may go unreplayed
  std::optional<double> replay_below;
  if (counts.size() == 1 && pin.recompute) replay_below = rival;
  std::optional<pipeline_plan> best;
  std::optional<layout_error> unsplit;  // the first count the layout could not split, where none could
  for (int c : counts) {
    pipeline_shape sh = shape;
    sh.microbatches = c;
    try {
      pipeline_plan p = plan_pipeline(build, batch, base, inner, sh, pin.recompute, seed, true, true, replay_below, pin);
      if (!best || detail::better_pipeline(p, *best)) best = std::move(p);
    } catch (const layout_error& e) {  // a micro-batch the stage layout cannot split: no such plan
      if (!unsplit) unsplit = e;
    }
  }
  if (!best) throw *unsplit;
  // The stage layouts chose their recomputation for the whole model under p times the limit; where
  // the replayed stages are over it, more recomputation is tried (unless the strategy or pin says).
  for (recompute_mode r : {recompute_mode::selective, recompute_mode::full}) {
    if (best->feasible || pin.recompute || int(best->layouts.recompute) >= int(r)) continue;
    for (int c : counts) {
      pipeline_shape sh = shape;
      sh.microbatches = c;
      try {
        pipeline_plan p = plan_pipeline(build, batch, base, inner, sh, r, seed, true, true, std::nullopt, pin);
        if (detail::better_pipeline(p, *best)) best = std::move(p);
      } catch (const layout_error&) {  // as above
      }
    }
  }
  return std::move(*best);
}

/// The search over pipelines: coordinate descent over the stage count p (divisors of the
/// outermost axis above 1, at most the layers), the micro-batch count m (divisors of the batch)
/// and the recomputation, each point's layouts searched on the stage mesh and its cuts by
/// balance_cuts. Starts from every p at m = the largest count of pipeline_microbatch_counts
/// (the least bubble and activation memory) and no recomputation (pin's where given), then
/// moves one coordinate at a time to the best neighbour (the next divisor up or down, about
/// twice or half the micro-batches, another recomputation; more recomputation only where the
/// best point's peak memory exceeds half the limit) while that improves; where it stops, each
/// move of p or m that does not fit is tried with more recomputation, and single moves go on
/// from a better point so found; all within
/// `max_points` evaluations. nullopt when the mesh or model admits no pipeline. The result's
/// search_s is the whole search's; its optimal_gap is its stage layouts' (attach_optimal_gap).
inline std::optional<pipeline_plan> search_pipeline(const std::function<graph(int)>& build_model, std::int64_t batch,
                                                    const plan_options& base, step_settings pin,
                                                    std::uint64_t seed = 1, int max_points = 24) {
  const planning_clock::scope timing(planning_phase::pipeline_search);
  const auto t0 = std::chrono::steady_clock::now();
  detail::pipeline_search search(build_model, batch, base, pin, seed, max_points);
  if (search.empty()) return std::nullopt;
  search.start();
  // Single moves first; where they stop, the diagonal ones (two coordinates at once, where memory
  // keeps single moves from a faster point: a 4-layer GPT on 4x2 under a tight limit, 13.6 %
  // above the best point without them), and single moves again from where those lead. The
  // single moves' end is kept unless a diagonal one beats it.
  while (search.found() && (search.round(false) || search.round(true))) {
  }
  if (!search.found()) return std::nullopt;
  pipeline_plan r = search.take_best();
  attach_runner_ups(*r.layouts.problem, r.layouts.result);  // the winner's only
  r.layouts.result.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  attach_optimal_gap(*r.layouts.problem, seed, r.layouts.result, /*adopt=*/false);  // priced into the stages already
  r.layouts.result.notes.push_back("pipeline search: " + detail::itos(search.points()) +
                                   " points (stages, micro-batches, recompute) tried");
  return r;
}

}  // namespace autoddl
