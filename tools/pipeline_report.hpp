#pragma once
// autoddl-plan's pipelines (search/pipeline.hpp): which plan a strategy gets once pipelines are
// on the table, and the report's pipeline section (table and --json).
//   megatron with pp > 1   plan_megatron_pipeline: its stages, the layouts of one stage
//   auto                   the best of the plan without a pipeline and search_pipeline's, where
//                          the outermost mesh axis runs between nodes (Megatron-LM pipelines
//                          across nodes, tensor parallelism inside them; on one node's links a
//                          pipeline only adds its bubble), and of Megatron-LM's layouts
//                          (search_megatron_layouts: tp, problem, cp, vpp, mbs, recompute)
//   anything else          plan_micro_batched, no pipeline
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "autoddl/models/model_file.hpp"
#include "autoddl/search/megatron_layouts.hpp"
#include "autoddl/search/pipeline.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/planning_time.hpp"
#include "autoddl/search/strategy_model.hpp"
#include "autoddl/search/svg.hpp"
#include "plan_report.hpp"

namespace autoddl::tools {

/// A chosen plan: its layouts (for a pipeline, one stage's, on the stage mesh, with the result's
/// time, feasibility and peak memory the pipeline's) and the pipeline, if any (its `layouts`
/// moved into `plan`).
struct chosen_plan {
  micro_batched_plan plan;
  std::optional<pipeline_plan> pipeline;
  std::optional<strategy::megatron> megatron_layout;  ///< the Megatron-LM layout the plan is, where it is one
};

namespace detail {

inline chosen_plan from_pipeline(pipeline_plan&& p) {
  chosen_plan c;
  c.plan = std::move(p.layouts);
  plan_result& r = c.plan.result;
  r.time = p.time;
  r.feasible = p.feasible;
  c.plan.peak_bytes = p.peak_memory();
  r.memory_limit = c.plan.problem->make_objective().memory_limit / p.shape.stages;
  r.notes.push_back(fmt::format(
      "pipeline of {} stages x {} micro-batches: the table shows one stage's layouts on the stage mesh {} (each stage "
      "runs its range of ops, see the pipeline section); the table prices every op on that "
      "mesh, whose layout search saw {} times the memory limit (a stage keeps about 1/{} of the model; the cuts hold "
      "each stage to the limit)",
      p.shape.stages, p.shape.microbatches, to_string(c.plan.problem->options().mesh), p.shape.stages, p.shape.stages));
  c.pipeline = std::move(p);
  return c;
}

inline bool outer_axis_between_nodes(const plan_options& o) {
  return (intra_node_axes(o.mesh, o.hw.devices_per_node) & 1u) == 0;
}

}  // namespace detail

namespace detail {

// The plan of strategy s by the layout search (and search_pipeline for auto), before auto's
// last starts, Megatron-LM's layouts (plan_with_pipelines).
inline chosen_plan plan_searched(const std::function<graph(int)>& build, std::int64_t batch, const plan_options& o,
                                 const plan_strategy& s, step_settings pin, std::uint64_t seed) {
  if (std::holds_alternative<strategy::megatron>(s)) {  // the mesh's rules first, then the model's
    check_strategy(s, o.mesh);
    check_strategy_on_model(s, build(1), o.mesh);
  }
  if (pipeline_stages(s) > 1) {
    chosen_plan c = detail::from_pipeline(plan_megatron_pipeline(build, batch, o, s, pin, seed));
    c.plan.result.strategy = s;
    c.megatron_layout = std::get<strategy::megatron>(s);
    return c;
  }
  if (const auto* m = std::get_if<strategy::megatron>(&s))
    return chosen_plan{plan_micro_batched(build, batch, o, s, pin, seed), std::nullopt, *m};
  const bool piping = std::holds_alternative<strategy::automatic>(s) && detail::outer_axis_between_nodes(o);
  step_settings flat_pin = pin;
  flat_pin.with_gap = pin.with_gap && !piping;  // the plan without a pipeline gets its gap
  flat_pin.runner_ups = pin.runner_ups && !piping;  // and runner-ups only if it is kept
  chosen_plan c{plan_micro_batched(build, batch, o, s, flat_pin, seed), std::nullopt, std::nullopt};
  if (!piping) return c;
  std::optional<pipeline_plan> p = search_pipeline(build, batch, o, pin, seed);
  const bool keep_flat = !p || !p->feasible || (c.plan.result.feasible && c.plan.result.time <= p->time);
  if (keep_flat && pin.runner_ups) attach_runner_ups(*c.plan.problem, c.plan.result);  // as plan_micro_batched would
  if (keep_flat && pin.with_gap) adopt_exact_where_it_fits(c.plan, seed);
  if (!p) return c;
  if (keep_flat) {
    c.plan.result.notes.push_back(fmt::format("the best pipeline found ({} stages x {} micro-batches, recompute {}) takes "
                                              "{}{}; the plan without one is kept",
                                              p->shape.stages, p->shape.microbatches,
                                              to_string(p->layouts.recompute), seconds(p->time),
                                              p->feasible ? "" : " and is over the memory limit"));
    return c;
  }
  const double flat = c.plan.result.time;
  const bool flat_fits = c.plan.result.feasible;
  chosen_plan piped = detail::from_pipeline(std::move(*p));
  piped.plan.result.strategy = s;
  piped.plan.result.notes.push_back(flat_fits ? fmt::format("without a pipeline the best plan takes {}", seconds(flat))
                                              : std::string("without a pipeline no plan fits the memory limit"));
  return piped;
}

}  // namespace detail

namespace detail {

// The descent over Megatron-LM's layouts that auto takes its last starts from, after the layout
// search's own plan c (its pipeline's stage count the descent's first).
inline std::optional<megatron_layout_plan> megatron_layouts_after(const chosen_plan& c, const std::function<graph(int)>& build,
                                                                   std::int64_t batch, const plan_options& o,
                                                                   step_settings pin, std::uint64_t seed, bool interleaved,
                                                                   bool torchtitan = false,
                                                                   std::optional<strategy::megatron> start = std::nullopt) {
  megatron_layout_space space;
  space.pipelines = detail::outer_axis_between_nodes(o);
  space.interleaved = interleaved;
  space.torchtitan = torchtitan;
  space.first_stages = c.pipeline ? c.pipeline->shape.stages : 1;
  space.start = start;
  return search_megatron_layouts(build, batch, o, pin, seed, space);
}

// Whether g routes to no experts (torchtitan's layouts are searched for dense models).
inline bool dense(const graph& g) {
  return std::none_of(g.ops.begin(), g.ops.end(),
                      [](const op_node& n) { return n.kind == op_kind::experts || n.kind == op_kind::routed_experts; });
}

// The chosen plan of layout m (a pipeline or not), its strategy s.
inline chosen_plan chosen_of(megatron_layout_plan&& m, const plan_strategy& s) {
  chosen_plan r = m.pipeline ? detail::from_pipeline(std::move(*m.pipeline)) : chosen_plan{std::move(*m.flat), std::nullopt, {}};
  r.plan.result.strategy = s;
  r.megatron_layout = m.knobs;
  return r;
}

// Layout m planned again as --strategy plans its knobs (plan_searched; the descent prices each
// point against the best so far and may keep another pipeline cut), and the faster of the two
// where both fit; its strategy the knobs.
inline chosen_plan layout_planned_again(megatron_layout_plan&& m, const std::function<graph(int)>& build, std::int64_t batch,
                                        const plan_options& o, const step_settings& pin, std::uint64_t seed) {
  const plan_strategy knobs{m.knobs};
  // Without a pipeline, planning again gives m itself: the descent priced its best point against
  // a feasible rival it beat, or none, so each setting that point's plan compared (its one
  // micro-batch count and recomputation, then with copies or parameters kept) that could win was
  // replayed as it is here, and the same one won. Only a pipeline's cuts may differ.
  if (!m.pipeline) return chosen_of(std::move(m), knobs);
  step_settings quiet = pin;  // runner-ups and the gap are the caller's
  quiet.with_gap = quiet.runner_ups = false;
  chosen_plan again = plan_searched(build, batch, o, knobs, quiet, seed);
  const plan_result& a = again.plan.result;
  if (a.feasible && (!m.feasible || a.time < m.time * (1 - 1e-9))) return again;
  return chosen_of(std::move(m), knobs);
}

inline chosen_plan plan_with_megatron_layouts(const std::function<graph(int)>& build, std::int64_t batch,
                                              const plan_options& o, const plan_strategy& s, step_settings pin,
                                              std::uint64_t seed, bool interleaved) {
  chosen_plan c = detail::plan_searched(build, batch, o, s, pin, seed);
  if (!std::holds_alternative<strategy::automatic>(s)) return c;
  std::optional<megatron_layout_plan> m = megatron_layouts_after(c, build, batch, o, pin, seed, interleaved);
  std::optional<megatron_layout_plan> t;
  if (dense(build(1))) {  // torchtitan's layouts too (FSDP beside tensor parallelism): auto is never slower than they
    std::optional<strategy::megatron> twin;  // the torchtitan descent starts where Megatron-LM's ended
    if (m) twin = m->knobs;
    t = megatron_layouts_after(c, build, batch, o, pin, seed, interleaved, true, twin);
  }
  if (!m && !t) return c;
  // each engine's best planned again as --strategy plans it, the better kept (a descent prices a
  // point against its best so far, so the two descents' own figures are not alike)
  int points = 0;
  strategy::megatron knobs;
  std::optional<chosen_plan> again;
  for (std::optional<megatron_layout_plan>* x : {&m, &t}) {
    if (!*x) continue;
    const int n = (*x)->points;
    const strategy::megatron k = (*x)->knobs;
    chosen_plan p = layout_planned_again(std::move(**x), build, batch, o, pin, seed);
    const plan_result& r = p.plan.result;
    if (again && !(r.feasible && (!again->plan.result.feasible || r.time < again->plan.result.time * (1 - 1e-9)))) continue;
    again = std::move(p), points = n, knobs = k;
  }
  chosen_plan best = std::move(*again);
  const plan_result& b = best.plan.result;
  if (!b.feasible || (c.plan.result.feasible && b.time >= c.plan.result.time * (1 - 1e-9))) {
    c.plan.result.notes.push_back(fmt::format("{}'s layouts: {} priced, the best ({}) takes {}{}",
                                              knobs.fsdp ? "torchtitan" : "Megatron-LM", points,
                                              to_string(plan_strategy{knobs}), seconds(b.time),
                                              b.feasible ? "" : " and is over the memory limit"));
    return c;
  }
  const double own = c.plan.result.time;
  const bool own_fits = c.plan.result.feasible;
  chosen_plan r = std::move(best);
  r.plan.result.strategy = s;
  if (pin.runner_ups) attach_runner_ups(*r.plan.problem, r.plan.result);
  if (pin.with_gap && r.pipeline) attach_optimal_gap(*r.plan.problem, seed, r.plan.result, /*adopt=*/false);
  else if (pin.with_gap) {
    const std::vector<int> megatron_picks = r.plan.result.pick;
    adopt_exact_where_it_fits(r.plan, seed);
    if (r.plan.result.pick != megatron_picks) r.megatron_layout.reset();  // the exact reference moved ops off it
  }
  r.plan.result.notes.push_back(fmt::format(
      "the fastest plan found is {}'s layout {} (the best of {} megatron layouts priced: tp, pp, cp, vpp, mbs "
      "and recompute searched, {} and sequence parallelism on); the layout search's own best takes "
      "{}{}",
      knobs.fsdp ? "torchtitan" : "Megatron-LM", to_string(plan_strategy{knobs}), points,
      knobs.fsdp ? "FSDP" : "distributed optimizer",
      seconds(own), own_fits ? "" : " and is over the memory limit"));
  return r;
}

}  // namespace detail

/// The plan of strategy s (see the header). For auto, Megatron-LM's layouts across every
/// parallel dimension (search_megatron_layouts; interleaved: whether vpp > 1 may be chosen) are
/// the last starts: where one beats the layout search's plan, it is the plan, and a note says so.
/// The plan's search_s is the whole of this planning, search_parts_s its phases (planning_clock).
inline chosen_plan plan_with_pipelines(const std::function<graph(int)>& build, std::int64_t batch, const plan_options& o,
                                       const plan_strategy& s, step_settings pin, std::uint64_t seed,
                                       bool interleaved = true) {
  planning_clock::reset();
  const auto t0 = std::chrono::steady_clock::now();
  chosen_plan c = detail::plan_with_megatron_layouts(build, batch, o, s, pin, seed, interleaved);
  plan_result& r = c.plan.result;
  r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (std::size_t p = 0; p < planning_phases; ++p) r.search_parts_s[p] = planning_clock::seconds(planning_phase(p));
  return c;
}

/// The plan's one memory figure (plan_peak): without a pipeline the step replayed, with one the
/// stage whose replayed step peaks highest. `base`: the options as given (the whole mesh).
inline plan_peak peak_of(const plan_problem& problem, const plan_result& r, const std::optional<pipeline_plan>& p,
                         const plan_options& base) {
  plan_peak k = flat_peak(problem, r, base);
  if (!p) return k;
  int top = 0;
  for (int i = 0; i < int(p->stages.size()); ++i)
    if (at(p->stages, i).peak > at(p->stages, top).peak) top = i;
  const step_memory m = replay_stage_memory(problem, r.pick, p->shape, p->cut_ops, top);
  k.bytes = double(m.peak());
  k.where = peak_where(problem, m) + fmt::format(", stage {} of {}", top, p->shape.stages);
  k.stages = p->shape.stages;
  int slowest = 0;
  k.sent_bytes = 0;
  for (int i = 0; i < int(p->stages.size()); ++i) {
    if (at(p->stages, i).slot_s > at(p->stages, slowest).slot_s) slowest = i;
    k.sent_bytes = std::max(k.sent_bytes, at(p->stages, i).bytes);
  }
  const stage_figures& f = at(p->stages, slowest);
  const double mb = p->shape.microbatches, busy = mb * f.slot_s + 2 * p->shape.chunks * mb * f.send_s + f.step_s;
  k.busiest_stage = slowest;
  k.compute_s = f.compute_s;
  k.comm_s = std::max(0.0, busy - f.compute_s);
  return k;
}

/// The pipeline a plan file describes: its stage layouts (`layouts`, on the file's stage mesh)
/// priced at the file's cuts on `base` (the whole mesh). Throws error when a cut is not at a
/// layer boundary (pipeline_units) or the whole mesh does not split into the file's stages (the
/// stage mesh may lay a stage's devices out differently, as a Megatron-LM layout does).
inline chosen_plan file_pipeline(micro_batched_plan&& layouts, const plan_file& f, const plan_options& base) {
  // a Megatron-LM layout lays a stage's devices out as its own axes (dp x cp x tp: 4x8 as 4x2x4)
  if (stage_mesh(base.mesh, f.stages).devices() != f.mesh.devices())
    throw error("the plan file's stage mesh " + to_string(f.mesh) + " is not one of " + std::to_string(f.stages) +
                " stages of mesh " + to_string(base.mesh));
  const std::vector<int> first = pipeline_units(layouts.problem->model());
  std::vector<int> units;
  for (int op : f.cuts) {
    const auto it = std::find(first.begin(), first.end(), op);
    if (it == first.end())
      throw error("the plan file cuts the model before op " + std::to_string(op) +
                  ", which is not the first op of a layer (pipeline stages begin at layer boundaries)");
    units.push_back(int(it - first.begin()));
  }
  const pipeline_shape shape{f.stages, layouts.microbatches, f.chunks};
  return detail::from_pipeline(price_pipeline_at(std::move(layouts), shape, base, units));
}

/// The plan plan file f describes, priced as the search prices it: its layouts on the file's mesh
/// and schedule for the model `spec` (plan_model_spec(f)), feasible where the replayed step fits,
/// a pipeline at its own cuts. `base`: the options as given (hardware, dtype, optimizer, the whole
/// mesh). @throws layout_error for layouts the problem does not offer: the rule they break and the
/// nearest valid layouts (pick_of).
inline chosen_plan plan_of_file(const plan_file& f, const std::string& spec, const plan_options& base) {
  const plan_strategy strategy = parse_strategy(f.strategy);
  plan_options o = base;  // exactly the file's layouts and schedule
  o.mesh = f.mesh;
  o.microbatches = f.microbatches;
  o.recompute = f.recompute;
  o.regather_inputs = f.regather_inputs;
  o.reshard_after_forward = f.reshard_after_forward;
  // ZeRO-1's and -2's parameter layouts offered whatever the strategy: an auto plan may hold them
  // (Megatron-LM's distributed optimizer among its last starts), and offering more candidates
  // changes no price of the file's own
  o.zero1_layouts = o.zero2_layouts = true;
  check_microbatches(o.microbatches, graph_batch(load_model(spec)));
  micro_batched_plan layouts{std::make_unique<plan_problem>(load_model(spec, o.microbatches), o), {}, o.microbatches,
                             o.recompute};
  layouts.result = result_of(*layouts.problem, pick_of(*layouts.problem, f), strategy);
  price_peak(layouts);
  if (f.stages > 1) return file_pipeline(std::move(layouts), f, base);
  return chosen_plan{std::move(layouts), std::nullopt, std::nullopt};
}

/// Stage i's ops as the reports name them: "first op .. last op".
inline std::string stage_ops(const pipeline_plan& p, const graph& g, int i) {
  const int first = at(p.cut_ops, i);
  const int last = (i + 1 < int(p.cut_ops.size()) ? at(p.cut_ops, i + 1) : int(g.ops.size())) - 1;
  return at(g.ops, first).name + " .. " + at(g.ops, last).name;
}

/// The pipeline section of the table: stages, cuts, bubble, per-stage predicted time and memory.
inline void print_pipeline(const pipeline_plan& p, const graph& g) {
  fmt::print("\npipeline  {} stages x {} micro-batches{}, 1F1B: bubble {:.1f}% ((p - 1) / {}m), predicted step {}\n",
             p.shape.stages, p.shape.microbatches,
             p.shape.chunks > 1 ? fmt::format(", {} chunks per stage (interleaved)", p.shape.chunks) : std::string(),
             100 * p.bubble, p.shape.chunks > 1 ? "v" : "", seconds(p.time));
  fmt::print("{:<6} {:<32} {:>12} {:>12} {:>12} {:>12}\n", "stage", "ops", "per micro-b.", "send", "sync+update",
             "peak memory");
  for (int i = 0; i < int(p.stages.size()); ++i) {
    const stage_figures& f = at(p.stages, i);
    fmt::print("{:<6} {:<32} {:>12} {:>12} {:>12} {:>12}\n", i, stage_ops(p, g, i),
               seconds(f.slot_s), seconds(f.send_s), seconds(f.step_s), si(f.peak, "B"));
  }
}

/// The pipeline keys of --json: pipeline_stages (1 without a pipeline) and, with one,
/// microbatches, pipeline {bubble, chunks, cuts (first op of each stage), stages [... peak_bytes:
/// the stage's step replayed],
/// layout_reference (the exact reference's keys, which with a pipeline price the stage layouts)}.
inline void add_pipeline_json(nlohmann::json& j, const std::optional<pipeline_plan>& p, const graph& g) {
  j["pipeline_stages"] = p ? p->shape.stages : 1;
  if (!p) return;
  j["microbatches"] = p->shape.microbatches;
  nlohmann::json stages = nlohmann::json::array();
  std::vector<std::string> cuts;
  for (int i = 0; i < int(p->stages.size()); ++i) {
    const stage_figures& f = at(p->stages, i);
    cuts.push_back(at(g.ops, at(p->cut_ops, i)).name);
    stages.push_back({{"first_op", at(g.ops, at(p->cut_ops, i)).name},
                      {"per_microbatch_s", f.slot_s},
                      {"send_s", f.send_s},
                      {"sync_and_update_s", f.step_s},
                      {"peak_bytes", f.peak}});
  }
  j["pipeline"] = {{"bubble", p->bubble}, {"chunks", p->shape.chunks}, {"cuts", cuts}, {"stages", stages}};
  // The exact reference and its bound price the layouts' additive step of the whole model on one
  // stage's mesh, not the pipelined step: they move under "pipeline", saying so.
  nlohmann::json reference = {{"of", "the stage layouts: the whole model's additive step on one stage's mesh"}};
  for (const char* key : {"optimal_gap", "exact_status", "lower_bound_s", "gap_to_bound"}) {
    reference[key] = j[key];
    j.erase(key);
  }
  j["pipeline"]["layout_reference"] = reference;
}

/// The stages of the picture (plan_svg); none without a pipeline.
inline svg_stages svg_stages_of(const std::optional<pipeline_plan>& p) {
  svg_stages s;
  if (!p) return s;
  s.first_ops = p->cut_ops;
  for (const stage_figures& f : p->stages) {
    s.slot_s.push_back(f.slot_s);
    s.memory.push_back(f.peak);
  }
  s.microbatches = p->shape.microbatches;
  s.bubble = p->bubble;
  return s;
}

/// The plan file of r (plan_file_json), with the pipeline's stages, chunks, cuts and whole
/// mesh where there is one (add_pipeline_schedule).
inline nlohmann::json plan_file_of(const plan_problem& problem, const plan_result& r, const std::optional<pipeline_plan>& p,
                                   const plan_peak& peak, const std::string& model, const std::string& hardware,
                                   const mesh_shape& mesh) {
  nlohmann::json f = plan_file_json(problem, r, model, hardware);
  f["predicted"]["peak_bytes_per_device"] = peak.bytes;  // the replayed step's (a pipeline's highest stage)
  f["predicted"]["compute_s"] = peak.compute_s;          // per device (a pipeline's slowest stage)
  f["predicted"]["comm_s"] = peak.comm_s;
  f["predicted"]["comm_bytes_per_device"] = peak.sent_bytes;
  f["parallelism"] = parallelism_json(parallelism_of(problem, r.pick, peak.stages));  // for a reader: not read back
  if (p) add_pipeline_schedule(f, mesh, p->shape.stages, p->shape.chunks, p->cut_ops);
  return f;
}

}  // namespace autoddl::tools
