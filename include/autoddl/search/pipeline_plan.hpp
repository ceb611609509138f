#pragma once
// A pipeline plan (pipeline_plan): the layouts of one stage's mesh, the cuts, each stage's
// figures and replayed memory peak, the step time; and the pricing of layouts as a pipeline at
// given cuts or at the cuts balance_cuts finds. (Not in the umbrella autoddl/search.hpp, as
// search/pipeline.hpp is not: it builds on search/micro_batches.hpp.)
#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/mesh/device_mesh.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/pipeline_cuts.hpp"
#include "autoddl/search/pipeline_shape.hpp"
#include "autoddl/search/step_memory.hpp"

namespace autoddl {

/// Stage `stage`'s step replayed (search/step_memory.hpp): its ops [cut_ops[stage],
/// cut_ops[stage + 1]) in the 1F1B order, as many forwards ahead of the first backward as the
/// stage holds micro-batches in flight less one (in_flight_microbatches, rounded up: the
/// interleaved schedule's count where s.chunks > 1).
/// `slots` is boxed_slots_of(problem, pick), read once for all stages.
inline step_memory replay_stage_memory(const plan_problem& problem, const std::vector<int>& pick, const boxed_slots& slots,
                                       const pipeline_shape& s, const std::vector<int>& cut_ops, int stage,
                                       const step_schedule* schedule = nullptr) {
  const int end = stage + 1 < int(cut_ops.size()) ? at(cut_ops, stage + 1) : int(problem.model().ops.size());
  const int warm = int(std::ceil(in_flight_microbatches(s, stage) - 1e-9)) - 1;
  return replay_step_memory(problem, pick, slots, at(cut_ops, stage), end, std::max(0, warm), schedule);
}
inline step_memory replay_stage_memory(const plan_problem& problem, const std::vector<int>& pick, const pipeline_shape& s,
                                       const std::vector<int>& cut_ops, int stage) {
  return replay_stage_memory(problem, pick, boxed_slots_of(problem, pick), s, cut_ops, stage);
}

/// One stage's mesh: the outermost axis divided by `stages` (dropped where it becomes 1 on a
/// mesh of several axes). stage_mesh(128x8, 8) == 16x8; stage_mesh(2x4, 2) == 4.
/// Throws layout_error when stages does not divide the outermost axis.
inline mesh_shape stage_mesh(const mesh_shape& mesh, int stages) {
  if (stages < 1 || mesh[0] % stages != 0)
    detail::fail<layout_error>("a pipeline of " + detail::itos(stages) + " stages must divide the outermost axis of mesh " +
                               to_string(mesh) + " (" + detail::itos(mesh[0]) + " devices); choose a divisor of " +
                               detail::itos(mesh[0]));
  mesh_shape r;
  if (mesh[0] / stages > 1 || mesh.size() == 1) r.push_back(mesh[0] / stages);
  for (int a = 1; a < mesh.size(); ++a) r.push_back(mesh[a]);
  return r;
}

/// A pipeline plan: the layouts of one stage's sub-mesh, the cuts and the schedule's figures.
struct pipeline_plan {
  micro_batched_plan layouts;          ///< solved on stage_mesh, its graph one micro-batch
  pipeline_shape shape;
  std::vector<int> cuts;               ///< the first unit of each stage
  std::vector<int> cut_ops;            ///< the first op of each stage
  std::vector<stage_figures> stages;
  double time = 0;                     ///< predicted step, seconds
  double bubble = 0;                   ///< pipeline_bubble_fraction(shape)
  bool feasible = false;               ///< every stage's replayed peak within the memory limit
  /// Whether the stages were replayed (stage_figures::peak, feasible). A plan priced no faster
  /// than a feasible rival need not be (detail::price_pipeline's `replay_below`): it cannot
  /// beat the rival whatever its memory, so its peaks stay 0 and feasible false.
  bool replayed = true;
  /// The step time of this shape keeping what this plan gathers again for backward, where that
  /// is faster but over the memory limit (plan_pipeline): a descent reads it as a faster
  /// neighbour over the limit, one more knob of memory away (megatron_layouts.hpp's round).
  std::optional<double> faster_over;
  /// The highest replayed peak of any stage (stage_figures::peak).
  double peak_memory() const {
    double r = 0;
    for (const stage_figures& f : stages) r = std::max(r, f.peak);
    return r;
  }
};

/// `layouts` (solved for s's micro-batches on the stage mesh of base.mesh) priced as a pipeline
/// of shape s cut at `cuts` (the first unit of each stage; a plan file's): its stages' figures,
/// step time and feasibility under base's memory limit. Throws layout_error when the cuts are
/// not s.stages ascending units beginning with 0.
namespace detail {

// Replays each stage of p (replay_stage_memory: stage_figures::peak) and sets p.feasible under
// base's memory limit.
inline void replay_stages(pipeline_plan& p, const plan_options& base) {
  const plan_problem& problem = *p.layouts.problem;
  const std::vector<int>& pick = p.layouts.result.pick;
  const boxed_slots slots = boxed_slots_of(problem, pick);  // one plan's slots and schedule, every stage's replay
  const step_schedule schedule = step_schedule_of(problem, pick, slots);
  for (int i = 0; i < p.shape.stages; ++i)
    at(p.stages, i).peak = double(replay_stage_memory(problem, pick, slots, p.shape, p.cut_ops, i, &schedule).peak());
  const double limit = memory_limit_of(base);
  p.feasible = limit <= 0 || p.peak_memory() <= limit;
  p.replayed = true;
}

// price_pipeline_at; where replay_below is set and the step is no faster than it, the stages
// are not replayed (pipeline_plan::replayed).
inline pipeline_plan price_pipeline_at(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base,
                                       const std::vector<int>& cuts, const unit_costs& u,
                                       std::optional<double> replay_below);

}  // namespace detail

inline pipeline_plan price_pipeline_at(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base,
                                       const std::vector<int>& cuts, const unit_costs& u) {
  return detail::price_pipeline_at(std::move(layouts), s, base, cuts, u, std::nullopt);
}

inline pipeline_plan detail::price_pipeline_at(micro_batched_plan&& layouts, const pipeline_shape& s,
                                               const plan_options& base, const std::vector<int>& cuts,
                                               const unit_costs& u, std::optional<double> replay_below) {
  bool ok = int(cuts.size()) == s.stages && !cuts.empty() && cuts.front() == 0 && cuts.back() < u.units();
  for (std::size_t i = 1; ok && i < cuts.size(); ++i) ok = cuts[i - 1] < cuts[i];
  if (!ok)
    detail::fail<layout_error>("a pipeline of " + detail::itos(s.stages) + " stages needs " + detail::itos(s.stages) +
                               " ascending stage cuts beginning with unit 0, below the model's " + detail::itos(u.units()) +
                               " units");
  pipeline_plan r;
  r.shape = s;
  r.cuts = cuts;
  const std::vector<int> first_op = pipeline_units(layouts.problem->model());
  for (int c : r.cuts) r.cut_ops.push_back(at(first_op, c));
  r.stages = stage_figures_of(u, s, r.cuts, make_device_mesh(base.mesh, base.hw).axis_link(0));
  r.time = pipeline_time(r.stages, s);
  r.bubble = pipeline_bubble_fraction(s);
  r.layouts = std::move(layouts);
  r.replayed = false;
  if (!replay_below || r.time < *replay_below) replay_stages(r, base);
  return r;
}

/// The same, its unit costs computed from `layouts` (pipeline_unit_costs).
inline pipeline_plan price_pipeline_at(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base,
                                       const std::vector<int>& cuts) {
  const unit_costs u = pipeline_unit_costs(*layouts.problem, layouts.result.pick);
  return price_pipeline_at(std::move(layouts), s, base, cuts, u);
}

namespace detail {

// Prices `layouts` (solved for shape's micro-batches on the stage mesh) as a pipeline: cuts by
// balance_cuts under the limit, or, where nothing fits, the fastest cuts (feasible false).
// replay_below: price_pipeline_at's.
inline pipeline_plan price_pipeline(micro_batched_plan&& layouts, const unit_costs& u, const pipeline_shape& s,
                                    const plan_options& base, std::optional<double> replay_below = std::nullopt) {
  const link stage_link = make_device_mesh(base.mesh, base.hw).axis_link(0);
  // the cuts hold the additive bound within the limit where they can; the replayed stages decide
  std::optional<std::vector<int>> cuts = balance_cuts(u, s, stage_link, memory_limit_of(base));
  if (!cuts) cuts = balance_cuts(u, s, stage_link, 0);
  return price_pipeline_at(std::move(layouts), s, base, *cuts, u, replay_below);  // the unit costs priced once
}
// The same, its unit costs computed from `layouts` (pipeline_unit_costs).
inline pipeline_plan price_pipeline(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base,
                                    std::optional<double> replay_below = std::nullopt) {
  const unit_costs u = pipeline_unit_costs(*layouts.problem, layouts.result.pick);
  return price_pipeline(std::move(layouts), u, s, base, replay_below);
}

}  // namespace detail

}  // namespace autoddl
