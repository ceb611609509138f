#pragma once
// The order in which one pipeline stage runs its micro-batches: 1F1B (PipeDream-Flush, as
// Megatron-LM's non-interleaved schedule; Narayanan et al. 2021, section 2.2.1). Stage s of p
// runs min(p - s - 1, m) forwards (warm-up), then alternates one forward and one backward, then
// the backwards left (cool-down); backwards go in micro-batch order. Between stages, activations
// go forward and their gradients back by point-to-point messages: sends never block (they are
// posted and completed later), receives block until their message is in. Every receive's
// message is sent earlier in its sender's order than anything that waits on the receiver, so
// no p, m deadlocks (tests/unit/runtime/pipeline_schedule.cpp replays every p <= 8, m <= 16).
#include <algorithm>
#include <vector>

#include "autoddl/error.hpp"
#include "autoddl/text.hpp"

namespace autoddl {

/// One entry of a stage's order: the forward or the backward of micro-batch `microbatch`.
struct pipeline_slot {
  bool forward = true;
  int microbatch = 0;
  friend constexpr bool operator==(const pipeline_slot&, const pipeline_slot&) = default;
};

/// Stage `stage` of `stages`' 1F1B order over m micro-batches (2m slots).
/// one_f_one_b(2, 0, 3) == F0 F1 B0 F2 B1 B2; one_f_one_b(2, 1, 3) == F0 B0 F1 B1 F2 B2.
/// Throws error when stage is not in [0, stages) or m < 1.
inline std::vector<pipeline_slot> one_f_one_b(int stages, int stage, int m) {
  if (stages < 1 || stage < 0 || stage >= stages || m < 1)
    detail::fail<error>("a 1F1B order needs 0 <= stage < stages and at least one micro-batch; got stage " +
                        detail::itos(stage) + " of " + detail::itos(stages) + ", " + detail::itos(m) + " micro-batches");
  const int warm = std::min(stages - stage - 1, m);
  std::vector<pipeline_slot> r;
  int f = 0, b = 0;
  for (; f < warm; ++f) r.push_back({true, f});
  for (; f < m; ++f) {
    r.push_back({true, f});
    r.push_back({false, b++});
  }
  for (; b < m; ++b) r.push_back({false, b});
  return r;
}

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
