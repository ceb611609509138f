#pragma once
// Pipeline parallelism in the planner: stages along the outermost mesh axis, contiguous layer
// ranges per stage, the 1F1B schedule. (Not in the umbrella autoddl/search.hpp: it builds on
// search/micro_batches.hpp, which includes <memory>, see mesh/link.hpp.)
//
// A pipeline plan of degree p on mesh a0 x a1 x ... splits the outermost axis into p stages of
// (a0 / p) x a1 x ... devices (Megatron-LM's rank order: tensor innermost, then data, pipeline
// outermost). 128x8 with p = 8 is 8 stages of 16x8. Inside a stage the SBP layouts are the
// planner's, searched as today on the sub-mesh for one micro-batch of batch / m; every stage
// lays out its ops as that plan does (repeated blocks are alike, so one search serves all).
//
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
// 1F1B (PipeDream-Flush; Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
// on GPU Clusters Using Megatron-LM", SC'21, section 2.2.1), with t the slowest stage's
// per-micro-batch forward + backward and x the slowest cut's activation transfer on the stage
// axis link (alpha + bytes / beta, the same size again for the gradient):
//   step = (m + p - 1) * (t + 2 x) + max over stages of step_s       (nothing overlapped)
//   bubble fraction = (p - 1) / m
//   stage i (0-based) holds min(p - i, m) micro-batches of activations in flight.
// Interleaved (v model chunks per device, section 2.2.2): the bubble shrinks by v,
//   step = (m + (p - 1) / v) * t + (m + p - 1) * 2 v x + max step_s   (v times the transfers)
//   bubble fraction = (p - 1) / (v m),
// and stage 0 holds (1 + (p - 1) / (p v)) times the 1F1B in-flight activations (Korthikanti et
// al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.2.3);
// stage i holds min(m, p + (p - 1 - 2i) / v) micro-batches' worth (Megatron-LM's interleaved
// order, schedules.py, replayed; m a multiple of p, as Megatron-LM requires).
// (A device's v chunks are v ranges of the model in Megatron-LM; here its share is priced as one
// contiguous range of the same size, so the cuts stand for the devices' loads, not the chunks.
// The tests replay both schedules event by event and compare step and memory with these forms.)
// A tied parameter (GPT's wte, used by the first and last stage) is kept by each stage using it,
// whose gradients add with one all-reduce between the two on the stage axis link.
//
// Cuts (balance_cuts): dynamic programming over the units minimising the slowest stage's slot
// (t + 2 x of its outgoing cut) with every stage's memory (state + in-flight activations +
// transient) within the limit. Exact for that objective; max step_s is not part of it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/step_memory.hpp"

namespace autoddl {

/// The schedule's shape: p stages, m micro-batches, v model chunks per device (1: plain 1F1B).
struct pipeline_shape {
  int stages = 1;
  int microbatches = 1;
  int chunks = 1;
  friend constexpr bool operator==(const pipeline_shape&, const pipeline_shape&) = default;
};

/// The share of the step the devices idle in fill and drain: (p - 1) / (v m) (Narayanan et al.
/// 2021, sections 2.2.1-2.2.2). pipeline_bubble_fraction({4, 8, 1}) == 0.375.
constexpr double pipeline_bubble_fraction(const pipeline_shape& s) {
  return double(s.stages - 1) / (double(s.chunks) * double(s.microbatches));
}

/// Micro-batches of activations stage i (0-based) holds at once under 1F1B: min(p - i, m) (the
/// first stage runs p forwards before its first backward). Interleaved (v chunks of 1/v of the
/// stage each): min(m, p + (p - 1 - 2i) / v) micro-batches' worth, stage 0's
/// p (1 + (p - 1) / (p v)) as Korthikanti et al. 2022 (section 4.2.3) give it.
constexpr double in_flight_microbatches(const pipeline_shape& s, int stage) {
  if (s.chunks <= 1) return double(std::min(s.stages - stage, s.microbatches));
  const double p = s.stages, v = s.chunks;
  return std::min(double(s.microbatches), p + (p - 1 - 2 * stage) / v);
}

/// The step of a pipeline whose slowest stage takes slot_s per micro-batch (forward + backward),
/// whose slowest cut takes send_s to pass one micro-batch's activations (its gradient as long),
/// and whose slowest once-per-step work (gradient sync, update) takes step_s; see the header.
/// pipeline_step_time({4, 8, 1}, 1.0, 0.0, 0.5) == 11.5.
constexpr double pipeline_step_time(const pipeline_shape& s, double slot_s, double send_s, double step_s) {
  const double p = s.stages, m = s.microbatches, v = s.chunks;
  return (m + (p - 1) / v) * slot_s + (m + p - 1) * 2 * v * send_s + step_s;
}

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
      if (k < std::ssize(u.bytes)) f.bytes += at(u.bytes, k);  // (figures built by hand may leave bytes out)
    }
    if (f.end_unit < u.units()) f.send_s = stage_link.time(1, at(u.send_bytes, f.end_unit));
    if (f.end_unit < u.units()) f.bytes += s.microbatches * at(u.send_bytes, f.end_unit);  // activations
    if (i > 0) f.bytes += s.microbatches * at(u.send_bytes, f.first_unit);                 // their gradients
    f.memory = stage_memory(u, s, i, f.first_unit, f.end_unit);
    r.push_back(f);
  }
  // a tied parameter on two stages: each updates its copy, and they all-reduce the gradient (2
  // devices: T bytes each way, 2 steps; DESIGN.md's table)
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

