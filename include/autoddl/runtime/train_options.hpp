#pragma once
// What a trainer is told (train_options) and what it reports of a step's time (step_profile).
#include <cstdint>
#include <vector>

#include "autoddl/cost/memory.hpp"
#include "autoddl/runtime/data.hpp"

namespace autoddl {

struct train_options {
  optimizer opt = optimizer::adam;
  double lr = 1e-3;
  std::uint64_t seed = 1;
  bool keep_outputs = false;  ///< keep every op's output shard of the last step (for checks)
  /// Stop with autoddl::error, on every rank alike, when the loss or a parameter's synchronised
  /// gradient holds NaN or Inf (naming the parameter and the ops that use it); costs one scan of
  /// the gradient shards and one all-reduce of a double per step.
  bool check_finite = true;
  /// Sample the device's bytes in use at every op boundary for last_step_peak_bytes() (on the
  /// CPU glibc's mallinfo2: a few microseconds a sample); false reports 0.
  bool measure_memory = true;
  /// A byte-level text the index inputs are read from (a language model's ids and labels, vocab
  /// 256), instead of the synthetic task; not owned, must outlive the trainer.
  const text_corpus* text = nullptr;
  /// A 16-bit trainer's dynamic loss scale (fp16 needs one; 0: none): the initial scale, and the
  /// clean steps after which it doubles (runtime/detail/precision.hpp, dynamic_loss_scale). A step
  /// whose gradients overflow is then skipped and the scale halved, instead of stopping training.
  double loss_scale = 0;
  int loss_scale_window = 1000;
  /// Testing: the step whose loss gradient is made infinite (an injected overflow); -1: none.
  std::int64_t inject_overflow_step = -1;
};

/// Where one device's last step spent its time (wall seconds, steady clock), op by op as the
/// planner prices it: each op's kernels (forward + backward) and its boxings (the paths of its
/// input and parameter edges, both directions), then the steps the planner prices per model.
struct step_profile {
  std::vector<double> kernel_s;  ///< per op, all micro-batches: op_forward (twice where recomputed) + op_backward
  std::vector<double> boxing_s;  ///< per op: boxing of its inputs (reboxed where recomputed), parameters, gradients
  double inputs_s = 0;           ///< synthetic model inputs generated (not priced: the data loader's share)
  double accumulate_s = 0;       ///< gradient contributions added (residuals, tied parameters)
  double loss_s = 0;             ///< the global loss all-reduce (reported, outside the plan's bytes)
  double sync_s = 0;             ///< tied parameters' one synchronisation
  /// With a side queue (SideQueue<D, M>): the host's time in the join after backward, before the
  /// loss all-reduce (a queued wait on a GPU; the deferred gradient boxings themselves on the
  /// opaque test device); counted in none of the other fields.
  /// The gradient boxings' share of boxing_s is then only the time to queue them.
  double side_join_s = 0;
  double update_s = 0;           ///< optimizer update
  double pipe_wait_s = 0;        ///< a pipeline stage waiting for its neighbours' activations and gradients
  double total_s = 0;            ///< the whole train_step
};

}  // namespace autoddl
