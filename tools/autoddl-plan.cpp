// autoddl-plan: finds, prices and explains the layout plan of a model on a mesh.
//   autoddl-plan --model gpt:layers=24,hidden=1024,heads=16,seq=1024,batch=8,vocab=50257
//                [--mesh 2x4] [--hardware dgx1-v100] [--strategy auto] [--compare dp,megatron] [--json]
//   (without --model, --mesh or --hardware: autoddl-train's defaults, the small GPT on 2x2 priced
//   with cpu-local: what mpirun -np 4 autoddl-train runs)
//                [--microbatches auto|N] [--recompute auto|none|selective|full] [--regather auto|on|off]
//                [--reshard auto|on|off] [--out plan.json]
//   --model m.json plans a model file (models/model_file.hpp); --export-model m.json writes one
//   autoddl-plan ... --emit dtensor       (the plan as PyTorch DTensor placements, emit_dtensor.hpp; also
//                                          with --check plan.json)
//   autoddl-plan --diff a.json b.json     (two plan files: the ops whose layouts differ, and the
//                                          predicted step time, communication and memory of each)
// Bad input is one sentence on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <cmath>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/json_input.hpp"
#include "autoddl/text_file.hpp"
#include "autoddl/models/model_file.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/svg.hpp"
#include "emit_dtensor.hpp"
#include "engine_plan.hpp"
#include "pipeline_report.hpp"
#include "plan_report.hpp"
#include "support/cli.hpp"
#include "support/cli_parse.hpp"
#include "support/heap.hpp"
#include "support/profile.hpp"

using namespace autoddl;
using autoddl::tools::plan_json;
using autoddl::tools::print_human;
using autoddl::tools::seconds;
using autoddl::tools::si;

