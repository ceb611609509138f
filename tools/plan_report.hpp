#pragma once
// What autoddl-plan and autoddl-train print about a plan: the human table and the JSON object
// (one implementation, so autoddl-train's "plan" is exactly autoddl-plan --json).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoddl/search/parallelism.hpp"
#include "autoddl/search/planning_time.hpp"
#include "autoddl/search/report.hpp"
#include "autoddl/search/step_memory.hpp"

namespace autoddl::tools {

inline std::string si(double v, const char* unit) {
  const char* p[] = {"", "K", "M", "G", "T", "P", "E"};
  int k = 0;
  while (std::abs(v) >= 1000 && k < 6) {
    v /= 1000;
    ++k;
  }
  return fmt::format("{:.3g} {}{}", v, p[k], unit);
}

inline std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

/// One line on how the op candidates were priced (search/kernel_prices.hpp): measured in the
/// profile's kernel table, fitted per op kind from it (shapes it lacks), or analytical.
///   "kernel prices: 412 measured, 18 analytical (not in profile 'x.json')"
inline std::string kernel_prices_line(const plan_problem& problem, const std::string& hw_name) {
  const kernel_price_counts k = problem.kernel_price_counts_of();
  if (problem.options().hw.measured.kernels.empty())
    return fmt::format("kernel prices: {} analytical (profile '{}' has no measured kernels)", k.analytical, hw_name);
  std::string s = fmt::format("kernel prices: {} measured", k.measured);
  if (k.fitted > 0) s += fmt::format(", {} fitted per op kind from the measured ones (shapes not in profile '{}')", k.fitted, hw_name);
  if (k.analytical > 0) s += fmt::format(", {} analytical (op kinds not in profile '{}')", k.analytical, hw_name);
  return s;
}

/// The one memory figure of a plan: the step's replayed peak per device (search/step_memory.hpp;
/// a pipeline's highest stage's), where it falls, and the limit it is held to; and what a device
/// computes and sends per step (a pipeline's devices run one stage each: the stage figures).
struct plan_peak {
  double bytes = 0;
  std::string where;         ///< "the backward of h3.mlp.fc1" (a pipeline's: ", stage 1 of 2" after it)
  double limit = 0;          ///< bytes per device the plan is held to
  double device_memory = 0;  ///< the hardware profile's memory per device
  bool reserve = true;       ///< the limit is the device's memory less memory_reserve_fraction (no --memory-limit)
  int stages = 1;            ///< the plan's pipeline stages (1: none)
  double compute_s = 0;      ///< a device's compute per step (a pipeline's: the stage with the slowest slot)
  double comm_s = 0;         ///< the rest of that device's busy time: communication not overlapped
  double sent_bytes = 0;     ///< bytes a device sends per step (a pipeline's: the stage that sends most)
  int busiest_stage = 0;     ///< the stage compute_s and comm_s are of
};

/// Where replay m peaks: "the backward of h3.mlp.fc1", "the gradient synchronisation".
inline std::string peak_where(const plan_problem& problem, const step_memory& m) {
  if (m.peak_op < 0) return "the gradient synchronisation";
  return std::string(m.peak_in_backward ? "the backward of " : "the forward of ") + at(problem.model().ops, m.peak_op).name;
}

/// The plan_peak of r without a pipeline; `base`: the options as given (their memory_limit unset:
/// the device's memory less the reserve).
inline plan_peak flat_peak(const plan_problem& problem, const plan_result& r, const plan_options& base) {
  const step_memory m = replay_step_memory(problem, r.pick);
  plan_peak k{double(m.peak()), peak_where(problem, m), memory_limit_of(base), base.hw.device.memory_bytes, !(base.memory_limit > 0)};
  k.compute_s = r.totals.compute();
  k.comm_s = r.totals.comm();
  k.sent_bytes = r.totals.bytes;
  return k;
}

/// "77.3 GB allowed (the device's 85.9 GB less a 10 % reserve ...)" or "32 GB allowed (--memory-limit)".
inline std::string limit_text(const plan_peak& p) {
  if (!p.reserve) return si(p.limit, "B") + " allowed (--memory-limit)";
  return fmt::format("{} allowed (the device's {} less a {:.0f} % reserve for allocator rounding and fragmentation and "
                     "for workspaces; --memory-limit sets it)",
                     si(p.limit, "B"), si(p.device_memory, "B"), 100 * memory_reserve_fraction);
}

/// A step's throughput as training runs report it: tokens per second per device and the model
/// FLOPs utilisation (model_flops_per_token: PaLM's count) against the device's peak in the
/// plan's dtype. Zero for a model without tokens.
struct throughput {
  double tokens_per_s_per_device = 0, model_flops_per_token = 0, mfu = 0;
};
inline throughput throughput_of(const plan_problem& problem, double step_s, int stages) {
  const plan_options& o = problem.options();
  throughput t;
  const double tokens = tokens_per_step(problem.model(), o.microbatches), devices = double(o.mesh.devices()) * stages;
  if (tokens == 0 || !(step_s > 0)) return t;
  t.tokens_per_s_per_device = tokens / step_s / devices;
  t.model_flops_per_token = model_flops_per_token(problem.model());
  const double peak = o.hw.device.peak(o.type);
  t.mfu = peak > 0 ? t.tokens_per_s_per_device * t.model_flops_per_token / peak : 0;
  return t;
}

/// "predicted throughput 2.41 K tokens/s per device, MFU 41.2 % (...)" or "" for a model without tokens.
inline std::string throughput_line(const plan_problem& problem, const throughput& t, const char* what) {
  if (t.tokens_per_s_per_device == 0) return "";
  return fmt::format("{} throughput {} tokens/s per device, MFU {:.1f} % ({} model FLOPs per token as published MFU "
                     "figures count them, 6 x non-embedding parameters + attention, of the {} peak {})",
                     what, si(t.tokens_per_s_per_device, ""), 100 * t.mfu, si(t.model_flops_per_token, ""),
                     to_string(problem.options().type), si(problem.options().hw.device.peak(problem.options().type), "FLOP/s"));
}

/// "dp=64 tp=1 pp=1 cp=1 ep=1, ZeRO stage 3, 1 sequence per device per micro-batch (mesh axes: dp dp)".
inline std::string parallelism_line(const plan_parallelism& x, const mesh_shape& mesh) {
  std::string axes;
  for (axis_role a : x.axes) axes += std::string(axes.empty() ? "" : " ") + to_string(a);
  const double n = x.sequences_per_device;
  return fmt::format("dp={} tp={} pp={} cp={} ep={}, ZeRO stage {}, {:g} sequence{} per device per micro-batch ({} axes: {})",
                     x.dp, x.tp, x.pp, x.cp, x.ep, x.zero_stage, n, n == 1 ? "" : "s",
                     x.pp > 1 ? "each stage's " + to_string(mesh) : to_string(mesh), axes);
}

/// The "parallelism" object of --json and plan files.
inline nlohmann::json parallelism_json(const plan_parallelism& x) {
  std::vector<std::string> axes;
  for (axis_role a : x.axes) axes.push_back(to_string(a));
  return {{"dp", x.dp}, {"tp", x.tp}, {"pp", x.pp}, {"cp", x.cp}, {"ep", x.ep}, {"zero_stage", x.zero_stage},
          {"sequences_per_device_per_microbatch", x.sequences_per_device}, {"axes", axes}};
}

// search_s by phase (plan_result::search_parts_s, planning_time.hpp), and the rest ("other":
// building models, runner-ups, comparing plans), in seconds.
inline nlohmann::json search_parts_json(const plan_result& r) {
  nlohmann::json j = nlohmann::json::object();
  double parts = 0;
  for (std::size_t p = 0; p < planning_phases; ++p) {
    j[to_string(planning_phase(p))] = r.search_parts_s[p];
    parts += r.search_parts_s[p];
  }
  j["other"] = std::max(0.0, r.search_s - parts);
  return j;
}

// " (layout_search 0.21 s, ...)" where the phases were measured, else empty.
inline std::string search_parts_text(const plan_result& r) {
  std::string t;
  for (std::size_t p = 0; p < planning_phases; ++p)
    if (r.search_parts_s[p] > 0) t += (t.empty() ? "" : ", ") + std::string(to_string(planning_phase(p))) + " " + seconds(r.search_parts_s[p]);
  return t.empty() ? t : " (" + t + ")";
}

// The op table's rows, as --json prints them.
inline nlohmann::json layers_json(const plan_result& r, const std::vector<plan_row>& rows) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& row : rows) {
    nlohmann::json l;
    l["name"] = row.name;
    l["op"] = row.op;
    l["signature"] = row.signature;
    l["compute_s"] = row.compute_s;
    l["comm_bytes"] = row.comm_bytes;
    l["comm_s"] = row.comm_s;
    l["memory_bytes"] = row.memory_bytes;
    l["lower_bound_bytes"] = row.lower_bound_bytes ? nlohmann::json(*row.lower_bound_bytes) : nlohmann::json(nullptr);
    if (!r.runner_up.empty()) {
      l["runner_up_step_s"] = row.runner_up_s ? nlohmann::json(*row.runner_up_s) : nlohmann::json(nullptr);
      l["runner_up_over_memory"] = row.runner_up_over_memory;
    }
    layers.push_back(l);
  }
  return layers;
}

