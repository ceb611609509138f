#pragma once
// Which slots of a plan box (copy through a non-empty boxing path) and which read in place: all
// that a step's schedule (step_schedule) and the replay of its memory (search/step_memory.hpp)
// read of the plan's paths. The search replays the memory of every layout it prices, and a
// plan's paths are most of its bytes (a 2048-layer GPT: over 100 MB a plan), so it reads these
// flags off the problem's priced paths (search/plan_of.hpp) rather than building the plan.
//   boxed_slots b = boxed_slots_of(p);  // b.inputs[i][j] == p.boxes_input(i, j)
#include <cstddef>
#include <vector>

#include "autoddl/index.hpp"
#include "autoddl/plan/plan.hpp"

namespace autoddl {

/// Per op and slot: whether the slot boxes, and the slot an input is chained from.
struct boxed_slots {
  std::vector<std::vector<bool>> inputs;         ///< input j of op i is a boxed copy (plan::boxes_input)
  std::vector<std::vector<input_slot>> chained;  ///< plan::chained_from
  std::vector<std::vector<bool>> param_forward;  ///< parameter slot j of op i gathers (its forward path boxes)
  std::vector<std::vector<bool>> param_backward;  ///< its gradient is boxed on the way to the summing layout
  friend bool operator==(const boxed_slots&, const boxed_slots&) = default;
};

/// The boxed slots of plan p.
inline boxed_slots boxed_slots_of(const plan& p) {
  boxed_slots r;
  r.inputs = p.boxed_inputs();
  r.chained = p.chains();
  for (const op_plan& o : p.ops) {
    std::vector<bool>& forward = r.param_forward.emplace_back();
    std::vector<bool>& backward = r.param_backward.emplace_back();
    for (const slot_boxing& s : o.params) {
      forward.push_back(s.forward.size() > 0);
      backward.push_back(s.backward.size() > 0);
    }
  }
  return r;
}

}  // namespace autoddl