namespace {

std::string layouts_text(const op_layouts& l) {
  std::string r;
  auto list = [&](const char* what, const std::vector<nd_sbp>& v) {
    for (const nd_sbp& x : v) r += (r.empty() ? "" : " ") + std::string(what) + to_string(x);
  };
  list("in", l.inputs);
  list("param", l.params);
  list("out", l.outputs);
  return r;
}

// Builds the model at a micro-batch count (what plan_micro_batched searches over).
using graph_builder = std::function<graph(int)>;

// The command line, as given.
struct plan_cli {
  std::string model = autoddl::tools::default_model, mesh = autoddl::tools::default_mesh,
              hardware = autoddl::tools::default_hardware, dtype = "fp32", strategy = "auto", compare, svg,
                     optimizer = "adam", grad_sums, microbatches = "auto", recompute = "auto", regather = "auto", reshard = "auto", out, export_model;
  std::optional<std::string> memory;  ///< --memory-limit as given ("" is refused, not ignored)
  std::vector<std::string> diff;
  std::string check;
  std::string engine = "autoddl", emit;  ///< --engine, --emit
  bool json = false, no_overlap = false, all_ops = false, allow_over_limit = false;
  bool hardware_given = false, mesh_given = false, dtype_given = false;  ///< --hardware, --mesh, --dtype given
  std::uint64_t seed = 1;
  std::optional<std::int64_t> seq, batch;
};

void add_options(CLI::App& app, plan_cli& c) {
  app.add_option("--model", c.model,
                 "NAME:key=value,... (gpt, bert, llama, vgg11, vgg13, vgg16, vgg19, mlp), a model file m.json, or "
                 "hf:config.json (a Hugging Face LLaMA, Mistral, Qwen2 or Qwen3 config); default " +
                     std::string(autoddl::tools::default_model) + ", as autoddl-train's");
  app.add_option("--seq", c.seq, "sequence length of the model (a zoo transformer or an hf config)");
  app.add_option("--batch", c.batch, "global batch of the model (sequences, images or rows per step)");
  app.add_option("--mesh", c.mesh,
                 "device mesh, e.g. 8, 2x4, 2x2x2 (default " + std::string(autoddl::tools::default_mesh) +
                     ", as autoddl-train's)");
  app.add_option("--hardware", c.hardware,
                 "a preset name or a hardware JSON file (default " + std::string(autoddl::tools::default_hardware) +
                     ", as autoddl-train's)");
  app.add_option("--dtype", c.dtype, "fp32, fp16, bf16 or fp64 (default fp32; an hf config's torch_dtype where it gives one)");
  app.add_option("--grad-sums", c.grad_sums,
                 std::string(autoddl::tools::grad_sums_help) + " (default: the --dtype's own)");
  app.add_option("--memory-limit", c.memory, "bytes per device, e.g. 32GiB (default: the device's memory less a 10 % reserve)");
  app.add_option("--strategy", c.strategy,
                 std::string(autoddl::tools::strategies_help) + ", exact or exhaustive");
  app.add_option("--engine", c.engine,
                 "autoddl (default: every layout), megatron or torchtitan: auto searches only the layouts that engine runs");
  app.add_option("--emit", c.emit,
                 "megatron or torchtitan: print the settings that launch the plan on that engine (also written to --out); "
                 "dtensor: print the plan as PyTorch DTensor placements (JSON) instead of the report")
      ->check(CLI::IsMember({"megatron", "torchtitan", "dtensor"}));
  app.add_option("--microbatches", c.microbatches,
                 "micro-batches per step (gradient accumulation): auto or a divisor of the batch");
  app.add_option("--recompute", c.recompute, autoddl::tools::recompute_help);
  app.add_option("--regather", c.regather, autoddl::tools::regather_help);
  app.add_option("--reshard", c.reshard, autoddl::tools::reshard_help);
  app.add_option("--compare", c.compare, "comma-separated plans to compare against, e.g. dp,megatron:tp=4");
  app.add_option("--optimizer", c.optimizer, autoddl::tools::optimizers_help);
  app.add_option("--seed", c.seed, "seed of the random starts");
  app.add_flag("--no-overlap", c.no_overlap, "price gradient sync without overlapping backward compute");
  app.add_flag("--json", c.json, "print one JSON object");
  app.add_flag("--allow-over-limit", c.allow_over_limit,
               "exit 0 for a pinned strategy whose plan does not fit the memory limit (by default it is printed, "
               "then exit 1 with the nearest change that fits)");
  app.add_flag("--all-ops", c.all_ops, "print every op (by default repeated blocks laid out alike print once)");
  app.add_option("--svg", c.svg, "write a picture of the plan to this file");
  app.add_option("--out", c.out, "write the plan to this file (JSON: layouts of every op and parameter, schedule, predictions)");
  app.add_option("--export-model", c.export_model, "write the model as a model file (JSON graph: --model path.json reads it)");
  app.add_option("--diff", c.diff,
                 "compare two plan files, each validated and priced again: --diff a.json b.json")->expected(2);
  app.add_option("--check", c.check,
                 "validate a plan file (its model unchanged, every layout one the planner offers) and price it again "
                 "(with its hardware, or --hardware)");
}

// Writes `text` to `path`, or says which of `what` could not be written.
void write_file(const std::string& path, const std::string& what, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw error("cannot write " + what + " to '" + path + "'");
  f << text;
  if (!f) throw error("cannot write " + what + " to '" + path + "'");
}

plan_options options_of(const plan_cli& c) {
  plan_options o;
  o.mesh = parse_mesh(c.mesh);
  o.hw = load_hardware(c.hardware);
  autoddl::tools::warn_if_other_cpu("autoddl-plan", c.hardware, o.hw);
  o.type = parse_dtype(c.dtype);
  o.opt = parse_optimizer(c.optimizer);
  // by default a 16-bit plan keeps its sums in its type (docs/reference/cost.md says why)
  o.fp32_gradient_sums = c.grad_sums.empty() ? bytes_of(o.type) != 2 : autoddl::tools::parse_fp32_gradient_sums(c.grad_sums, c.dtype);
  if (c.memory) o.memory_limit = autoddl::tools::parse_bytes(*c.memory);
  if (c.no_overlap) o.overlap = overlap_rule::none;
  return o;
}

step_settings pinned_settings(const plan_cli& c) {
  step_settings pin;
  if (c.microbatches != "auto") pin.microbatches = autoddl::tools::parse_count("--microbatches", c.microbatches);
  if (c.recompute != "auto") pin.recompute = parse_recompute(c.recompute);
  pin.regather_inputs = autoddl::tools::parse_auto_on_off("--regather", c.regather);
  pin.reshard_after_forward = autoddl::tools::parse_auto_on_off("--reshard", c.reshard);
  return pin;
}

// The search found no plan under the memory limit: one sentence saying what takes the memory and
// the smallest mesh of the same shape that fits, if any.
[[noreturn]] void no_plan_fits(const micro_batched_plan& best, const graph_builder& build, std::int64_t batch,
                               const plan_options& o, const step_settings& pin, const plan_cli& c) {
  const plan_problem& problem = *best.problem;
  const plan_result& r = best.result;
  std::string msg = "no plan fits the memory limit of " + si(memory_limit_of(o), "B") +
                    " per device, even with micro-batches and recomputation (the best peaks at " +
                    si(best.peak_bytes, "B") + ", most of it " + largest_memory_term(problem.memory_of(r.pick)) + ")";
  if (const std::optional<mesh_shape> bigger = smallest_fitting_mesh(build, batch, o, pin, c.seed))
    msg += "; the smallest mesh like " + c.mesh + " that fits is " + to_string(*bigger);
  else
    msg += "; raise --memory-limit, use a larger mesh or a smaller model";
  throw error(msg);
}

// The --compare plans, each with its own knobs (open ones chosen as for auto), and the ones the
// mesh or model cannot take, with the reason.
struct compared_plans {
  std::vector<std::pair<std::string, plan_result>> plans;
  std::vector<double> peaks;  ///< per plan: its replayed peak per device
  std::vector<std::pair<std::string, std::string>> not_applicable;
};

compared_plans compare_plans(const plan_cli& c, const graph_builder& build, std::int64_t batch,
                             const plan_options& o) {
  compared_plans out;
  for (const plan_strategy& s : parse_strategy_list(c.compare)) {
    try {
      autoddl::tools::chosen_plan p = autoddl::tools::plan_with_pipelines(build, batch, o, s, {}, c.seed);
      out.peaks.push_back(p.plan.peak_bytes);
      out.plans.push_back({to_string(s), std::move(p.plan.result)});
    } catch (const error& e) {
      out.not_applicable.push_back({to_string(s), e.what()});
    }
  }
  return out;
}

void print_plan(const plan_cli& c, const plan_problem& problem, const plan_result& r, const std::optional<pipeline_plan>& pipe,
                const autoddl::tools::plan_peak& peak, const std::vector<plan_row>& rows, const compared_plans& cmp,
                const std::string& engine = "autoddl", const nlohmann::json& emitted = nullptr) {
  if (c.json) {
    auto j = plan_json(problem, r, peak, rows, c.model, c.hardware);
    autoddl::tools::add_pipeline_json(j, pipe, problem.model());
    j["engine"] = engine;
    if (!emitted.is_null()) j["emit"] = emitted;
    if (!cmp.plans.empty() || !cmp.not_applicable.empty()) {
      nlohmann::json all = nlohmann::json::object();
      for (std::size_t k = 0; k < cmp.plans.size(); ++k) {
        const auto& [name, o2] = cmp.plans[k];
        all[name] = {{"applicable", true},
                     {"predicted_step_s", o2.time},
                     {"speedup", o2.time / r.time},
                     {"feasible", o2.feasible},
                     {"comm_bytes_per_device", o2.totals.bytes},
                     {"peak_bytes_per_device", cmp.peaks[k]}};
      }
      for (const auto& [name, why] : cmp.not_applicable) all[name] = {{"applicable", false}, {"reason", why}};
      j["compare"] = all;
    }
    std::puts(j.dump(2).c_str());
    return;
  }
  print_human(problem, r, peak, rows, c.model, c.hardware, c.all_ops);
  if (pipe) autoddl::tools::print_pipeline(*pipe, problem.model());
  for (std::size_t k = 0; k < cmp.plans.size(); ++k) {
    const auto& [name, o2] = cmp.plans[k];
    fmt::print("vs {:<9} predicted step {:>10}  -> {} is {:.2f}x faster{}\n", name, seconds(o2.time), to_string(r.strategy),
               o2.time / r.time,
               o2.feasible ? std::string()
                           : " (that plan peaks at " + si(cmp.peaks[k], "B") + " per device, over the limit of " +
                                 si(peak.limit, "B") + ")");
  }
  for (const auto& [name, why] : cmp.not_applicable) fmt::print("vs {:<9} not applicable: {}\n", name, why);
  if (!emitted.is_null())
    fmt::print("\n{} settings of layout {} ({}):\n{}", emitted["engine"].get<std::string>(), emitted["layout"].get<std::string>(),
               emitted["version"].get<std::string>(), emitted["command"].get<std::string>());
}

// A plan file's "parallelism" object (written by --out; null in a file without it).
nlohmann::json file_parallelism(const std::string& path) {
  const std::optional<std::string> text = read_text_file(path, "plan file");
  const nlohmann::json j = text ? parse_json(*text, "plan file " + path) : nlohmann::json(nullptr);
  return j.is_object() && j.contains("parallelism") ? j["parallelism"] : nlohmann::json(nullptr);
}

// "4x2x4 per stage x 2 stages" or "2x4".
std::string layout_mesh_text(const plan_file& f) {
  return f.stages > 1 ? to_string(f.mesh) + " per stage x " + std::to_string(f.stages) + " stages" : to_string(f.mesh);
}

// "dp=64 tp=1 cp=1 ep=1, ZeRO stage 3, 1 sequence per device per micro-batch", or "not recorded".
std::string parallelism_text(const nlohmann::json& x) {
  if (!x.is_object()) return "not recorded";
  const double n = x.value("sequences_per_device_per_microbatch", 0.0);
  return fmt::format("dp={} tp={} pp={} cp={} ep={}, ZeRO stage {}, {:g} sequence{} per device per micro-batch",
                     x.value("dp", 1), x.value("tp", 1), x.value("pp", 1), x.value("cp", 1), x.value("ep", 1),
                     x.value("zero_stage", 0), n, n == 1 ? "" : "s");
}

// A plan file read, its model checked (plan_model_spec), its layouts validated and priced again
// (tools::plan_of_file) with its hardware or --hardware, dtype, optimizer and whole mesh.
struct repriced_file {
  plan_file file;
  std::string spec;  ///< the model as loaded
  std::string hardware;
  autoddl::tools::chosen_plan plan;
  autoddl::tools::plan_peak peak;
  plan_prediction now;  ///< what it is priced at here
};

repriced_file reprice(const plan_cli& c, const std::string& path) {
  repriced_file r{read_plan_file(path), {}, {}, {}, {}, {}};
  if (r.file.model_hash.empty())  // nothing to tell a changed model by
    throw error("plan file " + path + " records no model_hash, so whether model '" + detail::excerpt(r.file.model) +
                "' changed since it was planned cannot be checked; plan it again (autoddl-plan --out)");
  r.spec = plan_model_spec(r.file);
  r.hardware = c.hardware_given ? c.hardware : r.file.hardware;
  if (c.mesh_given && !(parse_mesh(c.mesh) == r.file.pipeline_mesh))
    throw error("plan file " + path + " is for mesh " + to_string(r.file.pipeline_mesh) + ", not " + c.mesh +
                "; leave --mesh out to check it on its own");
  plan_options o;
  o.mesh = r.file.pipeline_mesh;
  o.hw = load_hardware(r.hardware);
  autoddl::tools::warn_if_other_cpu("autoddl-plan", r.hardware, o.hw);
  o.type = parse_dtype(r.file.dtype);
  o.opt = parse_optimizer(r.file.optimizer);
  if (c.memory) o.memory_limit = autoddl::tools::parse_bytes(*c.memory);
  if (c.no_overlap) o.overlap = overlap_rule::none;
  try {
    r.plan = autoddl::tools::plan_of_file(r.file, r.spec, o);
  } catch (const layout_error& e) {
    throw error("plan file " + path + " is not a valid plan: " + e.what());
  }
  const plan_problem& problem = *r.plan.plan.problem;
  const plan_result& res = r.plan.plan.result;
  r.peak = autoddl::tools::peak_of(problem, res, r.plan.pipeline, o);
  r.now = {res.time, r.peak.compute_s, r.peak.comm_s, r.peak.sent_bytes, r.peak.bytes};  // per device, as --out writes them
  return r;
}

// "step 1.2 ms (the file says 1.3 ms)" where they differ, "step 1.2 ms" where they agree.
std::string against(const char* what, double now, double stored, const std::function<std::string(double)>& show) {
  const bool same = std::abs(now - stored) <= 1e-9 * std::max(std::abs(now), std::abs(stored));
  return std::string(what) + " " + show(now) + (same ? "" : " (the file says " + show(stored) + ")");
}

// --emit dtensor: the plan as DTensor placements on stdout (a pipeline has none: refused).
void emit_dtensor(const plan_problem& problem, const plan_result& r, const std::optional<pipeline_plan>& pipe,
                  const std::string& model) {
  if (pipe) throw error("--emit dtensor writes plans without pipeline stages; this plan has " + std::to_string(pipe->shape.stages) +
                        " (pin --strategy to one without pp)");
  std::fputs(autoddl::tools::dtensor_text(autoddl::tools::dtensor_json(problem, r, model, hf_experts_naming_of(model))).c_str(), stdout);
}

// --check: the plan as it prices here, and one line: valid, and today's figures against the file's.
void check_plan(const plan_cli& c) {
  const repriced_file r = reprice(c, c.check);
  const plan_problem& problem = *r.plan.plan.problem;
  const plan_result& res = r.plan.plan.result;
  const plan_prediction& was = r.file.predicted;
  const bool same = std::abs(r.now.step_s - was.step_s) <= 1e-9 * r.now.step_s &&
                    std::abs(r.now.peak_bytes - was.peak_bytes) <= 1e-9 * r.now.peak_bytes &&
                    std::abs(r.now.comm_bytes - was.comm_bytes) <= 1e-9 * std::max(1.0, r.now.comm_bytes);
  plan_cli shown = c;
  shown.model = r.spec;
  shown.hardware = r.hardware;
  if (c.emit == "dtensor") return emit_dtensor(problem, res, r.plan.pipeline, r.spec);
  if (!c.emit.empty())
    throw error("--check with --emit writes dtensor placements only; for --emit " + c.emit +
                ", plan with --strategy set to the file's layout");
  const std::vector<plan_row> rows = plan_rows(problem, res);
  if (c.json) {
    nlohmann::json j = plan_json(problem, res, r.peak, rows, r.spec, r.hardware);
    autoddl::tools::add_pipeline_json(j, r.plan.pipeline, problem.model());
    auto fig = [](const plan_prediction& p) {
      return nlohmann::json{{"step_s", p.step_s}, {"comm_bytes_per_device", p.comm_bytes}, {"peak_bytes_per_device", p.peak_bytes}};
    };
    j["check"] = {{"file", c.check}, {"valid", true}, {"same_figures", same}, {"file_figures", fig(was)}, {"priced", fig(r.now)}};
    std::puts(j.dump(2).c_str());
    return;
  }
  print_plan(shown, problem, res, r.plan.pipeline, r.peak, rows, {});
  fmt::print("\nplan file {}: valid (model '{}' unchanged; every op's and parameter's layouts are the planner's on mesh "
             "{}); priced again with hardware {}: {}, {}, {}{}\n",
             c.check, r.file.model, to_string(r.file.mesh), r.hardware, against("step", r.now.step_s, was.step_s, seconds),
             against("peak", r.now.peak_bytes, was.peak_bytes, [](double x) { return si(x, "B"); }),
             against("sends", r.now.comm_bytes, was.comm_bytes, [](double x) { return si(x, "B"); }),
             same ? "" : "; the file's figures are older prices (plan it again to update them)");
}

// The ops and the parameters whose layouts differ between plan files a and b (--diff's lists).
std::pair<nlohmann::json, nlohmann::json> differing_layouts(const plan_file& a, const plan_file& b) {
  nlohmann::json ops = nlohmann::json::array(), params = nlohmann::json::array();
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const op_layouts &x = a.ops[i], &y = b.ops[i];
    if (x.inputs == y.inputs && x.params == y.params && x.outputs == y.outputs) continue;
    ops.push_back({{"name", x.name}, {"kind", x.kind}, {"a", layouts_text(x)}, {"b", layouts_text(y)}});
  }
  auto text = [](const param_layouts_entry& e) {
    return to_string(e.storage) + " summed " + to_string(e.grad_sum) + " updated " + to_string(e.update);
  };
  for (std::size_t p = 0; p < a.params.size() && p < b.params.size(); ++p)
    if (!(a.params[p].storage == b.params[p].storage) || !(a.params[p].grad_sum == b.params[p].grad_sum) ||
        !(a.params[p].update == b.params[p].update))
      params.push_back({{"name", a.params[p].name}, {"a", text(a.params[p])}, {"b", text(b.params[p])}});
  return {ops, params};
}