inline nlohmann::json plan_json(const plan_problem& problem, const plan_result& r, const plan_peak& peak,
                                const std::vector<plan_row>& rows, const std::string& model_spec,
                                const std::string& hw_name) {
  const graph& g = problem.model();
  nlohmann::json j;
  j["model"] = model_spec;
  j["mesh"] = std::vector<int>(problem.options().mesh.begin(), problem.options().mesh.end());
  j["hardware"] = hw_name;
  j["strategy"] = to_string(r.strategy);
  j["parallelism"] = parallelism_json(parallelism_of(problem, r.pick, peak.stages));
  j["dtype"] = std::string(to_string(problem.options().type));
  const int m = problem.options().microbatches;
  j["params"] = param_count(g);
  j["active_params"] = active_param_count(g);
  j["flops_per_step"] = double(m) * (forward_flops(g) + backward_flops(g));
  j["microbatches"] = m;
  j["micro_batch_size"] = g.inputs.empty() ? 0 : g.inputs[0][0];
  j["recompute"] = std::string(to_string(problem.options().recompute));
  j["regather_inputs"] = problem.options().regather_inputs;
  j["reshard_after_forward"] = problem.options().reshard_after_forward;
  j["predicted_step_s"] = r.time;
  j["compute_s"] = peak.compute_s;  // per device: a pipeline's slowest stage
  j["comm_s"] = peak.comm_s;
  j["comm_bytes_per_device"] = peak.sent_bytes;
  const throughput tp = throughput_of(problem, r.time, peak.stages);
  j["tokens_per_s_per_device"] = tp.tokens_per_s_per_device;  // 0 for a model without tokens
  j["model_flops_per_token"] = tp.model_flops_per_token;
  j["mfu"] = tp.mfu;
  j["peak_bytes_per_device"] = peak.bytes;
  j["peak_at"] = peak.where;
  j["memory_limit_bytes"] = peak.limit;
  j["device_memory_bytes"] = peak.device_memory;
  j["memory_reserve_fraction"] = peak.reserve ? memory_reserve_fraction : 0.0;
  const memory_breakdown mem = problem.memory_of(r.pick);
  j["memory_breakdown_bytes"] = {{"parameters", mem.params}, {"gradients", mem.grads}, {"optimizer", mem.optimizer},
                                 {"activations", mem.activations}, {"transient", mem.transient}};
  j["feasible"] = r.feasible;
  j["search_s"] = r.search_s;
  j["search_parts_s"] = search_parts_json(r);
  j["optimal_gap"] = r.optimal_gap ? nlohmann::json(*r.optimal_gap) : nlohmann::json(nullptr);
  j["exact_status"] = to_string(r.exact);
  j["lower_bound_s"] = r.lower_bound ? nlohmann::json(*r.lower_bound) : nlohmann::json(nullptr);
  j["gap_to_bound"] = r.bound_gap ? nlohmann::json(*r.bound_gap) : nlohmann::json(nullptr);
  j["notes"] = r.notes;
  const kernel_price_counts k = problem.kernel_price_counts_of();
  j["kernel_prices"] = {{"measured", k.measured}, {"fitted", k.fitted}, {"analytical", k.analytical},
                        {"line", kernel_prices_line(problem, hw_name)}};
  j["layers"] = layers_json(r, rows);
  return j;
}

