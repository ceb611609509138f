#pragma once
// The order in which one pipeline stage runs its micro-batches: 1F1B (PipeDream-Flush, as
// Megatron-LM's non-interleaved schedule; Narayanan et al. 2021, section 2.2.1). Stage s of p
// runs min(p - s - 1, m) forwards (warm-up), then alternates one forward and one backward, then
// the backwards left (cool-down); backwards go in micro-batch order. The trainer runs it
// (runtime/trainer.hpp) and the step's memory replay walks it (search/step_memory.hpp). Without a
// pipeline (one stage) it is F0 B0 F1 B1 ...: each micro-batch's forward, then its backward.
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

/// `warm` forwards (at most m), then one forward and one backward in turn, then the backwards
/// left: the order of a stage that holds warm + 1 micro-batches at once (2m slots).
/// warm_up_order(1, 3) == F0 F1 B0 F2 B1 B2. Throws error when warm < 0 or m < 1.
inline std::vector<pipeline_slot> warm_up_order(int warm, int m) {
  if (warm < 0 || m < 1)
    detail::fail<error>("a pipeline order needs at least one micro-batch and no negative warm-up; got warm-up " +
                        detail::itos(warm) + ", " + detail::itos(m) + " micro-batches");
  warm = std::min(warm, m);
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

/// Stage `stage` of `stages`' 1F1B order over m micro-batches (2m slots).
/// one_f_one_b(2, 0, 3) == F0 F1 B0 F2 B1 B2; one_f_one_b(2, 1, 3) == F0 B0 F1 B1 F2 B2.
/// Throws error when stage is not in [0, stages) or m < 1.
inline std::vector<pipeline_slot> one_f_one_b(int stages, int stage, int m) {
  if (stages < 1 || stage < 0 || stage >= stages || m < 1)
    detail::fail<error>("a 1F1B order needs 0 <= stage < stages and at least one micro-batch; got stage " +
                        detail::itos(stage) + " of " + detail::itos(stages) + ", " + detail::itos(m) + " micro-batches");
  return warm_up_order(stages - stage - 1, m);
}

}  // namespace autoddl
