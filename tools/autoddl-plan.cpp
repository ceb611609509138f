// autoddl-plan: finds, prices and explains the layout plan of a model on a mesh.
//   autoddl-plan --model gpt:layers=24,hidden=1024,heads=16,seq=1024,batch=8,vocab=50257 \
//                --mesh 2x4 --hardware dgx1-v100 [--strategy auto] [--compare dp,megatron] [--json]
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
#include "autoddl/search/svg.hpp"
#include "tool_common.hpp"

namespace {

using namespace autoddl;

std::string si(double v, const char* unit) {
  const char* p[] = {"", "K", "M", "G", "T", "P", "E"};
  int k = 0;
  while (std::abs(v) >= 1000 && k < 6) {
    v /= 1000;
    ++k;
  }
  return fmt::format("{:.3g} {}{}", v, p[k], unit);
}

std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

nlohmann::json plan_json(const plan_problem& pp, const plan_result& r, const std::vector<plan_row>& rows,
                         const std::string& model_spec, const std::string& hw_name) {
  const graph& g = pp.model();
  nlohmann::json j;
  j["model"] = model_spec;
  j["mesh"] = std::vector<int>(pp.options().mesh.begin(), pp.options().mesh.end());
  j["hardware"] = hw_name;
  j["strategy"] = r.strategy;
  j["dtype"] = std::string(to_string(pp.options().type));
  j["params"] = param_count(g);
  j["flops_per_step"] = forward_flops(g) + backward_flops(g);
  j["predicted_step_s"] = r.time;
  j["compute_s"] = r.totals.compute();
  j["comm_s"] = r.totals.comm();
  j["comm_bytes_per_device"] = r.totals.bytes;
  j["memory_bytes_per_device"] = r.totals.peak_memory();
  j["memory_limit_bytes"] = pp.make_objective().memory_limit;
  j["feasible"] = r.feasible;
  j["search_s"] = r.search_s;
  j["optimal_gap"] = r.optimal_gap ? nlohmann::json(*r.optimal_gap) : nlohmann::json(nullptr);
  j["notes"] = r.notes;
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
    if (!r.runner_up.empty()) l["runner_up_step_s"] = row.runner_up_s;
    layers.push_back(l);
  }
  j["layers"] = layers;
  return j;
}