// --diff: what differs between two plan files of one model and mesh.
// Each file is validated and priced again (reprice): the figures are today's.
void diff_plans(const plan_cli& c, const std::string& a_path, const std::string& b_path) {
  const bool json = c.json;
  const repriced_file ra = reprice(c, a_path), rb = reprice(c, b_path);
  const plan_file &a = ra.file, &b = rb.file;
  const nlohmann::json par_a = file_parallelism(a_path), par_b = file_parallelism(b_path);
  // the same devices however the mesh is written (8, 2x4, 2x2x2) or split into pipeline stages
  if (a.model != b.model || a.pipeline_mesh.devices() != b.pipeline_mesh.devices())
    throw error("plan files " + a_path + " and " + b_path + " are for different models or device counts ('" + a.model + "' on " +
                std::to_string(a.pipeline_mesh.devices()) + " devices, '" + b.model + "' on " +
                std::to_string(b.pipeline_mesh.devices()) + "); --diff compares plans of one model on the same devices");
  if (a.ops.size() != b.ops.size()) throw error("plan files " + a_path + " and " + b_path + " have different op lists");
  const auto [ops, params] = differing_layouts(a, b);
  const plan_prediction &pa = ra.now, &pb = rb.now;
  if (json) {
    nlohmann::json j = {{"a", a_path}, {"b", b_path}, {"ops_differing", ops}, {"params_differing", params},
                        {"hardware", {ra.hardware, rb.hardware}}};
    j["predicted"] = {{"step_s", {pa.step_s, pb.step_s, pb.step_s - pa.step_s}},
                      {"comm_s", {pa.comm_s, pb.comm_s, pb.comm_s - pa.comm_s}},
                      {"comm_bytes_per_device", {pa.comm_bytes, pb.comm_bytes, pb.comm_bytes - pa.comm_bytes}},
                      {"peak_bytes_per_device", {pa.peak_bytes, pb.peak_bytes, pb.peak_bytes - pa.peak_bytes}}};
    j["schedule"] = {{"a", {a.microbatches, std::string(to_string(a.recompute))}},
                     {"b", {b.microbatches, std::string(to_string(b.recompute))}}};
    j["parallelism"] = {{"a", par_a}, {"b", par_b}};
    std::puts(j.dump(2).c_str());
    return;
  }
  fmt::print("a: {} ({}, {} micro-batch{}, recompute {})\nb: {} ({}, {} micro-batch{}, recompute {})\n", a_path, a.strategy,
             a.microbatches, a.microbatches == 1 ? "" : "es", to_string(a.recompute), b_path, b.strategy, b.microbatches,
             b.microbatches == 1 ? "" : "es", to_string(b.recompute));
  fmt::print("both valid, priced again with hardware {} and {}\n", ra.hardware, rb.hardware);
  if (!(a.mesh == b.mesh))
    fmt::print("meshes: a lays its {} devices out as {}, b as {} (each op's layouts below are per axis of its own mesh)\n",
               a.pipeline_mesh.devices(), layout_mesh_text(a), layout_mesh_text(b));
  fmt::print("parallel a: {}\n         b: {}\n", parallelism_text(par_a), parallelism_text(par_b));
  fmt::print("{} of {} ops and {} of {} parameters differ\n", ops.size(), a.ops.size(), params.size(), a.params.size());
  for (const auto& o : ops)
    fmt::print("  {:<22} {:<14}\n      a: {}\n      b: {}\n", o["name"].get<std::string>(), o["kind"].get<std::string>(),
               o["a"].get<std::string>(), o["b"].get<std::string>());
  for (const auto& q : params)
    fmt::print("  parameter {:<22} a: {}   b: {}\n", q["name"].get<std::string>(), q["a"].get<std::string>(),
               q["b"].get<std::string>());
  auto pct = [](double x, double y) { return x > 0 ? fmt::format(" ({:+.1f}%)", 100 * (y - x) / x) : std::string(); };
  fmt::print("predicted step       {:>12} -> {:>12}{}\n", seconds(pa.step_s), seconds(pb.step_s), pct(pa.step_s, pb.step_s));
  fmt::print("communication time   {:>12} -> {:>12}{}\n", seconds(pa.comm_s), seconds(pb.comm_s), pct(pa.comm_s, pb.comm_s));
  fmt::print("bytes sent / device  {:>12} -> {:>12}{}\n", si(pa.comm_bytes, "B"), si(pb.comm_bytes, "B"),
             pct(pa.comm_bytes, pb.comm_bytes));
  fmt::print("peak memory / device {:>12} -> {:>12}{}\n", si(pa.peak_bytes, "B"), si(pb.peak_bytes, "B"),
             pct(pa.peak_bytes, pb.peak_bytes));
}

