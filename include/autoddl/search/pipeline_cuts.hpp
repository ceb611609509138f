#pragma once
// Where a pipeline cuts the model: its units (layer boundaries), what each unit costs on the stage
// mesh, the figures of the stages a cut makes, and the cuts that balance them.
// The model is cut at layer boundaries (pipeline_units): a unit is a maximal run of ops of one
// repeated block, or, outside blocks, a weighted op and the ops after it up to the next weighted
// op (a GPT: the embedding, each block, ln_f, the head with the loss; a VGG: each layer).
// Each unit is priced from the sub-mesh plan (pipeline_unit_costs):
//   slot_s       one micro-batch's forward + backward through the unit: its ops and the boxing
//                of the activations it reads (the plan's m-micro-batch terms / m);
//   step_s       once per step: its parameters' gathers, gradient synchronisation and update;
//   state_bytes  parameters, gradients, optimizer state (and gathered copies) it keeps;
//   activation_bytes  one micro-batch's activations kept for backward;
//   send_bytes   per device, what crosses a cut before the unit (forward activations; their
//                gradients come back the same size).
// A tied parameter (GPT's wte, used by the first and last stage) is kept by each stage using it,
// whose gradients add with one all-reduce between the two on the stage axis link.
//
// Cuts (balance_cuts): dynamic programming over the units minimising the slowest stage's slot
// (t + 2 x of its outgoing cut) with every stage's memory (state + in-flight activations +
// transient) within the limit. Exact for that objective; max step_s is not part of it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/mesh/link.hpp"
#include "autoddl/search/pipeline_shape.hpp"
#include "autoddl/search/planner.hpp"

namespace autoddl {

/// The first op of every unit, ascending, beginning with 0: a unit is a maximal run of ops of
/// one repeated block or, outside blocks, an op with parameters and the parameterless ops after
/// it. A GPT of 2 blocks: {embed, h0.ln1, h1.ln1, ln_f, lm_head} as op indices.
inline std::vector<int> pipeline_units(const graph& g) {
  std::vector<int> first;
  bool weighted = false;  // whether the current unit outside blocks has an op with parameters
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const bool has_params = !at(g.ops, i).params.empty();
    const bool outside = at(g.block, i) < 0;
    if (i == 0 || at(g.block, i) != at(g.block, i - 1) || (outside && has_params && weighted)) {
      first.push_back(i);
      weighted = false;
    }
    weighted = weighted || (outside && has_params);
  }
  return first;
}

/// What each unit costs per device on the stage's sub-mesh (see the header).
struct unit_costs {
  std::vector<double> slot_s;
  std::vector<double> compute_s;    ///< per unit: the compute part of m x slot_s + step_s (per step)
  std::vector<double> step_s;
  std::vector<double> state_bytes;
  std::vector<double> activation_bytes;
  std::vector<double> transient_bytes;
  std::vector<double> send_bytes;   ///< per unit u: bytes crossing a cut just before u (0 for u = 0)
  std::vector<double> bytes;        ///< per unit: bytes sent on the stage mesh per step (m micro-batches and the step's work)
  /// A parameter used by several units (GPT's wte): priced in its first unit; a stage that holds
  /// its last use but not its first keeps a copy too, and the two all-reduce its gradient.
  struct tied_weight {
    int first_unit = 0, last_unit = 0;
    double state_bytes = 0;  ///< parameters, gradients, optimizer state of the copy
    double param_bytes = 0;  ///< the gradient all-reduced between the two stages (its update layout's shard)
    double step_s = 0;       ///< the copy's synchronisation and update
    double compute_s = 0;    ///< the compute part of step_s (the copy's update)
    double bytes = 0;        ///< the copy's synchronisation bytes on the stage mesh
  };
  std::vector<tied_weight> tied;
  int units() const { return int(slot_s.size()); }
};

/// Per-stage figures of a cut plan.
struct stage_figures {
  int first_unit = 0, end_unit = 0;
  double slot_s = 0;    ///< forward + backward of one micro-batch
  double send_s = 0;    ///< activations of one micro-batch to the next stage (0 for the last)
  double step_s = 0;    ///< once per step: gradient synchronisation and the update
  double compute_s = 0; ///< per step: the compute part of m x slot_s + step_s (the rest is communication)
  double memory = 0;    ///< the additive bound: state + in-flight activations + transient (stage_memory)
  double peak = 0;      ///< the replayed step's peak per device (replay_stage_memory): what the limit holds
  /// Bytes each device sends per step: its units' boxings and collectives on the stage mesh, m
  /// micro-batches of activations to the next stage and of gradients to the one before, and a
  /// tied parameter's synchronisation and exchange (what the trainer counts).
  double bytes = 0;
};

