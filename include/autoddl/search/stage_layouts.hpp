#pragma once
// The stage layouts of pipeline plans, solved once and shared by the plans that differ only in
// their schedule: a megatron layout's interleaving (vpp) changes the bubble, the sends between
// chunks and the micro-batches in flight, never the layouts of one stage on the stage mesh nor
// their per-unit costs. The descent over Megatron-LM's layouts (megatron_layouts.hpp) tries up to
// eight interleavings of one stage count; with this it solves the stage layouts once for them.
//   stage_layouts_memo memo;
//   pin.stage_layouts = &memo;  // plan_pipeline looks its stage layouts up here first
// One memo serves one model, batch, base options and seed (a search's): the key is what
// varies within one search (the stage strategy, the stage mesh and its memory limit, the pins).
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "autoddl/search/micro_batches.hpp"
#include "autoddl/search/pipeline_cuts.hpp"

namespace autoddl {

/// Stage layouts (plan_micro_batched on the stage mesh) with their unit costs
/// (pipeline_unit_costs), by what they were solved for.
class stage_layouts_memo {
 public:
  struct entry {
    micro_batched_plan layouts;  ///< its problem shared with every plan made from it
    unit_costs units;
  };

  /// The entry for stage strategy s on `stage` options under `pin`, solved by `solve` the first
  /// time (an error it throws reaches the caller and is not kept).
  const entry& get(const plan_strategy& s, const plan_options& stage, const step_settings& pin,
                   const std::function<micro_batched_plan()>& solve) {
    key k{to_string(s), to_string(stage.mesh), stage.memory_limit, pin.microbatches, pin.recompute,
          pin.regather_inputs, pin.reshard_after_forward, pin.with_gap, pin.runner_ups, pin.replay_below};
    if (const auto found = entries_.find(k); found != entries_.end()) return found->second;
    micro_batched_plan p = solve();
    unit_costs u = pipeline_unit_costs(*p.problem, p.result.pick);
    return entries_.emplace(std::move(k), entry{std::move(p), std::move(u)}).first->second;
  }
  /// Stage layouts solved so far.
  int size() const { return int(entries_.size()); }

 private:
  using key = std::tuple<std::string, std::string, double, std::optional<int>, std::optional<recompute_mode>,
                         std::optional<bool>, std::optional<bool>, bool, bool, std::optional<double>>;
  std::map<key, entry> entries_;
};

}  // namespace autoddl