// Auto on a one-axis mesh across nodes (64 for 8 nodes of 8): the search reads the axis as one
// link, so it pipelines nowhere and may cut tensor parallelism across nodes; the same devices
// written node by node (8x8) are searched with both. A note says so.
void add_one_axis_note(plan_result& r, const plan_options& o) {
  const int per_node = o.hw.devices_per_node;
  const std::int64_t n = o.mesh.devices();
  if (o.mesh.size() != 1 || per_node <= 1 || n <= per_node || n % per_node != 0) return;
  r.notes.push_back(fmt::format("mesh {} spans {} nodes of {} devices as one axis, priced at the slowest link, so auto "
                                "neither pipelines over the nodes nor keeps tensor parallelism within one; --mesh {}x{} "
                                "names the same devices node by node, where auto searches pipelines and tensor parallelism within a node",
                                n, n / per_node, per_node, n / per_node, per_node));
}

// A pinned strategy's plan over the memory limit (printed already): one sentence on stderr with
// what fits instead (auto with the same settings, else the smallest mesh like c.mesh on which
// auto fits), and exit status 1.
int over_limit(const plan_cli& c, const std::string& strategy, double peak, double limit, const graph_builder& build,
               std::int64_t batch, const plan_options& o, const step_settings& pin) {
  std::string instead;
  const autoddl::tools::chosen_plan a = autoddl::tools::plan_with_pipelines(build, batch, o, strategy::automatic{}, pin, c.seed);
  if (a.plan.result.feasible)
    instead = "--strategy auto fits (predicted step " + seconds(a.plan.result.time) + ", peak " +
              si(autoddl::tools::peak_of(*a.plan.problem, a.plan.result, a.pipeline, o).bytes, "B") + ")";
  else if (const std::optional<mesh_shape> m = smallest_fitting_mesh(build, batch, o, pin, c.seed))
    instead = "auto fits on mesh " + to_string(*m);
  else
    instead = "raise --memory-limit, use a larger mesh or a smaller model";
  std::fprintf(stderr, "autoddl-plan: the %s plan peaks at %s per device, over the limit of %s; %s (--allow-over-limit "
               "accepts the plan as it is)\n", strategy.c_str(), si(peak, "B").c_str(), si(limit, "B").c_str(), instead.c_str());
  return 1;
}

