#pragma once
// autoddl-plan's engines: the plan --engine asks for (the best of that engine's layouts) and the
// settings --emit writes for a plan (engine_settings.hpp), or the one sentence saying why the
// engine cannot run it.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "engine_settings.hpp"
#include "pipeline_report.hpp"

namespace autoddl::tools {

/// The plan of `e`'s layouts only (e != autoddl): the best megatron layout the descent auto takes
/// its last starts from finds, with Megatron-LM's knobs (megatron) or torchtitan's (torchtitan:
/// FSDP over the data-parallel devices, tensor parallelism with sequence parallelism and a
/// vocabulary-parallel loss, context parallelism, 1F1B or interleaved pipelines), planned as
/// `--strategy` plans those knobs. Auto runs the same descent from the same start and takes the
/// faster of its point and that plan, so it is never slower. Throws error naming the model and
/// the mesh where no layout of the engine makes a plan.
inline chosen_plan plan_for_engine(engine e, const std::function<graph(int)>& build, std::int64_t batch, const plan_options& o,
                                   const step_settings& pin, std::uint64_t seed) {
  if (e == engine::torchtitan)
    for (const op_node& n : build(1).ops)
      if (n.kind == op_kind::experts || n.kind == op_kind::routed_experts)
        throw error("--engine torchtitan plans dense models here (op '" + n.name + "' routes to experts, whose expert " +
                    "parallelism torchtitan lays out differently); use --engine megatron");
  planning_clock::reset();
  const auto t0 = std::chrono::steady_clock::now();
  const chosen_plan own = detail::plan_searched(build, batch, o, strategy::automatic{}, pin, seed);
  std::optional<megatron_layout_plan> m = detail::megatron_layouts_after(own, build, batch, o, pin, seed, true, e == engine::torchtitan);
  if (!m)
    throw error("no " + std::string(e == engine::megatron ? "Megatron-LM" : "torchtitan") + " layout splits this model on mesh " +
                to_string(o.mesh) + ": its heads, layers, batch or sequence divide by none of the engine's tensor-, " +
                "context- and pipeline-parallel sizes that fit the mesh");
  const int points = m->points;
  // the best knobs planned as --strategy plans them, so that those flags re-planned give this plan
  chosen_plan r = detail::plan_searched(build, batch, o, plan_strategy{m->knobs}, pin, seed);
  const bool fits = r.plan.result.feasible;
  r.plan.result.notes.push_back(fmt::format("engine {}: the best of {} of its layouts priced is {}{}", engine_name(e), points,
                                            to_string(plan_strategy{*r.megatron_layout}),
                                            fits ? "" : ", over the memory limit"));
  r.plan.result.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

/// The layers (repeated blocks) of each pipeline stage of plan c; empty without a pipeline.
inline std::vector<int> stage_layers(const chosen_plan& c) {
  std::vector<int> r;
  if (!c.pipeline) return r;
  const graph& g = c.plan.problem->model();
  const std::vector<int>& cuts = c.pipeline->cut_ops;
  for (std::size_t k = 0; k < cuts.size(); ++k) {
    const int end = k + 1 < cuts.size() ? cuts[k + 1] : int(g.ops.size());
    int first = -1, last = -2;
    for (int i = cuts[k]; i < end; ++i)
      if (g.block[std::size_t(i)] >= 0) {
        if (first < 0) first = g.block[std::size_t(i)];
        last = g.block[std::size_t(i)];
      }
    r.push_back(last - first + 1);
  }
  return r;
}

/// The split of the layers over the stages of plan c into l: for Megatron-LM even, or the first
/// and last stage given their own counts (--decoder-first/last-pipeline-num-layers); throws error
/// where the plan's stages hold unequal middle counts, which no such flag expresses.
inline void set_stage_layers(engine_layout& l, const chosen_plan& c, engine e) {
  const std::vector<int> n = stage_layers(c);
  if (n.size() < 2 || std::all_of(n.begin(), n.end(), [&](int x) { return x == n[0]; })) return;
  l.stage_layers = n;  // torchtitan's split is checked where its flags are written
  if (e == engine::torchtitan) return;
  if (l.vpp > 1 || !std::all_of(n.begin() + 1, n.end() - 1, [&](int x) { return x == n[1]; }))
    throw error("the plan's pipeline stages hold unequal numbers of layers in the middle (or interleaved), which " +
                std::string("no Megatron-LM flag expresses; plan with --engine megatron"));
  l.first_stage_layers = n.front();
  l.last_stage_layers = n.back();
}

/// Plan c as torchtitan's layout (FSDP, or DDP alone; tensor parallelism always with sequence
/// parallelism; no distributed optimizer, no expert parallelism): `zero` is FSDP on every device,
/// `dp` DDP. nullopt where torchtitan cannot run it. Throws error naming what torchtitan lacks for a
/// megatron layout it cannot run.
inline std::optional<strategy::megatron> torchtitan_layout(const chosen_plan& c) {
  const plan_strategy& s = c.plan.result.strategy;
  if (const auto* z = std::get_if<strategy::zero>(&s); z && z->stage == 3) return strategy::megatron{.tp = 1, .fsdp = true};
  if (std::holds_alternative<strategy::dp>(s)) return strategy::megatron{.tp = 1};
  if (!c.megatron_layout) return std::nullopt;
  const strategy::megatron& m = *c.megatron_layout;
  const bool parallel = m.tp > 1 || m.pp > 1 || m.cp > 1;
  if (m.dopt || m.ep > 1 || (m.tp > 1 && !m.sp) || (parallel && !m.fsdp))
    throw error("layout " + to_string(plan_strategy{m}) + " is not one torchtitan runs: it shards data-parallel weights with " +
                "FSDP (fsdp=1, not Megatron's distributed optimizer dopt=1), runs tensor parallelism with sequence " +
                "parallelism (sp=1), DDP only without other parallelism, and no expert parallelism here; plan with " +
                "--engine torchtitan");
  return m;
}

/// The settings that launch plan c on engine e (--emit): {"engine", "command", "settings"}.
/// Throws error, one sentence, for a plan the engine cannot express or a model it has no flags for.
inline nlohmann::json emitted_settings(engine e, const chosen_plan& c, const std::string& model, const mesh_shape& mesh,
                                       std::int64_t batch, const std::string& dtype, int devices_per_node) {
  const std::string who = e == engine::megatron ? "Megatron-LM" : "torchtitan";
  const std::optional<llama_config> config = llama_config_of(model);
  if (!config)
    throw error("--emit " + engine_name(e) + " writes the settings of LLaMA-family models (llama:..., hf:config.json); model '" +
                model + "' is not one");
  const std::optional<strategy::megatron> layout = e == engine::torchtitan ? torchtitan_layout(c) : c.megatron_layout;
  if (!layout)
    throw error("this plan is autoddl's own per-weight layout, which no " + who + " setting expresses; plan with --engine " +
                engine_name(e) + (e == engine::megatron ? " or --strategy megatron:..." : " or --strategy zero") +
                " to emit its settings");
  const int microbatches = c.pipeline ? c.pipeline->shape.microbatches : c.plan.microbatches;
  engine_layout l = resolve_layout(*layout, mesh, batch, microbatches, c.plan.recompute);
  set_stage_layers(l, c, e);
  const std::string launcher =
      "torchrun --nnodes " + std::to_string(std::max<std::int64_t>(1, mesh.devices() / std::max(1, devices_per_node))) +
      " --nproc-per-node " + std::to_string(std::min<std::int64_t>(mesh.devices(), std::max(1, devices_per_node)));
  nlohmann::json j{{"engine", engine_name(e)}, {"layout", to_string(plan_strategy{*layout})}};
  if (e == engine::megatron) {
    const std::vector<engine_flag> flags = megatron_flags(l, *config, dtype);
    j["command"] = command_text(launcher + " pretrain_gpt.py", flags);
    j["settings"] = flags_json(flags);
    j["version"] = "Megatron-LM core_v0.16.1 (megatron/training/arguments.py)";
    return j;
  }
  const std::vector<engine_flag> flags = torchtitan_flags(l, *config, dtype);
  j["command"] = command_text(launcher + " -m torchtitan.train", flags);
  j["settings"] = flags_json(flags);
  j["activation_checkpoint"] = torchtitan_checkpointing(l.recompute);  // the subcommand's choice, as a name
  j["version"] = "torchtitan 0.3.0 (torchtitan/config/configs.py, torchtitan/models/" +
                 j["settings"]["--module"].get<std::string>() + "/config_registry.py)";
  return j;
}

}  // namespace autoddl::tools
