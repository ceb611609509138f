// autoddl-plan: finds, prices and explains the layout plan of a model on a mesh.
//   autoddl-plan --model gpt:layers=24,hidden=1024,heads=16,seq=1024,batch=8,vocab=50257
//                --mesh 2x4 --hardware dgx1-v100 [--strategy auto] [--compare dp,megatron] [--json]
//                [--microbatches auto|N] [--recompute auto|none|selective|full]
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
#include "autoddl/models/zoo.hpp"
#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/svg.hpp"
#include "plan_report.hpp"
#include "support/cli.hpp"

using namespace autoddl;
using autoddl::tools::plan_json;
using autoddl::tools::print_human;
using autoddl::tools::seconds;
using autoddl::tools::si;

int main(int argc, char** argv) {
  CLI::App app{"autoddl-plan: find, price and explain the distributed layout plan of a model on a device mesh"};
  std::string model, mesh = "8", hardware = "dgx1-v100", dtype_s = "fp32", memory, strategy = "auto", compare, svg,
                     optimizer_s = "adam", microbatches_s = "auto", recompute_s = "auto";
  bool json = false, no_overlap = false;
  std::uint64_t seed = 1;
  app.add_option("--model", model, "NAME:key=value,... (gpt, bert, vgg11, vgg13, vgg16, vgg19, mlp)")->required();
  app.add_option("--mesh", mesh, "device mesh, e.g. 8, 2x4, 2x2x2");
  app.add_option("--hardware", hardware, "a preset name or a hardware JSON file");
  app.add_option("--dtype", dtype_s, "fp32, fp16 or bf16");
  app.add_option("--memory-limit", memory, "bytes per device, e.g. 32GiB (default: the device's memory)");
  app.add_option("--strategy", strategy,
                 "auto, dp, megatron[:tp=T,dp=D,mbs=B,recompute=R,sp=1], zero, owt, 2d, exact or exhaustive");
  app.add_option("--microbatches", microbatches_s, "micro-batches per step (gradient accumulation): auto or a divisor of the batch");
  app.add_option("--recompute", recompute_s, "activation recomputation of repeated blocks: auto, none, selective or full");
  app.add_option("--compare", compare, "comma-separated plans to compare against, e.g. dp,megatron:tp=4");
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
    const std::int64_t batch = graph_batch(build_model(model));
    auto build = [&](int m) { return build_model(model, m); };
    micro_batched_plan chosen_plan = plan_micro_batched(build, batch, o, chosen, pin, seed);
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
    std::vector<micro_batched_plan> compared_plans;  // each with its own knobs; open ones chosen as for auto
    for (const plan_strategy& c : compared) {
      compared_plans.push_back(plan_micro_batched(build, batch, o, c, {}, seed));
      others.push_back({to_string(c), compared_plans.back().result});
    }
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
        fmt::print("vs {:<9} predicted step {:>10}  -> {} is {:.2f}x faster{}\n", name, seconds(o2.time), to_string(r.strategy),
                   o2.time / r.time, o2.feasible ? "" : " (that plan is over the memory limit)");
    }
  });
}