// An hf config's defaults taken: its saved dtype unless --dtype is given (c.dtype set), and the
// batch and sequence it leaves to autoddl's defaults. One note per default taken.
std::vector<std::string> hf_input_notes(plan_cli& c) {
  if (!is_hf_spec(c.model)) return {};
  const hf_defaults d = hf_defaults_of(c.model);
  std::vector<std::string> notes;
  if (!c.dtype_given && !d.saved_dtype.empty() && d.saved_dtype != c.dtype) {
    if (load_hardware(c.hardware).device.peak(parse_dtype(d.saved_dtype)) > 0) {
      c.dtype = d.saved_dtype;
      notes.push_back("dtype " + d.saved_dtype + " from the config's torch_dtype '" + d.saved_as + "' (--dtype sets another)");
    } else {
      notes.push_back("dtype " + c.dtype + ": the config's torch_dtype '" + d.saved_as + "' has no peak in hardware '" +
                      c.hardware + "' (--dtype sets another)");
    }
  }
  if (d.batch_default)
    notes.push_back("batch " + std::to_string(d.batch) + ": the config names no batch, so " + std::to_string(d.batch) +
                    " sequences per step are planned (--batch sets the global batch)");
  if (d.seq_default)
    notes.push_back("seq " + std::to_string(d.seq) + " from the config's max_position_embeddings, at most 8192 (--seq sets it)");
  return notes;
}