/// Stage cuts: the first unit of each of the s.stages stages (cuts[0] == 0, ascending, each
/// stage at least one unit) minimising the slowest stage's slot_s + 2 x its outgoing transfer,
/// every stage's memory within `memory_limit` (bytes; <= 0: no limit). Dynamic programming over
/// (stages placed, units covered), O(p U^2). nullopt when no cut fits the limit.
/// Throws layout_error when there are more stages than units.
inline std::optional<std::vector<int>> balance_cuts(const unit_costs& u, const pipeline_shape& s,
                                                    const link& stage_link, double memory_limit) {
  const int n = u.units(), p = s.stages;
  if (p > n)
    detail::fail<layout_error>("a pipeline of " + detail::itos(p) + " stages needs at least as many layers, but the model has " +
                               detail::itos(n) + "; choose at most " + detail::itos(n) + " stages");
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(std::size_t(n) + 1, 0.0);
  for (int k = 0; k < n; ++k) at(prefix, k + 1) = at(prefix, k) + at(u.slot_s, k);
  auto cost = [&](int stage, int first, int end) {  // one stage's slot, or inf over the limit
    if (memory_limit > 0 && stage_memory(u, s, stage, first, end) > memory_limit) return inf;
    const double send = end < n ? stage_link.time(1, at(u.send_bytes, end)) : 0.0;
    return at(prefix, end) - at(prefix, first) + 2 * s.chunks * send;
  };
  // best[i][j]: the least bottleneck of stages 0..i-1 covering units 0..j-1; from[i][j]: first unit of stage i-1
  std::vector<std::vector<double>> best(std::size_t(p) + 1, std::vector<double>(std::size_t(n) + 1, inf));
  std::vector<std::vector<int>> from(std::size_t(p) + 1, std::vector<int>(std::size_t(n) + 1, -1));
  at(at(best, 0), 0) = 0;
  for (int i = 1; i <= p; ++i)
    for (int j = i; j <= n - (p - i); ++j)
      for (int k = i - 1; k < j; ++k) {
        const double b = std::max(at(at(best, i - 1), k), cost(i - 1, k, j));
        if (b < at(at(best, i), j)) {
          at(at(best, i), j) = b;
          at(at(from, i), j) = k;
        }
      }
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
inline std::vector<double> cut_bytes(const plan_problem& pp, const std::vector<int>& pick, const std::vector<int>& unit,
                                     int units) {
  const graph& g = pp.model();
  std::map<std::pair<int, int>, int> last_reader;  // (producer op, output) -> furthest unit reading it
  for (const auto& e : pp.edge_infos())
    if (!e.param) {
      int& r = last_reader[{e.from_node, e.producer_output}];
      r = std::max(r, at(unit, e.to_node));
    }
  std::vector<double> bytes(std::size_t(units), 0.0);
  const double elem = double(bytes_of(pp.options().type));
  for (const auto& [out, reader] : last_reader) {
    const auto [op, k] = out;
    const nd_sbp& l = at(pp.op_candidate(op, at(pick, op)).outputs, k);
    const double b = double(local_shape(at(at(g.ops, op).outputs, k), layout{l, pp.options().mesh}).elements()) * elem;
    for (int c = at(unit, op) + 1; c <= reader; ++c) at(bytes, c) += b;
  }
  return bytes;
}

}  // namespace detail

