// autoddl-plan: finds, prices and explains the layout plan of a model on a mesh.
//   autoddl-plan --model gpt:layers=24,hidden=1024,heads=16,seq=1024,batch=8,vocab=50257
//                --mesh 2x4 --hardware dgx1-v100 [--strategy auto] [--compare dp,megatron] [--json]
//                [--microbatches auto|N] [--recompute auto|none|selective|full] [--out plan.json]
//   --model m.json plans a model file (models/model_file.hpp); --export-model m.json writes one
//   autoddl-plan --diff a.json b.json     (two plan files: the ops whose layouts differ, and the
//                                          predicted step time, communication and memory of each)
// Bad input is one sentence on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoddl/cost/hardware_io.hpp"
#include "autoddl/models/model_file.hpp"
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/plan_file.hpp"
#include "autoddl/search/svg.hpp"
#include "pipeline_report.hpp"
#include "plan_report.hpp"
#include "support/cli.hpp"

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

// --diff: what differs between two plan files of one model and mesh.
void diff_plans(const std::string& a_path, const std::string& b_path, bool json) {
  const plan_file a = read_plan_file(a_path), b = read_plan_file(b_path);
  if (a.model != b.model || !(a.mesh == b.mesh))
    throw error("plan files " + a_path + " and " + b_path + " are for different models or meshes ('" + a.model + "' on " +
                to_string(a.mesh) + ", '" + b.model + "' on " + to_string(b.mesh) + "); --diff compares plans of one model and mesh");
  if (a.ops.size() != b.ops.size()) throw error("plan files " + a_path + " and " + b_path + " have different op lists");
  nlohmann::json ops = nlohmann::json::array(), params = nlohmann::json::array();
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const op_layouts &x = a.ops[i], &y = b.ops[i];
    if (x.inputs == y.inputs && x.params == y.params && x.outputs == y.outputs) continue;
    ops.push_back({{"name", x.name}, {"kind", x.kind}, {"a", layouts_text(x)}, {"b", layouts_text(y)}});
  }
  for (std::size_t p = 0; p < a.params.size() && p < b.params.size(); ++p)
    if (!(a.params[p].storage == b.params[p].storage) || !(a.params[p].grad_sum == b.params[p].grad_sum) ||
        !(a.params[p].update == b.params[p].update))
      params.push_back({{"name", a.params[p].name},
                        {"a", to_string(a.params[p].storage) + " summed " + to_string(a.params[p].grad_sum) +
                                  " updated " + to_string(a.params[p].update)},
                        {"b", to_string(b.params[p].storage) + " summed " + to_string(b.params[p].grad_sum) +
                                  " updated " + to_string(b.params[p].update)}});
  const plan_prediction &pa = a.predicted, &pb = b.predicted;
  if (json) {
    nlohmann::json j = {{"a", a_path}, {"b", b_path}, {"ops_differing", ops}, {"params_differing", params}};
    j["predicted"] = {{"step_s", {pa.step_s, pb.step_s, pb.step_s - pa.step_s}},
                      {"comm_s", {pa.comm_s, pb.comm_s, pb.comm_s - pa.comm_s}},
                      {"comm_bytes_per_device", {pa.comm_bytes, pb.comm_bytes, pb.comm_bytes - pa.comm_bytes}},
                      {"peak_bytes_per_device", {pa.peak_bytes, pb.peak_bytes, pb.peak_bytes - pa.peak_bytes}}};
    j["schedule"] = {{"a", {a.microbatches, std::string(to_string(a.recompute))}},
                     {"b", {b.microbatches, std::string(to_string(b.recompute))}}};
    std::puts(j.dump(2).c_str());
    return;
  }
  fmt::print("a: {} ({}, {} micro-batch{}, recompute {})\nb: {} ({}, {} micro-batch{}, recompute {})\n", a_path, a.strategy,
             a.microbatches, a.microbatches == 1 ? "" : "es", to_string(a.recompute), b_path, b.strategy, b.microbatches,
             b.microbatches == 1 ? "" : "es", to_string(b.recompute));
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"autoddl-plan: find, price and explain the distributed layout plan of a model on a device mesh"};
  std::string model, mesh = "8", hardware = "dgx1-v100", dtype_s = "fp32", memory, strategy = "auto", compare, svg,
                     optimizer_s = "adam", microbatches_s = "auto", recompute_s = "auto", out, export_model;
  std::vector<std::string> diff;
  bool json = false, no_overlap = false, all_ops = false;
  std::uint64_t seed = 1;
  app.add_option("--model", model, "NAME:key=value,... (gpt, bert, vgg11, vgg13, vgg16, vgg19, mlp)");
  app.add_option("--mesh", mesh, "device mesh, e.g. 8, 2x4, 2x2x2");
  app.add_option("--hardware", hardware, "a preset name or a hardware JSON file");
  app.add_option("--dtype", dtype_s, "fp32, fp16 or bf16");
  app.add_option("--memory-limit", memory, "bytes per device, e.g. 32GiB (default: the device's memory)");
  app.add_option("--strategy", strategy,
                 "auto, dp, megatron[:tp=T,pp=P,dp=D,mbs=B,recompute=R,sp=1,vpp=V], zero, owt, 2d, exact or exhaustive");
  app.add_option("--microbatches", microbatches_s, "micro-batches per step (gradient accumulation): auto or a divisor of the batch");
  app.add_option("--recompute", recompute_s, "activation recomputation of repeated blocks: auto, none, selective or full");
  app.add_option("--compare", compare, "comma-separated plans to compare against, e.g. dp,megatron:tp=4");
  app.add_option("--optimizer", optimizer_s, "adam or sgd-momentum");
  app.add_option("--seed", seed, "seed of the random starts");
  app.add_flag("--no-overlap", no_overlap, "price gradient sync without overlapping backward compute");
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--all-ops", all_ops, "print every op (by default repeated blocks laid out alike print once)");
  app.add_option("--svg", svg, "write a picture of the plan to this file");
  app.add_option("--out", out, "write the plan to this file (JSON: layouts of every op and parameter, schedule, predictions)");
  app.add_option("--export-model", export_model, "write the model as a model file (JSON graph: --model path.json reads it)");
  app.add_option("--diff", diff, "compare two plan files: --diff a.json b.json")->expected(2);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "autoddl-plan: %s\n", e.what());
    return 2;
  }
  return autoddl::tools::guarded("autoddl-plan", [&] {
    if (!diff.empty()) {
      diff_plans(diff.at(0), diff.at(1), json);
      return;
    }
    if (model.empty()) throw error("--model is required (or --diff a.json b.json)");
    if (!export_model.empty()) {
      std::ofstream f(export_model);
      if (!f) throw error("cannot write the model to '" + export_model + "'");
      f << model_file_json(load_model(model)).dump(1) << "\n";
      if (!f) throw error("cannot write the model to '" + export_model + "'");
    }
    const plan_strategy chosen = parse_strategy(strategy);
    const std::vector<plan_strategy> compared = parse_strategy_list(compare);
    plan_options o;
    o.mesh = parse_mesh(mesh);
    o.hw = load_hardware(hardware);
    o.type = parse_dtype(dtype_s);
    o.opt = parse_optimizer(optimizer_s);
    if (!memory.empty()) o.memory_limit = autoddl::tools::parse_bytes(memory);
    if (no_overlap) o.overlap = overlap_rule::none;
    step_settings pin;
    if (microbatches_s != "auto") pin.microbatches = autoddl::tools::parse_count("--microbatches", microbatches_s);
    if (recompute_s != "auto") pin.recompute = parse_recompute(recompute_s);
    const std::int64_t batch = graph_batch(load_model(model));
    auto build = [&](int m) { return load_model(model, m); };
    // pipelines: megatron pp > 1, and auto across nodes (pipeline_report.hpp)
    autoddl::tools::chosen_plan chosen_with_pipeline = autoddl::tools::plan_with_pipelines(build, batch, o, chosen, pin, seed);
    micro_batched_plan& chosen_plan = chosen_with_pipeline.plan;
    const plan_problem& pp = *chosen_plan.problem;
    plan_result r = chosen_plan.result;
    auto rows = plan_rows(pp, r);
    if (!r.feasible && std::holds_alternative<strategy::automatic>(chosen)) {
      const memory_breakdown mem = pp.memory_of(r.pick);
      std::string msg = "no plan fits the memory limit of " + si(pp.make_objective().memory_limit, "B") +
                        " per device, even with micro-batches and recomputation (the best needs " +
                        si(r.totals.peak_memory(), "B") + ", most of it " + largest_memory_term(mem) + ")";
      if (const std::optional<mesh_shape> bigger = smallest_fitting_mesh(build, batch, o, pin, seed))
        msg += "; the smallest mesh like " + mesh + " that fits is " + to_string(*bigger);
      else
        msg += "; raise --memory-limit, use a larger mesh or a smaller model";
      throw error(msg);
    }
    std::vector<std::pair<std::string, plan_result>> others;
    std::vector<std::pair<std::string, std::string>> not_applicable;  // a plan the mesh or model cannot take, and why
    std::vector<micro_batched_plan> compared_plans;  // each with its own knobs; open ones chosen as for auto
    for (const plan_strategy& c : compared) {
      try {
        compared_plans.push_back(autoddl::tools::plan_with_pipelines(build, batch, o, c, {}, seed).plan);
        others.push_back({to_string(c), compared_plans.back().result});
      } catch (const error& e) {
        not_applicable.push_back({to_string(c), e.what()});
      }
    }
    if (!out.empty()) {
      std::ofstream f(out);
      if (!f) throw error("cannot write the plan to '" + out + "'");
      f << autoddl::tools::plan_file_of(pp, r, chosen_with_pipeline.pipeline, model, hardware, o.mesh).dump(1) << "\n";
      if (!f) throw error("cannot write the plan to '" + out + "'");
    }
    if (!svg.empty()) {
      std::ofstream f(svg);
      if (!f) throw error("cannot write the picture to '" + svg + "'");
      f << plan_svg(pp, r, rows, others);
    }
    if (json) {
      auto j = plan_json(pp, r, rows, model, hardware);
      autoddl::tools::add_pipeline_json(j, chosen_with_pipeline.pipeline, pp.model());
      if (!others.empty() || !not_applicable.empty()) {
        nlohmann::json c = nlohmann::json::object();
        for (const auto& [name, o2] : others)
          c[name] = {{"applicable", true},
                     {"predicted_step_s", o2.time},
                     {"speedup", o2.time / r.time},
                     {"feasible", o2.feasible},
                     {"comm_bytes_per_device", o2.totals.bytes},
                     {"memory_bytes_per_device", o2.totals.peak_memory()}};
        for (const auto& [name, why] : not_applicable) c[name] = {{"applicable", false}, {"reason", why}};
        j["compare"] = c;
      }
      std::puts(j.dump(2).c_str());
    } else {
      print_human(pp, r, rows, model, hardware, all_ops);
      if (chosen_with_pipeline.pipeline) autoddl::tools::print_pipeline(*chosen_with_pipeline.pipeline, pp.model());
      for (const auto& [name, o2] : others)
        fmt::print("vs {:<9} predicted step {:>10}  -> {} is {:.2f}x faster{}\n", name, seconds(o2.time), to_string(r.strategy),
                   o2.time / r.time, o2.feasible ? "" : " (that plan is over the memory limit)");
      for (const auto& [name, why] : not_applicable) fmt::print("vs {:<9} not applicable: {}\n", name, why);
    }
  });
}
