#pragma once
// From a solved layout-choice problem to the plan value the executor runs (plan/plan.hpp): the
// picked signature of every op, the priced boxing path into every operand slot (the same paths
// the problem priced: plan_problem::edge_paths), every parameter's layouts and its
// synchronisation, gather and slice paths, and the problem's schedule.
//   plan p = plan_of(problem, result.pick);       // one stage, the whole model
//   plan q = plan_of(problem, pick, {0, 41});     // a pipeline of two stages, cut before op 41
// What the replay of a step's memory reads of that plan, without building it (its paths are
// most of its bytes): boxed_slots_of(problem, pick) == boxed_slots_of(plan_of(problem, pick)), and
// step_schedule_of its schedule.
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/plan/boxed_slots.hpp"
#include "autoddl/plan/plan.hpp"
#include "autoddl/plan/step_schedule.hpp"
#include "autoddl/search/planner.hpp"

namespace autoddl {

/// The plan `pick` of `problem` (plan_result::pick: a candidate per node of problem.untied()),
/// its pipeline stages beginning at `stage_first_ops`.
/// @pre pick holds a candidate of every node.
inline plan plan_of(const plan_problem& problem, const std::vector<int>& pick, std::vector<int> stage_first_ops = {0}) {
  const graph& g = problem.model();
  const plan_options& o = problem.options();
  plan r;
  r.model = problem.shared_model();
  r.mesh = o.mesh;
  r.type = o.type;
  r.microbatches = o.microbatches;
  r.recompute = o.recompute;
  r.regather_inputs = o.regather_inputs;
  r.reshard_after_forward = o.reshard_after_forward;
  r.stage_first_ops = std::move(stage_first_ops);
  const int nops = int(g.ops.size());
  resize(r.ops, nops);
  for (int i = 0; i < nops; ++i) {
    op_plan& x = at(r.ops, i);
    x.sig = problem.op_candidate(i, at(pick, i));
    x.inputs.resize(at(g.op_inputs, i).size());
    x.chained.resize(at(g.op_inputs, i).size());
    x.params.resize(at(g.ops, i).param_ids.size());
  }
  const auto& infos = problem.edge_infos();
  const auto& edges = problem.untied().edges();
  for (int e = 0; e < int(infos.size()); ++e) {
    const auto& ei = at(infos, e);
    auto [fwd, bwd] = problem.edge_paths(e, at(pick, at(edges, e).u), at(pick, at(edges, e).v));
    op_plan& x = at(r.ops, ei.to_node);
    auto& slots = ei.param ? x.params : x.inputs;
    at(slots, ei.tensor_index) = slot_boxing{fwd, bwd};
    if (!ei.param && ei.from_input >= 0) at(x.chained, ei.tensor_index) = input_slot{ei.from_node, ei.from_input};
  }
  r.params.reserve(g.params.size());
  for (int p = 0; p < int(g.params.size()); ++p) {
    const int c = at(pick, problem.param_node(p));
    const param_choice& layouts = problem.param_candidate(p, c);
    r.params.push_back(param_plan{layouts, problem.param_sync_path(p, c), problem.param_gather_path(p, c),
                                  problem.box(layouts.storage, layouts.update, at(g.params, p).shape)});
  }
  return r;
}

/// The boxed slots of plan_of(problem, pick), read off the problem's priced paths.
/// @pre pick holds a candidate of every node.
inline boxed_slots boxed_slots_of(const plan_problem& problem, const std::vector<int>& pick) {
  const graph& g = problem.model();
  const int nops = int(g.ops.size());
  boxed_slots r;
  resize(r.inputs, nops);
  resize(r.chained, nops);
  resize(r.param_forward, nops);
  resize(r.param_backward, nops);
  for (int i = 0; i < nops; ++i) {
    at(r.inputs, i).assign(at(g.op_inputs, i).size(), false);
    at(r.chained, i).assign(at(g.op_inputs, i).size(), input_slot{});
    at(r.param_forward, i).assign(at(g.ops, i).param_ids.size(), false);
    at(r.param_backward, i).assign(at(g.ops, i).param_ids.size(), false);
  }
  const auto& infos = problem.edge_infos();
  const auto& edges = problem.untied().edges();
  for (int e = 0; e < int(infos.size()); ++e) {
    const auto& ei = at(infos, e);
    const auto& [fwd, bwd] = problem.edge_paths(e, at(pick, at(edges, e).u), at(pick, at(edges, e).v));
    const auto j = std::size_t(ei.tensor_index);
    if (ei.param) {
      at(at(r.param_forward, ei.to_node), j) = fwd.size() > 0;
      at(at(r.param_backward, ei.to_node), j) = bwd.size() > 0;
      continue;
    }
    at(at(r.inputs, ei.to_node), j) = fwd.size() > 0;
    if (ei.from_input >= 0) at(at(r.chained, ei.to_node), j) = input_slot{ei.from_node, ei.from_input};
  }
  return r;
}

/// step_schedule(plan_of(problem, pick)), from that plan's boxed slots `slots`.
inline step_schedule step_schedule_of(const plan_problem& problem, const std::vector<int>& pick, const boxed_slots& slots) {
  const plan_options& o = problem.options();
  const auto sig = [&](int i) -> const signature& { return problem.op_candidate(i, at(pick, i)); };
  return step_schedule(problem.model(), o.recompute, slots,
                       regathered_inputs(problem.model(), sig, slots, o.mesh, o.recompute, o.regather_inputs));
}

}  // namespace autoddl