namespace detail {

// Ops: their forward + backward per micro-batch (the plan prices m), activations, transients.
inline void add_op_costs(const plan_problem& pp, const std::vector<int>& pick, const std::vector<int>& unit, unit_costs& u) {
  const graph& g = pp.model();
  const double m = pp.options().microbatches;
  for (int i = 0; i < int(g.ops.size()); ++i) {
    const int c = at(pick, i), k = at(unit, i);
    const cost_terms& t = pp.untied().unary(i, c);
    at(u.slot_s, k) += (t.compute() + t.comm()) / m;
    at(u.bytes, k) += t.bytes;
    const op_work w = device_work(at(g.ops, i), pp.op_candidate(i, c), pp.options().mesh, bytes_of(pp.options().type));
    const memory_breakdown mem = pp.op_memory(i, c, w);
    at(u.activation_bytes, k) += double(mem.activations);
    at(u.transient_bytes, k) = std::max(at(u.transient_bytes, k), double(mem.transient));
  }
}

// Edges, in the consumer's unit: an activation's boxing per micro-batch; a parameter's gather
// and gradient synchronisation once per step. Returns the units using each parameter.
inline std::vector<std::set<int>> add_edge_costs(const plan_problem& pp, const std::vector<int>& pick,
                                                 const std::vector<int>& unit, unit_costs& u) {
  const choice_problem& cp = pp.untied();
  const int ops = int(pp.model().ops.size());
  const double m = pp.options().microbatches;
  std::vector<std::set<int>> param_units(pp.model().params.size());
  for (int e = 0; e < int(cp.edges().size()); ++e) {
    const auto& info = at(pp.edge_infos(), e);
    const int cu = at(pick, at(cp.edges(), e).u), cv = at(pick, at(cp.edges(), e).v), k = at(unit, info.to_node);
    const cost_terms& t = cp.pair(e, cu, cv);
    const memory_breakdown mem = pp.edge_memory(e, cu, cv);
    at(u.bytes, k) += t.bytes;
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
inline void add_param_costs(const plan_problem& pp, const std::vector<int>& pick,
                            const std::vector<std::set<int>>& param_units, unit_costs& u) {
  for (int p = 0; p < int(pp.model().params.size()); ++p) {
    const int c = at(pick, pp.param_node(p));
    const cost_terms& t = pp.untied().unary(pp.param_node(p), c);
    const std::set<int>& us = at(param_units, p);
    if (us.empty()) continue;
    const memory_breakdown mem = pp.param_memory(p, c);
    const int k = *us.begin();
    at(u.step_s, k) += t.compute() + t.comm();
    at(u.bytes, k) += t.bytes;
    at(u.state_bytes, k) += state_of(mem);
    at(u.transient_bytes, k) = std::max(at(u.transient_bytes, k), t.transient);
    const param_choice& pc = pp.param_candidate(p, c);
    const double update_bytes = double(local_shape(at(pp.model().params, p).shape, layout{pc.update, pp.options().mesh}).elements() *
                                       bytes_of(pp.options().type));
    if (us.size() > 1) u.tied.push_back({k, *us.rbegin(), state_of(mem), update_bytes, t.compute() + t.comm(), t.bytes});
  }
}

}  // namespace detail

/// The per-unit costs of pick (a plan of pp, whose graph is one micro-batch of
/// pp.options().microbatches) as the stages of a pipeline would run them; see the header.
/// With one stage they add up to the plan: m x the slots + the step work == its serial time.
inline unit_costs pipeline_unit_costs(const plan_problem& pp, const std::vector<int>& pick) {
  const std::vector<int> unit = detail::unit_of_ops(pp.model());
  const int n = int(pipeline_units(pp.model()).size());
  unit_costs u;
  for (auto* v : {&u.slot_s, &u.step_s, &u.state_bytes, &u.activation_bytes, &u.transient_bytes, &u.bytes})
    v->assign(std::size_t(n), 0.0);
  detail::add_op_costs(pp, pick, unit, u);
  detail::add_param_costs(pp, pick, detail::add_edge_costs(pp, pick, unit, u), u);
  u.send_bytes = detail::cut_bytes(pp, pick, unit, n);
  return u;
}

}  // namespace autoddl

namespace autoddl {

/// Stage `stage`'s step replayed (search/step_memory.hpp): its ops [cut_ops[stage],
/// cut_ops[stage + 1]) in the 1F1B order, as many forwards ahead of the first backward as the
/// stage holds micro-batches in flight less one (in_flight_microbatches, rounded up: the
/// interleaved schedule's count where s.chunks > 1).
inline step_memory replay_stage_memory(const plan_problem& pp, const std::vector<int>& pick, const pipeline_shape& s,
                                       const std::vector<int>& cut_ops, int stage) {
  const int end = stage + 1 < int(cut_ops.size()) ? at(cut_ops, stage + 1) : int(pp.model().ops.size());
  const int warm = int(std::ceil(in_flight_microbatches(s, stage) - 1e-9)) - 1;
  return replay_step_memory(pp, pick, at(cut_ops, stage), end, std::max(0, warm));
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
  /// The highest replayed peak of any stage (stage_figures::peak).
  double peak_memory() const {
    double r = 0;
    for (const stage_figures& f : stages) r = std::max(r, f.peak);
    return r;
  }
};

namespace detail {


// Prices `layouts` (solved for shape's micro-batches on the stage mesh) as a pipeline: cuts by
// balance_cuts under the limit, or, where nothing fits, the fastest cuts (feasible false).
inline pipeline_plan price_pipeline(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base);

}  // namespace detail

/// `layouts` (solved for s's micro-batches on the stage mesh of base.mesh) priced as a pipeline
/// of shape s cut at `cuts` (the first unit of each stage; a plan file's): its stages' figures,
/// step time and feasibility under base's memory limit. Throws layout_error when the cuts are
/// not s.stages ascending units beginning with 0.
inline pipeline_plan price_pipeline_at(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base,
                                       const std::vector<int>& cuts, const unit_costs& u) {
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
  for (int i = 0; i < s.stages; ++i)
    at(r.stages, i).peak = double(replay_stage_memory(*layouts.problem, layouts.result.pick, s, r.cut_ops, i).peak());
  r.time = pipeline_time(r.stages, s);
  r.bubble = pipeline_bubble_fraction(s);
  const double limit = memory_limit_of(base);
  r.feasible = limit <= 0 || r.peak_memory() <= limit;
  r.layouts = std::move(layouts);
  return r;
}

/// The same, its unit costs computed from `layouts` (pipeline_unit_costs).
inline pipeline_plan price_pipeline_at(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base,
                                       const std::vector<int>& cuts) {
  const unit_costs u = pipeline_unit_costs(*layouts.problem, layouts.result.pick);
  return price_pipeline_at(std::move(layouts), s, base, cuts, u);
}

namespace detail {

inline pipeline_plan price_pipeline(micro_batched_plan&& layouts, const pipeline_shape& s, const plan_options& base) {
  const unit_costs u = pipeline_unit_costs(*layouts.problem, layouts.result.pick);
  const link stage_link = make_device_mesh(base.mesh, base.hw).axis_link(0);
  // the cuts hold the additive bound within the limit where they can; the replayed stages decide
  std::optional<std::vector<int>> cuts = balance_cuts(u, s, stage_link, memory_limit_of(base));
  if (!cuts) cuts = balance_cuts(u, s, stage_link, 0);
  return price_pipeline_at(std::move(layouts), s, base, *cuts, u);  // the unit costs priced once
}

}  // namespace detail

/// Plans a pipeline of shape s for the model `build(m)` makes (one micro-batch of a step of m,
/// batch `batch` in all): the layouts of one stage by `stage_strategy` (auto, or an expert
/// without its pipeline) on stage_mesh(base.mesh, p), the graph one micro-batch of batch / m,
/// then the cuts. The layout search sees p times the memory limit (a stage keeps about 1/p of
/// the model); the cuts then hold every stage to the limit itself. with_gap: the stage layouts'
/// gap to the exact reference (attach_optimal_gap), for auto; runner_ups: their runner-ups
/// (attach_runner_ups).
/// Throws layout_error when p does not divide the outermost axis or exceeds the layers.
inline pipeline_plan plan_pipeline(const std::function<graph(int)>& build, std::int64_t batch, const plan_options& base,
                                   const plan_strategy& stage_strategy, const pipeline_shape& s,
                                   std::optional<recompute_mode> recompute, std::uint64_t seed = 1,
                                   bool with_gap = true, bool runner_ups = true) {
  plan_options sub = base;
  sub.mesh = stage_mesh(base.mesh, s.stages);
  sub.memory_limit = memory_limit_of(base) * s.stages;
  step_settings pin;
  pin.recompute = recompute;
  pin.with_gap = with_gap;
  pin.runner_ups = runner_ups;
  if (!megatron_microbatches(stage_strategy, sub.mesh, batch)) pin.microbatches = s.microbatches;  // else its mbs says
  micro_batched_plan layouts = plan_micro_batched(build, batch, sub, stage_strategy, pin, seed);
  pipeline_shape shape = s;
  shape.microbatches = layouts.microbatches;
  return detail::price_pipeline(std::move(layouts), shape, base);
}

/// The pipeline plan of a megatron strategy with pp > 1 (its tp, dp, mbs, recompute, sp and vpp;
/// micro-batches as `pin` or, unset, the planner's choice among a few multiples of pp).
/// @pre pipeline_stages(s) > 1
inline pipeline_plan plan_megatron_pipeline(const std::function<graph(int)>& build, std::int64_t batch,
                                            const plan_options& base, const plan_strategy& s, step_settings pin,
                                            std::uint64_t seed = 1);

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

// Better: feasible first, then faster; among infeasible, less memory.
inline bool better_pipeline(const pipeline_plan& a, const pipeline_plan& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (!a.feasible) return a.peak_memory() < b.peak_memory();
  return a.time < b.time * (1 - 1e-9);
}

}  // namespace detail

inline pipeline_plan plan_megatron_pipeline(const std::function<graph(int)>& build, std::int64_t batch,
                                            const plan_options& base, const plan_strategy& s, step_settings pin,
                                            std::uint64_t seed) {
  check_strategy(s, base.mesh);
  const auto& m = std::get<strategy::megatron>(s);
  if (m.recompute) pin.recompute = m.recompute;
  const pipeline_shape shape{m.pp, 1, std::max(1, m.vpp)};
  const plan_strategy inner = without_pipeline(s);
  std::vector<int> counts = pin.microbatches ? std::vector<int>{*pin.microbatches}
                                             : detail::pipeline_microbatch_counts(batch, m.pp);
  if (m.mbs > 0) counts = {1};  // its mbs says (plan_pipeline)
  std::optional<pipeline_plan> best;
  std::optional<layout_error> unsplit;  // the first count the layout could not split, where none could
  for (int c : counts) {
    pipeline_shape sh = shape;
    sh.microbatches = c;
    try {
      pipeline_plan p = plan_pipeline(build, batch, base, inner, sh, pin.recompute, seed);
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
        pipeline_plan p = plan_pipeline(build, batch, base, inner, sh, r, seed);
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
  const auto t0 = std::chrono::steady_clock::now();
  std::map<int, graph> graphs;  // points of one micro-batch count copy one graph
  const std::function<graph(int)> build = [&build_model, &graphs](int m) {
    return graph(detail::kept_graph(graphs, build_model, m));
  };
  const int units = int(pipeline_units(build(1)).size());
  std::vector<int> ps;
  for (int d : divisors(base.mesh[0]))
    if (d > 1 && d <= units) ps.push_back(d);
  if (ps.empty()) return std::nullopt;
  const std::vector<int> ms = pin.microbatches ? std::vector<int>{*pin.microbatches} : divisors(batch);
  std::vector<recompute_mode> rs{recompute_mode::none, recompute_mode::selective, recompute_mode::full};
  if (pin.recompute) rs = {*pin.recompute};
  using point = std::tuple<int, int, int>;  // indices into ps, ms, rs
  std::map<point, std::optional<pipeline_plan>> seen;
  std::optional<point> best;
  auto eval = [&](point x) -> const std::optional<pipeline_plan>& {
    auto it = seen.find(x);
    if (it != seen.end()) return it->second;
    std::optional<pipeline_plan>& slot = seen[x];
    if (int(seen.size()) > max_points) return slot;
    const pipeline_shape sh{at(ps, std::get<0>(x)), at(ms, std::get<1>(x)), 1};
    try {
      slot = plan_pipeline(build, batch, base, strategy::automatic{}, sh, at(rs, std::get<2>(x)), seed, /*with_gap=*/false,
                           /*runner_ups=*/false);
    } catch (const error&) {  // the batch does not split that way: no such point
    }
    if (slot && (!best || detail::better_pipeline(*slot, *seen[*best]))) best = x;
    return slot;
  };
  auto index_of = [&ms](int m) { return int(std::lower_bound(ms.begin(), ms.end(), m) - ms.begin()); };
  auto clamp = [&ms](int i) { return std::clamp(i, 0, int(ms.size()) - 1); };
  for (int i = 0; i < int(ps.size()); ++i)
    eval({i, clamp(index_of(detail::pipeline_microbatch_counts(batch, at(ps, i)).back())), 0});
  // One round from the best point: its neighbours, or with `diagonal` the moves of p or m that
  // do not fit, tried again with more recomputation. Whether the best point moved.
  auto round = [&](bool diagonal) {
    const point from = *best;
    const auto [pi, mi, ri] = from;
    const int m = at(ms, mi);
    const point moves[] = {{pi - 1, mi, ri}, {pi + 1, mi, ri}, {pi, mi - 1, ri}, {pi, mi + 1, ri},
                           {pi, clamp(index_of(2 * m)), ri}, {pi, clamp(index_of((m + 1) / 2)), ri},
                           {pi, mi, (ri + 1) % int(rs.size())}, {pi, mi, (ri + 2) % int(rs.size())}};
    // Recomputation only trades time for memory: where the best point's plan fits with half the
    // limit to spare, more of it is not tried (plan_micro_batched's rule; the 12-layer GPT on
    // 2x2x2x2: 5 points instead of 15, the same plan).
    const pipeline_plan& here = *seen[from];
    const bool roomy = here.feasible && here.peak_memory() < 0.5 * memory_limit_of(base);
    for (int k = 0; k < (diagonal ? 6 : 8); ++k) {
      const auto [p, mm, r] = moves[k];
      if (p < 0 || p >= int(ps.size()) || mm < 0 || mm >= int(ms.size())) continue;
      if (roomy && r > ri) continue;  // rs runs none, selective, full
      if (!diagonal) {
        eval(moves[k]);
        continue;
      }
      for (int more = r + 1; more < int(rs.size()); ++more) {
        const std::optional<pipeline_plan>& got = eval({p, mm, more - 1});
        if (!got || got->feasible) break;
        eval({p, mm, more});
      }
    }
    return !(*best == from);
  };
  // Single moves first; where they stop, the diagonal ones (two coordinates at once, where memory
  // keeps single moves from a faster point: a 4-layer GPT on 4x2 under a tight limit, 13.6 %
  // above the best point without them), and single moves again from where those lead. The
  // single moves' end is kept unless a diagonal one beats it.
  while (best && (round(false) || round(true))) {
  }
  if (!best) return std::nullopt;
  pipeline_plan r = std::move(*seen[*best]);
  attach_runner_ups(*r.layouts.problem, r.layouts.result);  // the winner's only
  r.layouts.result.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  attach_optimal_gap(*r.layouts.problem, seed, r.layouts.result, /*adopt=*/false);  // priced into the stages already
  r.layouts.result.notes.push_back("pipeline search: " + detail::itos(int(seen.size())) +
                                   " points (stages, micro-batches, recompute) tried");
  return r;
}

}  // namespace autoddl