// Plans c.model as asked, writes the files asked for and prints the plan. The exit status: 0, or
// 1 for a pinned strategy over the memory limit without --allow-over-limit.
int plan_model(plan_cli c) {
  c.model = resize_model_spec(c.model, c.seq, c.batch);  // --seq, --batch
  const std::vector<std::string> input_notes = hf_input_notes(c);
  if (!c.export_model.empty()) write_file(c.export_model, "the model", model_file_json(load_model(c.model)).dump(1) + "\n");
  const plan_strategy chosen = parse_strategy(c.strategy);
  const plan_options o = options_of(c);
  const step_settings pin = pinned_settings(c);
  const std::int64_t batch = graph_batch(load_model(c.model));
  const graph_builder build = [&](int m) { return load_model(c.model, m); };
  const autoddl::tools::engine engine = autoddl::tools::parse_engine(c.engine, "--engine");
  if (engine != autoddl::tools::engine::autoddl && !std::holds_alternative<strategy::automatic>(chosen))
    throw error("--engine " + c.engine + " picks among that engine's layouts, but --strategy " + c.strategy +
                " pins one; leave one of them out");
  const bool engine_settings = !c.emit.empty() && c.emit != "dtensor";  // --emit megatron|torchtitan
  // pipelines: megatron pp > 1, and auto across nodes (pipeline_report.hpp)
  autoddl::tools::chosen_plan chosen_plan =
      engine == autoddl::tools::engine::autoddl ? autoddl::tools::plan_with_pipelines(build, batch, o, chosen, pin, c.seed)
                                                : autoddl::tools::plan_for_engine(engine, build, batch, o, pin, c.seed);
  if (std::holds_alternative<strategy::automatic>(chosen)) add_one_axis_note(chosen_plan.plan.result, o);
  chosen_plan.plan.result.notes.insert(chosen_plan.plan.result.notes.begin(), input_notes.begin(), input_notes.end());
  const micro_batched_plan& best = chosen_plan.plan;
  if (!best.result.feasible && std::holds_alternative<strategy::automatic>(chosen)) no_plan_fits(best, build, batch, o, pin, c);
  const compared_plans cmp = compare_plans(c, build, batch, o);
  const plan_problem& problem = *best.problem;
  const auto rows = plan_rows(problem, best.result);
  const autoddl::tools::plan_peak peak = autoddl::tools::peak_of(problem, best.result, chosen_plan.pipeline, o);
  nlohmann::json emitted;  // --emit's settings: checked before anything is written
  if (engine_settings)
    emitted = autoddl::tools::emitted_settings(autoddl::tools::parse_engine(c.emit, "--emit"), chosen_plan, c.model, o.mesh,
                                               batch, c.dtype, o.hw.devices_per_node);
  if (!c.out.empty()) {
    nlohmann::json file = autoddl::tools::plan_file_of(problem, best.result, chosen_plan.pipeline, peak, c.model, c.hardware, o.mesh);
    file["engine"] = c.engine;
    if (!emitted.is_null()) file["emit"] = emitted;
    add_model_identity(file, c.model, c.out);  // its content hash, and a model file's path beside the plan
    write_file(c.out, "the plan", file.dump(1) + "\n");
  }
  if (!c.svg.empty())
    write_file(c.svg, "the picture",
               plan_svg(problem, best.result, rows, cmp.plans, autoddl::tools::svg_stages_of(chosen_plan.pipeline), peak.bytes));
  if (c.emit == "dtensor")
    emit_dtensor(problem, best.result, chosen_plan.pipeline, c.model);
  else
    print_plan(c, problem, best.result, chosen_plan.pipeline, peak, rows, cmp, c.engine, emitted);
  std::fflush(stdout);
  if (best.result.feasible || c.allow_over_limit) return 0;
  return over_limit(c, to_string(chosen), peak.bytes, peak.limit, build, batch, o, pin);
}

}  // namespace

int main(int argc, char** argv) {
  autoddl::tools::reserve_huge_page_heap();  // planning's many small blocks on 2 MiB pages
  CLI::App app{"autoddl-plan: find, price and explain the distributed layout plan of a model on a device mesh"};
  plan_cli c;
  add_options(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "autoddl-plan: %s\n", autoddl::tools::command_line_error(app, e).c_str());
    return 2;
  }
  int status = 0;  // plan_model's: 1 for a pinned plan over the memory limit
  const int refused = autoddl::tools::guarded("autoddl-plan", [&] {
    c.hardware_given = app.count("--hardware") > 0;
    c.mesh_given = app.count("--mesh") > 0;
    c.dtype_given = app.count("--dtype") > 0;
    if (!c.diff.empty())
      diff_plans(c, c.diff.at(0), c.diff.at(1));
    else if (!c.check.empty())
      check_plan(c);
    else
      status = plan_model(c);
  });
  return refused != 0 ? refused : status;
}