// A mixture of experts' routing, from its first dispatch or routed_experts (""; a dense model):
// experts per block, top-k, slots per expert per sequence beside what a balanced router fills
// (seq k / E), whether tokens can be dropped.
// What the step gathers again for backward: ", 3 inputs gathered again in backward,
// parameters resharded after forward" ("" where it gathers no input that backward reads and no
// parameter).
inline std::string gathered_again_text(const plan_problem& problem, const plan_result& r) {
  const plan p = plan_of(problem, r.pick);
  int inputs = 0, params = 0;
  const auto regathered = regathered_inputs(p);
  for (int i = 0; i < int(p.ops.size()); ++i) {  // what sends bytes again (local steps rerun for free)
    for (std::size_t j = 0; j < at(regathered, i).size(); ++j)
      inputs += at(regathered, i)[j] && p.input(i, j).forward.bytes_per_device() > 0;
    for (std::size_t j = 0; j < at(p.ops, i).params.size(); ++j) params += p.param(i, j).forward.bytes_per_device() > 0;
  }
  std::string t;
  if (inputs > 0) t += ", " + std::to_string(inputs) + " input" + (inputs == 1 ? "" : "s") + " gathered again in backward";
  if (params > 0) t += p.reshard_after_forward ? ", parameters resharded after forward" : ", parameters kept gathered";
  return t;
}