/// A unit range's memory as stage `stage` of s: state + in-flight activations + largest transient.
inline double stage_memory(const unit_costs& u, const pipeline_shape& s, int stage, int first, int end) {
  double state = 0, act = 0, transient = 0;
  for (int k = first; k < end; ++k) {
    state += at(u.state_bytes, k);
    act += at(u.activation_bytes, k);
    transient = std::max(transient, at(u.transient_bytes, k));
  }
  for (const unit_costs::tied_weight& t : u.tied)
    if (first <= t.last_unit && t.last_unit < end && !(first <= t.first_unit && t.first_unit < end)) state += t.state_bytes;
  return state + in_flight_microbatches(s, stage) * act + transient;
}

/// The figures of every stage of `cuts` (the first unit of each stage; cuts[0] == 0), with the
/// stage axis `stage_link` carrying activations between neighbours.
inline std::vector<stage_figures> stage_figures_of(const unit_costs& u, const pipeline_shape& s,
                                                   const std::vector<int>& cuts, const link& stage_link) {
  std::vector<stage_figures> r;
  for (int i = 0; i < int(cuts.size()); ++i) {
    stage_figures f;
    f.first_unit = at(cuts, i);
    f.end_unit = i + 1 < int(cuts.size()) ? at(cuts, i + 1) : u.units();
    for (int k = f.first_unit; k < f.end_unit; ++k) {
      f.slot_s += at(u.slot_s, k);
      f.step_s += at(u.step_s, k);
      if (k < std::ssize(u.compute_s)) f.compute_s += at(u.compute_s, k);
      if (k < std::ssize(u.bytes)) f.bytes += at(u.bytes, k);  // (figures built by hand may leave bytes out)
    }
    if (f.end_unit < u.units()) f.send_s = stage_link.time(1, at(u.send_bytes, f.end_unit));
    if (f.end_unit < u.units()) f.bytes += s.microbatches * at(u.send_bytes, f.end_unit);  // activations
    if (i > 0) f.bytes += s.microbatches * at(u.send_bytes, f.first_unit);                 // their gradients
    f.memory = stage_memory(u, s, i, f.first_unit, f.end_unit);
    r.push_back(f);
  }
  // a tied parameter on two stages: each updates its copy, and they all-reduce the gradient (2
  // devices: T bytes each way, 2 steps; sbp/boxing.hpp's table)
  auto stage_of = [&r](int unit) {
    int i = 0;
    while (i + 1 < int(r.size()) && at(r, i + 1).first_unit <= unit) ++i;
    return i;
  };
  for (const unit_costs::tied_weight& t : u.tied) {
    const int a = stage_of(t.first_unit), b = stage_of(t.last_unit);
    if (a == b) continue;
    at(r, a).step_s += stage_link.time(2, t.param_bytes);
    at(r, b).step_s += stage_link.time(2, t.param_bytes) + t.step_s;
    at(r, b).compute_s += t.compute_s;
    at(r, a).bytes += t.param_bytes;
    at(r, b).bytes += t.param_bytes + t.bytes;
  }
  return r;
}

/// The step time of stages `f` under s: pipeline_step_time of the slowest slot, cut and step work.
inline double pipeline_time(const std::vector<stage_figures>& f, const pipeline_shape& s) {
  double slot = 0, send = 0, step = 0;
  for (const stage_figures& x : f) {
    slot = std::max(slot, x.slot_s);
    send = std::max(send, x.send_s);
    step = std::max(step, x.step_s);
  }
  return pipeline_step_time(s, slot, send, step);
}

namespace detail {

// balance_cuts' step for stage `stage` starting at unit `first`: every end up to `last_end`, the
// stage's memory summed as stage_memory sums it (the same additions in the same order, as the
// end grows), stopping where the memory without tied copies passes the limit (it only grows
// with the end). For each (stage, end) the starts arrive in ascending order, so ties go to the
// smallest start, as a loop over starts within each end gives.
inline void extend_stage(const unit_costs& u, const pipeline_shape& s, int stage, int first, int last_end,
                         double memory_limit, const std::vector<double>& prefix, const std::vector<double>& send,
                         std::vector<std::vector<double>>& best, std::vector<std::vector<int>>& from) {
  const double in_flight = in_flight_microbatches(s, stage), before = at(at(best, stage), first);
  double state = 0, act = 0, transient = 0;
  for (int end = first + 1; end <= last_end; ++end) {
    state += at(u.state_bytes, end - 1);
    act += at(u.activation_bytes, end - 1);
    transient = std::max(transient, at(u.transient_bytes, end - 1));
    if (memory_limit > 0 && state + in_flight * act + transient > memory_limit) return;
    double held = state;
    for (const unit_costs::tied_weight& t : u.tied)
      if (first <= t.last_unit && t.last_unit < end && !(first <= t.first_unit && t.first_unit < end)) held += t.state_bytes;
    if (memory_limit > 0 && held + in_flight * act + transient > memory_limit) continue;
    const double b = std::max(before, at(prefix, end) - at(prefix, first) + at(send, end));
    if (b < at(at(best, stage + 1), end)) {
      at(at(best, stage + 1), end) = b;
      at(at(from, stage + 1), end) = first;
    }
  }
}

}  // namespace detail

