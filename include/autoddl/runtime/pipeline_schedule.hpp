#pragma once
// A pipeline stage for the trainer: its index, where the stages begin and the stage axis'
// communicator. The order it runs its micro-batches in, 1F1B, is plan/pipeline_order.hpp's
// (the step's memory replay walks the same order). Between stages, activations go forward and
// their gradients back by point-to-point messages: sends never block (they are posted and
// completed later), receives block until their message is in. Every receive's message is sent
// earlier in its sender's order than anything that waits on the receiver, so no p, m deadlocks
// (tests/unit/runtime/pipeline_schedule.cpp replays every p <= 8, m <= 16).
#include <vector>

#include "autoddl/plan/pipeline_order.hpp"

namespace autoddl {

/// One device's stage of a pipeline for the trainer: its index, the first op of every stage
/// (pipeline_plan::cut_ops: ascending, beginning with 0) and the stage axis' communicator, on
/// which rank t is this device's peer (the same coordinates of the stage mesh) in stage t.
template <class Pipe>
struct pipeline_stage {
  int stage = 0;
  std::vector<int> first_ops{0};
  Pipe* pipe = nullptr;
  int stages() const { return int(first_ops.size()); }
};

}  // namespace autoddl