inline std::string experts_line(const graph& g) {
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const op_node& d = g.ops[i];
    if (d.kind == op_kind::routed_experts) {
      const double uniform = double(d.inputs[0][1]) * d.attrs.topk / double(d.inputs[1][2]);
      return fmt::format("{} per block, top {}, dropless: each expert computes the tokens routed to it, {:.3g} per "
                         "sequence of {} by balanced routing (what is priced; a run computes its own counts)",
                         d.inputs[1][2], d.attrs.topk, uniform, d.inputs[0][1]);
    }
    if (d.kind != op_kind::dispatch) continue;
    const tensor_ref gates = g.op_inputs[i][1];
    const int k = gates.op >= 0 ? g.ops[std::size_t(gates.op)].attrs.topk : 0;
    const std::int64_t seq = d.inputs[0][1], slots = d.attrs.capacity;
    const double uniform = double(seq) * k / double(d.inputs[1][2]);  // what balanced routing fills
    return fmt::format("{} per block, top {}, {} slots per expert per sequence of {}, {:.3g} filled by balanced routing "
                       "({}; the slots are what is sent and priced)",
                       d.inputs[1][2], k, slots, seq, uniform,
                       slots == seq ? "dropless" : "a token past its expert's slots is dropped there");
  }
  return "";
}

// The lines above the table: the model, the step, the mesh, the strategy, the parallelism.
inline void print_plan_heading(const plan_problem& problem, const plan_result& r, const plan_peak& peak, const std::string& spec,
                               const std::string& hw_name) {
  const graph& g = problem.model();
  const plan_options& o = problem.options();
  const std::int64_t active = active_param_count(g);
  fmt::print("model     {}  ({} parameters{}, {} per step)\n", spec, si(double(param_count(g)), ""),
             active == param_count(g) ? std::string() : ", " + si(double(active), "") + " active per token",
             si(double(o.microbatches) * (forward_flops(g) + backward_flops(g)), "FLOP"));
  fmt::print("step      {} micro-batch{} of {}, recompute {}{}\n", o.microbatches, o.microbatches == 1 ? "" : "es",
             g.inputs.empty() ? 0 : g.inputs[0][0], to_string(o.recompute), gathered_again_text(problem, r));
  if (const std::string moe = experts_line(g); !moe.empty()) fmt::print("experts   {}\n", moe);
  if (peak.stages > 1)  // one stage's mesh in the table; the job's devices are every stage's
    fmt::print("mesh      {} per stage x {} stages  ({} devices)   hardware {}   dtype {}\n", to_string(o.mesh), peak.stages,
               o.mesh.devices() * peak.stages, hw_name, to_string(o.type));
  else
    fmt::print("mesh      {}  ({} devices)   hardware {}   dtype {}\n", to_string(o.mesh), o.mesh.devices(), hw_name,
               to_string(o.type));
  fmt::print("strategy  {}   search {}{}\n", to_string(r.strategy), seconds(r.search_s), search_parts_text(r));
  fmt::print("parallel  {}\n\n", parallelism_line(parallelism_of(problem, r.pick, peak.stages), problem.options().mesh));
}