/// Stage cuts: the first unit of each of the s.stages stages (cuts[0] == 0, ascending, each
/// stage at least one unit) minimising the slowest stage's slot_s + 2 x its outgoing transfer,
/// every stage's memory within `memory_limit` (bytes; <= 0: no limit). Dynamic programming over
/// (stages placed, units covered), O(p U^2) (a stage's memory grows with its end, summed as it
/// grows). nullopt when no cut fits the limit.
/// Throws layout_error when there are more stages than units.
inline std::optional<std::vector<int>> balance_cuts(const unit_costs& u, const pipeline_shape& s,
                                                    const link& stage_link, double memory_limit) {
  const int n = u.units(), p = s.stages;
  if (p > n)
    detail::fail<layout_error>("a pipeline of " + detail::itos(p) + " stages needs at least as many layers, but the model has " +
                               detail::itos(n) + "; choose at most " + detail::itos(n) + " stages");
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(std::size_t(n) + 1, 0.0), send(std::size_t(n) + 1, 0.0);
  for (int k = 0; k < n; ++k) at(prefix, k + 1) = at(prefix, k) + at(u.slot_s, k);
  for (int j = 1; j < n; ++j) at(send, j) = 2 * s.chunks * stage_link.time(1, at(u.send_bytes, j));
  // best[i][j]: the least bottleneck of stages 0..i-1 covering units 0..j-1; from[i][j]: first unit of stage i-1
  std::vector<std::vector<double>> best(std::size_t(p) + 1, std::vector<double>(std::size_t(n) + 1, inf));
  std::vector<std::vector<int>> from(std::size_t(p) + 1, std::vector<int>(std::size_t(n) + 1, -1));
  at(at(best, 0), 0) = 0;
  for (int i = 1; i <= p; ++i)
    for (int k = i - 1; k < n - (p - i); ++k)
      if (at(at(best, i - 1), k) < inf) detail::extend_stage(u, s, i - 1, k, n - (p - i), memory_limit, prefix, send, best, from);
  if (at(at(best, p), n) == inf) return std::nullopt;
  std::vector<int> cuts(std::size_t(p), 0);
  for (int i = p, j = n; i > 0; j = at(at(from, i), j), --i) at(cuts, i - 1) = at(at(from, i), j);
  return cuts;
}

namespace detail {

// The unit of every op, from pipeline_units.
inline std::vector<int> unit_of_ops(const graph& g) {
  const std::vector<int> first = pipeline_units(g);
  std::vector<int> unit(g.ops.size());
  for (int u = 0, i = 0; i < int(g.ops.size()); ++i) {
    if (u + 1 < int(first.size()) && at(first, u + 1) == i) ++u;
    at(unit, i) = u;
  }
  return unit;
}

inline double state_of(const memory_breakdown& m) { return double(m.params + m.grads + m.optimizer); }

// Bytes per device crossing the cut before each unit: every op output read by a later unit,
// counted at each cut it crosses, in its producer's layout.
inline std::vector<double> cut_bytes(const plan_problem& problem, const std::vector<int>& pick, const std::vector<int>& unit,
                                     int units) {
  const graph& g = problem.model();
  std::map<std::pair<int, int>, int> last_reader;  // (producer op, output) -> furthest unit reading it
  for (const auto& e : problem.edge_infos())
    if (!e.param) {
      int& r = last_reader[{e.producer, e.producer_output}];
      r = std::max(r, at(unit, e.to_node));
    }
  std::vector<double> bytes(std::size_t(units), 0.0);
  const double elem = double(bytes_of(problem.options().type));
  for (const auto& [out, reader] : last_reader) {
    const auto [op, k] = out;
    const nd_sbp& l = at(problem.op_candidate(op, at(pick, op)).outputs, k);
    const double b = double(local_shape(at(at(g.ops, op).outputs, k), layout{l, problem.options().mesh}).elements()) * elem;
    for (int c = at(unit, op) + 1; c <= reader; ++c) at(bytes, c) += b;
  }
  return bytes;
}

// Ops: their forward + backward per micro-batch (the plan prices m), activations, transients.
inline void add_op_costs(const plan_problem& problem, const std::vector<int>& pick, const std::vector<int>& unit, unit_costs& u) {
  const graph& g = problem.model();
  const double m = problem.options().microbatches;
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const int c = at(pick, i), k = at(unit, i);
    const cost_terms& t = problem.untied().unary(i, c);
    at(u.slot_s, k) += (t.compute() + t.comm()) / m;
    at(u.compute_s, k) += t.compute();
    at(u.bytes, k) += t.bytes;
    const op_work w = device_work(at(g.ops, i), problem.op_candidate(i, c), problem.options().mesh, bytes_of(problem.options().type));
    const memory_breakdown mem = problem.op_memory(i, c, w);
    at(u.activation_bytes, k) += double(mem.activations);
    at(u.transient_bytes, k) = std::max(at(u.transient_bytes, k), double(mem.transient));
  }
}