void print_human(const plan_problem& pp, const plan_result& r, const std::vector<plan_row>& rows,
                 const std::string& spec, const std::string& hw_name) {
  const graph& g = pp.model();
  fmt::print("model     {}  ({} parameters, {} per step)\n", spec, si(double(param_count(g)), ""),
             si(forward_flops(g) + backward_flops(g), "FLOP"));
  fmt::print("mesh      {}  ({} devices)   hardware {}   dtype {}\n", to_string(pp.options().mesh),
             pp.options().mesh.devices(), hw_name, to_string(pp.options().type));
  fmt::print("strategy  {}   search {}\n\n", r.strategy, seconds(r.search_s));
  fmt::print("{:<22} {:<14} {:>10} {:>10} {:>10} {:>10} {:>11}  {}\n", "op", "kind", "compute", "comm", "comm time",
             "memory", "if runner-up", "signature");
  for (const auto& row : rows)
    fmt::print("{:<22} {:<14} {:>10} {:>10} {:>10} {:>10} {:>11}  {}\n", row.name, row.op, seconds(row.compute_s),
               si(row.comm_bytes, "B"), seconds(row.comm_s), si(row.memory_bytes, "B"),
               r.runner_up.empty() ? std::string("-") : seconds(row.runner_up_s), row.signature);
  fmt::print("\npredicted step {}  = compute {} + communication {} (gradient sync overlaps backward: {})\n",
             seconds(r.time), seconds(r.totals.compute()), seconds(r.totals.comm()),
             pp.options().overlap == overlap_rule::none ? "no" : "yes");
  fmt::print("per device: sends {} per step, peak memory {} of {} allowed{}\n", si(r.totals.bytes, "B"),
             si(r.totals.peak_memory(), "B"), si(pp.make_objective().memory_limit, "B"),
             r.feasible ? "" : "  (OVER THE LIMIT)");
  if (r.optimal_gap)
    fmt::print("gap to the exact optimum (additive objective, series-parallel DP): {:.3f}%\n", *r.optimal_gap * 100);
  for (const auto& n : r.notes) fmt::print("note: {}\n", n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"autoddl-plan: find, price and explain the distributed layout plan of a model on a device mesh"};
  std::string model, mesh = "8", hardware = "dgx1-v100", dtype_s = "fp32", memory, strategy = "auto", compare, svg,
                     optimizer_s = "adam";
  bool json = false, no_overlap = false;
  std::uint64_t seed = 1;
  app.add_option("--model", model, "NAME:key=value,... (gpt, bert, vgg11, vgg13, vgg16, vgg19, mlp)")->required();
  app.add_option("--mesh", mesh, "device mesh, e.g. 8, 2x4, 2x2x2");
  app.add_option("--hardware", hardware, "a preset name or a hardware JSON file");
  app.add_option("--dtype", dtype_s, "fp32, fp16 or bf16");
  app.add_option("--memory-limit", memory, "bytes per device, e.g. 32GiB (default: the device's memory)");
  app.add_option("--strategy", strategy, "auto, dp, megatron, zero, owt, 2d, exact or exhaustive");
  app.add_option("--compare", compare, "comma-separated plans to compare against, e.g. dp,megatron");
  app.add_option("--optimizer", optimizer_s, "adam or sgd-momentum");
  app.add_option("--seed", seed, "seed of the random starts");
  app.add_flag("--no-overlap", no_overlap, "price gradient sync without overlapping backward compute");
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--svg", svg, "write a picture of the plan to this file");
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
    const std::vector<std::string> strategies{"auto", "dp", "megatron", "zero", "owt", "2d", "exact", "exhaustive"};
    for (const auto& name : autoddl::tools::split(strategy + "," + compare, ','))
      if (std::find(strategies.begin(), strategies.end(), name) == strategies.end())
        throw parse_error("unknown strategy '" + name + "'; valid: auto, dp, megatron, zero, owt, 2d, exact, exhaustive");
    plan_options o;
    o.mesh = parse_mesh(mesh);
    o.hw = load_hardware(hardware);
    o.type = parse_dtype(dtype_s);
    o.opt = parse_optimizer(optimizer_s);
    if (!memory.empty()) o.memory_limit = autoddl::tools::parse_bytes(memory);
    if (no_overlap) o.overlap = overlap_rule::none;
    graph g = build_model(model);
    plan_problem pp(g, o);
    plan_result r = solve_plan(pp, strategy, seed);
    auto rows = plan_rows(pp, r);
    if (!r.feasible && strategy == "auto")
      throw error("no plan fits the memory limit of " + si(pp.make_objective().memory_limit, "B") +
                  " per device (the best needs " + si(r.totals.peak_memory(), "B") +
                  "); raise --memory-limit, use a larger mesh or a smaller model");
    std::vector<std::pair<std::string, plan_result>> others;
    for (const auto& name : autoddl::tools::split(compare, ','))
      others.push_back({name, solve_plan(pp, name, seed)});
    if (!svg.empty()) {
      std::ofstream f(svg);
      if (!f) throw error("cannot write the picture to '" + svg + "'");
      f << plan_svg(pp, r, rows);
    }
    if (json) {
      auto j = plan_json(pp, r, rows, model, hardware);
      if (!others.empty()) {
        nlohmann::json c = nlohmann::json::object();
        for (const auto& [name, o2] : others)
          c[name] = {{"predicted_step_s", o2.time}, {"speedup", o2.time / r.time}, {"feasible", o2.feasible},
                     {"comm_bytes_per_device", o2.totals.bytes}, {"memory_bytes_per_device", o2.totals.peak_memory()}};
        j["compare"] = c;
      }
      std::puts(j.dump(2).c_str());
    } else {
      print_human(pp, r, rows, model, hardware);
      for (const auto& [name, o2] : others)
        fmt::print("vs {:<9} predicted step {:>10}  -> {} is {:.2f}x faster{}\n", name, seconds(o2.time), r.strategy,
                   o2.time / r.time, o2.feasible ? "" : " (that plan is over the memory limit)");
    }
  });
}
