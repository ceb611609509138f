#pragma once
// What a plan is asked for (plan_options: hardware, mesh, dtype, optimizer, memory limit, overlap,
// allow-lists, micro-batches, recomputation, ZeRO layouts) and the layouts a parameter can take
// (param_choice: storage, gradient-summing and update layouts).
#include <optional>
#include <vector>

#include "autoddl/cost/boxing_path.hpp"
#include "autoddl/cost/dtype.hpp"
#include "autoddl/cost/hardware.hpp"
#include "autoddl/cost/memory.hpp"
#include "autoddl/cost/step_time.hpp"
#include "autoddl/plan/plan.hpp"
#include "autoddl/sbp/boxing.hpp"
#include "autoddl/sbp/layout.hpp"
#include "autoddl/sbp/nd_sbp.hpp"

namespace autoddl {

// param_choice (a parameter's storage, summing and update layouts) is the plan value's: plan/plan.hpp.

/// `st` with each B axis split on the first dim that divides evenly in one step (ZeRO's
/// partitioning over the data-parallel devices); axes that cannot split, or have one device,
/// stay B. zero_shard([B, S(1)], [64, 32], 2x2) == [S(0), S(1)].
inline nd_sbp zero_shard(nd_sbp st, const tensor_shape& shape, const mesh_shape& mesh) {
  for (int a = 0; a < st.size(); ++a) {
    if (!st[a].is_broadcast() || mesh[a] == 1) continue;
    for (int d = 0; d < shape.rank(); ++d) {
      nd_sbp t = st.with(a, S(d));
      if (divides(shape, layout{t, mesh}) && single_axis_step_exact(st, a, S(d))) {
        st = t;
        break;
      }
    }
  }
  return st;
}

/// The layout one synchronisation away from `storage`: P on its B axes (all-reduce to B), the
/// storage's split on its S axes (nothing left to do there). reduce_layout([B,S(0)]) == [P,S(0)].
constexpr nd_sbp reduce_layout(const nd_sbp& storage) {
  nd_sbp r = storage;
  for (int a = 0; a < r.size(); ++a)
    if (r[a].is_broadcast()) r[a] = P;
  return r;
}

struct plan_options {
  hardware hw;
  mesh_shape mesh;
  dtype type = dtype::fp32;
  optimizer opt = optimizer::adam;
  double memory_limit = 0;  ///< bytes per device; 0: the device's memory less a reserve (memory_limit_of)
  /// What the step-time model overlaps; unset: what the hardware's executor overlaps (hw.overlap).
  std::optional<overlap_rule> overlap{};
  /// Optional per-op allow-list: allowed[i] holds the indices into signatures(op i, mesh) the
  /// search may pick for op i (a pinned typed layer lists one). A missing or empty entry allows
  /// every signature. Example: allowed = {{}, {3}} pins op 1 to its signature 3.
  std::vector<std::vector<int>> allowed{};
  /// Micro-batches per step (gradient accumulation). The problem's graph is ONE micro-batch (its
  /// batch is the step's batch / microbatches, build_model(spec, microbatches)): ops and
  /// activation edges run once per micro-batch, parameters are gathered once per step (or, resharded
  /// after forward, for each micro-batch's forward and backward) and their
  /// gradients accumulated over the micro-batches and synchronised once.
  int microbatches = 1;
  /// What the repeated blocks recompute in backward (cost/memory.hpp).
  recompute_mode recompute = recompute_mode::none;
  /// Whether an input copy that gathers and that its op's backward reads is freed after forward
  /// and gathered again for backward (plan::regather_inputs): the forward boxing once more per
  /// micro-batch, its source kept instead of the copy.
  bool regather_inputs = true;
  /// Whether gathered parameters are gathered for each op's forward and again for its backward
  /// and freed after each (plan::reshard_after_forward): the gather 2 x microbatches times a step
  /// instead of once, the gathered copy a transient instead of kept through the step. On unless
  /// a caller pins it off (plan_micro_batched tries both where a plan gathers parameters).
  bool reshard_after_forward = true;
  /// Also offer ZeRO-2's parameter layouts (optimizer state and gradient in the storage's
  /// slices; param_choice::update) and ZeRO-1's (each gradient summed whole, then
  /// reduce-scattered once). Off unless a plan asks for them (strategy zero:stage=2 sets the
  /// first, zero:stage=1 both): with them the coordinate descent met worse local optima (the
  /// 2-layer GPT on 2x2x2: 15 % slower, 6.8 % above the exact optimum, against 0.02 % without).
  bool zero2_layouts = false;
  bool zero1_layouts = false;
  /// With a 16-bit type: gradient sums over micro-batches and the synchronised gradients kept in
  /// fp32, 4 bytes an element (cost/memory.hpp, gradient_sum_bytes), as autoddl's executor keeps
  /// them (runtime/detail/precision.hpp) and as Megatron-LM trains bf16 (its
  /// --accumulate-allreduce-grads-in-fp32, on for bf16 runs). Off: in the type's 2 bytes, as an
  /// engine with a 16-bit gradient buffer keeps them. autoddl-train sets it for its bf16 and fp16
  /// runs; autoddl-plan with --grad-sums fp32.
  bool fp32_gradient_sums = false;
};

/// The share of a device's memory a plan leaves free unless plan_options::memory_limit says
/// otherwise: a tenth. The plan's peak is the sum of the buffers live at once
/// (search/step_memory.hpp); the device needs more than that. A caching allocator (PyTorch's CUDA
/// caching allocator, the stream-ordered pool of backend/cuda) rounds requests up (512 B, and
/// large ones to 2 MiB) and splits cached segments, so a freed block of one size may not serve a
/// larger request and what it reserves runs above what it hands out; the CUDA context, cuBLAS
/// workspaces and NCCL's buffers live outside it; and what a kernel or a boxing path allocates
/// inside itself is not in the replayed peak. A plan that fills memory to the last megabyte runs
/// out on the device. autoddl-plan and autoddl-train print the limit with the reserve;
/// --memory-limit sets the limit itself.
inline constexpr double memory_reserve_fraction = 0.10;

/// The bytes per device a plan of o is held to: o.memory_limit where set, else the device's
/// memory less memory_reserve_fraction of it. A 80 GiB device: 72 GiB.
inline double memory_limit_of(const plan_options& o) {
  return o.memory_limit > 0 ? o.memory_limit : o.hw.device.memory_bytes * (1 - memory_reserve_fraction);
}

}  // namespace autoddl