// Edges, in the consumer's unit: an activation's boxing per micro-batch; a parameter's gather
// and gradient synchronisation once per step. Returns the units using each parameter.
inline std::vector<std::set<int>> add_edge_costs(const plan_problem& problem, const std::vector<int>& pick,
                                                 const std::vector<int>& unit, unit_costs& u) {
  const choice_problem& cp = problem.untied();
  const int ops = int(problem.model().ops.size());
  const double m = problem.options().microbatches;
  std::vector<std::set<int>> param_units(problem.model().params.size());
  for (int e = 0; e < int(cp.edges().size()); ++e) {
    const auto& info = at(problem.edge_infos(), e);
    const int cu = at(pick, at(cp.edges(), e).u), cv = at(pick, at(cp.edges(), e).v), k = at(unit, info.to_node);
    const cost_terms& t = cp.pair(e, cu, cv);
    const memory_breakdown mem = problem.edge_memory(e, cu, cv);
    at(u.bytes, k) += t.bytes;
    at(u.compute_s, k) += t.compute();
    if (info.param) {
      at(param_units, info.from_node - ops).insert(k);
      at(u.step_s, k) += t.compute() + t.comm();
      at(u.state_bytes, k) += state_of(mem);
    } else {
      at(u.slot_s, k) += (t.compute() + t.comm()) / m;
    }
    at(u.activation_bytes, k) += double(mem.activations);
    at(u.transient_bytes, k) = std::max(at(u.transient_bytes, k), t.transient);
  }
  return param_units;
}

// Parameters, in their first user's unit (a tied one recorded for the stage of its last use).
inline void add_param_costs(const plan_problem& problem, const std::vector<int>& pick,
                            const std::vector<std::set<int>>& param_units, unit_costs& u) {
  for (int p = 0; p < int(problem.model().params.size()); ++p) {
    const int c = at(pick, problem.param_node(p));
    const cost_terms& t = problem.untied().unary(problem.param_node(p), c);
    const std::set<int>& us = at(param_units, p);
    if (us.empty()) continue;
    const memory_breakdown mem = problem.param_memory(p, c);
    const int k = *us.begin();
    at(u.step_s, k) += t.compute() + t.comm();
    at(u.compute_s, k) += t.compute();
    at(u.bytes, k) += t.bytes;
    at(u.state_bytes, k) += state_of(mem);
    at(u.transient_bytes, k) = std::max(at(u.transient_bytes, k), t.transient);
    const param_choice& pc = problem.param_candidate(p, c);
    const double update_bytes = double(local_shape(at(problem.model().params, p).shape, layout{pc.update, problem.options().mesh}).elements() *
                                       bytes_of(problem.options().type));
    if (us.size() > 1)
      u.tied.push_back({k, *us.rbegin(), state_of(mem), update_bytes, t.compute() + t.comm(), t.compute(), t.bytes});
  }
}

}  // namespace detail

/// The per-unit costs of pick (a plan of problem, whose graph is one micro-batch of
/// problem.options().microbatches) as the stages of a pipeline would run them; see the header.
/// With one stage they add up to the plan: m x the slots + the step work == its serial time.
inline unit_costs pipeline_unit_costs(const plan_problem& problem, const std::vector<int>& pick) {
  const std::vector<int> unit = detail::unit_of_ops(problem.model());
  const int n = int(pipeline_units(problem.model()).size());
  unit_costs u;
  for (auto* v : {&u.slot_s, &u.compute_s, &u.step_s, &u.state_bytes, &u.activation_bytes, &u.transient_bytes, &u.bytes})
    v->assign(std::size_t(n), 0.0);
  detail::add_op_costs(problem, pick, unit, u);
  detail::add_param_costs(problem, pick, detail::add_edge_costs(problem, pick, unit, u), u);
  u.send_bytes = detail::cut_bytes(problem, pick, unit, n);
  return u;
}

}  // namespace autoddl