// The table of ops: every op (all_ops), or consecutive repeated blocks laid out alike once.
inline void print_op_table(const plan_problem& problem, const std::vector<plan_row>& rows, bool all_ops) {
  const graph& g = problem.model();
  fmt::print("{:<22} {:<14} {:>10} {:>10} {:>10} {:>10} {:>11}  {}\n", "op", "kind", "compute", "comm", "comm time",
             "memory", "if runner-up", "signature");
  auto print_row = [&](const plan_row& row) {
    fmt::print("{:<22} {:<14} {:>10} {:>10} {:>10} {:>10} {:>11}  {}\n", row.name, row.op, seconds(row.compute_s),
               si(row.comm_bytes, "B"), seconds(row.comm_s), si(row.memory_bytes, "B"),
               row.runner_up_s ? seconds(*row.runner_up_s) : row.runner_up_over_memory ? std::string("over memory") : std::string("none"),
               row.signature);
  };
  // Consecutive repeated blocks laid out alike print once, under a line naming them ("h0-h23
  // x24"), unless all_ops (--json lists every op): a block's key is what each op runs, without names.
  auto block_key = [&](int first, int last) {
    std::string k;
    for (int i = first; i < last; ++i) {
      const plan_row& row = at(rows, i);
      std::string layouts;
      for (char c : row.signature) layouts += c == '|' ? ';' : c;
      std::string kept;  // the bracketed layouts only
      bool in = false;
      for (char c : layouts) {
        if (c == '[') in = true;
        if (in) kept += c;
        if (c == ']') in = false, kept += ' ';
      }
      k += row.op + ":" + kept + "\n";
    }
    return k;
  };
  if (all_ops)
    for (const plan_row& row : rows) print_row(row);
  else
    for (const op_run& run : fold_repeated_blocks(g, block_key)) {
      if (run.count > 1)
        fmt::print("{}-{} x{}: the same layouts in every block; per block:\n", block_prefix(at(rows, run.first).name),
                   block_prefix(at(rows, run.last_first).name), run.count);
      for (int k = run.first; k < run.end; ++k) print_row(at(rows, k));
    }
}

// The lines below the table: the predicted step, bytes, memory, prices, gap and notes.
inline void print_plan_totals(const plan_problem& problem, const plan_result& r, const plan_peak& peak, const std::string& hw_name) {
  const char* overlaps = problem.overlap() == overlap_rule::none ? "no" : "yes";
  if (peak.stages > 1)  // the step is the schedule's (see the pipeline section); a device runs one stage
    fmt::print("\npredicted step {}  = the pipeline's schedule (see below); a device of stage {}, the slowest: compute {} + "
               "communication {} (gradient sync overlaps backward: {})\n",
               seconds(r.time), peak.busiest_stage, seconds(peak.compute_s), seconds(peak.comm_s), overlaps);
  else
    fmt::print("\npredicted step {}  = compute {} + communication {} (gradient sync overlaps backward: {})\n",
               seconds(r.time), seconds(peak.compute_s), seconds(peak.comm_s), overlaps);
  fmt::print("per device: sends {} per step{}\n", si(peak.sent_bytes, "B"), peak.stages > 1 ? " (the stage that sends most)" : "");
  if (const std::string t = throughput_line(problem, throughput_of(problem, r.time, peak.stages), "predicted"); !t.empty())
    fmt::print("{}\n", t);
  fmt::print("peak memory per device {} at {} (the step replayed), of {}{}\n", si(peak.bytes, "B"), peak.where,
             limit_text(peak), r.feasible ? "" : "  (OVER THE LIMIT)");
  const memory_breakdown mem = problem.memory_of(r.pick);
  fmt::print("memory breakdown (every term as if all lived at once): parameters {}, gradients {}, optimizer {}, "
             "activations {}, transient {}\n",
             si(double(mem.params), "B"), si(double(mem.grads), "B"), si(double(mem.optimizer), "B"),
             si(double(mem.activations), "B"), si(double(mem.transient), "B"));
  fmt::print("{}\n", kernel_prices_line(problem, hw_name));
  if (r.optimal_gap)
    fmt::print("gap to the exact optimum (additive objective, series-parallel DP): {:.3f}%\n", *r.optimal_gap * 100);
  else if (r.exact == exact_status::bounded && r.lower_bound && r.bound_gap)
    fmt::print("exact reference bounded (over its budget): additive step time at least {}, this plan at most {:.3f}% "
               "above it\n", seconds(*r.lower_bound), *r.bound_gap * 100);
  for (const auto& n : r.notes) fmt::print("note: {}\n", n);
}

inline void print_human(const plan_problem& problem, const plan_result& r, const plan_peak& peak,
                        const std::vector<plan_row>& rows, const std::string& spec, const std::string& hw_name,
                        bool all_ops = false) {
  print_plan_heading(problem, r, peak, spec, hw_name);
  print_op_table(problem, rows, all_ops);
  print_plan_totals(problem, r, peak, hw_name);
}
}  // namespace autoddl::tools
